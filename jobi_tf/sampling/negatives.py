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
of batches these features are added to are `jobi_tf.sampling.pipelines`'s.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from jobi_tf.config import SamplerConfig
from jobi_tf.contracts import features as F
from jobi_tf.data.index import KGIndex
from jobi_tf.runtime.types import HEAD, RELATION, TAIL
from jobi_tf.sampling.batch_plan import BatchPlan
from jobi_tf.sampling.distributions import get_distribution
from jobi_tf.sampling.pools import slot_pools
from jobi_tf.sampling.slot_membership import DENSE_MEMBERSHIP_BYTES, SlotMembership

__all__ = [
    "NegativeSampler",
    "SlotMembership",
    "DENSE_SLOT_TABLE_BYTES",
    "DENSE_MEMBERSHIP_BYTES",
    "slot_pools",
]

#: Largest ``relations x entities`` table of training slots (one byte each) kept for
#: 1-vs-all pair labels: FB15k-237 needs 3.4 MB a side; an FB1.9M-size graph would need 6 GB.
DENSE_SLOT_TABLE_BYTES = 1 << 28


class NegativeSampler:
    """Draws negatives and pair labels for a batch of positives; owns the lookup tensors.

    What it draws, and the shape of each feature, is its `jobi_tf.sampling.batch_plan.BatchPlan`'s
    (a run's sampler and model read the same plan); `from_settings` builds a sampled plan from
    sampler settings alone, for use outside a run.

    Args:
        index: the graph; its training head/tail pools become constant tensors once.
        plan: what the batches hold (`jobi_tf.sampling.batch_plan.BatchPlan.for_run`).
        seed: run seed; each batch's draws are keyed on ``(seed, step)``.
    """

    def __init__(self, index: KGIndex, plan: BatchPlan, seed: int = 0) -> None:
        if not isinstance(plan, BatchPlan):
            raise TypeError(
                f"NegativeSampler takes a BatchPlan (sampler settings: NegativeSampler.from_settings). "
                f"Received: {type(plan).__name__}"
            )
        self.plan = plan
        self.cfg = plan.sampler
        self.seed = int(seed)
        self.num_entities = index.num_entities
        tails, heads = slot_pools(index, self.cfg.biased_draw)
        # One flat pool: tails first, then heads, so a single gather serves both sides.
        self._pool_values = tf.constant(np.concatenate([tails.values, heads.values]), tf.int32)
        self._tail_start = tf.constant(tails.offsets[:-1], tf.int64)
        self._head_start = tf.constant(heads.offsets[:-1] + len(tails.values), tf.int64)
        self._tail_count = tf.constant(tails.sizes(), tf.int64)
        self._head_count = tf.constant(heads.sizes(), tf.int64)
        # How the negatives that are not biased pick their entity (`jobi_tf.sampling.distributions`).
        self.distribution = get_distribution(self.cfg.negative_distribution, index)
        log_q = self.distribution.log_q() if plan.logq_correction else None
        self._log_q = None if log_q is None else tf.constant(log_q)
        # Only a sampler that returns pair labels looks slots up (1.85M entities: 0.6 GiB).
        self._slots = SlotMembership(index, counts=plan.slot_prior_in_loss) if plan.looks_up_slots else None
        self._index = index  # for the slot tables of 1-vs-all pair labels, built on first use
        self._slot_tables: tuple[tf.Tensor, tf.Tensor] | None = None

    @classmethod
    def from_settings(
        cls,
        index: KGIndex,
        sampler: SamplerConfig,
        seed: int = 0,
        *,
        provenance: bool = False,
        pair_labels: bool = True,
        pair_every: int = 1,
    ) -> NegativeSampler:
        """A sampled-regime sampler from sampler settings alone (``None`` settings get the
        sampled regime's choice, `jobi_tf.config.SamplerConfig.resolved`).

        ``provenance``: also return ``biased`` (which negatives came from the slot pools), for
        inspecting the sampler. ``pair_labels``: return the candidates' ``pair_labels`` (False
        for a model without a pair head). ``pair_every``: the pair labels of positives 0, n,
        2n, ... only (n must divide the batch and each chunk).
        """
        plan = BatchPlan.sampled(sampler, pair_labels=pair_labels, pair_every=pair_every, provenance=provenance)
        return cls(index, plan, seed)

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
        uniform = self._unbiased(shape, s[2])
        rel = tf.broadcast_to(relations, shape)
        start = tf.where(corrupt_tail, tf.gather(self._tail_start, rel), tf.gather(self._head_start, rel))
        count = tf.where(corrupt_tail, tf.gather(self._tail_count, rel), tf.gather(self._head_count, rel))
        offset = tf.random.stateless_uniform(shape, s[3], minval=None, maxval=None, dtype=tf.int64)
        offset = tf.math.floormod(offset, tf.maximum(count, 1))
        from_pool = tf.gather(self._pool_values, start + offset)
        biased = biased & (count > 0)
        return {F.CANDIDATES: tf.where(biased, from_pool, uniform), F.CORRUPT_TAIL: corrupt_tail, F.BIASED: biased}

    def _unbiased(self, shape: tf.Tensor, seed: tf.Tensor) -> tf.Tensor:
        """Entities of the negatives that are not biased: ``--negative-distribution``'s draw."""
        return self.distribution.draw(shape, seed)

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
                F.PAIR_LABELS_TAIL: tf.cast(tf.gather(tails, rel), tf.float32),
                F.PAIR_LABELS_HEAD: tf.cast(tf.gather(heads, rel), tf.float32),
            }
        rel = triples[:, RELATION][:, None]
        every = tf.range(self.num_entities)[None, :]
        shape = tf.stack([tf.shape(triples)[0], self.num_entities])
        pairs = tf.broadcast_to(rel, shape), tf.broadcast_to(every, shape)
        return {
            F.PAIR_LABELS_TAIL: self.pair_labels(*pairs, tf.ones(shape, tf.bool)),
            F.PAIR_LABELS_HEAD: self.pair_labels(*pairs, tf.zeros(shape, tf.bool)),
        }

    # -- public --------------------------------------------------------------------------
    def __call__(self, triples: tf.Tensor, step: tf.Tensor) -> dict[str, tf.Tensor]:
        """Features for one batch: those of `plan`'s ``features()``, shaped as its ``shapes()``.

        Per triple, each positive has ``K`` own negatives, each biased with probability
        ``plan.biased_chance``. With shared negatives the first ``K_b = plan.biased_count`` are
        biased (each positive's own, or with ``--biased-chunk`` C_b shared by each run of C_b
        positives of the batch sorted by relation and side: ``plan.sorts_triples``, see
        `_chunk_biased`), and the other ``K_u`` uniform ones are shared by each chunk of C
        positives; ``valid_negative`` and ``pair_labels`` list the ``K_b`` then the ``K_u``.
        ``pair_labels`` has the rows of the pair head's positives only (0, n, 2n, ...).

        Args:
            triples: int32 ``[B, 3]`` positives.
            step: int64 scalar, the global step (keys the random draws).
        """
        seed = tf.stack([tf.constant(self.seed, tf.int64), tf.cast(step, tf.int64)])
        s_own, s_shared = tf.unstack(tf.random.experimental.stateless_split(seed, num=2))
        side = None
        if self.plan.per_positive_side:
            # A separate stream (folded in), so per-negative runs keep their exact draws.
            side_seed = tf.random.experimental.stateless_fold_in(seed, 1)
            side = tf.random.stateless_uniform(tf.stack([tf.shape(triples)[0], 1]), side_seed) < 0.5
        if not self.plan.shared:
            return self._per_triple(triples, s_own, side)
        return self._shared(triples, s_own, s_shared, side)

    def _per_triple(self, triples: tf.Tensor, s_own: tf.Tensor, side: tf.Tensor | None) -> dict[str, tf.Tensor]:
        """Features with ``neg`` negatives of each positive's own (`__call__`)."""
        plan = self.plan
        rel = triples[:, RELATION][:, None]
        own = self._draw(rel, tf.stack([tf.shape(triples)[0], plan.sampler.neg]), plan.biased_chance, s_own, side)
        out = {F.TRIPLES: triples, **own}
        if not plan.provenance:
            out.pop(F.BIASED)
        label_side = own[F.CORRUPT_TAIL] if side is None else side  # [B, 1] when per positive
        out[F.VALID_NEGATIVE] = self._differs(triples, own[F.CANDIDATES], label_side)
        if plan.logq_correction:
            out[F.NEGATIVE_LOG_Q] = tf.where(own[F.BIASED], 0.0, tf.gather(self._log_q, own[F.CANDIDATES]))
        if plan.slot_prior_in_loss:
            out[F.NEGATIVE_PRIOR] = self._negative_prior(triples, own[F.CANDIDATES], label_side)
        if plan.pair_labels:
            n = plan.pair_every
            out[F.PAIR_LABELS] = self.pair_labels(rel[::n], own[F.CANDIDATES][::n], label_side[::n])
        if side is not None:
            out[F.POSITIVE_CORRUPT_TAIL] = side[:, 0]
        return out

    def _shared(
        self, triples: tf.Tensor, s_own: tf.Tensor, s_shared: tf.Tensor, side: tf.Tensor | None
    ) -> dict[str, tf.Tensor]:
        """Features with biased negatives per positive (or per run of ``biased_chunk``) and
        uniform ones shared by each chunk of ``shared_negatives`` positives (`__call__`)."""
        plan = self.plan
        b, k_b, c, c_b = tf.shape(triples)[0], plan.biased_count, plan.shared, plan.biased_chunk
        k_u = plan.sampler.neg - k_b
        if plan.sorts_triples:
            triples, side = self._sorted_by_slot(triples, side)
        rel = triples[:, RELATION][:, None]
        shared = self._draw(tf.zeros([b // c, 1], tf.int32), tf.stack([b // c, k_u]), 0.0, s_shared)
        if side is None:
            shared_tail = tf.repeat(shared[F.CORRUPT_TAIL], c, axis=0)
        else:
            shared_tail = tf.broadcast_to(side, tf.stack([b, k_u]))
        out = {F.TRIPLES: triples, F.SHARED_CANDIDATES: shared[F.CANDIDATES], F.SHARED_CORRUPT_TAIL: shared_tail}
        if c_b:
            chunk = self._chunk_biased(triples, side, b // c_b, k_b, s_own)
            own_cand = tf.repeat(chunk[F.CANDIDATES], c_b, axis=0)  # [B, K_b], for labels only
            if side is None:
                own_tail = tf.repeat(chunk[F.CORRUPT_TAIL], c_b, axis=0)
            else:
                own_tail = tf.broadcast_to(side, [b, k_b])
            out.update({F.CHUNK_CANDIDATES: chunk[F.CANDIDATES], F.CHUNK_CORRUPT_TAIL: own_tail})
        else:
            own = self._draw(rel, tf.stack([b, k_b]), 1.0, s_own, side)
            own_cand, own_tail = own[F.CANDIDATES], own[F.CORRUPT_TAIL]
            out.update({F.CANDIDATES: own_cand, F.CORRUPT_TAIL: own_tail})
        cand = tf.concat([own_cand, tf.repeat(shared[F.CANDIDATES], c, axis=0)], axis=1)
        # One side per positive: its [B, 1] serves every candidate; else one per candidate.
        label_side = side if side is not None else tf.concat([own_tail, shared_tail], axis=1)
        out[F.VALID_NEGATIVE] = self._differs(triples, cand, label_side)
        if plan.logq_correction:  # the K_b biased candidates are left as they are
            shared_log_q = tf.repeat(tf.gather(self._log_q, shared[F.CANDIDATES]), c, axis=0)
            out[F.NEGATIVE_LOG_Q] = tf.concat([tf.zeros(tf.shape(own_cand)), shared_log_q], axis=1)
        if plan.slot_prior_in_loss:
            out[F.NEGATIVE_PRIOR] = self._negative_prior(triples, cand, label_side)
        if plan.pair_labels:
            out[F.PAIR_LABELS] = self._shared_pair_labels(rel, side, own_cand, own_tail, out, shared_tail)
        if side is not None:  # (sorted with the batch, with --biased-chunk)
            out[F.POSITIVE_CORRUPT_TAIL] = side[:, 0]
        return out

    def _shared_pair_labels(self, rel, side, own_cand, own_tail, out, shared_tail) -> tf.Tensor:
        """``pair_labels`` of a shared batch: the rows of the pair head's positives only (every
        n-th; n divides every chunk, `jobi_tf.regimes.checks`), own candidates then shared."""
        plan = self.plan
        n, c_b = plan.pair_every, plan.biased_chunk
        own_side, shared_side = (side, side) if side is not None else (own_tail, shared_tail)
        rel, own_side, shared_side = rel[::n], own_side[::n], shared_side[::n]
        if c_b:
            own = self._slots.contains_shared(rel, out[F.CHUNK_CANDIDATES], own_side, c_b // n)
        else:
            own = self._slots.contains(rel, own_cand[::n], own_side)
        found = [own, self._slots.contains_shared(rel, out[F.SHARED_CANDIDATES], shared_side, plan.shared // n)]
        return tf.cast(tf.concat(found, axis=1), tf.float32)

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
        c_b = self.plan.biased_chunk
        s_pick, s_draw = tf.unstack(tf.random.experimental.stateless_split(seed, num=2))
        pick = tf.random.stateless_uniform(tf.stack([groups, k_b]), s_pick, minval=0, maxval=c_b, dtype=tf.int32)
        source = pick + c_b * tf.range(groups)[:, None]  # [G, K_b] rows of the batch
        rel = tf.gather(triples[:, RELATION], source)
        source_side = None if side is None else tf.gather(side[:, 0], source)
        return self._draw(rel, tf.shape(source), 1.0, s_draw, source_side)

    def _negative_prior(self, triples: tf.Tensor, candidates: tf.Tensor, corrupt_tail: tf.Tensor) -> tf.Tensor:
        """``[B, K]`` ``W * (log(1 + c(slot, candidate)) - log(1 + c(slot, replaced)))``: each
        candidate's triple's slot-prior offset over its positive's (the other end's count is the
        same in both, so only the corrupted slot's counts differ); ``corrupt_tail`` is ``[B, 1]``
        or ``[B, K]``."""
        rel = triples[:, RELATION][:, None]
        cand = self._slots.log_counts(rel, candidates, corrupt_tail)
        own_tail = self._slots.log_counts(rel, triples[:, TAIL][:, None], tf.ones_like(rel, tf.bool))
        own_head = self._slots.log_counts(rel, triples[:, HEAD][:, None], tf.zeros_like(rel, tf.bool))
        return self.plan.prior_weight * (cand - tf.where(corrupt_tail, own_tail, own_head))

    @staticmethod
    def _differs(triples: tf.Tensor, candidates: tf.Tensor, corrupt_tail: tf.Tensor) -> tf.Tensor:
        """False where the replacement equals the entity it replaces (the negative is the positive)."""
        replaced = tf.where(corrupt_tail, triples[:, TAIL][:, None], triples[:, HEAD][:, None])
        return tf.not_equal(candidates, replaced)
