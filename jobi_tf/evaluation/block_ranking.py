"""One batch of queries ranked against the entity table, a block of entities at a time.

Why a module of its own: `jobi_tf.evaluation.ranking` decides *what* is ranked (directions, the
known-facts filter, type-aware candidates, metrics); this is *how* one batch is counted with
bounded memory, whatever the graph's size. Queries are scored against blocks of
``chunk_size`` entities with the scorer's ``score_candidates`` (one matmul for the bilinear
scorers); the batch's known facts falling in a block are set to ``-inf`` there, and the
entities scoring above / equal to the true one are counted. Memory is bounded by
``batch * chunk_size`` floats.

The true entity's score must come out of the same matmul as its rivals' (a dot product
summed in another order rounds differently and breaks exact ties). Two ways to get it:

* **One pass** (`OnePassCounter`, for scorers whose score is a plain dot product, without
  type-aware candidates or a slot prior): the targets' scores come first, from one product of
  the same shape as every tile's, the targets' rows in its columns. A matrix product of one
  shape sums each entry in one order, so each score is bit for bit the one its own tile
  gives; that is checked in the tile, and a batch where it is not so is counted again by the
  two-pass route (never seen on the CPUs measured). Each tile's scores above and at least the
  target's are then counted in one fused reduction. Tiles are small (`TILE` entities, the last one padded) so that the
  score matrix stays in cache while it is reduced: at 1.85M entities the reductions, not the
  products, had bounded the rate.
* **Two passes** (every other case): a first pass reads the target's score from its block,
  the second counts; each product is computed twice.

``dtype="bfloat16"`` (``--valid-dtype``) computes the products from bfloat16-rounded rows and
queries, as the hardware's bfloat16 dot products do; the scores come back as bfloat16, so each
rank is exactly that of the bfloat16 scores (ties counted as such). An approximation of the
float32 ranks for validating often on a large graph; the test set is ranked in float32.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from jobi_tf.models.scorers.base import Scorer

__all__ = ["BlockCounts", "BlockRanker", "OnePassCounter", "TILE", "entity_blocks"]

#: Entities per product of the one-pass count: 4,096 x 1,000 queries stay in cache while
#: reduced, and the targets' own product costs one tile per batch.
TILE = 4096
#: Tiles from this many entities reduce in one XLA-fused loop (smaller ones are not worth a compile).
FUSED_FROM = 1024


def entity_blocks(num_entities: int, chunk_size: int) -> list[tuple[int, int]]:
    """``[(lo, hi), ...]``: the entity ids ``lo:hi`` of each block, in order."""
    return [(lo, min(lo + chunk_size, num_entities)) for lo in range(0, num_entities, chunk_size)]


class BlockCounts:
    """What counting one batch block by block found, per query (``B`` queries).

    Attributes:
        greater, equal: float64 ``(B,)`` unfiltered candidates scoring above / equal to the target.
        rival_score: float32 ``(B,)`` best unfiltered non-target score (``-inf``: none left).
        rival: int64 ``(B,)`` its entity (exact ties: the lower id).
        target_score: float32 ``(B,)`` the true entity's score.
    """

    def __init__(self, size: int) -> None:
        self.greater = np.zeros(size, np.float64)
        self.equal = np.zeros(size, np.float64)
        self.rival_score = np.full(size, -np.inf, np.float32)
        self.rival = np.zeros(size, np.int64)
        self.target_score: np.ndarray | None = None

    def add(self, lo: int, greater: tf.Tensor, equal: tf.Tensor, best: tf.Tensor, best_col: tf.Tensor) -> None:
        """Add the counts of the block starting at entity ``lo``, and keep the better rival."""
        self.greater += greater.numpy()
        self.equal += equal.numpy()
        best = best.numpy()
        better = best > self.rival_score  # strict: on ties the earlier block (lower id) stays
        self.rival_score = np.where(better, best, self.rival_score)
        self.rival = np.where(better, best_col.numpy() + lo, self.rival)


class BlockRanker:
    """Counts, for a batch of queries, the candidates above and equal to each true entity.

    Holds the two traced block kernels, so that one evaluator traces them once.
    """

    def __init__(self, dtype: str = "float32") -> None:
        self._count = tf.function(_count_above, reduce_retracing=True)
        self._read = tf.function(_read_target_scores, reduce_retracing=True)
        self.one_pass = OnePassCounter(dtype)

    def product_table(self, table):
        """The entity table as the one-pass products read it (cast once per evaluation)."""
        return self.one_pass.product_table(table)

    def count(
        self,
        scorer,
        q: tf.Tensor,
        table,
        filtered: tuple[np.ndarray, np.ndarray],
        targets: np.ndarray,
        blocks: list[tuple[int, int]],
        allowed: np.ndarray | None = None,
        offsets: tf.Tensor | None = None,
        products=None,
    ) -> BlockCounts:
        """Counts of ``B`` queries over every block.

        Args:
            scorer: the model's `jobi_tf.models.Scorer` (its ``score_candidates``).
            q: ``[B, W]`` queries.
            table: the entity table ``[E, W]`` (sliced ``table[lo:hi]`` per block).
            filtered: ``(rows, cols)`` int ``(M,)``: the (query, entity) pairs to ignore,
                the targets themselves included.
            targets: int64 ``(B,)`` each query's true entity.
            blocks: `entity_blocks` of the table.
            allowed: bool ``[B, E]`` candidates to rank (type-aware ranking), or None for all.
            offsets: float32 ``[B, E]`` added to the scores (the model's slot prior), or None.
            products: `product_table` of ``table`` (made here when not given).
        """
        several = len(blocks) > 1 or self.one_pass.dtype != "float32"  # one block: no first pass to save
        if several and allowed is None and offsets is None and self.one_pass.handles(scorer):
            products = self.product_table(table) if products is None else products
            counts = self.one_pass.count(q, table, products, filtered, targets, blocks)
            if counts is not None:
                return counts
        if self.one_pass.dtype != "float32":
            raise ValueError("bfloat16 ranking needs a dot-product scorer, without --restrict or a slot prior")
        return self._count_two_pass(scorer, q, table, filtered, targets, blocks, allowed, offsets)

    def _count_two_pass(
        self, scorer, q, table, filtered, targets, blocks, allowed=None, offsets=None
    ) -> BlockCounts:
        """`count` by the general route: the target's score read in a first pass."""
        rows, cols = filtered
        if len(blocks) == 1:
            target_scores, target_cols = tf.zeros(len(targets), table.dtype), targets
        else:
            target_scores, target_cols = (
                self._target_scores(scorer, q, table, targets, blocks, offsets),
                np.full(len(targets), -1),
            )
        counts = BlockCounts(len(targets))
        for lo, hi in blocks:
            inside = (cols >= lo) & (cols < hi)
            filt = np.stack([rows[inside], cols[inside] - lo], axis=1).astype(np.int32).reshape(-1, 2)
            cols_in_block = np.where(target_cols >= 0, target_cols - lo, -1).astype(np.int32)
            g, e, best, best_col, target_score = self._count(
                scorer,
                q,
                table[lo:hi],
                tf.constant(filt),
                target_scores,
                tf.constant(cols_in_block),
                None if allowed is None else tf.constant(allowed[:, lo:hi]),
                None if offsets is None else offsets[:, lo:hi],
            )
            counts.add(lo, g, e, best, best_col)
        counts.target_score = target_score.numpy()
        return counts

    def _target_scores(
        self, scorer, q, table, targets: np.ndarray, blocks: list[tuple[int, int]], offsets: tf.Tensor | None = None
    ) -> np.ndarray:
        """float32 ``(B,)``: each true entity's score, read from its own block's score matrix."""
        target_scores = np.zeros(len(targets), np.float32)
        for lo, hi in blocks:
            inside = (targets >= lo) & (targets < hi)
            if inside.any():
                cols = tf.constant(np.where(inside, targets - lo, 0), tf.int32)
                block = self._read(scorer, q, table[lo:hi], cols, None if offsets is None else offsets[:, lo:hi])
                target_scores[inside] = block.numpy()[inside]
        return target_scores


def _count_above(scorer, q, entities, filtered, target_scores, target_cols, allowed=None, offsets=None):
    """Per query, how many unfiltered entities of a block score above / equal to the target.

    Args:
        scorer: the model's `jobi_tf.models.Scorer` (its ``score_candidates``).
        q: ``[B, W]`` queries.
        entities: ``[C, W]`` a block of the entity table.
        filtered: int32 ``[M, 2]`` (query row, column in block) pairs to ignore; they
            include the target itself.
        target_scores: ``[B]`` score of each query's true entity, used where
            ``target_cols`` is -1.
        target_cols: int32 ``[B]`` column of the true entity in this block, or -1; where
            given, the target's score is read from this block's score matrix.
        allowed: bool ``[B, C]`` candidates to rank (type-aware ranking), or None for all.
        offsets: ``[B, C]`` added to the block's scores (the slot prior), or None.
    """
    scores = _block_scores(scorer, q, entities, offsets)
    read = tf.gather(scores, tf.maximum(target_cols, 0), axis=1, batch_dims=1)
    target_scores = tf.where(target_cols >= 0, read, tf.cast(target_scores, scores.dtype))
    scores = tf.tensor_scatter_nd_update(scores, filtered, tf.fill([tf.shape(filtered)[0]], -np.inf))
    if allowed is not None:
        scores = tf.where(allowed, scores, tf.constant(-np.inf, scores.dtype))
    # int32 counts: a [B, C] float64 cast would be 8 bytes per score, twice, per block.
    greater = tf.reduce_sum(tf.cast(scores > target_scores[:, None], tf.int32), axis=1)
    equal = tf.reduce_sum(tf.cast(scores == target_scores[:, None], tf.int32), axis=1)
    # The best candidate the filter keeps (the target is filtered here, so it is a rival).
    best_col = tf.argmax(scores, axis=1, output_type=tf.int32)
    best = tf.gather(scores, best_col, axis=1, batch_dims=1)
    return greater, equal, best, best_col, target_scores


def _read_target_scores(scorer, q, entities, target_cols, offsets=None):
    """``[B]`` scores at ``target_cols`` of this block's score matrix (first pass, several blocks)."""
    scores = _block_scores(scorer, q, entities, offsets)
    return tf.gather(scores, target_cols, axis=1, batch_dims=1)


def _block_scores(scorer, q, entities, offsets=None):
    """``[B, C]``: the block's scores, with ``offsets`` added (both passes compute them alike)."""
    scores = scorer.score_candidates(q, entities)
    return scores if offsets is None else scores + offsets


class OnePassCounter:
    """The one-pass count of a dot-product scorer (see the module's docstring).

    Args:
        dtype: ``float32`` or ``bfloat16`` (the products of bfloat16-rounded rows).
    """

    def __init__(self, dtype: str = "float32") -> None:
        if dtype not in ("float32", "bfloat16"):
            raise ValueError(f"rank dtype must be float32 or bfloat16, not {dtype!r}")
        self.dtype = dtype
        self._tile = tf.function(_tile_counts, reduce_retracing=True)
        self._product = tf.function(_product, reduce_retracing=True)

    @staticmethod
    def handles(scorer) -> bool:
        """True for a scorer whose candidates' scores are the base class's dot products."""
        return type(scorer).score_candidates is Scorer.score_candidates

    def product_table(self, table):
        if self.dtype == "float32":
            return table
        dense = table if isinstance(table, (tf.Variable, tf.Tensor, np.ndarray)) else table[0 : table.shape[0]]
        return tf.cast(dense, tf.bfloat16)

    def count(self, q, table, products, filtered, targets, blocks) -> BlockCounts | None:
        """The counts of one batch, or None where a target's score came out otherwise in its
        own tile than in the product that gave it beforehand (the caller then counts again)."""
        q = tf.convert_to_tensor(q, tf.float32)
        qp = tf.cast(q, tf.bfloat16) if self.dtype == "bfloat16" else q
        targets = np.asarray(targets, np.int64)
        tiles = _tiles(blocks)
        width = max(hi - lo for lo, hi in tiles)
        value = self._target_scores(qp, products, targets, width)
        target = tf.constant(value)
        rows, cols = (np.asarray(a, np.int64) for a in filtered)
        order = np.argsort(cols, kind="stable")
        rows, cols = rows[order], cols[order]
        size = len(targets)
        greater = np.zeros(size, np.float64)
        at_least = np.zeros(size, np.float64)
        best = np.full(size, -np.inf, np.float32)
        rival = np.zeros(size, np.int64)
        read = np.full(size, np.nan, np.float32)
        for lo, hi in tiles:
            a, b = np.searchsorted(cols, [lo, hi])
            filt = np.stack([rows[a:b], cols[a:b] - lo], axis=1)
            inside = (targets >= lo) & (targets < hi)
            target_cols = np.where(inside, targets - lo, -1).astype(np.int32)
            above, at_least_here, block_best, improved, best_col, own = self._tile(
                qp,
                _padded(products, lo, hi, width),
                tf.constant(filt.astype(np.int32).reshape(-1, 2)),
                target,
                tf.constant(best),
                tf.constant(target_cols),
                hi - lo if hi - lo < width else None,  # the last tile's pad: no candidates
            )
            greater += above.numpy()
            at_least += at_least_here.numpy()
            improved = improved.numpy()
            if improved.any():
                best[improved] = block_best.numpy()[improved]
                rival[improved] = best_col.numpy()[improved] + lo
            if inside.any():
                read[inside] = own.numpy()[inside]
        if not np.array_equal(read.view(np.int32), value.view(np.int32)):
            return None  # the products rounded otherwise: never seen on the CPUs measured
        counts = BlockCounts(size)
        counts.greater, counts.equal = greater, at_least - greater
        counts.rival_score, counts.rival, counts.target_score = best, rival, value
        return counts

    def _target_scores(self, qp, products, targets: np.ndarray, width: int) -> np.ndarray:
        """float32 ``(B,)``: each target's score from a product of the tiles' shape, the
        targets' rows in its columns. Why not a dot product: a matrix product of the same
        shape sums each entry in the same order, so the score is the one the target's tile
        will give (checked there), and equal scores are found equal."""
        out = np.empty(len(targets), np.float32)
        for start in range(0, len(targets), width):
            part = targets[start : start + width]
            rows = tf.gather(products, part) if not hasattr(products, "gather") else products.gather(part)
            rows = tf.pad(rows, [[0, width - len(part)], [0, 0]])
            scores = self._product(qp, rows).numpy()
            out[start : start + len(part)] = scores[np.arange(start, start + len(part)), np.arange(len(part))]
        return out


def _tiles(blocks: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Each block cut into pieces of at most `TILE` entities."""
    return [(a, min(a + TILE, hi)) for lo, hi in blocks for a in range(lo, hi, TILE)]


def _padded(products, lo: int, hi: int, width: int):
    """Rows ``lo:hi`` of the table, with zero rows up to ``width`` (the last tile's pad)."""
    rows = products[lo:hi]
    return rows if hi - lo == width else tf.pad(rows, [[0, width - (hi - lo)], [0, 0]])


def _product(q, rows):
    return tf.matmul(q, rows, transpose_b=True)


def _tile_counts(q, entities, filtered, target, best, target_cols, valid=None):
    """One tile: per query, the filtered-in scores above and at least ``target``, the best
    one, which queries it improves and where, and the scores at ``target_cols`` (read before
    filtering). ``valid``: the columns before the pad of a last tile (None: no pad); the pad
    scores -inf.
    """
    scores = tf.matmul(q, entities, transpose_b=True)
    read = tf.gather(scores, tf.maximum(target_cols, 0), axis=1, batch_dims=1)
    with tf.control_dependencies([read]):  # read first, so that the update may reuse the buffer
        scores = tf.tensor_scatter_nd_update(
            scores, filtered, tf.fill([tf.shape(filtered)[0]], tf.constant(-np.inf, scores.dtype))
        )
    if valid is not None:
        scores = tf.where(tf.range(tf.shape(scores)[1])[None, :] < valid, scores, tf.constant(-np.inf, scores.dtype))
    reduce = _fused_sums if scores.shape[1] is not None and scores.shape[1] >= FUSED_FROM else _sums
    packed, block_best = reduce(scores, target)
    improved = block_best > best  # strict: on ties the earlier tile (lower id) keeps it
    best_col = tf.scatter_nd(
        tf.where(improved),
        tf.argmax(tf.boolean_mask(scores, improved), axis=1, output_type=tf.int32),
        tf.shape(improved, out_type=tf.int64),
    )
    return packed % _SECOND, packed // _SECOND, block_best, improved, best_col, tf.cast(read, tf.float32)


def _sums(scores, target):
    """``(#(s > t) + 2¹⁶·#(s ≥ t), max s)`` per query: both counts in one integer reduction
    (exact for tiles below 2¹⁶ entities), which XLA fuses with the maximum into one pass."""
    wide = tf.cast(scores, tf.float32)
    above = tf.cast(wide > target[:, None], tf.int32) + _SECOND * tf.cast(wide >= target[:, None], tf.int32)
    return tf.reduce_sum(above, axis=1), tf.reduce_max(wide, axis=1)


#: The factor that packs the count of scores at least the target's above the count of greater ones.
_SECOND = 1 << 16
_fused_sums = tf.function(_sums, jit_compile=True, reduce_retracing=True)
