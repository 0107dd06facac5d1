"""The exports' block top-k gives exactly ``tf.math.top_k``'s values and ids, ties and -inf included."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from jobi_tf.export.served_tables import TOP_K_BLOCK, top_k


@pytest.mark.parametrize("n", [1, 5, TOP_K_BLOCK - 1, TOP_K_BLOCK, TOP_K_BLOCK + 1, 5 * TOP_K_BLOCK + 17])
@pytest.mark.parametrize("rows", [0, 1, 3])
def test_block_top_k_equals_tensorflows(n, rows):
    rng = np.random.default_rng(n + rows)
    scores = rng.integers(-4, 4, size=(rows, n)).astype(np.float32)  # many ties
    scores[rng.random((rows, n)) < 0.3] = -np.inf  # masked known facts
    if rows:
        scores[0, -1] = 10.0  # the best in the last, padded block
    for k in sorted({0, 1, 10, n // 2, n}):
        k = min(k, n)
        want = tf.math.top_k(tf.constant(scores), k=k)
        got = top_k(tf.constant(scores), tf.constant(k))
        np.testing.assert_array_equal(got[0].numpy(), want[0].numpy())
        np.testing.assert_array_equal(got[1].numpy(), want[1].numpy())


def test_block_top_k_on_distinct_scores_equals_numpy():
    scores = np.random.default_rng(0).normal(size=(2, 3 * TOP_K_BLOCK + 5)).astype(np.float32)
    values, ids = top_k(tf.constant(scores), tf.constant(7))
    expected = np.argsort(-scores, axis=1, kind="stable")[:, :7]
    np.testing.assert_array_equal(ids.numpy(), expected)
    np.testing.assert_array_equal(values.numpy(), np.take_along_axis(scores, expected, 1))
