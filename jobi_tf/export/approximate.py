"""The served object with approximate top-k signatures: `TripleScorerModule` plus a `CellIndex`.

Why a subclass: the exact signatures stay as they are; an export made with ``--cells`` adds
``predict_tail_approximate`` and ``predict_head_approximate``, which rank only the rows of the
``probe`` cells whose centroids score highest against the query (`jobi_tf.export.cells`).
Each candidate's score is the model's exact score, the slot counts included when the model ranks
with them (`jobi_tf.export.cells.SlotCells`: each slot's most frequent entities are always
scored, and the counts raise the probe scores of the cells whose rows they lift), and known facts
are filtered as in the exact signatures, so the answers differ from the exact ones only by the
rows never looked at. With a neighbourhood term (`jobi_tf.export.served_neighbourhood`) the
entities two steps from the query's given entity are candidates too, scored with it: the term
lifts exactly those, so no other row's place changes.
``probe`` is an input, so a client trades recall for latency per request, without a new export.

The candidates' rows are read by one XLA-compiled gather and product (`_row_scores`): the export
numbers its entities cell by cell, so they are runs of consecutive rows, and the fused loop reads
them once, at close to streaming speed; TensorFlow's own gather then product copied them first
(docs/serving.md). TensorFlow Serving runs it with ``--xla_cpu_compilation_enabled=true``.
That read is most of a query, so a float32 table is also held as a smaller copy
(`jobi_tf.export.coarse.CoarseRows`: the rows' principal directions in bfloat16, a quarter of the
bytes): the cells' candidates are ranked by it, and the best ``k + RESCORED`` of them are scored
again from the float32 rows. The answers and their scores are the float32 ones; the copy only
chooses which candidates reach that second scoring (FAISS's re-ranking of a compressed index's
candidates, Jégou et al., 2011).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import tensorflow as tf

from jobi_tf.contracts.scorer import not_a_dot_product
from jobi_tf.export.cells import FREQUENT, CellIndex, Cells, SlotCells, places_in_cells, row_shifts
from jobi_tf.export.coarse import CoarseRows
from jobi_tf.export.scorer_module import _K, _NAMES, TripleScorerModule
from jobi_tf.export.served_tables import KnownFacts, read_value
from jobi_tf.runtime.errors import ExportError

__all__ = ["ApproximateScorerModule", "COARSE_SHARE", "RESCORED", "padded_size"]

#: The candidates of a query are padded to one of a few sizes, ``2^(i/4)`` apart (at most 19% more
#: rows), so that XLA compiles one program per size class instead of one per query.
_SIZES_PER_DOUBLING = 4
_MIN_PADDED = 1024

#: Candidates of the cells scored again in float32 beyond the ``k`` asked, after the copy ranked
#: them all (docs/serving.md measures the recall against the float32 ranking).
RESCORED = 256

#: The share of the rows' principal directions the copy keeps (`jobi_tf.export.coarse`): half, in
#: bfloat16, a quarter of float32's bytes (docs/serving.md measures what it keeps of the top 10).
COARSE_SHARE = 0.5


def padded_size(n: tf.Tensor) -> tf.Tensor:
    """The size ``n`` candidates are padded to: the least ``ceil(2^(i/4)) >= n``, at least 1,024."""
    n = tf.maximum(tf.cast(n, tf.float64), _MIN_PADDED)
    step = tf.math.ceil(_SIZES_PER_DOUBLING * tf.math.log(n) / np.log(2.0))
    return tf.maximum(
        tf.cast(tf.math.ceil(tf.pow(tf.constant(2.0, tf.float64), step / _SIZES_PER_DOUBLING)), tf.int32),
        tf.cast(n, tf.int32),
    )


@tf.function(jit_compile=True, autograph=False)
def _row_scores(table: tf.Tensor, ids: tf.Tensor, query: tf.Tensor) -> tf.Tensor:
    """``<query, table[id]>`` for each id: gather, widening (a bfloat16 table) and product fused by
    XLA, no copy of the rows."""
    return tf.linalg.matvec(tf.cast(tf.gather(table, ids), query.dtype), query)


class ApproximateScorerModule(TripleScorerModule):
    """`TripleScorerModule` with the two approximate signatures.

    Args:
        scorer, entity_embeddings, *args, **kwargs: `TripleScorerModule`'s (the table and its
            ``slot_prior`` in the export's numbering).
        cells: `jobi_tf.export.cells.Cells`, from `jobi_tf.export.cells.kmeans_cells`.

    Raises:
        ExportError: a scorer that is not a dot product of a query and a row.
    """

    entity_columns = False  # candidates are gathered as rows: 10^5 strided column reads are far slower
    frequent = FREQUENT  # with slot counts: each slot's entities always scored (`SlotCells`)
    rescored = RESCORED  # 0: no copy, every candidate scored from the table itself
    coarse_share = COARSE_SHARE  # of the rows' directions, the copy keeps

    def __init__(self, scorer, entity_embeddings: np.ndarray, *args, cells: Cells, **kwargs) -> None:
        super().__init__(scorer, entity_embeddings, *args, **kwargs)
        if not self._scorer.dot_product:
            raise ExportError(not_a_dot_product(self._scorer, "--cells"))
        self.cells = CellIndex(cells)
        self.coarse_rows = None  # a bfloat16 table holds no copy: its own rows are read once already
        if self.rescored and not self.entities.widened:
            self.coarse_rows = CoarseRows(entity_embeddings, self.coarse_share)  # (not a third copy of the table)
        self.slot_cells = None
        if self.slot_prior is not None:
            keys, values = self.slot_prior.sparse_arrays()
            args = (len(cells.centroids), self.num_entities, self.num_relations, self.frequent)
            self.slot_cells = SlotCells(keys, values, cells.cell, *args)

    @tf.function(input_signature=[_NAMES, _NAMES, _K, _K], autograph=False)
    def predict_tail_approximate(
        self, head: tf.Tensor, relation: tf.Tensor, k: tf.Tensor, probe: tf.Tensor
    ) -> dict[str, tf.Tensor]:
        """Top-k tails of each (head, relation) row among the rows of its ``probe`` best cells."""
        return self._approximate("tail", k, probe, head=head, relation=relation)

    @tf.function(input_signature=[_NAMES, _NAMES, _K, _K], autograph=False)
    def predict_head_approximate(
        self, relation: tf.Tensor, tail: tf.Tensor, k: tf.Tensor, probe: tf.Tensor
    ) -> dict[str, tf.Tensor]:
        """Top-k heads of each (relation, tail) row among the rows of its ``probe`` best cells."""
        return self._approximate("head", k, probe, relation=relation, tail=tail)

    def _approximate(self, side: str, k: tf.Tensor, probe: tf.Tensor, **names: tf.Tensor) -> dict[str, tf.Tensor]:
        """One query at a time (`tf.map_fn`): memory is one query's candidates (``probe`` cells of
        rows), not the batch's (100 queries x 256 cells x 340 rows x 200 floats would be 7 GB)."""
        found, ids = self._ids(**names)
        anchor, r = ids if side == "tail" else ids[::-1]
        queries = self._queries(self.triple_relations)
        query = queries.tail(anchor, r) if side == "tail" else queries.head(r, anchor)  # [B, W]
        known = self.known_tails if side == "tail" else self.known_heads
        k = tf.clip_by_value(k, 0, self.num_entities)
        asked = self._slots(side, anchor, r)

        def answer(inputs: tuple) -> tuple[tf.Tensor, tf.Tensor]:
            one, key, slot, given = inputs
            facts = None if known is None else _Facts.of(known, key)
            ids, scores = self._from_cells(one, slot, facts, k, probe)
            if self.slot_cells is not None:
                ids, scores = self._with_frequent(ids, scores, one, slot, facts)
            if self.neighbourhood is not None:
                ids, scores = self._with_reached(ids, scores, one, slot, facts, given)
            best, position = tf.math.top_k(scores, k=tf.minimum(k, tf.size(scores)))
            missing = [[0, k - tf.size(best)]]  # fewer candidates than k: no answers, as a typed slot
            return tf.pad(best, missing, constant_values=-np.inf), tf.pad(
                tf.gather(ids, position), missing, constant_values=-1
            )

        keys = anchor * self.num_relations + r
        spec = (tf.TensorSpec([None], tf.float32), tf.TensorSpec([None], tf.int32))
        best, chosen = tf.cond(  # (map_fn cannot stack the results of an empty batch)
            tf.size(keys) > 0,
            lambda: tf.map_fn(answer, (query, keys, asked, anchor), fn_output_signature=spec),  # [B, k] each
            lambda: (tf.zeros([0, k], tf.float32), tf.zeros([0, k], tf.int32)),
        )
        answers = tf.where(tf.math.is_inf(best), "", self.entity_names.lookup(tf.cast(chosen, tf.int64)))
        return {
            f"{side}s": tf.where(found[:, None], answers, ""),
            "scores": tf.where(found[:, None], best, np.nan),
            "found": found,
        }

    def _from_cells(self, query, slot: _Slot, facts, k, probe) -> tuple[tf.Tensor, tf.Tensor]:
        """The shortlist (`_shortlist`) of the rows of the ``probe`` cells that score highest for
        one query: scored from the bfloat16 copy when there is one, with the counts, known facts out."""
        bonus = None
        if self.slot_cells is not None:
            bound = self.slot_cells.slack.value() * tf.gather(self.slot_cells.bound.value(), slot.slot)
            bonus = slot.weight * bound[None]
        chosen = self.cells.probe(query[None, :], probe, bonus)[0]  # [P], in id order
        offsets = self.cells.offsets.value()
        starts, ends = tf.gather(offsets, chosen), tf.gather(offsets, chosen + 1)  # each cell's ids
        to_place = row_shifts(starts, ends)  # an id of a probed cell -> its place among the rows
        ids = self.cells.rows_of(chosen[None]).flat_values  # entity ids [n]
        coarse = self.coarse_rows
        if coarse is None:
            scores = self._scores(ids, query)
        else:  # ranked by the copy: <P^T query, bf16(P^T row)>
            scores = self._scores(ids, coarse.query(query), read_value(coarse.values))
        added = None
        if self.slot_cells is not None:
            keys, log_counts = self.slot_prior.sparse_arrays()
            runs = tf.gather(self.slot_cells.run_starts.value(), slot.slot)  # where each cell's keys begin
            lo, hi = tf.gather(runs, chosen), tf.gather(runs, chosen + 1)
            at, place = places_in_cells(keys, lo, hi, to_place, base=slot.slot * self.num_entities)
            in_cells = tf.scatter_nd(place, tf.gather(log_counts, at), tf.shape(scores, out_type=tf.int64))
            added = slot.weight * in_cells + slot.shift
            scores += added
        if facts is not None:
            _, place = places_in_cells(facts.entities, *facts.in_cells(starts, ends), to_place)
            scores = tf.tensor_scatter_nd_update(scores, place, tf.fill([tf.shape(place)[0]], -np.inf))
        return self._shortlist(ids, scores, added, query, k, rescore=coarse is not None)

    def _slots(self, side: str, anchor: tf.Tensor, r: tf.Tensor) -> _Slot:
        """Each query's `_Slot` (tail slots first, then head slots): its weight of the counts is
        the prior's, or its hub route's for a query asked from a hub, and its shift makes the
        scores equal the exact signatures'. Weights and shifts are 0 without counts."""
        r64, anchor64 = tf.cast(r, tf.int64), tf.cast(anchor, tf.int64)
        tail_slot, head_slot = r64, r64 + self.num_relations
        slot, other = (tail_slot, head_slot) if side == "tail" else (head_slot, tail_slot)
        if self.slot_prior is None:
            zeros = tf.zeros(tf.shape(slot), tf.float32)
            return _Slot(slot, zeros, zeros)
        prior = self.slot_prior.read()
        weight = prior.group_weights(prior.groups(anchor64))
        return _Slot(slot, weight, weight * prior.log_counts(other, anchor64))

    def _with_frequent(self, ids, scores, query, slot: _Slot, facts) -> tuple[tf.Tensor, tf.Tensor]:
        """The shortlist with the slot's most frequent entities (`SlotCells`), scored exactly; an
        entity in both lists keeps its frequent copy only, so every entity is listed once."""
        frequent, counts = self.slot_cells.frequent(slot.slot)
        f = tf.size(frequent)
        padded = tf.pad(frequent, [[0, self.slot_cells.width - f]])  # one compiled size
        extra = _row_scores(read_value(self.entities.values), padded, query)[:f]
        extra += slot.weight * counts + slot.shift
        if facts is not None:
            extra = tf.where(_known(facts, frequent), tf.constant(-np.inf, extra.dtype), extra)
        once = ~tf.reduce_any(ids[:, None] == frequent[None, :], axis=1)
        ids, scores = tf.boolean_mask(ids, once), tf.boolean_mask(scores, once)
        return tf.concat([ids, frequent], 0), tf.concat([scores, extra], 0)

    def _with_reached(self, ids, scores, query, slot: _Slot, facts, given) -> tuple[tf.Tensor, tf.Tensor]:
        """The candidates so far, those the term reaches taken out, then every entity it reaches
        from ``given``, scored exactly with it (and the counts, when the model ranks with them)."""
        _, reached, terms = self.neighbourhood.reach(given[None])
        extra = self._scores(tf.cast(reached, tf.int32), query) + terms
        if self.slot_prior is not None:
            prior = self.slot_prior.read()
            extra += slot.weight * prior.log_counts(tf.fill(tf.shape(reached), slot.slot), reached) + slot.shift
        if facts is not None:
            extra = tf.where(_known(facts, reached), tf.constant(-np.inf, extra.dtype), extra)
        # In both lists, the copy without the term goes: each reached entity is looked up in the
        # shortlist (a few hundred distinct ids, sorted here), not the shortlist in the reach.
        ids64 = tf.cast(ids, tf.int64)
        order = tf.argsort(ids64)
        listed = tf.concat([tf.gather(ids64, order), [-1]], 0)  # (the ends keep the gathers valid)
        at = tf.searchsorted(listed[:-1], reached)
        twice = tf.boolean_mask(tf.gather(tf.concat([order, [0]], 0), at), tf.gather(listed, at) == reached)
        scores = tf.tensor_scatter_nd_update(scores, twice[:, None], tf.fill(tf.shape(twice), -np.inf))
        return tf.concat([ids, tf.cast(reached, ids.dtype)], 0), tf.concat([scores, extra], 0)

    def _shortlist(self, ids, scores, added, query, k, rescore: bool) -> tuple[tf.Tensor, tf.Tensor]:
        """The cells' best ``k`` candidates, or with ``rescore`` their best ``k + rescored`` by the
        bfloat16 copy's scores, scored again from the float32 rows (``added``: the counts' part of
        each score, kept; known facts stay out). The frequent and reached entities join after."""
        best, position = tf.math.top_k(scores, k=tf.minimum(k + (self.rescored if rescore else 0), tf.size(scores)))
        ids = tf.gather(ids, position)
        if not rescore:
            return ids, best
        exact = self._scores(ids, query)
        if added is not None:
            exact += tf.gather(added, position)
        return ids, tf.where(tf.math.is_inf(best), best, exact)

    def _scores(self, ids: tf.Tensor, query: tf.Tensor, table: tf.Tensor | None = None) -> tf.Tensor:
        """``<query, row>`` of each id's row of ``table`` (default: the served table), through
        `_row_scores` on ids padded to `padded_size`."""
        n = tf.size(ids)
        padded = tf.pad(ids, [[0, padded_size(n) - n]])  # (id 0's row: scored, then cut off)
        table = read_value(self.entities.values) if table is None else table
        return _row_scores(table, padded, query)[:n]


class _Slot(NamedTuple):
    """A query's part of the counts: ``slot`` (its row of the counts), ``weight`` (its ``w``) and
    ``shift`` (``w`` x the given entity's count in its own slot, which every candidate shares)."""

    slot: tf.Tensor
    weight: tf.Tensor
    shift: tf.Tensor


class _Facts(NamedTuple):
    """One query's known facts: ``listed``, its key's entities (int32, sorted), which are
    ``entities[start:start + len(listed)]`` of all keys' (a `KnownFacts` span)."""

    entities: tf.Tensor
    start: tf.Tensor
    listed: tf.Tensor

    @classmethod
    def of(cls, known: KnownFacts, key: tf.Tensor) -> _Facts:
        entities = read_value(known.values)
        start, limit = known.spans(key[None])
        return cls(entities, start[0], entities[start[0] : limit[0]])

    def in_cells(self, starts: tf.Tensor, ends: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """``(lo, hi)``: the facts with ids ``starts[p]..ends[p] - 1`` are ``entities[lo[p]:hi[p]]``
        (a cell's facts are one run of the sorted facts: `places_in_cells`)."""
        lo = tf.searchsorted(self.listed, tf.cast(starts, self.listed.dtype), out_type=tf.int64)
        hi = tf.searchsorted(self.listed, tf.cast(ends, self.listed.dtype), out_type=tf.int64)
        return self.start + lo, self.start + hi


def _known(facts: _Facts, ids: tf.Tensor) -> tf.Tensor:
    """bool ``[n]``: each of ``ids`` is one of a query's known ``facts``: one search each, and no
    sort of a hub's 10^5 facts per call."""
    ids = tf.cast(ids, facts.listed.dtype)
    return tf.gather(tf.concat([facts.listed, [-1]], 0), tf.searchsorted(facts.listed, ids)) == ids
