"""Trilinear dot product <h, r, t>, symmetric in h and t (DistMult: Yang et al., 2015)."""

from __future__ import annotations

import tensorflow as tf

from jobi_tf.contracts.scorer import Scorer

__all__ = ["DistMult"]


class DistMult(Scorer):
    """``s = <h, r, t> = sum_i h_i r_i t_i``: entity and relation rows of ``dim`` floats."""

    kind = "distmult"

    def entity_width(self, dim: int) -> int:
        return dim

    def relation_width(self, dim: int) -> int:
        return dim

    def tail_query(self, h: tf.Tensor, r: tf.Tensor) -> tf.Tensor:
        return h * r

    def head_query(self, r: tf.Tensor, t: tf.Tensor) -> tf.Tensor:
        return r * t

    def relation_query(self, h: tf.Tensor, t: tf.Tensor) -> tf.Tensor:
        return h * t


SCORER = DistMult
