"""What counting a batch of queries against the entity table finds, and the blocks it walks.

A module of its own because both counts write it: the general one
(`jobi_tf.evaluation.block_ranking`) and the one-pass one (`jobi_tf.evaluation.one_pass`).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

__all__ = ["BlockCounts", "entity_blocks"]


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
