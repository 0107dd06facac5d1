"""`SlotMembership`: was an entity seen in a slot of a relation in train? Asked in-graph.

The sampler's pair labels are this question for every candidate of a batch
(`jobi_tf.sampling.negatives.NegativeSampler`), and with ``--slot-prior-in-loss`` it also
answers how often (`SlotMembership.log_counts`); it lives apart because it is the sampler's one data
structure sized by the graph (a dense table or a hash table, see the class).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from jobi_tf.data.index import KGIndex

__all__ = ["SlotMembership", "DENSE_MEMBERSHIP_BYTES"]

#: Largest ``2 x relations x entities`` byte table `SlotMembership` keeps for pair labels of
#: sampled candidates (YAGO3-10: 9 MB); larger graphs look keys up in a hash table instead.
DENSE_MEMBERSHIP_BYTES = 1 << 26

#: How many times a group's rows must outnumber an entity's training slots (on average) before
#: `SlotMembership.contains_shared` marks rows from the candidates' slots instead of asking the
#: hash table every question (measured at 1.85M entities, see there).
MARK_ROWS_FACTOR = 8


class SlotMembership:
    """In-graph answers to: was entity ``e`` seen in the tail (or head) slot of relation ``r`` in train?

    Why two forms: a dense byte per ``(side, relation, entity)`` answers with one gather
    (FB15k-237: 6.9 MB), while a graph of FB1.9M's size would need 12 GB; there each key
    ``slot * E + entity`` of train (tail slots first, head slots offset past them) sits in a hash
    table (13.1M keys at 1.85M entities: this structure took 1.4 s and 0.6 GiB to build). A binary
    search of the sorted keys runs 24 levels deep, most of them cache misses: a batch's 3,000
    biased candidates took 2.4 ms so against 0.05 ms in the hash table (one core,
    docs/performance.md). A sampler built while a function is traced (a
    parameter-server step, whose constants travel to the workers; a table would stay on the
    chief) has no table: it answers shared candidates from their slots (`contains_shared`) and
    the rest by the search.
    """

    def __init__(self, index: KGIndex, dense_bytes: int = DENSE_MEMBERSHIP_BYTES, *, counts: bool = False) -> None:
        e, r = index.num_entities, index.num_relations
        self._num_entities, self._num_relations = e, r
        self._hash = self._log_count_table = self._count_values = None
        if 2 * r * e <= dense_bytes:
            self._table, self._keys = tf.constant(index.slot_rows().reshape(-1)), None
            if counts:  # float32 per (slot, entity): 4x the membership bytes, still small here
                log_counts = np.zeros(2 * r * e, np.float32)
                log_counts[index.slot_keys] = np.log1p(index.slot_counts)
                self._log_count_table = tf.constant(log_counts)
        else:
            self._table, self._keys = None, tf.constant(index.slot_keys, tf.int64)
            # With counts the hash table holds each key's count (membership is a count above 0):
            # one table answers both questions.
            values = index.slot_counts if counts else np.ones(len(index.slot_keys), np.int32)
            if counts:
                self._count_values = tf.constant(values)
            if tf.executing_eagerly():  # a sampler traced inside a step (parameter servers) searches the keys
                initializer = tf.lookup.KeyValueTensorInitializer(self._keys, tf.constant(values, tf.int32))
                self._hash = tf.lookup.StaticHashTable(initializer, default_value=0)
            self._entity_starts, self._entity_slots = self._slots_of_entities(index)
            self._slots_per_entity = len(index.slot_keys) / max(e, 1)
        # Dense keys fit int32 (below 2**26); the keys of a large graph may not.
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
        if self._hash is not None:
            return self._hash.lookup(key) > 0
        flat = tf.reshape(key, [-1])
        pos = tf.minimum(tf.searchsorted(self._keys, flat), tf.cast(tf.size(self._keys) - 1, tf.int32))
        return tf.reshape(tf.equal(tf.gather(self._keys, pos), flat), tf.shape(key))

    def log_counts(self, relations: tf.Tensor, entities: tf.Tensor, tail: tf.Tensor) -> tf.Tensor:
        """float32, the broadcast shape of the inputs: ``log(1 + c)``, ``c`` the training triples
        that put each entity in that slot (needs ``counts=True``). Same keys as `contains`."""
        if self._log_count_table is None and self._count_values is None:
            raise ValueError("this SlotMembership was built without counts (counts=True)")
        dtype = self._key_dtype
        key = self._slot(relations, tail, dtype) * self._num_entities + tf.cast(entities, dtype)
        if self._log_count_table is not None:
            return tf.gather(self._log_count_table, key)
        if self._hash is not None:
            return tf.math.log1p(tf.cast(self._hash.lookup(key), tf.float32))
        flat = tf.reshape(key, [-1])
        pos = tf.minimum(tf.searchsorted(self._keys, flat), tf.cast(tf.size(self._keys) - 1, tf.int32))
        found = tf.where(tf.equal(tf.gather(self._keys, pos), flat), tf.gather(self._count_values, pos), 0)
        return tf.reshape(tf.math.log1p(tf.cast(found, tf.float32)), tf.shape(key))

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
        path: when a group has many more rows than an entity has training slots (about 7 at
        1.85M entities), the ``G x K`` candidates' own slots are far fewer than the ``B x K``
        questions, and each says which rows it answers yes for (`_mark_rows_of_pairs`). A pair
        costs several hash lookups' time, so with a hash table the rows must outnumber the
        slots `MARK_ROWS_FACTOR` times; without one (a traced build) the pairs always beat the
        binary search. At 1.85M entities, one core, ms a batch net of its own draw (hash /
        search / pairs; docs/performance.md): biased candidates in
        runs of 10 rows 0.27 / 6.6 / 2.2, the 70 uniform ones shared by 1,000 rows 0.24 / 10.1 /
        under 0.1.

        Args:
            relations: int32 ``[B, 1]``, each row's relation.
            shared: int32 ``[G, K]``, the candidates of each group of ``rows_per_group`` rows.
            tail: bool, ``[B, 1]`` or ``[B, K]``: which slot each row's candidates go in.
            rows_per_group: rows per group (``B = G * rows_per_group``).
        """
        if self._table is not None or (
            self._hash is not None and rows_per_group <= MARK_ROWS_FACTOR * self._slots_per_entity
        ):
            return self.contains(relations, tf.repeat(shared, rows_per_group, axis=0), tail)
        return self._mark_rows_of_pairs(relations, shared, tail, rows_per_group)

    def _mark_rows_of_pairs(self, relations, shared, tail, rows_per_group) -> tf.Tensor:
        """Each ``(candidate, training slot)`` pair of ``shared`` looked up once among the ``B``
        rows (a search in their ``B`` sorted ``(group, relation)`` codes, in the cache) and
        marked in a ``[B, 2, K]`` table that each row reads with one gather."""
        flat = tf.reshape(shared, [-1])
        at = tf.ragged.range(tf.gather(self._entity_starts, flat), tf.gather(self._entity_starts, flat + 1))
        owner = at.value_rowids()  # each pair's candidate, ``g * K + k``
        pair_slot = tf.cast(tf.gather(self._entity_slots, at.flat_values), tf.int64)  # ``side * R + relation``
        r = tf.constant(self._num_relations, tf.int64)
        per_group = tf.shape(shared, out_type=tf.int64)[1]
        rows = tf.shape(relations, out_type=tf.int64)[0]
        row_code = (tf.range(rows) // rows_per_group) * r + tf.cast(relations[:, 0], tf.int64)
        codes = tf.sort(row_code)  # equal codes share the first position of the sort
        pair_code = (owner // per_group) * r + pair_slot % r
        position = tf.minimum(tf.searchsorted(codes, pair_code, out_type=tf.int64), rows - 1)
        hit = tf.gather(codes, position) == pair_code
        marks = tf.boolean_mask(tf.stack([position, pair_slot // r, owner % per_group], axis=1), hit)
        table = tf.scatter_nd(marks, tf.ones(tf.shape(marks)[:1], tf.int32), tf.stack([rows, 2, per_group])) > 0
        mine = tf.gather(table, tf.searchsorted(codes, row_code, out_type=tf.int64))  # [B, 2, K]
        return tf.where(tail, mine[:, 0], mine[:, 1])  # tail slots first, then head slots

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
