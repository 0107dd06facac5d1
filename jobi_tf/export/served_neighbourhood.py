"""The neighbourhood term in an export (`jobi_tf.models.neighbourhood`), so that what is served is
what was measured.

Why its own module: the term is not a table lookup but a two-step walk over the training graph,
a query's own set of entities; the export holds the graph as compressed rows (the neighbours of
entity ``e`` are ``neighbours[start[e]:start[e + 1]]``, 4 bytes an edge end: 155 MB at 1.85M
entities) and each entity's share ``1 / deg`` (0 for a hub: no step, no given entity), and walks it
per query, as `Neighbourhood.reach` does in NumPy. The sums are float64, as there, so the terms
come out the same float32 values.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from jobi_tf.export.served_tables import read_value, row_ids
from jobi_tf.models.neighbourhood import SCALE, Neighbourhood

__all__ = ["ServedNeighbourhood"]


class ServedNeighbourhood(tf.Module):
    """The graph's rows, the shares and ``v``; `reach` gives a batch's terms as sparse triples."""

    def __init__(self, near: Neighbourhood) -> None:
        super().__init__(name="neighbourhood")
        self.weight, self.num_entities = float(near.weight), near.num_entities
        self.neighbours = tf.Variable(near.neighbours.astype(np.int32), trainable=False, name="neighbours")
        self.start = tf.Variable(near.start.astype(np.int64), trainable=False, name="neighbour_start")
        self.share = tf.Variable(near.shares.astype(np.float64), trainable=False, name="neighbour_share")

    @classmethod
    def optional(cls, near: Neighbourhood | None) -> ServedNeighbourhood | None:
        return None if near is None or not near.weight else cls(near)

    def reach(self, anchor: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """``(rows, ids, terms)``, int64, int64, float32 ``[n]``: query ``rows[i]``'s term at entity
        ``ids[i]`` (``v`` applied), for every entity two steps from its given entity ``anchor``."""
        start, share, neighbours = (read_value(v) for v in (self.start, self.share, self.neighbours))
        anchor = tf.cast(anchor, tf.int64)
        queries = tf.range(tf.size(anchor, out_type=tf.int64))
        queries, anchor = _kept(share, queries, anchor)  # none from a hub
        rows, via = _kept(share, *_steps(start, neighbours, queries, anchor))  # no step through one
        of_via, reached = _steps(start, neighbours, tf.range(tf.size(via, out_type=tf.int64)), via)  # (hubs too)
        keys = tf.gather(rows, of_via) * self.num_entities + reached
        weights = tf.gather(share, tf.gather(via, of_via))
        distinct, which = tf.unique(keys)
        ra = tf.math.unsorted_segment_sum(weights, which, tf.size(distinct))
        terms = tf.constant(self.weight, tf.float32) * tf.cast(tf.math.log1p(SCALE * ra), tf.float32)
        return distinct // self.num_entities, distinct % self.num_entities, terms

    def at_pairs(self, anchor: tf.Tensor, other: tf.Tensor) -> tf.Tensor:
        """float32 ``[B]``: the term of each pair ``(anchor[b], other[b])`` (0 where not reached)."""
        rows, ids, terms = self.reach(anchor)
        hit = tf.equal(ids, tf.gather(tf.cast(other, tf.int64), rows))
        return tf.math.unsorted_segment_sum(tf.where(hit, terms, 0.0), rows, tf.size(anchor))

    def add_to(self, scores: tf.Tensor, anchor: tf.Tensor) -> tf.Tensor:
        """``scores [B, E]`` with each query's terms added (the exact signatures)."""
        rows, ids, terms = self.reach(anchor)
        return tf.tensor_scatter_nd_add(scores, tf.stack([rows, ids], axis=1), terms)


def _steps(start, neighbours, rows: tf.Tensor, entities: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """``(rows, neighbours)``: every edge end of each of ``entities``, with the row it came from."""
    spans = tf.ragged.range(tf.gather(start, entities), tf.gather(start, entities + 1))
    return tf.gather(rows, row_ids(spans)), tf.cast(tf.gather(neighbours, spans.flat_values), tf.int64)


def _kept(share: tf.Tensor, rows: tf.Tensor, entities: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """``(rows, entities)`` where the entity has a share (is no hub and has an edge)."""
    keep = tf.gather(share, entities) > 0
    return tf.boolean_mask(rows, keep), tf.boolean_mask(entities, keep)
