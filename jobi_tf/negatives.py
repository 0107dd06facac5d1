"""Negatives and pair labels of a batch of positives, drawn in-graph (`NegativeSampler`).

Per batch, random draws keyed on ``(seed, global step)`` decide per negative (or, with
``corrupt_side="per-positive"``, once per positive) whether to corrupt the head or the tail
(a coin flip), and per negative whether the replacement comes from that relation's training
heads/tails (probability ``p``: biased negatives) or from all entities. Pair labels come
from one membership test (`SlotMembership`): 1 when the replacement was seen in that slot
of that relation in train (so biased replacements are always 1).

A replacement that equals the entity it replaces would make the "negative" identical to
the positive; it is kept (shapes stay static) and flagged in ``valid_negative`` so the
loss can ignore it, as TensorFlow Recommenders' ``RemoveAccidentalHits`` does. The epochs
of batches these features are added to are `jobi_tf.sampling`'s.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from jobi_tf.config import SamplerConfig
from jobi_tf.data.index import KGIndex
from jobi_tf.types import HEAD, RELATION, TAIL

__all__ = ["NegativeSampler", "SlotMembership", "DENSE_SLOT_TABLE_BYTES", "DENSE_MEMBERSHIP_BYTES"]

#: Largest ``relations x entities`` table of training slots (one byte each) kept for
#: 1-vs-all pair labels: FB15k-237 needs 3.4 MB a side; an FB1.9M-size graph would need 6 GB.
DENSE_SLOT_TABLE_BYTES = 1 << 28

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


class NegativeSampler:
    """Draws negatives and pair labels for a batch of positives; owns the lookup tensors.

    Args:
        index: the graph; its training head/tail pools become constant tensors once.
        cfg: batch size, negatives, ``p`` and the shared-negatives chunk.
        seed: run seed; each batch's draws are keyed on ``(seed, step)``.
        provenance: also return ``biased`` (which negatives came from the slot pools), for
            inspecting the sampler; training does not read it, so it is left out by default.
        pair_labels: return the candidates' ``pair_labels`` (JoBi's pair head reads them);
            False for a model without a pair head, which would only pay for the lookups.
        pair_every: the pair labels of positives 0, n, 2n, ... only: those a pair head with
            ``pair_every=n`` trains on (n must divide the batch and each chunk).

    A ``cfg`` with settings left to the run (``None``) gets the sampled regime's choice
    (`jobi_tf.config.SamplerConfig.resolved`); a run resolves its config before this.
    """

    def __init__(
        self,
        index: KGIndex,
        cfg: SamplerConfig,
        seed: int = 0,
        *,
        provenance: bool = False,
        pair_labels: bool = True,
        pair_every: int = 1,
    ) -> None:
        self.cfg = cfg if cfg.is_resolved else cfg.resolved(pair_every=pair_every)
        self.seed = int(seed)
        self.provenance = provenance
        self.with_pair_labels = pair_labels
        self.pair_every = pair_every
        self.num_entities = index.num_entities
        tails, heads = index.train_tails, index.train_heads
        # One flat pool: tails first, then heads, so a single gather serves both sides.
        self._pool_values = tf.constant(np.concatenate([tails.values, heads.values]), tf.int32)
        self._tail_start = tf.constant(tails.offsets[:-1], tf.int64)
        self._head_start = tf.constant(heads.offsets[:-1] + len(tails.values), tf.int64)
        self._tail_count = tf.constant(tails.sizes(), tf.int64)
        self._head_count = tf.constant(heads.sizes(), tf.int64)
        # Only a sampler that returns pair labels looks slots up (large graphs: a few hundred MB).
        self._slots = SlotMembership(index) if pair_labels else None
        self._index = index  # for the slot tables of 1-vs-all pair labels, built on first use
        self._slot_tables: tuple[tf.Tensor, tf.Tensor] | None = None

    # -- pieces --------------------------------------------------------------------------
    def pair_labels(self, relations: tf.Tensor, entities: tf.Tensor, corrupt_tail: tf.Tensor) -> tf.Tensor:
        """float32, shape of ``entities``: was each seen in that slot of ``relations`` in train
        (``relations`` and ``corrupt_tail`` broadcast to it)."""
        if self._slots is None:
            raise ValueError("this NegativeSampler was built with pair_labels=False")
        found = self._slots.contains(relations, entities, corrupt_tail)
        return tf.cast(tf.broadcast_to(found, tf.shape(entities)), tf.float32)

    def _draw(
        self, relations: tf.Tensor, shape: tf.Tensor, p: float, seed: tf.Tensor, side: tf.Tensor | None = None
    ) -> dict[str, tf.Tensor]:
        """Replacement entities for negatives of the given relations (broadcast to ``shape``).

        ``side`` (bool, broadcastable to ``shape``) fixes which slot is corrupted; by default
        a coin is flipped for every negative.
        """
        s = tf.random.experimental.stateless_split(seed, num=4)
        if side is None:
            corrupt_tail = tf.random.stateless_uniform(shape, s[0]) < 0.5
        else:
            corrupt_tail = tf.broadcast_to(side, shape)
        biased = tf.random.stateless_uniform(shape, s[1]) < p
        uniform = tf.random.stateless_uniform(shape, s[2], minval=0, maxval=self.num_entities, dtype=tf.int32)
        rel = tf.broadcast_to(relations, shape)
        start = tf.where(corrupt_tail, tf.gather(self._tail_start, rel), tf.gather(self._head_start, rel))
        count = tf.where(corrupt_tail, tf.gather(self._tail_count, rel), tf.gather(self._head_count, rel))
        offset = tf.random.stateless_uniform(shape, s[3], minval=None, maxval=None, dtype=tf.int64)
        offset = tf.math.floormod(offset, tf.maximum(count, 1))
        from_pool = tf.gather(self._pool_values, start + offset)
        biased = biased & (count > 0)
        return {
            "candidates": tf.where(biased, from_pool, uniform),
            "corrupt_tail": corrupt_tail,
            "biased": biased,
        }

    def dense_pair_labels(self, triples: tf.Tensor) -> dict[str, tf.Tensor]:
        """Pair labels of every entity as tail and as head, for full-softmax training.

        Returns ``pair_labels_tail`` and ``pair_labels_head``, float32 ``[B, num_entities]``.
        Each is one row gather from a ``[relations, entities]`` table of the training slots
        (built at the first call, so sampled training never pays for it, while it takes at
        most `DENSE_SLOT_TABLE_BYTES`; larger graphs fall back
        to the sorted-key test, four binary searches per label). Only for graphs where ``B *
        num_entities`` floats fit a batch.
        """
        index = self._index
        if self._slot_tables is None and index.num_relations * index.num_entities <= DENSE_SLOT_TABLE_BYTES:
            slots = index.slot_rows()  # tail slots, then head slots
            self._slot_tables = (tf.constant(slots[: index.num_relations]), tf.constant(slots[index.num_relations :]))
        if self._slot_tables is not None:
            tails, heads = self._slot_tables
            rel = triples[:, RELATION]
            return {
                "pair_labels_tail": tf.cast(tf.gather(tails, rel), tf.float32),
                "pair_labels_head": tf.cast(tf.gather(heads, rel), tf.float32),
            }
        rel = triples[:, RELATION][:, None]
        every = tf.range(self.num_entities)[None, :]
        shape = tf.stack([tf.shape(triples)[0], self.num_entities])
        pairs = tf.broadcast_to(rel, shape), tf.broadcast_to(every, shape)
        return {
            "pair_labels_tail": self.pair_labels(*pairs, tf.ones(shape, tf.bool)),
            "pair_labels_head": self.pair_labels(*pairs, tf.zeros(shape, tf.bool)),
        }

    # -- public --------------------------------------------------------------------------
    def __call__(self, triples: tf.Tensor, step: tf.Tensor) -> dict[str, tf.Tensor]:
        """Features for one batch.

        Args:
            triples: int32 ``[B, 3]`` positives.
            step: int64 scalar, the global step (keys the random draws).

        Returns:
            A dict with ``triples`` and, per-triple mode, ``candidates`` int32 ``[B, K]``,
            ``corrupt_tail`` bool ``[B, K]``, ``valid_negative``
            bool ``[B, K]`` and ``pair_labels`` float32 ``[B, K]``. With shared negatives the
            first ``K_b = round(p K)`` negatives are per triple as above, and the other
            ``K_u`` are shared by each chunk of C positives: ``shared_candidates`` and
            ``[B / C, K_u]`` and ``shared_corrupt_tail`` ``[B, K_u]`` (per positive, since
            the side may be per positive); ``pair_labels`` and ``valid_negative`` are
            ``[B, K_b + K_u]`` in that order (``pair_labels`` has ``B / pair_every`` rows: the
            pair head's positives). With ``biased_chunk`` C_b the batch comes back
            sorted by relation and corrupted side, and the ``K_b`` biased negatives are shared
            by each run of C_b positives (see `_chunk_biased`): ``chunk_candidates``
            ``[B / C_b, K_b]`` and ``chunk_corrupt_tail`` ``[B, K_b]`` replace the per-triple
            ``candidates`` and ``corrupt_tail``.
            With ``corrupt_side="per-positive"`` also ``positive_corrupt_tail`` bool ``[B]``
            (the model then scores one side only). With ``provenance``, per-triple mode adds
            ``biased`` bool ``[B, K]``. Without ``pair_labels`` (a model with no pair head)
            the ``pair_labels`` feature is left out.
        """
        cfg = self.cfg
        seed = tf.stack([tf.constant(self.seed, tf.int64), tf.cast(step, tf.int64)])
        s_own, s_shared = tf.unstack(tf.random.experimental.stateless_split(seed, num=2))
        side = None
        if cfg.corrupt_side == "per-positive":
            # A separate stream (folded in), so per-negative runs keep their exact draws.
            side_seed = tf.random.experimental.stateless_fold_in(seed, 1)
            side = tf.random.stateless_uniform(tf.stack([tf.shape(triples)[0], 1]), side_seed) < 0.5
        if cfg.shared_negatives == 0:
            out = self._per_triple(triples, s_own, side)
        else:
            out = self._shared(triples, s_own, s_shared, side)
        return out

    def _per_triple(self, triples: tf.Tensor, s_own: tf.Tensor, side: tf.Tensor | None) -> dict[str, tf.Tensor]:
        """Features with ``neg`` negatives of each positive's own (`__call__`)."""
        rel = triples[:, RELATION][:, None]
        own = self._draw(rel, tf.stack([tf.shape(triples)[0], self.cfg.neg]), self.cfg.p, s_own, side)
        out = dict(own, triples=triples)
        if not self.provenance:
            out.pop("biased")
        label_side = own["corrupt_tail"] if side is None else side  # [B, 1] when per positive
        out["valid_negative"] = self._differs(triples, own["candidates"], label_side)
        if self.with_pair_labels:
            n = self.pair_every
            out["pair_labels"] = self.pair_labels(rel[::n], own["candidates"][::n], label_side[::n])
        if side is not None:
            out["positive_corrupt_tail"] = side[:, 0]
        return out

    def _shared(
        self, triples: tf.Tensor, s_own: tf.Tensor, s_shared: tf.Tensor, side: tf.Tensor | None
    ) -> dict[str, tf.Tensor]:
        """Features with biased negatives per positive (or per run of ``biased_chunk``) and
        uniform ones shared by each chunk of ``shared_negatives`` positives (`__call__`)."""
        cfg = self.cfg
        b = tf.shape(triples)[0]
        k_b = int(round(cfg.p * cfg.neg))
        k_u = cfg.neg - k_b
        c = cfg.shared_negatives
        if cfg.biased_chunk:
            triples, side = self._sorted_by_slot(triples, side)
        rel = triples[:, RELATION][:, None]
        shared = self._draw(tf.zeros([b // c, 1], tf.int32), tf.stack([b // c, k_u]), 0.0, s_shared)
        if side is None:
            shared_tail = tf.repeat(shared["corrupt_tail"], c, axis=0)
        else:
            shared_tail = tf.broadcast_to(side, tf.stack([b, k_u]))
        out = {"triples": triples, "shared_candidates": shared["candidates"], "shared_corrupt_tail": shared_tail}
        if cfg.biased_chunk:
            c_b = cfg.biased_chunk
            chunk = self._chunk_biased(triples, side, b // c_b, k_b, s_own)
            own_cand = tf.repeat(chunk["candidates"], c_b, axis=0)  # [B, K_b], for labels only
            own_tail = (
                tf.repeat(chunk["corrupt_tail"], c_b, axis=0) if side is None else tf.broadcast_to(side, [b, k_b])
            )
            out.update(chunk_candidates=chunk["candidates"], chunk_corrupt_tail=own_tail)
        else:
            own = self._draw(rel, tf.stack([b, k_b]), 1.0, s_own, side)
            own_cand, own_tail = own["candidates"], own["corrupt_tail"]
            out.update(candidates=own_cand, corrupt_tail=own_tail)
        cand = tf.concat([own_cand, tf.repeat(shared["candidates"], c, axis=0)], axis=1)
        # One side per positive: its [B, 1] serves every candidate; else one per candidate.
        label_side = side if side is not None else tf.concat([own_tail, shared_tail], axis=1)
        out["valid_negative"] = self._differs(triples, cand, label_side)
        if self.with_pair_labels:
            # The rows of the pair head's positives only (every n-th; n divides every chunk).
            n = self.pair_every
            own_side, shared_side = (side, side) if side is not None else (own_tail, shared_tail)
            rel, own_side, shared_side = rel[::n], own_side[::n], shared_side[::n]
            if cfg.biased_chunk:
                own = self._slots.contains_shared(rel, out["chunk_candidates"], own_side, cfg.biased_chunk // n)
            else:
                own = self._slots.contains(rel, own_cand[::n], own_side)
            found = [own, self._slots.contains_shared(rel, shared["candidates"], shared_side, c // n)]
            out["pair_labels"] = tf.cast(tf.concat(found, axis=1), tf.float32)
        if side is not None:
            out["positive_corrupt_tail"] = side[:, 0]
        return out

    @staticmethod
    def _sorted_by_slot(triples: tf.Tensor, side: tf.Tensor | None) -> tuple[tf.Tensor, tf.Tensor | None]:
        """The batch (and its sides) ordered by relation, then corrupted side: a stable sort, so
        runs of positives that corrupt the same slot lie next to each other."""
        key = triples[:, RELATION] * 2
        if side is not None:
            key += tf.cast(side[:, 0], tf.int32)
        order = tf.argsort(key, stable=True)
        return tf.gather(triples, order), None if side is None else tf.gather(side, order)

    def _chunk_biased(
        self, triples: tf.Tensor, side: tf.Tensor | None, groups: int | tf.Tensor, k_b: int, seed: tf.Tensor
    ) -> dict[str, tf.Tensor]:
        """``K_b`` biased negatives per run of C_b positives, shared by them: ``[G, K_b]``.

        Each is drawn from the training slot of a positive of the run picked at random (its
        relation, and its corrupted side when sides are per positive; else a coin per negative,
        the same for the whole run). On a batch sorted by slot (`_sorted_by_slot`) most runs
        hold one relation and side, whose positives then get exactly the negatives per-triple
        sampling would draw from, shared. Why: per-triple biased negatives cost a row gather
        and a gradient row per negative and positive; shared, C_b positives score them with
        one small matmul.
        """
        c_b = self.cfg.biased_chunk
        s_pick, s_draw = tf.unstack(tf.random.experimental.stateless_split(seed, num=2))
        pick = tf.random.stateless_uniform(tf.stack([groups, k_b]), s_pick, minval=0, maxval=c_b, dtype=tf.int32)
        source = pick + c_b * tf.range(groups)[:, None]  # [G, K_b] rows of the batch
        rel = tf.gather(triples[:, RELATION], source)
        source_side = None if side is None else tf.gather(side[:, 0], source)
        return self._draw(rel, tf.shape(source), 1.0, s_draw, source_side)

    @staticmethod
    def _differs(triples: tf.Tensor, candidates: tf.Tensor, corrupt_tail: tf.Tensor) -> tf.Tensor:
        """False where the replacement equals the entity it replaces (the negative is the positive)."""
        replaced = tf.where(corrupt_tail, triples[:, TAIL][:, None], triples[:, HEAD][:, None])
        return tf.not_equal(candidates, replaced)
