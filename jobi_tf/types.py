"""Shared constants and type aliases."""

from __future__ import annotations

__all__ = ["HEAD", "RELATION", "TAIL", "SPLITS"]

#: Column of each part of a triple in an ``(N, 3)`` array.
HEAD, RELATION, TAIL = 0, 1, 2

#: The three splits of a benchmark, in the order they are read.
SPLITS = ("train", "valid", "test")
