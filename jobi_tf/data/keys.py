"""One int64 key per pair of ids, and membership tests against sorted keys.

Why a module of its own: a key such as ``head * R + relation`` overflows int32 as soon as
entities × relations exceeds 2³¹ (FB1.9M: 1.9M × 3,247), and NumPy 1.x keeps an int32
array times an integer scalar in int32, wrapping silently. Every key is built here, from
int64 operands, whatever the dtype of the ids passed in.
"""

from __future__ import annotations

import numpy as np

__all__ = ["pack", "sorted_contains"]


def pack(major, minor, stride: int) -> np.ndarray:
    """int64 ``major * stride + minor`` (e.g. ``head * num_relations + relation``)."""
    major = np.asarray(major).astype(np.int64, copy=False)
    minor = np.asarray(minor).astype(np.int64, copy=False)
    return major * np.int64(stride) + minor


def sorted_contains(sorted_keys: np.ndarray, keys) -> np.ndarray:
    """bool: each of ``keys`` is in ``sorted_keys`` (``np.isin`` without sorting the haystack again)."""
    keys = np.asarray(keys, dtype=np.int64)
    if len(sorted_keys) == 0:
        return np.zeros(keys.shape, bool)
    pos = np.minimum(np.searchsorted(sorted_keys, keys), len(sorted_keys) - 1)
    return sorted_keys[pos] == keys
