"""`SlotMembership`: was an entity seen in a slot of a relation in train? Asked in-graph.

The sampler's pair labels are this question for every candidate of a batch
(`jobi_tf.sampling.negatives.NegativeSampler`); it lives apart because it is the sampler's one data
structure sized by the graph (a dense table or sorted keys, see the class).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from jobi_tf.data.index import KGIndex

__all__ = ["SlotMembership", "DENSE_MEMBERSHIP_BYTES"]

#: Largest ``2 x relations x entities`` byte table `SlotMembership` keeps for pair labels of
#: sampled candidates (YAGO3-10: 9 MB); larger graphs search sorted keys instead.
DENSE_MEMBERSHIP_BYTES = 1 << 26


class SlotMembership:
    """In-graph answers to: was entity ``e`` seen in the tail (or head) slot of relation ``r`` in train?

    Why two forms: a dense byte per ``(side, relation, entity)`` answers with one gather
    (FB15k-237: 6.9 MB), while a graph of FB1.9M's size would need 12 GB; there one binary
    search runs over the sorted keys of both sides at once (tail keys first, head keys offset
    past them), instead of one search per side. Candidates shared by many rows have a cheaper
    answer there (`contains_shared`).
    """

    def __init__(self, index: KGIndex, dense_bytes: int = DENSE_MEMBERSHIP_BYTES) -> None:
        e, r = index.num_entities, index.num_relations
        self._num_entities, self._num_relations = e, r
        if 2 * r * e <= dense_bytes:
            self._table, self._keys = tf.constant(index.slot_rows().reshape(-1)), None
        else:
            self._table, self._keys = None, tf.constant(index.slot_keys, tf.int64)
            self._entity_starts, self._entity_slots = self._slots_of_entities(index)
        # Dense keys fit int32 (below 2**26); sorted keys of a large graph may not.
        self._key_dtype = tf.int32 if self._table is not None else tf.int64

    def contains(self, relations: tf.Tensor, entities: tf.Tensor, tail: tf.Tensor) -> tf.Tensor:
        """bool, the broadcast shape of the inputs.

        Why the slot is built at the shape of ``relations`` and ``tail`` (``[B, 1]`` for
        a batch whose side is chosen per positive) and only then added to the candidates: the
        sampler's ops run outside XLA, one pass over memory each, so broadcasting first made
        every step of the key a pass over all ``B x K`` candidates instead of one.
        """
        dtype = self._key_dtype
        key = self._slot(relations, tail, dtype) * self._num_entities + tf.cast(entities, dtype)
        if self._table is not None:
            return tf.gather(self._table, key)
        flat = tf.reshape(key, [-1])
        pos = tf.minimum(tf.searchsorted(self._keys, flat), tf.cast(tf.size(self._keys) - 1, tf.int32))
        return tf.reshape(tf.equal(tf.gather(self._keys, pos), flat), tf.shape(key))

    def _slot(self, relations: tf.Tensor, tail: tf.Tensor, dtype: tf.DType) -> tf.Tensor:
        """Slot ids ``side * R + relation``, tail slots first (the layout of `KGIndex.slot_keys`,
        whose keys are ``slot * E + entity``)."""
        head_offset = tf.constant(self._num_relations, dtype)
        return tf.cast(relations, dtype) + tf.where(tail, tf.constant(0, dtype), head_offset)

    def contains_shared(
        self, relations: tf.Tensor, shared: tf.Tensor, tail: tf.Tensor, rows_per_group: int
    ) -> tf.Tensor:
        """bool ``[B, K]``: for row ``i``, is each of ``shared[i // rows_per_group]`` in its slot.

        The same answers as `contains` on the candidates repeated to ``[B, K]``. Why a second
        path: with sorted keys, each of the ``B x K`` searches runs 25 levels deep, the lower ones
        cache misses (on an FB1.9M-size graph, most of the sampler's time). The other way round is
        cheap: the ``G x K`` candidates' own slots (about 11 per entity there) make a sorted
        set of ``(candidate, slot)`` keys, small enough for the cache, and every row's question
        becomes a search in that set.

        Args:
            relations: int32 ``[B, 1]``, each row's relation.
            shared: int32 ``[G, K]``, the candidates of each group of ``rows_per_group`` rows.
            tail: bool, ``[B, 1]`` or ``[B, K]``: which slot each row's candidates go in.
            rows_per_group: rows per group (``B = G * rows_per_group``).
        """
        if self._table is not None:
            return self.contains(relations, tf.repeat(shared, rows_per_group, axis=0), tail)
        starts, slots = self._entity_starts, self._entity_slots
        per_group = tf.shape(shared)[1]
        flat = tf.reshape(shared, [-1])
        at = tf.ragged.range(tf.gather(starts, flat), tf.gather(starts, flat + 1))
        # Keys ``candidate * S + slot`` come out sorted: candidates in order, each one's slots
        # ascending (`_slots_of_entities`). A sentinel past the end keeps the gather in range.
        n_slots = tf.constant(2 * self._num_relations, tf.int64)
        keys = at.value_rowids() * n_slots + tf.cast(tf.gather(slots, at.flat_values), tf.int64)
        keys = tf.concat([keys, [tf.int64.max]], 0)
        slot = self._slot(relations, tail, tf.int64)
        rows = tf.shape(slot)[0]
        column = (tf.range(rows) // rows_per_group)[:, None] * per_group + tf.range(per_group)[None, :]
        query = tf.reshape(tf.cast(column, tf.int64) * n_slots + slot, [-1])
        found = tf.equal(tf.gather(keys, tf.searchsorted(keys, query)), query)
        return tf.reshape(found, tf.shape(column))

    @staticmethod
    def _slots_of_entities(index: KGIndex) -> tuple[tf.Tensor, tf.Tensor]:
        """CSR of each entity's training slots (``side * R + relation``): row starts, slot ids."""
        e = index.num_entities
        keys = index.slot_keys
        slot = (keys // e).astype(np.int32)  # int32 copies: start-up memory is about 20 bytes a key
        entity = (keys % e).astype(np.int32)
        starts = np.concatenate([[0], np.cumsum(np.bincount(entity, minlength=e))])
        order = np.argsort(entity, kind="stable")  # slots stay ascending within an entity
        del entity
        return tf.constant(starts, tf.int64), tf.constant(slot[order])
