"""Complex trilinear product Re(<h, r, conj(t)>) of [real, imaginary] rows (ComplEx: Trouillon et al., 2016)."""

from __future__ import annotations

import tensorflow as tf

from jobi_tf.contracts.scorer import Scorer

__all__ = ["ComplEx"]


class ComplEx(Scorer):
    """``s = Re(<h, r, conj(t)>)``; rows are ``[real, imaginary]``, so ``dim`` 200 is 200 real
    and 200 imaginary components (rows of 400 floats), as in the paper's code."""

    kind = "complex"

    def entity_width(self, dim: int) -> int:
        return 2 * dim

    def relation_width(self, dim: int) -> int:
        return 2 * dim

    def tail_query(self, h: tf.Tensor, r: tf.Tensor) -> tf.Tensor:
        h_re, h_im = tf.split(h, 2, axis=-1)
        r_re, r_im = tf.split(r, 2, axis=-1)
        # h * r as complex numbers; <q, [t_re, t_im]> = Re(h r conj(t)).
        return tf.concat([h_re * r_re - h_im * r_im, h_re * r_im + h_im * r_re], axis=-1)

    def head_query(self, r: tf.Tensor, t: tf.Tensor) -> tf.Tensor:
        r_re, r_im = tf.split(r, 2, axis=-1)
        t_re, t_im = tf.split(t, 2, axis=-1)
        # r * conj(t) as complex numbers, conjugated: <q, [h_re, h_im]> = Re(h r conj(t)).
        return tf.concat([r_re * t_re + r_im * t_im, r_re * t_im - r_im * t_re], axis=-1)

    def relation_query(self, h: tf.Tensor, t: tf.Tensor) -> tf.Tensor:
        h_re, h_im = tf.split(h, 2, axis=-1)
        t_re, t_im = tf.split(t, 2, axis=-1)
        # h * conj(t) as complex numbers, conjugated: <q, [r_re, r_im]> = Re(h r conj(t)).
        return tf.concat([h_re * t_re + h_im * t_im, h_re * t_im - h_im * t_re], axis=-1)

    def cubed_norm(self, x: tf.Tensor) -> tf.Tensor:
        """The cubed modulus of each complex component, as Lacroix et al. (2018) define N3."""
        x_re, x_im = tf.split(x, 2, axis=-1)
        return tf.reduce_sum((x_re**2 + x_im**2) ** 1.5, axis=-1)


SCORER = ComplEx
