"""Logistic loss: BCE of the positive (label 1) and of its sampled negatives (label 0) (PBG, DGL-KE)."""

from __future__ import annotations

import tensorflow as tf

from jobi_tf.contracts.objectives import SAMPLED, Objective, replica_share
from jobi_tf.contracts.scored_batch import ScoredBatch

__all__ = ["SampledBCE"]


class SampledBCE(Objective):
    """Binary cross-entropy of each positive against 1 and of its sampled negatives against 0.

    ``L = softplus(-s⁺) + mean_k softplus(s⁻_k)`` per positive (``-log σ(s⁺) - mean_k log σ(-s⁻_k)``),
    averaged over the batch: the positive and its negatives weigh the same whatever ``--neg``
    (PyTorch-BigGraph's ``logistic`` loss gives each negative ``1 / K``; DGL-KE's
    ``logsigmoid`` halves the sum). A candidate equal to the positive (``valid_negative``
    False) is no negative and is left out of the mean.

    Why offered beside the softmax: it is the default of PBG-style and DGL-KE-style trainers,
    so a comparison with them can train the same loss; each negative's gradient does not
    depend on the others' scores, as it does in a softmax. With ``--joint`` the pair head
    trains JoBi's `jobi_tf.contracts.objectives.PairBCE` over the same candidates.
    """

    regime = SAMPLED
    features = ("valid_negative",)

    def logits(self, batch: ScoredBatch) -> dict[str, tf.Tensor]:
        return {self.name: batch.sampled()[:, self.head]}  # [B, 1 + K], column 0 the positive

    def loss(self, features: dict[str, tf.Tensor], logits: dict[str, tf.Tensor]) -> tf.Tensor:
        scores = logits[self.name]
        valid = tf.cast(features["valid_negative"], scores.dtype)  # [B, K]
        negatives = tf.reduce_sum(tf.nn.softplus(scores[:, 1:]) * valid, axis=1)
        negatives = negatives / tf.maximum(tf.reduce_sum(valid, axis=1), 1.0)
        return replica_share(tf.reduce_mean(tf.nn.softplus(-scores[:, 0]) + negatives))


LOSS = SampledBCE
