"""The embedding tables and the queries built from them, for the model and the export alike.

A query is what a scorer dots with every candidate entity's row: ``(h, r, ?)`` gives a tail
query, ``(?, r, t)`` a head query. With reciprocal relations (Lacroix et al., 2018) a head
query is the tail query of the inverse relation, whose row sits at ``r + num_relations``;
`Queries` is the one place that rule is written, so training, evaluation, the pair head and
the SavedModel (`jobi_tf.export.savedmodel`) rank with the same expressions.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable

import keras
import tensorflow as tf

from jobi_tf.models.scorers import Scorer
from jobi_tf.models.sharding import ShardedTable, glorot_blocks
from jobi_tf.runtime.types import HEAD, PAIR_HEAD, RELATION, TAIL, TRIPLE_HEAD

__all__ = ["Queries", "TableQueries", "rows", "make_tables", "initializer", "pair_score_threshold"]


def rows(table: keras.Variable | ShardedTable, ids: tf.Tensor) -> tf.Tensor:
    """Rows ``ids`` of an embedding table, read as a sparse gather of the variable itself
    (of the blocks that hold them, for a table sharded over parameter servers).

    Why not ``tf.gather(table, ids)``: that converts the Keras variable to a tensor first (a
    read of the whole table); without XLA the optimizer's later row update then finds the
    table's buffer still shared with that read and copies the whole table (seconds per step
    for a 2M-row table). Gathering from the backing ``tf.Variable`` reads only the rows.
    """
    if isinstance(table, ShardedTable):
        return table.gather(ids)
    backing = getattr(table, "value", table)
    return tf.gather(backing if isinstance(backing, tf.Variable) else table, ids)


@dataclasses.dataclass(frozen=True)
class Queries:
    """The queries of one head: its relation table with the shared entity table.

    Args:
        scorer: the bilinear scorer.
        entity_rows: ids ``[B]`` → entity rows ``[B, W]``.
        relation_rows: ids ``[B]`` → rows ``[B, W]`` of this head's relation table.
        num_relations: forward relations (the inverse of ``r`` is row ``r + num_relations``).
        reciprocal: head queries are the inverse relations' tail queries.
    """

    scorer: Scorer
    entity_rows: Callable[[tf.Tensor], tf.Tensor]
    relation_rows: Callable[[tf.Tensor], tf.Tensor]
    num_relations: int
    reciprocal: bool

    def tail(self, heads: tf.Tensor, relations: tf.Tensor) -> tf.Tensor:
        """``[B, W]`` queries whose dot with an entity's row scores it as the tail of ``(h, r, ?)``."""
        return self.scorer.tail_query(self.entity_rows(heads), self.relation_rows(relations))

    def head(self, relations: tf.Tensor, tails: tf.Tensor) -> tf.Tensor:
        """``[B, W]`` queries whose dot with an entity's row scores it as the head of ``(?, r, t)``."""
        return self.head_from_rows(self.relation_rows(self.head_relation_ids(relations)), self.entity_rows(tails))

    def head_relation_ids(self, relations: tf.Tensor) -> tf.Tensor:
        """The rows a head query reads: ``r``, or with ``reciprocal`` its inverse ``r + R``."""
        if self.reciprocal:
            return relations + tf.constant(self.num_relations, relations.dtype)
        return relations

    def head_from_rows(self, relation_rows: tf.Tensor, tail_rows: tf.Tensor) -> tf.Tensor:
        """A head query from rows already read (``relation_rows`` at `head_relation_ids`)."""
        if self.reciprocal:
            return self.scorer.tail_query(tail_rows, relation_rows)
        return self.scorer.head_query(relation_rows, tail_rows)


class TableQueries:
    """The queries and rows of a model holding an entity table and one relation table per head.

    A mixin of `jobi_tf.models.JoBiModel`: it reads the model's ``scorer``, ``num_relations``,
    ``reciprocal``, ``joint``, ``pair_every``, ``entity_embeddings``, ``triple_relations``,
    ``pair_relations`` (None without the pair head) and ``prior`` (a
    `jobi_tf.models.slot_prior.SlotPrior` added to the triple head's scores, or None).
    Evaluation and export use only the triple head's queries; training stacks the heads'
    (`queries`).
    """

    @property
    def triple_queries(self) -> Queries:
        """The triple head's queries (evaluation and export rank with these)."""
        return self._queries(self.triple_relations)

    @property
    def pair_queries(self) -> Queries:
        """The pair head's queries: their dot with an entity's row is the logit that it fits
        the asked slot (``joint`` only)."""
        if self.pair_relations is None:
            raise ValueError("this model has no pair head (joint=False)")
        return self._queries(self.pair_relations)

    def _queries(self, relation_table) -> Queries:
        relation_rows = functools.partial(rows, relation_table)
        return Queries(self.scorer, self.entity_rows, relation_rows, self.num_relations, self.reciprocal)

    def tail_queries(self, heads: tf.Tensor, relations: tf.Tensor) -> tf.Tensor:
        """``[B, W]`` queries whose dot with ``entity_embeddings[t]`` is ``s_tri(h, r, t)``."""
        return self.triple_queries.tail(heads, relations)

    def head_queries(self, relations: tf.Tensor, tails: tf.Tensor) -> tf.Tensor:
        """``[B, W]`` queries whose dot with ``entity_embeddings[h]`` scores ``h`` as the head:
        ``s_tri(h, r, t)``, or with ``reciprocal`` ``s_tri(t, r⁻¹, h)``."""
        return self.triple_queries.head(relations, tails)

    def pair_tail_queries(self, heads: tf.Tensor, relations: tf.Tensor) -> tf.Tensor:
        """``[B, W]`` pair-head queries for the tail slot (``joint`` only)."""
        return self.pair_queries.tail(heads, relations)

    def pair_head_queries(self, relations: tf.Tensor, tails: tf.Tensor) -> tf.Tensor:
        """``[B, W]`` pair-head queries for the head slot (``joint`` only)."""
        return self.pair_queries.head(relations, tails)

    def score_triples(self, triples: tf.Tensor) -> tf.Tensor:
        """``[B]`` triple-head scores of int ``[B, 3]`` triples (the forward relation's, with
        ``reciprocal``: what ranks tails)."""
        head, tail = self.entity_rows(triples[:, HEAD]), self.entity_rows(triples[:, TAIL])
        scores = self.scorer.score(head, rows(self.triple_relations, triples[:, RELATION]), tail)
        if self.prior is not None:
            scores += self.prior.triples(triples[:, HEAD], triples[:, RELATION], triples[:, TAIL])
        return scores

    def entity_rows(self, ids: tf.Tensor) -> tf.Tensor:
        """Rows ``ids`` of the entity table (a row gather, see `jobi_tf.models.tables.rows`)."""
        return rows(self.entity_embeddings, ids)

    # -- training ------------------------------------------------------------------------
    @property
    def stacked_heads(self) -> tuple[int, ...]:
        """The heads scored together on every positive (the pair head apart if ``pair_every > 1``)."""
        return (TRIPLE_HEAD, PAIR_HEAD) if self.joint and self.pair_every == 1 else (TRIPLE_HEAD,)

    @property
    def strided_heads(self) -> tuple[tuple[int, int], ...]:  # (head, every): `ScoredBatch.sampled_rows`
        return ((PAIR_HEAD, self.pair_every),) if self.joint and self.pair_every > 1 else ()

    def queries(
        self, triples: tf.Tensor, heads: tuple[int, ...] | None = None
    ) -> tuple[tf.Tensor, tf.Tensor, dict[str, tf.Tensor]]:
        """Head and tail queries of ``heads`` (default `stacked_heads`), stacked: ``[B, S, W]`` twice.

        Also returns the positive's rows ``head``, ``tail``, ``relation`` (the first head's)
        and, with ``reciprocal``, ``inverse`` (for the score of the positive and the regularizer).
        """
        h, t = self.entity_rows(triples[:, HEAD]), self.entity_rows(triples[:, TAIL])
        chosen = self.stacked_heads if heads is None else heads
        heads = [self.pair_queries if i == PAIR_HEAD else self.triple_queries for i in chosen]
        relations = triples[:, RELATION]
        forward = [q.relation_rows(relations) for q in heads]
        tail_q = tf.stack([self.scorer.tail_query(h, r) for r in forward], axis=1)
        used = {"head": h, "tail": t, "relation": forward[0]}
        backward = forward
        if self.reciprocal:  # head queries read the inverse rows
            backward = [q.relation_rows(q.head_relation_ids(relations)) for q in heads]
            used["inverse"] = backward[0]
        head_q = tf.stack([q.head_from_rows(r, t) for q, r in zip(heads, backward, strict=True)], axis=1)
        return head_q, tail_q, used


def pair_score_threshold(probability: tf.Tensor | float) -> tf.Tensor:
    """The pair-head score ``s`` from which ``σ(s) >= probability``: ``logit(probability)``,
    how soft-typed ranking and soft-typed answers admit an entity to a slot.

    Why the logit and not the sigmoid of every score: it is exact at 1 (``+inf``: nothing more
    is admitted), where a float32 sigmoid already rounds to 1 above a score of about 17; 0
    gives ``-inf`` (everything is admitted).
    """
    probability = tf.convert_to_tensor(probability)
    return tf.math.log(probability) - tf.math.log1p(-probability)


def initializer(init: str, width: int) -> keras.initializers.Initializer | str:
    """``table-glorot``: Glorot-normal over the table (the paper's code); ``row-glorot``: N(0, 2 / width)."""
    if init == "table-glorot":
        return "glorot_normal"
    if init == "row-glorot":
        return keras.initializers.RandomNormal(stddev=math.sqrt(2.0 / width))
    raise ValueError(f"init must be 'table-glorot' or 'row-glorot'. Received: {init!r}")


def make_tables(
    model: keras.Model,
    shapes: dict[str, tuple[int, int]],
    init: str,
    table_shards: int = 0,
    table_seed: int = 0,
    draw: bool = True,
) -> dict[str, keras.Variable | ShardedTable]:
    """The tables named in ``shapes`` (in order: entity table first), as weights of ``model``
    or, with ``table_shards``, as `ShardedTable`s (the entity table in ``table_shards`` row
    blocks, the others in one; created inside a ``ParameterServerStrategy`` scope, the blocks
    live on the servers). Each table draws its initial rows from its own stream; ``draw=False``:
    unsharded tables start at zero instead (their rows are loaded next)."""
    tables = {}
    for stream, (name, shape) in enumerate(shapes.items()):
        if table_shards:
            shards = min(table_shards, shape[0]) if stream == 0 else 1
            blocks = glorot_blocks(*shape, table_seed, stream, init)
            tables[name] = ShardedTable(blocks, shards, f"{model.name}/{name}", shape=shape)
        else:
            start = initializer(init, shape[1]) if draw else "zeros"
            tables[name] = model.add_weight(shape=shape, initializer=start, name=name)
    return tables
