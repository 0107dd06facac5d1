"""The two JoBi losses, as Keras losses so that Keras reduces them.

Keras losses average per-example values over the batch and divide by the number of
replicas under ``tf.distribute``, which is what keeps gradients right under
``MirroredStrategy`` (a hand-written ``reduce_mean`` would make them N times too large).

* ``L_tri``: negative log-likelihood of a softmax over scores; for sampled negatives the
  logits are ``[s(pos), s(neg_1), ..., s(neg_K)]`` and the true class is 0, for full
  softmax the logits are every entity's score and the true class is the true entity.
* ``L_bi``: binary cross-entropy of the pair head's logits against pair labels, averaged
  over the candidates of each positive (the positive itself included, label 1).
"""

from __future__ import annotations

import keras

__all__ = ["triple_loss", "pair_loss"]


def triple_loss() -> keras.losses.Loss:
    """``L_tri(y_true [B] int, logits [B, C]) = logsumexp(logits) - logits[y_true]``, batch-averaged."""
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True, name="triple_loss")


def pair_loss() -> keras.losses.Loss:
    """``L_bi(labels [B, C] in {0, 1}, logits [B, C])``: mean binary cross-entropy per positive."""
    return keras.losses.BinaryCrossentropy(from_logits=True, name="pair_loss")
