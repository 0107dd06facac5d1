"""Ranking with the neighbourhood score (`jobi_tf.models.neighbourhood`), by a correction of the counts.

Why a correction and not an offset: the score is nonzero only for the entities two steps from
the query's given entity (a few thousand of 1.85M), different for every query, so it does not
fit the one-pass count's offsets (rows shared by a batch's slots). With ``n(e)`` the term, ``b(e)``
every other part of the score and ``a`` the answer, the answer's total is ``T = b(a) + n(a)``
and its rivals are counted in two parts:

- every entity, at ``b``, against ``T``: the usual count, the target's score shifted by ``n(a)``
  (`jobi_tf.evaluation.block_ranking.BlockRanker.count`'s ``target_shift``);
- then, for the reached entities alone, the count at ``b`` is taken back and the count at
  ``b + n`` put in its place.

The reached entities' ``b`` is recomputed here by the scorer (the same expression, products of
another shape), so a rival within a float's last bit of ``T`` may be counted on the other side
of it: a rank off by one, at most, on such a tie. With bfloat16 products (``--valid-dtype``,
validation only) the reached entities' ``b`` is recomputed in float32, so their ranks are
float32's where the rest are bfloat16's: the same approximation, on fewer entities.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from jobi_tf.evaluation.counts import BlockCounts

__all__ = ["NeighbourhoodTerms"]


class NeighbourhoodTerms:
    """One batch's reached entities and their terms (``v`` applied), and the counts' correction.

    Args:
        neighbourhood: the model's `jobi_tf.models.neighbourhood.Neighbourhood`.
        given: int ``(B,)`` each query's given entity (the head of a tail query, and so on).
        targets: int ``(B,)`` each query's answer.
        filtered: ``(rows, cols)``: the (query, entity) pairs the filter ignores, targets included.
        allowed: bool ``[B, E]`` candidates (type-aware ranking), or None for all.
    """

    def __init__(self, neighbourhood, given, targets, filtered, allowed=None) -> None:
        weight = np.float32(neighbourhood.weight)
        rows, cols = (np.asarray(a, np.int64) for a in filtered)
        order = np.lexsort((cols, rows))
        rows, cols = rows[order], cols[order]
        bounds = np.searchsorted(rows, np.arange(len(given) + 1))
        self.ids, self.terms, self.target_shift = [], [], np.zeros(len(given), np.float32)
        for b, (x, answer) in enumerate(zip(np.asarray(given), np.asarray(targets), strict=True)):
            ids, values = neighbourhood.reach(int(x))
            terms = weight * values
            at = np.searchsorted(ids, answer)
            if at < len(ids) and ids[at] == answer:
                self.target_shift[b] = terms[at]
            keep = ~np.isin(ids, cols[bounds[b] : bounds[b + 1]], assume_unique=True)
            if allowed is not None:
                keep &= allowed[b, ids]
            self.ids.append(ids[keep])
            self.terms.append(terms[keep])

    @classmethod
    def of(cls, model, given, targets, filtered, allowed=None) -> NeighbourhoodTerms | None:
        """The batch's terms when ``model`` ranks with a neighbourhood term (weight > 0), else None."""
        near = getattr(model, "neighbourhood", None)
        return cls(near, given, targets, filtered, allowed) if near is not None and near.weight > 0 else None

    def correct(self, counts: BlockCounts, scorer, q, table, offsets=None) -> BlockCounts:
        """``counts`` (made with `target_shift`) with every reached entity counted at its total."""
        owner = np.repeat(np.arange(len(self.ids)), [len(i) for i in self.ids])
        if not len(owner):
            return counts
        ids, terms = np.concatenate(self.ids), np.concatenate(self.terms)
        base = _scores(scorer, q, table, offsets, owner, ids)
        total = base + terms
        target = counts.target_score[owner]
        size = len(self.ids)

        def moved(now, before):  # per query: how many pass the test at the total, less at the base
            return np.bincount(owner, now.astype(np.float64) - before, minlength=size)

        counts.greater += moved(total > target, base > target)
        counts.equal += moved(total == target, base == target)
        # The best total per query, the lowest id on ties: ``owner`` runs in order and ids are
        # sorted within a query, so the first position at its query's maximum (no sort needed).
        starts = np.flatnonzero(np.r_[True, owner[1:] != owner[:-1]])
        b, best = owner[starts], np.maximum.reduceat(total, starts)
        at_best = np.flatnonzero(total == np.repeat(best, np.diff(np.r_[starts, len(owner)])))
        best_id = ids[at_best[np.r_[True, owner[at_best][1:] != owner[at_best][:-1]]]]
        better = (best > counts.rival_score[b]) | ((best == counts.rival_score[b]) & (best_id < counts.rival[b]))
        counts.rival_score[b[better]], counts.rival[b[better]] = best[better], best_id[better]
        return counts


#: Pairs scored at once: each gathers a row and a query (400 floats each at dim 200), so a batch
#: whose queries reach millions of entities is scored a bounded slice at a time.
PAIRS = 1 << 17
#: Scores one union block holds (``[B, columns]``, 64 MB of float32).
BLOCK = 1 << 24
#: A dot-product scorer takes the union route when it computes at most this many products per
#: pair: a matrix product costs about 1/80 of a gathered pair's product on one core (2.2M pairs
#: of 1,000 queries over FB15k-237's 14,505 entities: 0.9 s against 11.2 s), so on a dense graph,
#: where a batch's queries reach much the same entities, one product of the queries with their
#: union beats a product per pair; at 1.85M entities the reaches hardly overlap and pairs win.
UNION_PRODUCTS_PER_PAIR = 16


def _scores(scorer, q, table, offsets, owner: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """float32: the score of query ``owner[i]`` at entity ``ids[i]``, its offsets added."""
    reached = np.zeros(int(table.shape[0]), bool)  # a mask, not a sort of every pair
    reached[ids] = True
    if scorer.dot_product and len(q) * np.count_nonzero(reached) <= UNION_PRODUCTS_PER_PAIR * len(ids):
        scores = _union_scores(q, table, owner, ids, reached)
    else:
        parts = [
            _pair_scores(scorer, q, table, owner[i : i + PAIRS], ids[i : i + PAIRS]) for i in range(0, len(ids), PAIRS)
        ]
        scores = np.concatenate(parts) if parts else np.zeros(0, np.float32)
    if offsets is not None:
        scores += np.concatenate(
            [_offsets_at(offsets, owner[i : i + PAIRS], ids[i : i + PAIRS]) for i in range(0, len(ids), PAIRS)]
        )
    return scores


def _rows(table, ids: np.ndarray) -> tf.Tensor:
    ids_t = tf.constant(ids, tf.int64)
    return table.gather(ids_t) if hasattr(table, "gather") else tf.gather(table, ids_t)


def _union_scores(q, table, owner: np.ndarray, ids: np.ndarray, reached: np.ndarray) -> np.ndarray:
    """`_scores` of a dot-product scorer by the union route: every query against every entity
    any of them reaches (``reached``, a mask over the entities), one block of columns at a time,
    each pair read from its block."""
    q = tf.convert_to_tensor(q)
    union, column = np.flatnonzero(reached), (np.cumsum(reached) - 1)[ids]
    width = max(1, BLOCK // len(q))

    def block(lo: int) -> np.ndarray:  # [B, width]: every query against union[lo : lo + width]
        return tf.cast(tf.matmul(q, _rows(table, union[lo : lo + width]), transpose_b=True), tf.float32).numpy()

    if len(union) <= width:  # one block (a batch over a small graph): no grouping by block
        return block(0)[owner, column]
    order = np.argsort(column, kind="stable")
    starts = np.searchsorted(column[order], np.arange(0, len(union) + width, width))
    out = np.empty(len(ids), np.float32)
    for s, lo in enumerate(range(0, len(union), width)):
        pick = order[starts[s] : starts[s + 1]]
        out[pick] = block(lo)[owner[pick], column[pick] - lo]
    return out


def _pair_scores(scorer, q, table, owner: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """`_scores` of one slice, pair by pair, offsets not added. A dot-product scorer: each a
    row's product; any other: its candidates, query by query (``owner`` is sorted)."""
    rows = _rows(table, ids)
    if scorer.dot_product:
        scores = tf.reduce_sum(tf.gather(tf.convert_to_tensor(q), tf.constant(owner, tf.int64)) * rows, axis=1)
    else:
        queries = range(owner[0], owner[-1] + 1)
        bounds = np.searchsorted(owner, np.arange(owner[0], owner[-1] + 2))
        parts = [
            scorer.score_candidates(q[b : b + 1], rows[bounds[i] : bounds[i + 1]])[0] for i, b in enumerate(queries)
        ]
        scores = tf.concat(parts, axis=0)
    return tf.cast(scores, tf.float32).numpy()


def _offsets_at(offsets, owner: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """float32: query ``owner[i]``'s offset at entity ``ids[i]`` (the slot counts)."""
    owner_t, ids_t = tf.constant(owner, tf.int64), tf.constant(ids, tf.int64)
    if hasattr(offsets, "pairs_at"):
        return tf.cast(offsets.pairs_at(owner_t, ids_t), tf.float32).numpy()
    return tf.cast(tf.gather_nd(offsets, tf.stack([owner_t, ids_t], axis=1)), tf.float32).numpy()
