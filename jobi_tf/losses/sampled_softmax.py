"""The positive in a softmax over it and its sampled negatives (the paper's loss)."""

from __future__ import annotations

import keras
import tensorflow as tf

from jobi_tf.contracts.objectives import MASKED_LOGIT, SAMPLED, TRIPLE_HEAD, Objective
from jobi_tf.contracts.scored_batch import ScoredBatch

__all__ = ["SampledSoftmax"]


class SampledSoftmax(Objective):
    """Negative log-likelihood of the positive in a softmax over it and its sampled negatives.

    ``L = logsumexp(logits) - logits[0]`` per positive, batch-averaged; a candidate equal to
    the positive (``valid_negative`` False) is masked out of the softmax. With
    ``--logq-correction`` the batches carry ``negative_log_q``, subtracted from the candidates'
    logits (the sampled softmax's correction for negatives drawn by degree). With
    ``--slot-prior-in-loss`` they carry ``negative_prior``, added to the candidates' logits: the
    slot counts' offsets relative to the positive's, so the softmax sees the scores the model
    ranks with and the tables learn what the counts miss (logit adjustment: Menon et al., 2021,
    "Long-tail learning via logit adjustment"; a row's common shift leaves a softmax unchanged).
    """

    regime = SAMPLED
    features = ("valid_negative",)

    def __init__(self, head: int = TRIPLE_HEAD, name: str | None = None) -> None:
        super().__init__(head, name)
        self._loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, name=f"{self.name}_loss")

    def logits(self, batch: ScoredBatch) -> dict[str, tf.Tensor]:
        valid = tf.pad(batch.features["valid_negative"], [[0, 0], [1, 0]], constant_values=True)
        logits = batch.sampled()[:, self.head]
        log_q = batch.features.get("negative_log_q")
        if log_q is not None:
            logits -= tf.pad(log_q, [[0, 0], [1, 0]])  # the positive's column stays
        prior = batch.features.get("negative_prior")
        if prior is not None:
            logits += tf.pad(prior, [[0, 0], [1, 0]])
        return {self.name: tf.where(valid, logits, MASKED_LOGIT)}

    def loss(self, features, logits):
        return self._loss(tf.zeros_like(features["triples"][:, 0]), logits[self.name])


LOSS = SampledSoftmax
