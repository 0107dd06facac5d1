"""`Scorer`: what every ``--model`` implements, and the scoring helpers they share.

Every bilinear score can be written as a dot product ``s(h, r, t) = <q, e>`` between a
*query* vector built from the two known parts and the full embedding row of the candidate
entity. Scorers therefore expose three functions, and everything else (scoring a
positive, scoring sampled negatives, ranking against every entity with one matmul,
exported top-k) is built from them:

* ``tail_query(h, r)``: ``q`` such that ``s(h, r, t) = <q, E[t]>``;
* ``head_query(r, t)``: ``q`` such that ``s(h, r, t) = <q, E[h]>``;
* ``score_candidates(q, rows)``: the scores of queries against candidate rows, ``<q, row>``
  here (a matmul); the hook a scorer that is not a dot product overrides.

A scorer says which it is: ``dot_product`` (True here; False for a distance such as RotatE's,
and by default for any subclass that overrides ``score_candidates`` without saying). The fast
paths that need the dot-product form (one-pass ranking, the served tables' column layout and
bfloat16 rows, the approximate export's cells) read it, and fall back or refuse in one line
naming the scorer. ``relation_query`` is optional: without it, relation prediction is refused
and the export has no relation signature.

A scorer is a `keras.layers.Layer` so that one may own weights (a core tensor, a learned
scale): the model tracks it, its weights train and are checkpointed with the tables. Each
model gets its own instance (`jobi_tf.models.scorers.get_scorer`), made with the model's
``dim``, which a scorer with weights needs to shape them.
"""

from __future__ import annotations

import keras
import tensorflow as tf

__all__ = ["Scorer", "heads_against_own_rows", "not_a_dot_product"]

_LETTERS, _EXTRA = "abcdefgh", "stuv"  # einsum axis names: batch axes, then a query's extra axes


class Scorer(keras.layers.Layer):
    """Interface of a scorer. Subclasses set ``kind`` (the ``--model`` name, their module's;
    None for one of your own) and the query functions; one with weights creates them in
    ``__init__`` from ``dim``.

    Args:
        dim: components per part, the model's ``dim`` (``--dim``). None: a scorer used for
            its widths only (the memory guard's), which creates no weights.
    """

    kind: str | None = None
    #: True: ``score_candidates`` is ``<query, row>``, so a ranking may be one matmul of the queries
    #: with the table (module docstring). A subclass overriding ``score_candidates`` without
    #: setting it is taken as not a dot product.
    dot_product: bool = True

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        if "score_candidates" in cls.__dict__ and "dot_product" not in cls.__dict__:
            cls.dot_product = False

    @classmethod
    def has_relation_query(cls) -> bool:
        """True when the scorer builds ``relation_query`` (relation prediction, the export's
        relation signature); a scorer may leave it out."""
        return cls.relation_query is not Scorer.relation_query

    def __init__(self, dim: int | None = None, **kwargs) -> None:
        super().__init__(name=kwargs.pop("name", self.kind or type(self).__name__.lower()), **kwargs)
        self.dim = dim
        self.built = True  # nothing to infer from an input: weights, if any, exist already

    @classmethod
    def check(cls, cfg) -> None:
        """Refuse, as a `jobi_tf.runtime.errors.ConfigError`, a run (`jobi_tf.config.RunConfig`) this
        scorer cannot train; called before anything is written."""

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
        ``t``: ``s(h, r, t) = <q, R[r]>`` (relation prediction, Chen et al. 2021). Optional
        (`has_relation_query`)."""
        raise NotImplementedError(f"the {type(self).__name__} scorer has no relation_query")

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
        """``[...]`` scores of triples given their rows: the tail query against each triple's own
        tail, by ``score_candidates`` (a dot product's as one elementwise product and sum)."""
        query = self.tail_query(h, r)
        if self.dot_product:
            return tf.reduce_sum(query * t, axis=-1)
        return self.score_candidates(query, tf.expand_dims(tf.convert_to_tensor(t, query.dtype), -2))[..., 0]

    def cubed_norm(self, x: tf.Tensor) -> tf.Tensor:
        """``[...]`` sum of the cubed moduli of a row's components (the N3 penalty's term).

        Real-valued models take absolute values; ComplEx overrides this with the modulus of
        each complex component, as Lacroix et al. (2018) define N3.
        """
        return tf.reduce_sum(tf.abs(x) ** 3, axis=-1)


def not_a_dot_product(scorer, what: str) -> str:
    """The one line a path that needs ``<query, row>`` scores gives for ``scorer``: ``what``
    names the path (``--cells``)."""
    name = scorer.kind or type(scorer).__name__
    return f"{what}: the {name} scorer is not a dot product of a query and an entity row"


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
