"""Row-sharded tables: gathers equal one table's, and lazy Adam on shards equals LazyAdam on one table."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from jobi_tf.optimizers import LazyAdam
from jobi_tf.sharding import ShardedLazyAdam, ShardedTable


@pytest.mark.parametrize("num_shards", [1, 2, 3, 7])
def test_gather_equals_the_whole_tables_rows(num_shards):
    rng = np.random.default_rng(0)
    table = rng.normal(size=(53, 4)).astype(np.float32)
    sharded = ShardedTable(table, num_shards)
    ids = rng.integers(53, size=(6, 5))  # any shape, repeats included
    np.testing.assert_array_equal(sharded.gather(tf.constant(ids)).numpy(), table[ids])
    np.testing.assert_array_equal(sharded.numpy(), table)
    assert sum(s.shape[0] for s in sharded.shards) == 53


def test_lazy_adam_on_shards_equals_lazy_adam_on_one_table():
    """The synchronous case: the same steps, the same rows, to float rounding."""
    rng = np.random.default_rng(1)
    initial = rng.normal(size=(53, 4)).astype(np.float32)
    whole = keras.Variable(initial)
    reference = LazyAdam(learning_rate=0.05)
    reference.build([whole])
    sharded = ShardedTable(initial, 3)
    optimizer = ShardedLazyAdam(learning_rate=0.05)
    touched = set()
    for _ in range(4):
        ids = tf.constant(rng.integers(0, 40, size=30))  # rows 40-52 never move; ids repeat
        weights = tf.constant(rng.normal(size=(30, 4)).astype(np.float32))
        touched |= set(ids.numpy().tolist())
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.gather(whole.value, ids) * weights)
        reference.apply_gradients([(tape.gradient(loss, whole.value), whole)])
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(sharded.gather(ids) * weights)
        optimizer.apply([(sharded, tape.gradient(loss, sharded.shards))])
    np.testing.assert_allclose(sharded.numpy(), whole.numpy(), rtol=1e-6, atol=1e-6)
    m_slot, v_slot = reference._momentums[0].numpy(), reference._velocities[0].numpy()
    np.testing.assert_allclose(np.concatenate([m.numpy() for m in sharded.momentums]), m_slot, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(np.concatenate([v.numpy() for v in sharded.velocities]), v_slot, rtol=1e-6, atol=1e-9)
    untouched = sorted(set(range(53)) - touched)
    np.testing.assert_array_equal(sharded.numpy()[untouched], initial[untouched])  # lazy: never read, never moved
    assert int(optimizer.iterations.numpy()) == int(reference.iterations.numpy()) == 4
    assert not np.allclose(sharded.numpy(), initial)


def test_a_table_cannot_have_more_shards_than_rows():
    with pytest.raises(ValueError, match="num_shards must be in"):
        ShardedTable(np.zeros((3, 2), np.float32), 4)
