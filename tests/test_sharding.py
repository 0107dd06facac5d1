"""Row-sharded tables: reads and writes equal one table's, block-wise initialisation does not
depend on the number of shards, and the lazy optimizers on shards equal `LazyAdam` /
`LazyAdagrad` on one table (the synchronous case)."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from jobi_tf.models.sharding import (
    INIT_CHUNK_ROWS,
    ShardedLazyAdagrad,
    ShardedLazyAdam,
    ShardedTable,
    glorot_blocks,
    make_sharded_optimizer,
)
from jobi_tf.optimizers import LazyAdagrad, LazyAdam


@pytest.mark.parametrize("num_shards", [1, 2, 3, 7])
def test_reads_equal_the_whole_tables_rows(num_shards):
    rng = np.random.default_rng(0)
    table = rng.normal(size=(53, 4)).astype(np.float32)
    sharded = ShardedTable(table, num_shards)
    ids = rng.integers(53, size=(6, 5))  # any shape, repeats included
    np.testing.assert_array_equal(sharded.gather(tf.constant(ids)).numpy(), table[ids])
    np.testing.assert_array_equal(sharded.numpy(), table)
    assert sum(s.shape[0] for s in sharded.shards) == 53
    for lo, hi in [(0, 53), (5, 9), (7, 40), (52, 53), (50, 80), (20, 20)]:  # across block edges, clipped, empty
        np.testing.assert_array_equal(sharded[lo:hi].numpy(), table[lo:hi])
    assert tuple(sharded.shape) == (53, 4)


def test_assign_rows_writes_only_those_rows_across_blocks():
    table = np.zeros((20, 3), np.float32)
    sharded = ShardedTable(table, 3)  # blocks of 7, 7, 6 rows
    block = np.arange(24, dtype=np.float32).reshape(8, 3)
    sharded.assign_rows(5, block)
    table[5:13] = block
    np.testing.assert_array_equal(sharded.numpy(), table)


def test_block_initialisation_is_the_same_table_for_any_number_of_shards():
    rows, width = 2 * INIT_CHUNK_ROWS + 77, 6
    init = glorot_blocks(rows, width, seed=5, stream=0)
    one = ShardedTable(init, 1, shape=(rows, width)).numpy()
    three = ShardedTable(init, 3, shape=(rows, width)).numpy()
    np.testing.assert_array_equal(one, three)
    # Keras's Glorot normal over the whole table: truncated at 2 stddev of N(0, sqrt(2 / (rows + width)) / 0.8796).
    stddev = np.sqrt(2.0 / (rows + width)) / 0.87962566103423978
    assert np.abs(one).max() <= 2 * stddev + 1e-7
    assert abs(one.std() / np.sqrt(2.0 / (rows + width)) - 1) < 0.02
    other = ShardedTable(glorot_blocks(rows, width, seed=5, stream=1), 2, shape=(rows, width)).numpy()
    assert not np.allclose(one, other)  # another table (stream) draws other rows
    row_glorot = ShardedTable(glorot_blocks(rows, width, 5, 0, "row-glorot"), 2, shape=(rows, width)).numpy()
    assert abs(row_glorot.std() / np.sqrt(2.0 / width) - 1) < 0.02


def _steps(rng, num_steps=4):
    """Random sparse steps over rows 0-39 of a 53-row table (ids repeat; rows 40-52 never move)."""
    for _ in range(num_steps):
        ids = tf.constant(rng.integers(0, 40, size=30))
        yield ids, tf.constant(rng.normal(size=(30, 4)).astype(np.float32))


@pytest.mark.parametrize(
    "reference_cls, sharded_cls, slots, settings",
    [
        (LazyAdam, ShardedLazyAdam, {"momentum": "_momentums", "velocity": "_velocities"}, {}),
        (LazyAdagrad, ShardedLazyAdagrad, {"accumulator": "_accumulators"}, {}),
        (LazyAdagrad, ShardedLazyAdagrad, {"accumulator": "_accumulators"}, {"initial_accumulator_value": 0.0}),
    ],
    ids=["adam", "adagrad", "adagrad-from-0"],
)
def test_lazy_optimizer_on_shards_equals_it_on_one_table(reference_cls, sharded_cls, slots, settings):
    """The synchronous case: the same steps, the same rows, to float rounding."""
    rng = np.random.default_rng(1)
    initial = rng.normal(size=(53, 4)).astype(np.float32)
    whole = keras.Variable(initial)
    reference = reference_cls(learning_rate=0.05, **settings)
    reference.build([whole])
    sharded = ShardedTable(initial, 3, "t")
    optimizer = sharded_cls(learning_rate=0.05, **settings)
    optimizer.build([sharded])
    touched = set()
    for ids, weights in _steps(rng):
        touched |= set(ids.numpy().tolist())
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.gather(whole.value, ids) * weights)
        reference.apply_gradients([(tape.gradient(loss, whole.value), whole)])
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(sharded.gather(ids) * weights)
        optimizer.apply([(sharded, tape.gradient(loss, sharded.shards))])
    np.testing.assert_allclose(sharded.numpy(), whole.numpy(), rtol=1e-6, atol=1e-6)
    for name, attribute in slots.items():
        want = getattr(reference, attribute)[0].numpy()
        np.testing.assert_allclose(optimizer.slots["t"][name].numpy(), want, rtol=1e-6, atol=1e-9)
    untouched = sorted(set(range(53)) - touched)
    np.testing.assert_array_equal(sharded.numpy()[untouched], initial[untouched])  # lazy: never read, never moved
    assert int(optimizer.iterations.numpy()) == int(reference.iterations.numpy()) == 4
    assert not np.allclose(sharded.numpy(), initial)
    assert set(optimizer.variables()) == {"iterations", *(f"t/{name}" for name in slots)}


def test_sharded_adagrad_starts_its_accumulators_where_the_run_says():
    """``--initial-accumulator-value`` reaches the parameter servers' Adagrad too."""
    table = ShardedTable(np.ones((10, 2), np.float32), 2, "t")
    for start in (0.0, 1e-10):
        optimizer = make_sharded_optimizer("adagrad", 0.1, initial_accumulator_value=start)
        optimizer.build([table])
        np.testing.assert_array_equal(optimizer.slots["t"]["accumulator"].numpy(), np.full((10, 2), start, np.float32))


def test_slots_sit_beside_their_tables_rows():
    table = ShardedTable(np.ones((10, 2), np.float32), 2, "t")
    optimizer = make_sharded_optimizer("lazy-adam", 0.1)
    optimizer.build([table])
    for slot in optimizer.slots["t"].values():
        assert slot.rows_per_shard == table.rows_per_shard
        assert [s.device for s in slot.shards] == [s.device for s in table.shards]
        assert not any(s.trainable for s in slot.shards)


def test_bad_uses_are_refused():
    with pytest.raises(ValueError, match="num_shards must be in"):
        ShardedTable(np.zeros((3, 2), np.float32), 4)
    with pytest.raises(TypeError, match="row slices"):
        ShardedTable(np.zeros((3, 2), np.float32), 1)[[0, 1]]
    with pytest.raises(ValueError, match="build"):
        ShardedLazyAdam(0.1).apply([])
    with pytest.raises(ValueError, match="lazy-adam"):
        make_sharded_optimizer("adam", 0.1)
