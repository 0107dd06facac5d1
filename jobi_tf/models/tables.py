"""The embedding tables and the queries built from them, for the model and the export alike.

A query is what a scorer dots with every candidate entity's row: ``(h, r, ?)`` gives a tail
query, ``(?, r, t)`` a head query. With reciprocal relations (Lacroix et al., 2018) a head
query is the tail query of the inverse relation, whose row sits at ``r + num_relations``;
`Queries` is the one place that rule is written, so training, evaluation, the pair head and
the SavedModel (`jobi_tf.export`) rank with the same expressions.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import keras
import tensorflow as tf

from jobi_tf.models.scorers import Scorer
from jobi_tf.sharding import ShardedTable, glorot_blocks

__all__ = ["Queries", "rows", "make_tables", "initializer", "pair_score_threshold"]


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
) -> dict[str, keras.Variable | ShardedTable]:
    """The tables named in ``shapes`` (in order: entity table first), as weights of ``model``
    or, with ``table_shards``, as `ShardedTable`s (the entity table in ``table_shards`` row
    blocks, the others in one; created inside a ``ParameterServerStrategy`` scope, the blocks
    live on the servers). Each table draws its initial rows from its own stream."""
    tables = {}
    for stream, (name, shape) in enumerate(shapes.items()):
        if table_shards:
            shards = min(table_shards, shape[0]) if stream == 0 else 1
            blocks = glorot_blocks(*shape, table_seed, stream, init)
            tables[name] = ShardedTable(blocks, shards, f"{model.name}/{name}", shape=shape)
        else:
            tables[name] = model.add_weight(shape=shape, initializer=initializer(init, shape[1]), name=name)
    return tables
