"""Each distinct training query, BCE of every entity against its known answers (ConvE, LibKGE)."""

from __future__ import annotations

import tensorflow as tf

from jobi_tf.contracts.objectives import K_VS_ALL, TRIPLE_HEAD, Objective, replica_share
from jobi_tf.contracts.scored_batch import ScoredBatch

__all__ = ["KvsAll"]


class KvsAll(Objective):
    """k-vs-all: for each distinct training query ``(h, r, ?)`` or ``(?, r, t)``, binary
    cross-entropy of every entity's logit against "is a training answer", summed over the
    entities and averaged over the queries.

    Batches are distinct queries, not triples (`jobi_tf.sampling.pipelines.TrainingQueries`): a
    query with many answers is one example, not one per answer.

    Args:
        label_smoothing: ε: targets ``(1 - ε) · y + ε / E`` (ConvE's smoothing); 0 = none.
    """

    regime = K_VS_ALL
    features = ("query_is_tail", "answer_labels")
    options = ("label_smoothing",)

    def __init__(self, head: int = TRIPLE_HEAD, name: str | None = None, label_smoothing: float = 0.0) -> None:
        if not 0.0 <= label_smoothing < 1.0:
            raise ValueError(f"label_smoothing must be in [0, 1). Received: label_smoothing={label_smoothing!r}")
        super().__init__(head, name)
        self.label_smoothing = label_smoothing

    def logits(self, batch: ScoredBatch) -> dict[str, tf.Tensor]:
        return {self.name: batch.query_scores()[:, self.head]}

    def loss(self, features, logits):
        scores = logits[self.name]
        labels = tf.cast(features["answer_labels"], scores.dtype)
        if self.label_smoothing:
            entities = tf.cast(tf.shape(labels)[-1], scores.dtype)
            labels = (1.0 - self.label_smoothing) * labels + self.label_smoothing / entities
        per_query = tf.reduce_sum(tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=scores), axis=-1)
        return replica_share(tf.reduce_mean(per_query))


LOSS = KvsAll
