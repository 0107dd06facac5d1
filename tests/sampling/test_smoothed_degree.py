"""``--negative-distribution smoothed-degree`` against NumPy's degree ** 0.75, on a graph with
entities no training triple holds."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from jobi_tf.data.index import build_index
from jobi_tf.sampling.distributions import get_distribution


def test_draws_follow_the_degree_to_the_power_three_quarters():
    rng = np.random.default_rng(0)
    heads = rng.zipf(1.6, size=3000) % 40  # a long tail of degrees among 40 entities
    tails = rng.integers(0, 40, size=3000)
    rows = [(f"e{h}", f"r{i % 3}", f"e{t}") for i, (h, t) in enumerate(zip(heads, tails, strict=True))]
    splits = {
        "train": np.array(rows),
        "valid": np.array([("e50", "r0", "e51")]),
        "test": np.array([("e52", "r1", "e53")]),
    }
    index = build_index(splits, source="synthetic")[2]
    distribution = get_distribution("smoothed-degree", index)
    degree = np.bincount(index.train[:, [0, 2]].ravel(), minlength=index.num_entities).astype(np.float64)
    assert (degree == 0).sum() >= 4  # the valid/test-only entities
    q = degree**0.75 / np.sum(degree**0.75)
    np.testing.assert_allclose(distribution.log_q(), np.log(np.maximum(q * len(q), q[q > 0].min() * len(q))), rtol=1e-5)
    drawn = distribution.draw(tf.constant([200_000]), tf.constant([5, 6], tf.int64)).numpy()
    assert not np.isin(drawn, np.flatnonzero(degree == 0)).any()
    share = np.bincount(drawn, minlength=index.num_entities) / len(drawn)
    np.testing.assert_allclose(share[q > 0], q[q > 0], atol=4e-3)
    by_degree = degree / degree.sum()
    top = int(np.argmax(degree))
    assert by_degree[top] > share[top] > 1.0 / np.count_nonzero(degree)  # between by-degree and uniform
