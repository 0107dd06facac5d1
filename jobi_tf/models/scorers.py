"""DistMult, ComplEx and SimplE scoring functions, as Keras layers.

Every bilinear score can be written as a dot product ``s(h, r, t) = <q, e>`` between a
*query* vector built from the two known parts and the full embedding row of the candidate
entity. Scorers therefore expose three functions, and everything else (scoring a
positive, scoring sampled negatives, ranking against every entity with one matmul,
exported top-k) is built from them:

* ``tail_query(h, r)``: ``q`` such that ``s(h, r, t) = <q, E[t]>``;
* ``head_query(r, t)``: ``q`` such that ``s(h, r, t) = <q, E[h]>``;
* ``score_candidates(q, rows)``: the scores of queries against candidate rows, ``<q, row>``
  here (a matmul); the hook a scorer that is not a dot product overrides.

A scorer is a `keras.layers.Layer` so that one may own weights (a core tensor, a learned
scale): the model tracks it, its weights train and are checkpointed with the tables. The
three built-in scorers own none. Each model gets its own instance (`get_scorer`).

Widths follow the paper's code: ``dim`` counts components per part, so ComplEx dim 200 is
200 real + 200 imaginary (entity rows of 400 floats) and SimplE dim 200 has a head-role
and a tail-role embedding of 200 each per entity, and a relation and an inverse-relation
embedding of 200 each per relation.
"""

from __future__ import annotations

import keras
import tensorflow as tf

__all__ = ["Scorer", "DistMult", "ComplEx", "SimplE", "SCORERS", "get_scorer", "heads_against_own_rows"]

_LETTERS, _EXTRA = "abcdefgh", "stuv"  # einsum axis names: batch axes, then a query's extra axes


class Scorer(keras.layers.Layer):
    """Interface of a scorer. Subclasses set ``kind`` (the ``--model`` name; None for one of
    your own) and the query functions; one with weights creates them in ``__init__``."""

    kind: str | None = None

    def __init__(self, **kwargs) -> None:
        super().__init__(name=kwargs.pop("name", self.kind or type(self).__name__.lower()), **kwargs)
        self.built = True  # nothing to infer from an input: weights, if any, exist already

    def entity_width(self, dim: int) -> int:
        """Floats per entity row."""
        raise NotImplementedError

    def relation_width(self, dim: int) -> int:
        """Floats per relation row."""
        raise NotImplementedError

    def tail_query(self, h: tf.Tensor, r: tf.Tensor) -> tf.Tensor:
        """``[..., entity_width]`` query for tails given head rows ``h`` and relation rows ``r``."""
        raise NotImplementedError

    def head_query(self, r: tf.Tensor, t: tf.Tensor) -> tf.Tensor:
        """``[..., entity_width]`` query for heads given relation rows ``r`` and tail rows ``t``."""
        raise NotImplementedError

    def relation_query(self, h: tf.Tensor, t: tf.Tensor) -> tf.Tensor:
        """``[..., relation_width]`` query for relations given head rows ``h`` and tail rows
        ``t``: ``s(h, r, t) = <q, R[r]>`` (relation prediction, Chen et al. 2021)."""
        raise NotImplementedError

    def score_candidates(self, queries: tf.Tensor, rows: tf.Tensor) -> tf.Tensor:
        """Scores of queries against candidate entity rows: the one place a score is computed
        from a query, so the model's training logits, the evaluator's ranking and the
        exported top-k agree. A bilinear scorer's is ``<query, row>``, one matmul; a scorer
        that is not a dot product (a distance, or one with weights of its own) overrides it.

        Args:
            queries: ``[*batch, *extra, W]`` from `tail_query` / `head_query`.
            rows: ``[N, W]`` candidates shared by every query, or ``[*batch, K, W]``
                candidates of each batch element.

        Returns:
            ``[*batch, *extra, N]`` or ``[*batch, *extra, K]``.
        """
        if rows.shape.rank == 2:
            if queries.shape.rank == 2:
                return tf.matmul(queries, rows, transpose_b=True)
            lead = _LETTERS[: queries.shape.rank - 1]
            return tf.einsum(f"{lead}w,nw->{lead}n", queries, rows)
        if rows.shape.rank == 3 and queries.shape.rank == 3 and (queries.shape[1] or 1) > 1:
            return heads_against_own_rows(queries, rows)
        batch = _LETTERS[: rows.shape.rank - 2]
        extra = _EXTRA[: queries.shape.rank - 1 - len(batch)]
        return tf.einsum(f"{batch}{extra}w,{batch}kw->{batch}{extra}k", queries, rows)

    def score(self, h: tf.Tensor, r: tf.Tensor, t: tf.Tensor) -> tf.Tensor:
        """``[...]`` scores of triples given their rows."""
        return tf.reduce_sum(self.tail_query(h, r) * t, axis=-1)

    def cubed_norm(self, x: tf.Tensor) -> tf.Tensor:
        """``[...]`` sum of the cubed moduli of a row's components (the N3 penalty's term).

        Real-valued models take absolute values; ComplEx overrides this with the modulus of
        each complex component, as Lacroix et al. (2018) define N3.
        """
        return tf.reduce_sum(tf.abs(x) ** 3, axis=-1)


@tf.custom_gradient
def heads_against_own_rows(queries: tf.Tensor, rows: tf.Tensor):
    """``[B, S, K]`` dots of S queries per example (JoBi's triple and pair heads) with that
    example's own K candidate rows: ``queries [B, S, W]``, ``rows [B, K, W]``.

    Why not one batched einsum: XLA on CPU runs a batch of tiny ``[S, W] x [W, K]`` products
    as a generic loop; as one matrix-vector product per head, with the gradient written out
    (the rows' gradient is a sum of S outer products, one fused elementwise pass), the 500 x 50
    JoBi step went from 1.42x to 1.28x the baseline's (`docs/performance.md`, two runs of the
    same benchmark). The values are the same dot products.
    """
    per_head = tf.unstack(queries, axis=1)  # S x [B, W]
    scores = tf.stack([tf.einsum("bw,bkw->bk", q, rows) for q in per_head], axis=1)

    def gradient(upstream: tf.Tensor):
        upstream = tf.unstack(upstream, axis=1)  # S x [B, K]
        d_queries = tf.stack([tf.einsum("bk,bkw->bw", u, rows) for u in upstream], axis=1)
        d_rows = tf.add_n(
            [tf.expand_dims(u, 2) * tf.expand_dims(q, 1) for u, q in zip(upstream, per_head, strict=True)]
        )
        return d_queries, d_rows

    return scores, gradient


class DistMult(Scorer):
    """``s = <h, r, t> = sum_i h_i r_i t_i`` (Yang et al., 2015); symmetric in h and t."""

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


class ComplEx(Scorer):
    """``s = Re(<h, r, conj(t)>)`` (Trouillon et al., 2016); rows are ``[real, imaginary]``."""

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
        x_re, x_im = tf.split(x, 2, axis=-1)
        return tf.reduce_sum((x_re**2 + x_im**2) ** 1.5, axis=-1)


class SimplE(Scorer):
    """``s = (<h_head, r, t_tail> + <t_head, r_inv, h_tail>) / 2`` (Kazemi & Poole, 2018).

    Entity rows are ``[head-role, tail-role]``; relation rows are ``[r, r_inverse]``.
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


#: The built-in scorers by their ``--model`` name.
SCORERS: dict[str, type[Scorer]] = {cls.kind: cls for cls in (DistMult, ComplEx, SimplE)}


def get_scorer(name: str | Scorer) -> Scorer:
    """A new scorer called ``name`` (``distmult``, ``complex`` or ``simple``); a `Scorer`
    instance (one of your own) is returned as is."""
    if isinstance(name, Scorer):
        return name
    try:
        return SCORERS[name]()
    except (KeyError, TypeError):
        raise ValueError(f"model must be one of {sorted(SCORERS)} or a Scorer. Received: model={name!r}") from None
