"""Relations as rotations in the complex plane, scored by distance (RotatE: Sun et al., 2019)."""

from __future__ import annotations

import tensorflow as tf

from jobi_tf.contracts.scorer import Scorer
from jobi_tf.runtime.errors import ConfigError

__all__ = ["RotatE"]

#: Largest ``queries x candidates x components`` block scored at once: the distances of every
#: pair are materialised (a distance is no matmul), so a 1,000 x 100,000-entity ranking block
#: is scored a slice of queries at a time (64 MB of float32 per slice).
_BLOCK_ELEMENTS = 1 << 24


class RotatE(Scorer):
    """``s = -sum_i |h_i e^{i theta_i} - t_i|``: entity rows of ``dim`` complex numbers (``dim``
    real parts, then ``dim`` imaginary), relation rows of ``dim`` phases in radians. A rotation
    keeps lengths, so ``|h r - t| = |h - t conj(r)|``: the head query is the tail rotated back,
    and both sides rank by the same distance.

    Why it is here: the score is a distance, not a dot product (``dot_product = False``), so
    every path that needs ``<query, row>`` (one-pass ranking, the served tables' columns,
    bfloat16 rows, ``--cells``) falls back or refuses by that declaration; it has no relation
    query, so relation prediction is refused and its export has no ``predict_relation``.

    Not the paper's: its margin ``gamma`` (a constant, which changes no softmax and no ranking)
    and its self-adversarial negative weights (the sampled softmax's gradient weighs each
    negative by its softmax probability, a close kin). Phases start as ``--init`` draws the
    relation rows, near 0 (near-identity rotations); the paper draws them in [-pi, pi].

    >>> scorer = RotatE(dim=2)
    >>> round(float(scorer.score(tf.ones([1, 4]), tf.zeros([1, 2]), tf.ones([1, 4]))[0]), 3)
    -0.0
    """

    kind = "rotate"
    dot_product = False

    @classmethod
    def check(cls, cfg) -> None:
        if cfg.train.regularization and cfg.train.regularizer in ("n3", "dura"):
            raise ConfigError("regularizer", f"{cfg.train.regularizer} is a bilinear model's penalty; rotate takes l2")

    def entity_width(self, dim: int) -> int:
        return 2 * dim

    def relation_width(self, dim: int) -> int:
        return dim

    def tail_query(self, h: tf.Tensor, r: tf.Tensor) -> tf.Tensor:
        re, im = tf.split(h, 2, axis=-1)
        cos, sin = tf.cos(r), tf.sin(r)
        return tf.concat([re * cos - im * sin, re * sin + im * cos], axis=-1)

    def head_query(self, r: tf.Tensor, t: tf.Tensor) -> tf.Tensor:
        re, im = tf.split(t, 2, axis=-1)
        cos, sin = tf.cos(r), tf.sin(r)
        return tf.concat([re * cos + im * sin, im * cos - re * sin], axis=-1)

    def score_candidates(self, queries: tf.Tensor, rows: tf.Tensor) -> tf.Tensor:
        """Minus the summed complex moduli of ``query - row`` (the base class's shapes)."""
        if rows.shape.rank != 2:  # each batch element's own candidates: [*batch, K, W]
            batch = rows.shape.rank - 2
            extra = queries.shape.rank - 1 - batch
            rows = tf.reshape(rows, tf.concat([tf.shape(rows)[:batch], [1] * extra, tf.shape(rows)[batch:]], 0))
            return _distance(tf.expand_dims(queries, -2), rows)
        lead, width = tf.shape(queries)[:-1], tf.shape(queries)[-1]
        flat = tf.reshape(queries, [-1, width])
        candidates = rows.shape[0] or 1
        block = max(1, _BLOCK_ELEMENTS // (candidates * max(1, rows.shape[1] or 1)))
        if isinstance(flat.shape[0], int) and flat.shape[0] <= block:
            scores = _distance(flat[:, None, :], rows[None])
        else:
            count = tf.shape(flat)[0]
            padded = tf.pad(flat, [[0, (-count) % block], [0, 0]])
            blocks = tf.reshape(padded, [-1, block, width])
            scores = tf.map_fn(
                lambda q: _distance(q[:, None, :], rows[None]),
                blocks,
                fn_output_signature=tf.TensorSpec([block, None], queries.dtype),
            )
            scores = tf.reshape(scores, [-1, tf.shape(rows)[0]])[:count]
        return tf.reshape(scores, tf.concat([lead, [tf.shape(rows)[0]]], 0))


def _distance(a: tf.Tensor, b: tf.Tensor) -> tf.Tensor:
    """``-sum_i |a_i - b_i|`` over complex components (broadcast ``a`` against ``b``). The tiny
    term under the root keeps the gradient finite where a distance is exactly 0."""
    a_re, a_im = tf.split(a, 2, axis=-1)
    b_re, b_im = tf.split(b, 2, axis=-1)
    squared = tf.square(a_re - b_re) + tf.square(a_im - b_im)
    return -tf.reduce_sum(tf.sqrt(squared + tf.constant(1e-12, squared.dtype)), axis=-1)


SCORER = RotatE
