"""The row bookkeeping the lazy optimizers share: a sparse gradient's ids, deduplicated without a sort."""

from __future__ import annotations

import keras
import tensorflow as tf

__all__ = ["first_positions", "unique_rows", "summed_at_first", "slot_rows"]


def first_positions(gradient: tf.IndexedSlices, num_rows: int) -> tuple[tf.Tensor, tf.Tensor]:
    """``(ids [n], owner [n])`` of a sparse gradient: its ids as int32 and, for each, the
    first position holding the same id, found with one scatter-min into an int32
    ``[num_rows]`` scratch vector (under XLA on CPU ``tf.unique`` sorts, and cost a third of
    the whole lazy update in a 100k-lookup step)."""
    ids = tf.cast(gradient.indices, tf.int32)
    n = tf.shape(ids)[0]
    first = tf.tensor_scatter_nd_min(tf.fill([num_rows], n), ids[:, None], tf.range(n))
    return ids, tf.gather(first, ids)


def unique_rows(gradient: tf.IndexedSlices, num_rows: int, dtype: tf.DType) -> tuple[tf.Tensor, tf.Tensor]:
    """``(ids [U], summed gradients [U, W])`` of a sparse gradient whose ids may repeat, the
    ids in order of first appearance, as from ``tf.unique`` (`first_positions`)."""
    ids, owner = first_positions(gradient, num_rows)
    is_first = tf.equal(owner, tf.range(tf.shape(ids)[0]))
    slot = tf.cumsum(tf.cast(is_first, tf.int32)) - 1  # [n] rank of each first position
    unique_ids = tf.boolean_mask(ids, is_first)
    values = tf.math.unsorted_segment_sum(
        tf.cast(gradient.values, dtype), tf.gather(slot, owner), tf.shape(unique_ids)[0]
    )
    return unique_ids, values


def summed_at_first(gradient: tf.IndexedSlices, num_rows: int, dtype: tf.DType) -> tuple[tf.Tensor, tf.Tensor]:
    """``(ids [n], gradients [n, W])`` of a sparse gradient whose ids may repeat: each id's
    gradients summed at its first position, zeros at its later ones.

    Why not `unique_rows`: an additive update (Adagrad's accumulator and step) of a zero
    gradient row changes nothing, so the repeats can stay, and the compaction to unique ids
    (a cumulative sum, a boolean mask and a gather of n rows) goes; the sums are the same.
    """
    ids, owner = first_positions(gradient, num_rows)
    return ids, tf.math.unsorted_segment_sum(tf.cast(gradient.values, dtype), owner, tf.shape(ids)[0])


def slot_rows(slot: keras.Variable, ids: tf.Tensor) -> tf.Tensor:
    """Rows ``ids`` of an optimizer slot, read as a sparse gather (never the whole slot)."""
    return tf.gather(slot.value if isinstance(slot, keras.Variable) else slot, ids)
