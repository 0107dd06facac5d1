"""What the heads of `JoBiModel` are trained to do, as objects, and the scores they share.

An objective owns the sampler features it reads (`Objective.features`), the logits it asks
of the model (`Objective.logits`) and its loss (`Objective.loss`); `JoBiModel` keeps the
tables and the queries and holds one objective per head. The triple head's objectives are
the ``--loss`` choices, one module each in `jobi_tf.losses`; the pair head's `PairBCE` and
the auxiliary `RelationPrediction` live here, beside the base class.

Objectives read candidate scores from a `jobi_tf.contracts.scored_batch.ScoredBatch`, computed once per
batch for every head (re-exported here with `Factors`, as objectives and regularizers use them).

Losses are reduced as Keras losses are: averaged over the batch and divided by the number of
replicas under ``tf.distribute``, which keeps gradients right under ``MirroredStrategy`` (a
hand-written ``reduce_mean`` would make them N times too large).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, ClassVar

import keras
import tensorflow as tf

from jobi_tf.contracts import features as F
from jobi_tf.contracts.scored_batch import Factors, ScoredBatch, ScoringModel
from jobi_tf.runtime import plugins
from jobi_tf.runtime.types import PAIR_HEAD, RELATION, TRIPLE_HEAD

if TYPE_CHECKING:
    from jobi_tf.config import RunConfig

__all__ = [
    "Objective",
    "PairBCE",
    "RelationPrediction",
    "ScoredBatch",
    "Factors",
    "ScoringModel",
    "REGIME_NAMES",
    "replica_share",
    "reads_of",
]

#: Logit given to a sampled candidate that is not a negative (it equals the positive).
MASKED_LOGIT = -1e9

#: The built-in training regimes (`Objective.regime`; `jobi_tf.regimes` builds their batches):
#: the positive against sampled negatives, every entity for both directions of each positive,
#: every entity for batches of distinct training queries.
SAMPLED, ONE_VS_ALL, K_VS_ALL = "sampled", "1-vs-all", "k-vs-all"
#: Every regime an objective can name: the modules of `jobi_tf/regimes/` (read, not imported).
REGIME_NAMES = plugins.names("regime")


class Objective:
    """One head's objective: the features it reads, its logits and its loss.

    Subclasses set ``default_name`` (the prefix of their logits in the model's output and of
    their loss in the logs, e.g. ``triple`` → ``triple_loss``) and ``regime``, the training
    regime whose batches they read (`SAMPLED`: the positive and the sampler's negatives,
    ``batch.sampled()``; `ONE_VS_ALL`: every entity for both directions of each positive,
    ``batch.all_entities()``; `K_VS_ALL`: every entity for batches of distinct queries,
    ``batch.query_scores()``), and implement `logits` and `loss`. A ``--loss`` (a module of
    `jobi_tf.losses`) also lists in ``options`` the `jobi_tf.config.TrainConfig` fields it
    takes as constructor keywords, and may refuse settings in `check`.

    Args:
        head: whose queries are trained: `TRIPLE_HEAD` (0) or `PAIR_HEAD` (1).
        name: overrides the class's default name.
    """

    regime: str = SAMPLED
    default_name: ClassVar[str] = "triple"
    #: Features the objective reads besides ``triples`` (the model checks they are there).
    features: tuple[str, ...] = ()
    #: `jobi_tf.config.TrainConfig` fields the constructor takes (``--loss`` objectives).
    options: ClassVar[tuple[str, ...]] = ()

    def __init__(self, head: int = TRIPLE_HEAD, name: str | None = None) -> None:
        self.head = head
        self.name = name or self.default_name

    @classmethod
    def check(cls, cfg: RunConfig) -> None:
        """Refuse, as a `jobi_tf.runtime.errors.ConfigError`, a run this objective cannot train."""

    def logits(self, batch: ScoredBatch) -> dict[str, tf.Tensor]:
        """The logits this objective's loss reads, keyed ``name`` or ``name_<part>``."""
        raise NotImplementedError

    def loss(self, features: dict[str, tf.Tensor], logits: dict[str, tf.Tensor]) -> tf.Tensor:
        """A scalar, reduced as a Keras loss is (see the module docstring)."""
        raise NotImplementedError

    def uniform_loss(self, num_entities: int) -> float | None:
        """The loss when every candidate scores the same (None: not defined for this objective).

        Why: a training loss that stays there has learned nothing; `jobi_tf.training.stalls` warns
        when an epoch ends at it. Only an objective whose value there does not depend on the
        data or on the common score has one (a softmax over a fixed set of candidates).
        """
        return None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(head={self.head}, name={self.name!r})"


class PairBCE(Objective):
    """JoBi's pair loss: binary cross-entropy of the pair head's logits against pair labels.

    A label is 1 when both the (head, relation) and (relation, tail) pairs of the candidate
    triple occur in training. Over sampled candidates the positive itself is included with
    label 1 and the mean runs over the positive and its negatives; over all entities
    (1-vs-all), labels are the sampler's dense ``pair_labels_tail`` /
    ``pair_labels_head`` and both directions are summed; over the queries of a k-vs-all
    batch, ``query_pair_labels`` (the asked slot of each query's relation).

    Args:
        regime: one of `REGIME_NAMES`: the triple head's, so both heads score the same candidates.
        every: train on positives 0, every, 2 every, ... of each sampled batch only (1: all of
            them, the paper's objective); a cheaper step (`ScoredBatch.sampled_rows`). The
            batch's ``pair_labels`` then hold those positives' rows only (the sampler's
            ``pair_every``).
    """

    default_name = "pair"

    def __init__(self, regime: str = SAMPLED, head: int = PAIR_HEAD, name: str | None = None, every: int = 1) -> None:
        if regime not in REGIME_NAMES:
            raise ValueError(f"regime must be one of {list(REGIME_NAMES)}. Received: regime={regime!r}")
        if every < 1 or (every > 1 and regime != SAMPLED):
            raise ValueError(f"every must be 1, or > 1 with sampled training only. Received: every={every!r}")
        super().__init__(head, name)
        self.regime, self.every = regime, every
        self.features = {
            SAMPLED: (F.PAIR_LABELS,),
            ONE_VS_ALL: (F.PAIR_LABELS_TAIL, F.PAIR_LABELS_HEAD),
            K_VS_ALL: (F.QUERY_IS_TAIL, F.QUERY_PAIR_LABELS),
        }[regime]
        self._loss = keras.losses.BinaryCrossentropy(from_logits=True, name=f"{self.name}_loss")

    def logits(self, batch: ScoredBatch) -> dict[str, tf.Tensor]:
        if self.regime == SAMPLED:
            if self.every > 1:
                return {self.name: batch.sampled_rows(self.head, self.every)}
            return {self.name: batch.sampled()[:, self.head]}
        if self.regime == K_VS_ALL:
            return {self.name: batch.query_scores()[:, self.head]}
        tail, head = batch.all_entities()
        return {f"{self.name}_tail": tail[:, self.head], f"{self.name}_head": head[:, self.head]}

    def loss(self, features, logits):
        if self.regime == K_VS_ALL:
            return self._loss(features[F.QUERY_PAIR_LABELS], logits[self.name])
        if self.regime == ONE_VS_ALL:
            return self._loss(features[F.PAIR_LABELS_TAIL], logits[f"{self.name}_tail"]) + self._loss(
                features[F.PAIR_LABELS_HEAD], logits[f"{self.name}_head"]
            )
        # (Rows of the labels = the head's positives: `jobi_tf.sampling.batch_plan` and the model check it.)
        labels, scores = features[F.PAIR_LABELS], logits[self.name]
        return self._loss(tf.pad(labels, [[0, 0], [1, 0]], constant_values=1.0), scores)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(regime={self.regime!r}, every={self.every}, name={self.name!r})"


class RelationPrediction(Objective):
    """Auxiliary: the true relation of ``(h, ?, t)`` in a softmax over every row of the
    triple head's relation table (Chen et al., AKBC 2021: relation prediction as an
    auxiliary training objective). Its weight is the model's ``relation_prediction``.

    With a ``reciprocal`` model the inverse rows are candidates too and, as in Chen et al.'s
    code (which trains on both copies of each triple), the inverse copy ``(t, ?, h)`` is asked
    as well, its answer being the row of ``r⁻¹``; the two softmaxes are summed, as the full
    softmax sums a triple's two queries. Without the inverse copy the inverse rows are only
    ever pushed down (they are wrong answers of ``(h, ?, t)``), yet they rank every head.

    Args:
        inverse_copy: ask ``(t, ?, h)`` too (reciprocal models only); ``False`` keeps only
            ``(h, ?, t)``.
    """

    default_name = "relation"

    def __init__(self, head: int = TRIPLE_HEAD, name: str | None = None, inverse_copy: bool = True) -> None:
        super().__init__(head, name)
        self.inverse_copy = inverse_copy
        self._loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, name=f"{self.name}_loss")

    def logits(self, batch: ScoredBatch) -> dict[str, tf.Tensor]:
        model, h, t = batch.model, batch.rows["head"], batch.rows["tail"]
        score = model.scorer.score_candidates
        out = {self.name: score(model.scorer.relation_query(h, t), model.triple_relations)}  # [B, R]
        if model.reciprocal and self.inverse_copy:
            out[f"{self.name}_inverse"] = score(model.scorer.relation_query(t, h), model.triple_relations)
        return out

    def loss(self, features, logits):
        relations = features[F.TRIPLES][:, RELATION]
        loss = self._loss(relations, logits[self.name])
        inverse = logits.get(f"{self.name}_inverse") if self.inverse_copy else None
        if inverse is not None:  # present when the model is reciprocal
            # Reciprocal tables hold r⁻¹ at row r + R, R being half the rows.
            loss += self._loss(relations + tf.shape(inverse, out_type=relations.dtype)[-1] // 2, inverse)
        return loss


def replica_share(value: tf.Tensor) -> tf.Tensor:
    """A per-replica batch mean → its share of the global mean (what Keras losses do)."""
    return value / tf.cast(tf.distribute.get_strategy().num_replicas_in_sync, value.dtype)


def reads_of(objectives: Iterable[Objective]) -> frozenset[str]:
    """The features ``objectives`` read besides ``triples``: what a model asks of its batches."""
    return frozenset(f for o in objectives for f in o.features)
