"""An inverted file over the entity rows: the approximate top-k an export can serve beside the exact one.

Why: an exact top-k streams the whole entity table through memory for every query (1.5 GB at
1.85M entities, dim 100 ComplEx: 47 ms on one AVX-512 core, docs/serving.md). Cutting the rows into cells
by k-means and scoring only the rows of the few cells whose centroids score highest against the
query reads a few percent of the table instead. It is plain TensorFlow ops over variables, so
TensorFlow Serving loads it as it loads the exact signatures. The same idea is FAISS's IVF index
(Jégou et al., 2011) and a part of ScaNN's; this one has no quantization, so every candidate's
score is the exact score and only the choice of candidates is approximate.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import tensorflow as tf

from jobi_tf.export.served_tables import row_ids

__all__ = [
    "Cells",
    "CellIndex",
    "SlotCells",
    "places_in_cells",
    "kmeans_cells",
    "default_cells",
    "cell_order",
    "SLACK",
    "COUNT_SLACK",
    "FREQUENT",
]

#: How much of a cell's radius its probe score adds, per unit of the query's norm (see `CellIndex.probe`):
#: 0.25, chosen on validation queries at 1.85M entities with the slot counts served (recall@10 0.974
#: at probe 240 against 0.970 at 0.5 and 0.953 at 1; docs/serving.md); the tables alone had 0.5.
SLACK = 0.25


class Cells(NamedTuple):
    """k-means cells of the entity rows: ``centroids [C, W]``, each row's ``cell [E]``, and each
    cell's ``radius [C]`` (its farthest member's distance from the centroid)."""

    centroids: np.ndarray
    cell: np.ndarray
    radius: np.ndarray


def default_cells(num_entities: int) -> int:
    """Cells for ``num_entities`` rows: about 4·sqrt(E) (FAISS's rule of thumb), so a cell holds
    about sqrt(E) / 4 rows; at least 1."""
    return max(1, min(num_entities, int(round(4 * np.sqrt(num_entities)))))


def kmeans_cells(rows: np.ndarray, cells: int, *, iterations: int = 10, sample: int = 200_000, seed: int = 0) -> Cells:
    """`Cells` of ``rows``: Lloyd's k-means on a sample of them, then every row assigned to its
    nearest centroid (squared distance).

    Why a sample: one pass over 1.85M rows and 5,000 centroids is 2·10^12 FLOP; the centroids
    settle on 200k rows as well, and the last assignment visits every row once. An empty cell
    takes a random sampled row as its centroid again.
    """
    rng = np.random.default_rng(seed)
    rows = np.asarray(rows, np.float32)
    cells = min(cells, len(rows))
    train = rows[rng.choice(len(rows), min(sample, len(rows)), replace=False)]
    centroids = train[rng.choice(len(train), cells, replace=False)].copy()
    for _ in range(iterations):
        assigned, _ = _nearest(train, centroids)
        counts = np.bincount(assigned, minlength=cells)
        sums = np.zeros_like(centroids)
        np.add.at(sums, assigned, train)
        empty = counts == 0
        centroids[~empty] = sums[~empty] / counts[~empty, None]
        centroids[empty] = train[rng.choice(len(train), int(empty.sum()), replace=False)]
    cell, squared = _nearest(rows, centroids)
    radius = np.zeros(cells, np.float32)
    np.maximum.at(radius, cell, np.sqrt(squared))
    return Cells(centroids, cell, radius)


def cell_order(cells: Cells) -> tuple[np.ndarray, Cells]:
    """``(order, cells)``: the entity ids cell by cell (``order[i]`` becomes id ``i``), and the
    cells of the entities so numbered.

    Why an export with cells numbers its entities so: a query's probed cells are then runs of
    consecutive rows, which a fused gather and product read at close to streaming speed (3x the
    speed of the same rows scattered over the table, docs/serving.md). Names are unchanged; only
    the export's own ids differ from the run's.
    """
    order = np.argsort(cells.cell, kind="stable")
    return order, Cells(cells.centroids, cells.cell[order], cells.radius)


def _nearest(rows: np.ndarray, centroids: np.ndarray, block: int = 16_384) -> tuple[np.ndarray, np.ndarray]:
    """``(cell [E], squared distance [E])``: each row's nearest centroid and its squared distance,
    a block of rows at a time (memory stays ``block x C``, never ``E x W``)."""
    norms = np.square(centroids).sum(1)
    cell, squared = np.empty(len(rows), np.int32), np.empty(len(rows), np.float32)
    for start in range(0, len(rows), block):
        part = rows[start : start + block]
        distance = norms[None, :] - 2.0 * part @ centroids.T  # squared distance less |row|^2
        cell[start : start + block] = nearest = np.argmin(distance, axis=1)
        best = distance[np.arange(len(part)), nearest] + np.square(part).sum(1)
        squared[start : start + block] = np.maximum(best, 0.0)  # (rounding can dip below 0)
    return cell, squared


def cell_offsets(cell: np.ndarray, cells: int) -> np.ndarray:
    """int64 ``[C + 1]``: cell ``c``'s ids are ``offsets[c]..offsets[c + 1] - 1`` (``cell`` nondecreasing)."""
    return np.concatenate([[0], np.cumsum(np.bincount(cell, minlength=cells))]).astype(np.int64)


class CellIndex(tf.Module):
    """The cells of an export's entity rows as variables: centroids, radii and where each cell's
    run of ids starts (the entities are numbered cell by cell: `cell_order`)."""

    def __init__(self, cells: Cells) -> None:
        super().__init__(name="cell_index")
        centroids, cell, radius = cells
        if np.any(np.diff(cell) < 0):
            raise ValueError("the entities must be numbered cell by cell (see cell_order)")
        offsets = cell_offsets(cell, len(centroids))
        self.centroids = tf.Variable(np.asarray(centroids, np.float32), trainable=False, name="centroids")
        self.radius = tf.Variable(np.asarray(radius, np.float32), trainable=False, name="radius")
        self.slack = tf.Variable(SLACK, trainable=False, name="slack")  # a variable: a study may sweep it
        self.offsets = tf.Variable(offsets, trainable=False, name="offsets")  # cell c: ids offsets[c]..offsets[c+1]-1

    def probe(self, queries: tf.Tensor, probe: tf.Tensor, bonus: tf.Tensor | None = None) -> tf.Tensor:
        """int32 ``[B, P]``: each query's ``probe`` cells with the highest probe scores, in id order.

        A cell's probe score is ``<q, centroid> + SLACK * |q| * radius``, plus ``bonus [B, C]``
        when given: the slot counts' part, `COUNT_SLACK` of the most they add to a row of the cell
        (`SlotCells`). Why not the centroid's score alone: the best score is an inner product, not
        a distance, and a wide cell can hold a row far better than its centroid (with ``SLACK = 1``
        the score is the bound ``<q, x> <= <q, c> + |q| |x - c|``, loose in high dimension). At
        1.85M entities, dim 100 ComplEx, 256 of 5,446 cells, the exact top 10's recall was 0.82 by
        the centroid alone, 0.93 by the bound and 0.98 halfway (docs/serving.md).
        """
        centroids = self.centroids.value()
        probe = tf.clip_by_value(probe, 1, tf.shape(centroids)[0])
        scores = tf.matmul(queries, centroids, transpose_b=True)
        scores += self.slack.value() * tf.norm(queries, axis=1, keepdims=True) * self.radius.value()[None, :]
        if bonus is not None:
            scores += bonus
        _, chosen = tf.math.top_k(scores, k=probe)  # [B, P]
        return tf.sort(chosen, axis=1)  # in id order: the runs are read in order

    def rows_of(self, chosen: tf.Tensor) -> tf.RaggedTensor:
        """Entity ids ``[B, (n)]`` of the cells ``chosen [B, P]``, cell after cell."""
        offsets, probe = self.offsets.value(), tf.shape(chosen)[1]
        flat = tf.reshape(chosen, [-1])
        spans = tf.ragged.range(tf.gather(offsets, flat), tf.gather(offsets, flat + 1))  # [B * P, (n)]
        ids = tf.cast(spans.flat_values, tf.int32)
        return tf.RaggedTensor.from_row_splits(ids, spans.row_splits[::probe])  # each query's P cells, one row


#: Each slot's most frequent entities an approximate query always scores (`SlotCells`).
FREQUENT = 64

#: How much of a cell's count bound (``w`` x its rows' largest log count) its probe score adds, as
#: `SLACK` takes part of the radius: the row with the largest count is seldom the row the query
#: scores best, and the full bound lets cells that hold one frequent row crowd out the cells of the
#: answers. 0.5, chosen on validation queries at 1.85M entities (docs/serving.md): heads'
#: recall@10 at probe 200 stays within 0.006 of its best from 0.25 to 0.75 (0.954 at 0.5) and
#: drops to 0.942-0.943 from 0.85 up, the full bound's figure; 0.5 keeps clear of that edge.
COUNT_SLACK = 0.5


class SlotCells(tf.Module):
    """What the slot counts (`jobi_tf.models.slot_prior`) add to an approximate query, cell by cell.

    Why: a served score is ``<q, row> + w * log(1 + count in the slot)``, and a cell probed by its
    rows' products alone misses the entities the counts lift (at 1.85M entities the exact answers
    of the tables alone kept half of the counts' top 10, docs/serving.md). Two parts:

    * each slot's `FREQUENT` most frequent entities (its hubs), always scored, wherever their rows lie;
    * for every other entity, the largest log count of a cell's rows in each slot (``bound [2R, C]``),
      which ``slack`` x ``w`` times joins the cell's probe score (`COUNT_SLACK`; with ``slack`` 1
      the bound ``<q, x> <= <q, c> + |q| |x - c|`` with the counts added stays a bound,
      `CellIndex.probe`).

    Args:
        keys, values: the sparse counts (`jobi_tf.models.slot_prior.slot_counts`: sorted keys
            ``slot * E + entity`` in the export's numbering, log counts).
        cell: ``[E]`` each entity's cell, nondecreasing (entities numbered cell by cell).
        cells: the number of cells ``C``.
        num_entities, num_relations: ``E`` and ``R``.
        frequent: entities always scored per slot.
    """

    def __init__(self, keys, values, cell, cells: int, num_entities: int, num_relations: int, frequent=FREQUENT):
        super().__init__(name="slot_cells")
        keys, values, cell = np.asarray(keys, np.int64), np.asarray(values, np.float32), np.asarray(cell, np.int64)
        e, slots = int(num_entities), 2 * int(num_relations)
        slot = keys // e
        starts = np.searchsorted(slot, np.arange(slots + 1))
        # Rank within each slot by count (highest first; ties: lower id first), so the top ranks are its hubs.
        order = np.lexsort((keys, -values, slot))
        rank = np.empty(len(keys), np.int64)
        rank[order] = np.arange(len(keys)) - starts[slot[order]]
        top = rank < frequent
        by_slot = order[top[order]]  # the frequent ones, slot by slot, highest count first
        self.frequent_offsets = tf.Variable(
            np.concatenate([[0], np.cumsum(np.bincount(slot[top], minlength=slots))]).astype(np.int64),
            trainable=False,
            name="frequent_offsets",
        )
        self.frequent_ids = tf.Variable((keys[by_slot] % e).astype(np.int32), trainable=False, name="frequent_ids")
        self.frequent_counts = tf.Variable(values[by_slot], trainable=False, name="frequent_counts")
        self.width = int(frequent)
        # The rest: (slot, cell) groups are runs of the sorted keys, since ids go cell by cell.
        rest = ~top
        group = slot[rest] * cells + cell[keys[rest] % e]
        bound = np.zeros(slots * cells, np.float32)
        if len(group):
            firsts = np.flatnonzero(np.concatenate([[True], group[1:] != group[:-1]]))
            bound[group[firsts]] = np.maximum.reduceat(values[rest], firsts)
        self.bound = tf.Variable(bound.reshape(slots, cells), trainable=False, name="bound")
        self.slack = tf.Variable(COUNT_SLACK, trainable=False, name="slack")  # a variable: a study may sweep it
        # Where each (slot, cell)'s run of keys begins: two reads a probed cell, not two searches of 10^7 keys.
        runs = np.searchsorted(keys, np.arange(slots)[:, None] * e + cell_offsets(cell, cells)[None, :])
        self.run_starts = tf.Variable(runs.astype(np.int64), trainable=False, name="run_starts")  # [2R, C + 1]

    def frequent(self, slot: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """``(ids [F], log counts [F])``: the slot's most frequent entities (``F <= FREQUENT``)."""
        offsets = self.frequent_offsets.value()
        lo, hi = offsets[slot], offsets[slot + 1]
        return self.frequent_ids.value()[lo:hi], self.frequent_counts.value()[lo:hi]


def row_shifts(starts: tf.Tensor, ends: tf.Tensor) -> tf.Tensor:
    """int64 ``[P]``: what turns an id of probed cell ``p`` (ids ``starts[p]..ends[p] - 1``) into
    its place among the cells' rows (cell after cell, as `CellIndex.rows_of` lists them)."""
    return tf.cumsum(ends - starts, exclusive=True) - starts


def places_in_cells(entities, lo, hi, shift, base=0) -> tuple[tf.Tensor, tf.Tensor]:
    """``(at [m], place [m, 1])``, int64: the elements ``entities[lo[p]:hi[p]] - base`` (ids in
    probed cell ``p``, in id order) and where each stands among the cells' rows (``shift``: `row_shifts`).

    Why runs: to find a slot's counts (sorted keys ``slot * E + id``) or a query's known facts
    (sorted ids) among 10^5 candidates, a search per candidate costs about a microsecond (most
    levels miss the cache); but ids go cell by cell, so a cell's elements are one run of the
    sorted array, found by two reads (`SlotCells.run_starts`) or two searches a cell."""
    spans = tf.ragged.range(lo, hi)
    at, which = spans.flat_values, row_ids(spans)
    entity = tf.cast(tf.gather(entities, at), tf.int64) - base
    return at, (entity + tf.gather(shift, which))[:, None]
