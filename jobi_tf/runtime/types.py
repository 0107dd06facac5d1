"""Shared constants and type aliases."""

from __future__ import annotations

__all__ = ["HEAD", "RELATION", "TAIL", "TRIPLE_HEAD", "PAIR_HEAD", "SPLITS", "RANK_METRICS"]

#: Column of each part of a triple in an ``(N, 3)`` array.
HEAD, RELATION, TAIL = 0, 1, 2

#: The heads of a JoBi model, in the order their queries are stacked.
TRIPLE_HEAD, PAIR_HEAD = 0, 1

#: The three splits of a benchmark, in the order they are read.
SPLITS = ("train", "valid", "test")

#: The filtered ranking metrics every evaluation reports (metrics.json, logs, grids).
RANK_METRICS = ("mrr", "hits@1", "hits@3", "hits@10")
