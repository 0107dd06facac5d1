"""One batch of queries ranked against the entity table, a block of entities at a time.

Why a module of its own: `jobi_tf.evaluation.ranking` decides *what* is ranked (directions, the
known-facts filter, type-aware candidates, metrics); this is *how* one batch is counted with
bounded memory, whatever the graph's size. Queries are scored against blocks of
``chunk_size`` entities with the scorer's ``score_candidates`` (one matmul for the bilinear
scorers); the batch's known facts falling in a block are set to ``-inf`` there, and the
entities scoring above / equal to the true one are counted. Memory is bounded by
``batch * chunk_size`` floats.

The true entity's score must come out of the same matmul as its rivals' (a dot product
summed in another order rounds differently and breaks exact ties). With one block it is read
during counting; with several, a first pass reads it, so each product is computed twice. A
dot-product scorer without type-aware candidates is counted in one pass
instead (`jobi_tf.evaluation.one_pass`), which ``BlockRanker.count`` chooses.
"""

from __future__ import annotations

import logging

import numpy as np
import tensorflow as tf

from jobi_tf.contracts.scorer import not_a_dot_product
from jobi_tf.evaluation.counts import BlockCounts
from jobi_tf.evaluation.one_pass import OnePassCounter

__all__ = ["BlockRanker"]

logger = logging.getLogger(__name__)


class BlockRanker:
    """Counts, for a batch of queries, the candidates above and equal to each true entity.

    Holds the two traced block kernels, so that one evaluator traces them once.
    """

    def __init__(self, dtype: str = "float32") -> None:
        self._count = tf.function(_count_above, reduce_retracing=True)
        self._read = tf.function(_read_target_scores, reduce_retracing=True)
        self.one_pass = OnePassCounter(dtype)
        self._warned = False

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
        target_shift: np.ndarray | None = None,
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
            target_shift: float32 ``(B,)`` added to each target's score before its rivals are
                counted against it (the neighbourhood score's term at the target,
                `jobi_tf.evaluation.neighbourhood`), or None.
        """
        several = len(blocks) > 1 or self.one_pass.dtype != "float32"  # one block: no first pass to save
        if several and allowed is None and self.one_pass.handles(scorer):
            products = self.product_table(table) if products is None else products
            counts = self.one_pass.count(q, products, filtered, targets, blocks, offsets, target_shift)
            if counts is not None:
                return counts
        if several and not self._warned and not self.one_pass.handles(scorer):
            self._warned = True  # a run's validation goes on, by two passes, rather than stop mid-run
            why = not_a_dot_product(scorer, "one-pass ranking")
            if self.one_pass.dtype != "float32":
                logger.warning("%s; ranking in float32, by two passes", why)
            else:
                logger.info("%s; ranking by two passes", why)
        elif self.one_pass.dtype != "float32" and not self._warned:
            self._warned = True
            logger.warning("bfloat16 ranking needs a dot-product scorer without --restrict; ranking in float32")
        return self._count_two_pass(scorer, q, table, filtered, targets, blocks, allowed, offsets, target_shift)

    def _count_two_pass(
        self, scorer, q, table, filtered, targets, blocks, allowed=None, offsets=None, target_shift=None
    ) -> BlockCounts:
        """`count` by the general route: the target's score read in a first pass (with one
        block and no shift, read while counting)."""
        rows, cols = filtered
        if len(blocks) == 1 and target_shift is None:
            target_scores, target_cols = tf.zeros(len(targets), table.dtype), targets
        else:
            target_scores, target_cols = (
                self._target_scores(scorer, q, table, targets, blocks, offsets),
                np.full(len(targets), -1),
            )
            if target_shift is not None:
                target_scores = target_scores + np.asarray(target_shift, np.float32)
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
