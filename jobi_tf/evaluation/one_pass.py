"""The one-pass count of a batch of queries, for scorers whose score is a plain dot product.

Why: ranking against every entity needs each target's score from the same matmul as its
rivals' (a dot product summed in another order rounds differently and breaks exact ties), and
the general count (`jobi_tf.evaluation.block_ranking`) reads it in a first pass over the
blocks, computing every product twice. Here the targets' scores come first, from one product
of the same shape as every tile's, the targets' rows in its columns: a matrix product of one
shape sums each entry in one order, so each score is bit for bit the one its own tile gives.
That is checked in the tile, and a batch where it is not so is counted again by the general
route (never seen on the CPUs measured). Each tile's scores above and at least the target's
are then counted in one fused reduction. Tiles are small (`TILE` entities, the last one
padded) so that the score matrix stays in cache while it is reduced: at 1.85M entities the
reductions, not the products, bounded the rate.

``dtype="bfloat16"`` (``--valid-dtype``) computes the products from bfloat16-rounded rows and
queries, as the hardware's bfloat16 dot products do; the scores come back as bfloat16, so each
rank is exactly that of the bfloat16 scores (ties counted as such): an approximation of the
float32 ranks for validating often on a large graph. The test set is ranked in float32.

A slot prior's offsets (`jobi_tf.models.slot_prior`) are added to each tile's products in
float32, and to each target's product by the same single addition, so its total is still its
tile's; with bfloat16 products the totals are the bfloat16 products plus float32 offsets.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from jobi_tf.evaluation.counts import BlockCounts

__all__ = ["OnePassCounter", "TILE"]

#: Entities per product: 4,096 x 1,000 queries stay in cache while reduced, and the targets'
#: own product costs one tile per batch.
TILE = 4096
#: Tiles from this many entities reduce in one XLA-fused loop (smaller ones are not worth a compile).
FUSED_FROM = 1024
#: Tiles whose slot-prior rows are built at once (32 x 4,096 entities x the batch's distinct slots).
SPAN = 32


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
        return scorer.dot_product

    def product_table(self, table):
        """The table as the tiles slice it: a tensor read once (a variable's slice would read the
        whole variable again for every tile), cast to bfloat16 for bfloat16 products."""
        if hasattr(table, "gather"):  # a sharded table: its own slices
            return table if self.dtype == "float32" else tf.cast(table[0 : table.shape[0]], tf.bfloat16)
        dense = tf.convert_to_tensor(table)
        return dense if self.dtype == "float32" else tf.cast(dense, tf.bfloat16)

    def count(self, q, products, filtered, targets, blocks, offsets=None, target_shift=None) -> BlockCounts | None:
        """The counts of one batch, or None where a target's score came out otherwise in its
        own tile than in the product that gave it beforehand (the caller then counts again).
        ``offsets``: ``[B, E]`` added to the products (the slot prior, a tile at a time: module
        docstring); ``target_shift``: ``(B,)`` added to each target's total; either may be None."""
        q = tf.convert_to_tensor(q, tf.float32)
        qp = tf.cast(q, tf.bfloat16) if self.dtype == "bfloat16" else q
        targets = np.asarray(targets, np.int64)
        tiles = _tiles(blocks)
        width = max(hi - lo for lo, hi in tiles)
        value = self._target_scores(qp, products, targets, width)
        total = value if offsets is None else value + _at_targets(offsets, targets)
        target = tf.constant(total := total if target_shift is None else total + np.float32(target_shift))
        rows, cols = (np.asarray(a, np.int64) for a in filtered)
        order = np.argsort(cols, kind="stable")
        rows, cols, factors = rows[order], cols[order], None if offsets is None else _Factors(offsets, tiles)
        size = len(targets)
        greater, at_least = np.zeros(size, np.float64), np.zeros(size, np.float64)
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
                *(() if offsets is None else factors.tile(lo, hi, width)),
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
        counts.rival_score, counts.rival, counts.target_score = best, rival, total
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
    """The blocks' entities cut into pieces of `TILE`, contiguous blocks first joined: a block's
    end is not a tile's (a 100,000-entity block would end in a 1,696-wide tile padded to 4,096,
    a tenth of every product wasted)."""
    spans: list[list[int]] = []
    for lo, hi in blocks:
        if spans and spans[-1][1] == lo:
            spans[-1][1] = hi
        else:
            spans.append([lo, hi])
    return [(a, min(a + TILE, hi)) for lo, hi in spans for a in range(lo, hi, TILE)]


def _at_targets(offsets, targets: np.ndarray) -> np.ndarray:
    """float32 ``(B,)``: each query's offset at its target, by the expression its tile uses."""
    if hasattr(offsets, "at"):
        return offsets.at(targets).numpy()
    return tf.gather(offsets, tf.constant(targets), axis=1, batch_dims=1).numpy() + np.float32(0)


class _Factors:
    """A batch's offsets as each tile takes them: ``(rows [U, width], which [B], shift [B])``, the
    offset of query ``b`` at a tile's column ``c`` being ``rows[which[b], c] + shift[b]``
    (`jobi_tf.models.slot_prior.SlotOffsets.factors`; a dense ``[B, E]`` tensor is its own rows).
    A slot prior's rows are built `SPAN` tiles at a time: one build per tile cost more than the tile."""

    def __init__(self, offsets, tiles: list[tuple[int, int]]) -> None:
        self.offsets, self.tiles = offsets, tiles
        self.span, self.built = (None, None), None

    def tile(self, lo: int, hi: int, width: int) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        if not hasattr(self.offsets, "factors"):  # a dense [B, E] tensor
            rows, size = self.offsets[:, lo:hi], self.offsets.shape[0]
            which, shift = tf.range(size), tf.zeros([size], tf.float32)
        else:
            if self.span[0] is None or not self.span[0] <= lo < self.span[1]:
                ends = [b for a, b in self.tiles if a >= lo][:SPAN]
                self.span = (lo, ends[-1])
                self.built = self.offsets.factors(*self.span)
            block, which, shift = self.built
            rows = block[:, lo - self.span[0] : hi - self.span[0]]
        rows = tf.convert_to_tensor(rows, tf.float32)
        if rows.shape[1] != width:  # the last tile's pad scores -inf anyway
            rows = tf.pad(rows, [[0, 0], [0, width - rows.shape[1]]])
        return rows, which, shift


def _padded(products, lo: int, hi: int, width: int):
    """Rows ``lo:hi`` of the table, with zero rows up to ``width`` (the last tile's pad)."""
    rows = products[lo:hi]
    return rows if hi - lo == width else tf.pad(rows, [[0, width - (hi - lo)], [0, 0]])


def _product(q, rows):
    return tf.matmul(q, rows, transpose_b=True)


def _tile_counts(q, entities, filtered, target, best, target_cols, valid=None, rows=None, which=None, shift=None):
    """One tile: per query, the filtered-in scores above and at least ``target``, the best
    one, which queries it improves and where, and the products at ``target_cols`` (read before
    filtering and before the offsets ``rows[which] + shift[:, None]`` (`_Factors`), which are
    added to every score inside the reduction). ``valid``: the columns before the pad of a last
    tile (None: no pad); the pad scores -inf.
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
    packed, block_best = reduce(scores, target, rows, which, shift)
    improved = block_best > best  # strict: on ties the earlier tile (lower id) keeps it
    rivals = tf.boolean_mask(scores, improved)
    if rows is not None:  # the improved queries' totals (-inf stays -inf)
        rivals = _totals(rivals, rows, tf.boolean_mask(which, improved), tf.boolean_mask(shift, improved))
    best_col = tf.scatter_nd(  # (not in the fused reduction: XLA's CPU argmax tripled its time)
        tf.where(improved),
        tf.argmax(rivals, axis=1, output_type=tf.int32),
        tf.shape(improved, out_type=tf.int64),
    )
    return packed % _SECOND, packed // _SECOND, block_best, improved, best_col, tf.cast(read, tf.float32)


def _totals(scores, rows, which, shift):
    """float32 products plus offsets, one addition: what the target's total was made by."""
    return tf.cast(scores, tf.float32) + (tf.gather(rows, which) + shift[:, None])


def _sums(scores, target, rows=None, which=None, shift=None):
    """``(#(s > t) + 2¹⁶·#(s ≥ t), max s)`` per query, ``s`` with the offsets when given: both
    counts in one integer reduction (exact for tiles below 2¹⁶ entities), which XLA fuses with
    the offsets and the maximum into one pass."""
    wide = tf.cast(scores, tf.float32) if rows is None else _totals(scores, rows, which, shift)
    above = tf.cast(wide > target[:, None], tf.int32) + _SECOND * tf.cast(wide >= target[:, None], tf.int32)
    return tf.reduce_sum(above, axis=1), tf.reduce_max(wide, axis=1)


#: The factor that packs the count of scores at least the target's above the count of greater ones.
_SECOND = 1 << 16
_fused_sums = tf.function(_sums, jit_compile=True, reduce_retracing=True)
