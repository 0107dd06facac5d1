"""`SlotOffsets`: a batch's ``[B, E]`` slot-prior offsets (`jobi_tf.models.slot_prior`), built a
block of entities at a time, with each query's own weight of the counts (`jobi_tf.models.hub_route`)."""

from __future__ import annotations

import tensorflow as tf

__all__ = ["SlotOffsets"]


class SlotOffsets:
    """A batch's ``[B, E]`` prior offsets, made a block of entities at a time: ``offsets[:, lo:hi]``
    is a ``[B, hi - lo]`` tensor, and the whole is a tensor wherever one is needed (a served
    query's few rows). Why not a tensor: at 1.85M entities a batch of 1,000 queries would hold
    7.4 GB. The offset of query ``b`` at entity ``e`` is ``rows[which[b], e] + shift[b]``
    (`factors`): the query's ``w`` times the count of ``e`` in the query's slot, plus ``w`` times
    the given entity's in its own; ranking adds the factors inside its fused reduction. A row is
    built per distinct (slot, weight): with a hub route a slot can be asked with two weights."""

    def __init__(self, prior, slots: tf.Tensor, other_side: tf.Tensor, given: tf.Tensor) -> None:
        self.prior, self.slots = prior, slots
        group = prior.groups(given)  # [B]: 1 where a hub route gives the query its own weight
        pairs, which = tf.unique(tf.cast(slots, tf.int64) * 2 + group)
        self.distinct, self.which = pairs // 2, tf.cast(which, tf.int32)  # each (slot, weight) built once
        self.row_weights = prior.group_weights(pairs % 2)  # [U]
        self.weights = prior.group_weights(group)  # [B]: each query's weight of the counts
        self.shift = self.weights * tf.convert_to_tensor(other_side, tf.float32)

    @property
    def shape(self) -> tuple[int | None, int]:
        return (self.slots.shape[0], self.prior.num_entities)

    def factors(self, lo: int, hi: int) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """``(rows [U, hi - lo], which [B], shift [B])`` of entities ``lo..hi-1`` (class docstring)."""
        return self.row_weights[:, None] * self.prior.slot_rows(self.distinct, lo, hi), self.which, self.shift

    def __getitem__(self, key) -> tf.Tensor:
        rows, cols = key
        if rows != slice(None) or not isinstance(cols, slice) or cols.step not in (None, 1):
            raise IndexError("SlotOffsets takes [:, lo:hi] only")
        rows, which, shift = self.factors(*cols.indices(self.prior.num_entities)[:2])
        return tf.gather(rows, which) + shift[:, None]

    def at(self, entities) -> tf.Tensor:
        """``[B]``: each query's offset at one entity, by the expression of ``[:, lo:hi]``."""
        return self.weights * self.prior.log_counts(self.slots, entities) + self.shift

    def pairs_at(self, rows, entities) -> tf.Tensor:
        """``[n]``: query ``rows[i]``'s offset at ``entities[i]`` (int64 ``[n]`` each), by the
        expression of ``[:, lo:hi]``."""
        slots = tf.gather(tf.cast(self.slots, tf.int64), rows)
        return tf.gather(self.weights, rows) * self.prior.log_counts(slots, entities) + tf.gather(self.shift, rows)

    def dense(self) -> tf.Tensor:
        """The whole ``[B, E]``."""
        return self[:, :]


tf.register_tensor_conversion_function(SlotOffsets, lambda value, dtype=None, name=None, as_ref=False: value.dense())
