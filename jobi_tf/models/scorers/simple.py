"""Two role embeddings per entity, averaged over r and its inverse (SimplE: Kazemi & Poole, 2018)."""

from __future__ import annotations

import tensorflow as tf

from jobi_tf.contracts.scorer import Scorer

__all__ = ["SimplE"]


class SimplE(Scorer):
    """``s = (<h_head, r, t_tail> + <t_head, r_inv, h_tail>) / 2``.

    Entity rows are ``[head-role, tail-role]``; relation rows are ``[r, r_inverse]``: ``dim``
    200 is two embeddings of 200 per entity and per relation, as in the paper's code.
    """

    kind = "simple"

    def entity_width(self, dim: int) -> int:
        return 2 * dim

    def relation_width(self, dim: int) -> int:
        return 2 * dim

    def tail_query(self, h: tf.Tensor, r: tf.Tensor) -> tf.Tensor:
        h_head, h_tail = tf.split(h, 2, axis=-1)
        r_fwd, r_inv = tf.split(r, 2, axis=-1)
        # Pairs with the candidate's [t_head, t_tail].
        return 0.5 * tf.concat([r_inv * h_tail, r_fwd * h_head], axis=-1)

    def head_query(self, r: tf.Tensor, t: tf.Tensor) -> tf.Tensor:
        r_fwd, r_inv = tf.split(r, 2, axis=-1)
        t_head, t_tail = tf.split(t, 2, axis=-1)
        # Pairs with the candidate's [h_head, h_tail].
        return 0.5 * tf.concat([r_fwd * t_tail, r_inv * t_head], axis=-1)

    def relation_query(self, h: tf.Tensor, t: tf.Tensor) -> tf.Tensor:
        h_head, h_tail = tf.split(h, 2, axis=-1)
        t_head, t_tail = tf.split(t, 2, axis=-1)
        # Pairs with the candidate relation's [r, r_inverse].
        return 0.5 * tf.concat([h_head * t_tail, t_head * h_tail], axis=-1)


SCORER = SimplE
