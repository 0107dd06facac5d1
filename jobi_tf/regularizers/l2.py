"""Normalised L2 norm of every row a batch uses (PyKEEN's ComplEx default)."""

from __future__ import annotations

import tensorflow as tf

from jobi_tf.contracts.scored_batch import Factors
from jobi_tf.regularizers import Regularizer

__all__ = ["L2"]


class L2(Regularizer):
    """The mean, over the rows a positive's scores used (its head, tail and relation rows
    and its sampled candidates' rows), of ``||x|| / sqrt(width)``.

    Why normalised by the width: the weight then means the same at any ``--dim`` (PyKEEN's
    ``LpRegularizer(normalize=True)``, which its ComplEx applies at weight 0.01).
    """

    def penalty(self, factors: Factors) -> tf.Tensor:
        used = [factors.head, factors.tail, *factors.relations, *factors.candidates]
        norms = [tf.norm(x, axis=-1) / tf.sqrt(tf.cast(tf.shape(x)[-1], x.dtype)) for x in used]
        flat = [n if n.shape.rank == 2 else n[:, None] for n in norms]
        return tf.reduce_mean(tf.concat(flat, axis=1), axis=1)


REGULARIZER = L2
