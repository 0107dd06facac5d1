"""The contract every negative distribution of `jobi_tf.sampling.distributions` keeps: its draws
follow the probabilities its ``log_q`` states (a chi-square test of many draws), the same seed
draws the same entities, and it is a ``--negative-distribution`` choice. A new distribution is
tested here with nothing to add; its own test checks its formula against NumPy."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from jobi_tf.config import RunConfig, SamplerConfig
from jobi_tf.config.sampler import NEGATIVE_DISTRIBUTIONS
from jobi_tf.regimes import check
from jobi_tf.runtime.errors import ConfigError
from jobi_tf.sampling.distributions import get_distribution, names


def chi2_ok(counts: np.ndarray, expected: np.ndarray) -> bool:
    """A chi-square statistic within five standard deviations of its mean."""
    chi2 = np.sum((counts - expected) ** 2 / expected)
    dof = len(counts) - 1
    return chi2 < dof + 5 * np.sqrt(2 * dof)


def drawn(distribution, count: int, seed: int = 7) -> np.ndarray:
    return distribution.draw(tf.constant([count]), tf.constant([seed, 1], tf.int64)).numpy()


@pytest.mark.parametrize("name", names())
def test_every_distribution_draws_what_its_log_q_states(small_typed_index, name):
    index = small_typed_index
    distribution = get_distribution(name, index)
    assert distribution.kind == name and name in NEGATIVE_DISTRIBUTIONS
    ids = drawn(distribution, 60_000)
    assert ids.dtype == np.int32 and ids.min() >= 0 and ids.max() < index.num_entities
    log_q = distribution.log_q()
    if log_q is None:  # uniform
        q = np.full(index.num_entities, 1.0 / index.num_entities)
    else:
        assert log_q.shape == (index.num_entities,) and log_q.dtype == np.float32
        q = np.exp(log_q.astype(np.float64)) / index.num_entities
        never = np.bincount(ids, minlength=index.num_entities) == 0
        q[never & (q < 1.0 / (10 * len(ids)))] = 0.0  # the floor of entities never drawn
        q /= q.sum()
    seen = q > 0
    assert set(np.unique(ids)) <= set(np.flatnonzero(seen))
    counts = np.bincount(ids, minlength=index.num_entities)[seen].astype(np.float64)
    assert chi2_ok(counts, len(ids) * q[seen])


@pytest.mark.parametrize("name", names())
def test_every_distribution_is_stateless(small_typed_index, name):
    distribution = get_distribution(name, small_typed_index)
    np.testing.assert_array_equal(drawn(distribution, 500, seed=3), drawn(distribution, 500, seed=3))
    assert not np.array_equal(drawn(distribution, 500, seed=3), drawn(distribution, 500, seed=4))


def test_the_log_q_correction_needs_a_draw_that_is_not_uniform():
    check(RunConfig(sampler=SamplerConfig(negative_distribution="degree", logq_correction=True)))
    with pytest.raises(ConfigError, match="--logq-correction: needs a non-uniform --negative-distribution"):
        check(RunConfig(sampler=SamplerConfig(logq_correction=True)))
