"""Grouping by fingerprint gives np.unique's groups, and stays exact when fingerprints collide."""

from __future__ import annotations

import numpy as np
import pytest

import jobi_tf.data.fingerprints as fingerprints
from jobi_tf.data.fingerprints import fingerprint, unique_first


@pytest.mark.parametrize("width", [1, 7, 8, 9, 36])
def test_groups_match_np_unique(width):
    rng = np.random.default_rng(width)
    pool = np.array([bytes(rng.integers(1, 256, size=int(rng.integers(1, width + 1)))) for _ in range(50)])
    values = pool[rng.integers(len(pool), size=1000)].astype(f"S{width}")
    first, inverse = unique_first(values, block=97)  # several blocks
    _, expected_first = np.unique(values, return_index=True)
    assert sorted(first.tolist()) == sorted(expected_first.tolist())  # earliest occurrence of each value
    np.testing.assert_array_equal(values[first][inverse], values)
    assert inverse.dtype == np.int32


def test_padding_does_not_merge_values():
    values = np.array([b"ab", b"ab\x01", b"a", b"ab"], dtype="S9")
    assert len(set(fingerprint(values).tolist())) == 3
    first, inverse = unique_first(values)
    assert len(first) == 3 and inverse[0] == inverse[3]


def test_a_collision_falls_back_to_the_exact_sort(monkeypatch):
    values = np.array([b"x", b"y", b"x", b"z"], dtype="S1")
    monkeypatch.setattr(fingerprints, "fingerprint", lambda v, block=0: np.zeros(len(v), np.uint64))
    first, inverse = unique_first(values)
    np.testing.assert_array_equal(values[first][inverse], values)
    assert len(first) == 3
