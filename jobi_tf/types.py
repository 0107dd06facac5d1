"""Shared constants and type aliases."""

from __future__ import annotations

from typing import Literal

__all__ = ["HEAD", "RELATION", "TAIL", "RankType", "Direction", "SPLITS"]

#: Column of each part of a triple in an ``(N, 3)`` array.
HEAD, RELATION, TAIL = 0, 1, 2

#: How ties between the true entity and other candidates are counted.
RankType = Literal["optimistic", "realistic", "pessimistic"]

#: Which side of a triple a query asks for.
Direction = Literal["head", "tail"]

#: The three splits of a benchmark, in the order they are read.
SPLITS = ("train", "valid", "test")
