"""Row-sharded embedding tables and their lazy Adam: the building blocks of ``--strategy
parameter-server`` (docs/distributed.md; the strategy itself is not wired in yet).

Why plain ``tf.Variable`` blocks and not a Keras variable over a ``ShardedVariable``: Keras 3
variables assume one resource handle, so gradients with respect to a Keras variable that
wraps a ``ShardedVariable`` fail, and Keras's optimizers build one slot per Keras variable.
`bench/ps_probe.py` showed that N plain variables (one contiguous row block each, created in
a ``ParameterServerStrategy`` scope, so each lands on a parameter server), with each block's
moments created beside it (``colocate_vars_with``), train exactly like one table.

`ShardedTable` stores the blocks and gathers rows across them; `ShardedLazyAdam` applies, per
block, the update `jobi_tf.optimizers.LazyAdam` makes on one table: only the rows a step
touched move, repeated ids are summed first, and the bias correction is the global step's.
"""

from __future__ import annotations

import math

import numpy as np
import tensorflow as tf

from jobi_tf.optimizers import _unique_rows

__all__ = ["ShardedTable", "ShardedLazyAdam"]


class ShardedTable(tf.Module):
    """An embedding table stored as ``num_shards`` contiguous row blocks, with Adam moments.

    Block ``i`` holds rows ``[i * rows_per_shard, (i + 1) * rows_per_shard)`` (the last may
    be shorter). Under a ``ParameterServerStrategy`` scope each block and its two moments are
    variables on one parameter server; elsewhere they are ordinary local variables.

    Args:
        initial: float ``(rows, width)`` initial values.
        num_shards: number of blocks (at most ``rows``).
        name: prefix of the variables' names.
    """

    def __init__(self, initial: np.ndarray, num_shards: int, name: str = "table") -> None:
        super().__init__(name=name)
        initial = np.asarray(initial)
        rows = initial.shape[0]
        if not 1 <= num_shards <= rows:
            raise ValueError(f"num_shards must be in [1, {rows}]. Received: num_shards={num_shards}")
        self.num_rows = rows
        self.rows_per_shard = math.ceil(rows / num_shards)
        self.num_shards = math.ceil(rows / self.rows_per_shard)  # no empty block
        strategy = tf.distribute.get_strategy()
        self.shards, self.momentums, self.velocities = [], [], []
        for i in range(self.num_shards):
            block = initial[i * self.rows_per_shard : (i + 1) * self.rows_per_shard]
            shard = tf.Variable(block, name=f"{name}_shard{i}")
            with strategy.extended.colocate_vars_with(shard):  # the moments live where their rows do
                self.momentums.append(tf.Variable(tf.zeros_like(block), trainable=False, name=f"{name}_m{i}"))
                self.velocities.append(tf.Variable(tf.zeros_like(block), trainable=False, name=f"{name}_v{i}"))
            self.shards.append(shard)

    def gather(self, ids: tf.Tensor) -> tf.Tensor:
        """Rows ``ids`` (int, any shape ``S``) as ``S + [width]``, read only from the blocks that hold them."""
        ids = tf.cast(ids, tf.int32)
        flat = tf.reshape(ids, [-1])
        block = flat // self.rows_per_shard
        local = tf.dynamic_partition(flat - block * self.rows_per_shard, block, self.num_shards)
        where = tf.dynamic_partition(tf.range(tf.size(flat)), block, self.num_shards)
        rows = tf.dynamic_stitch(where, [tf.gather(s, i) for s, i in zip(self.shards, local, strict=True)])
        return tf.reshape(rows, tf.concat([tf.shape(ids), tf.shape(self.shards[0])[1:]], 0))

    def numpy(self) -> np.ndarray:
        """The whole table, block after block (for evaluation and export)."""
        return np.concatenate([s.numpy() for s in self.shards])


class ShardedLazyAdam:
    """Lazy Adam over `ShardedTable`s: `jobi_tf.optimizers.LazyAdam`'s update, block by block.

    Args:
        learning_rate, beta_1, beta_2, epsilon: as Keras's Adam (and so as ``LazyAdam``).
    """

    def __init__(self, learning_rate: float, beta_1: float = 0.9, beta_2: float = 0.999, epsilon: float = 1e-7) -> None:
        self.learning_rate = learning_rate
        self.beta_1, self.beta_2, self.epsilon = beta_1, beta_2, epsilon
        self.iterations = tf.Variable(0, dtype=tf.int64, trainable=False, name="iterations")

    def apply(self, updates: list[tuple[ShardedTable, list[tf.IndexedSlices | None]]]) -> None:
        """One step: for each table, its blocks' gradients (``tape.gradient(loss, table.shards)``;
        None for a block the step did not read)."""
        step = tf.cast(self.iterations + 1, tf.float32)
        alpha = self.learning_rate * tf.sqrt(1 - tf.pow(self.beta_2, step)) / (1 - tf.pow(self.beta_1, step))
        for table, gradients in updates:
            parts = zip(table.shards, table.momentums, table.velocities, gradients, strict=True)
            for shard, m, v, gradient in parts:
                if gradient is not None:
                    self._update_block(shard, m, v, gradient, alpha)
        self.iterations.assign_add(1)

    def _update_block(self, shard, m, v, gradient: tf.IndexedSlices, alpha: tf.Tensor) -> None:
        # The expressions of LazyAdam.update_step, on this block's rows.
        ids, grad = _unique_rows(gradient, shard.shape[0], shard.dtype)
        m_rows = tf.gather(m, ids)
        m_rows = m_rows + (grad - m_rows) * (1 - self.beta_1)
        v_rows = tf.gather(v, ids)
        v_rows = v_rows + (tf.square(grad) - v_rows) * (1 - self.beta_2)
        m.scatter_update(tf.IndexedSlices(m_rows, ids))
        v.scatter_update(tf.IndexedSlices(v_rows, ids))
        shard.scatter_sub(tf.IndexedSlices(m_rows * alpha / (tf.sqrt(v_rows) + self.epsilon), ids))
