"""1-vs-all: the true tail, then head, in a softmax over every entity (kbc's; the paper's appendix D)."""

from __future__ import annotations

import math

import keras
import tensorflow as tf

from jobi_tf.contracts.objectives import ONE_VS_ALL, TRIPLE_HEAD, Objective, replica_share
from jobi_tf.contracts.scored_batch import ScoredBatch
from jobi_tf.runtime.types import HEAD, TAIL

__all__ = ["FullSoftmax"]


class FullSoftmax(Objective):
    """1-vs-all: the true tail in a softmax over every entity, plus the same for the head.

    Args:
        label_smoothing: ε: the target puts ``1 - ε`` on the true entity and spreads ε
            evenly over all of them (LibKGE's and ConvE's option); 0 is the plain softmax.
        slot_weight: w: in the training softmax each entity seen in the asked slot of the
            relation in training counts ``1 + w`` times (``log(1 + w)`` added to its logit),
            so same-type rivals weigh more: biased negatives' counterpart when every entity
            is a candidate. Ranking is unchanged. Reads the sampler's dense slot rows
            (``pair_labels_tail`` / ``pair_labels_head``). 0 = off.
    """

    regime = ONE_VS_ALL
    options = ("label_smoothing", "slot_weight")

    def __init__(
        self, head: int = TRIPLE_HEAD, name: str | None = None, label_smoothing: float = 0.0, slot_weight: float = 0.0
    ) -> None:
        if not 0.0 <= label_smoothing < 1.0:
            raise ValueError(f"label_smoothing must be in [0, 1). Received: label_smoothing={label_smoothing!r}")
        if not slot_weight >= 0.0:
            raise ValueError(f"slot_weight must be >= 0. Received: slot_weight={slot_weight!r}")
        super().__init__(head, name)
        self.label_smoothing = label_smoothing
        self.slot_weight = slot_weight
        if slot_weight:
            self.features = ("pair_labels_tail", "pair_labels_head")
        self._loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, name=f"{self.name}_loss")

    def logits(self, batch: ScoredBatch) -> dict[str, tf.Tensor]:
        tail, head = batch.all_entities()
        return {f"{self.name}_tail": tail[:, self.head], f"{self.name}_head": head[:, self.head]}

    def loss(self, features, logits):
        triples = features["triples"]
        tail, head = logits[f"{self.name}_tail"], logits[f"{self.name}_head"]
        if self.slot_weight:
            boost = tf.math.log1p(tf.cast(self.slot_weight, tail.dtype))
            tail = tail + boost * tf.cast(features["pair_labels_tail"], tail.dtype)
            head = head + boost * tf.cast(features["pair_labels_head"], head.dtype)
        return self._direction(triples[:, TAIL], tail) + self._direction(triples[:, HEAD], head)

    def uniform_loss(self, num_entities: int) -> float | None:
        """``2 ln N``: `loss` sums the tail and head softmaxes over ``N`` entities, each ``ln N``
        at a uniform softmax (label smoothing's term is ``ln N`` there too). None with
        ``slot_weight``, whose boosted logits are not uniform when the scores are."""
        return None if self.slot_weight else 2.0 * math.log(num_entities)

    def _direction(self, targets: tf.Tensor, logits: tf.Tensor) -> tf.Tensor:
        nll = self._loss(targets, logits)
        if not self.label_smoothing:
            return nll
        # Cross-entropy against the uniform target: logsumexp(s) - mean(s), reduced as ``nll``.
        uniform = replica_share(tf.reduce_mean(tf.reduce_logsumexp(logits, axis=-1) - tf.reduce_mean(logits, axis=-1)))
        return (1.0 - self.label_smoothing) * nll + self.label_smoothing * uniform


LOSS = FullSoftmax
