"""Row-sharded embedding tables and their lazy optimizers: what ``--strategy
parameter-server`` trains (`jobi_tf.distributed.ps_training`, docs/distributed.md).

Why plain ``tf.Variable`` blocks and not a Keras variable over a ``ShardedVariable``: Keras 3
variables assume one resource handle, so gradients with respect to a Keras variable that
wraps a ``ShardedVariable`` fail, and Keras's optimizers build one slot per Keras variable.
`bench/ps_probe.py` (retired; `git show d054bd8:bench/ps_probe.py`) showed that N plain variables
(one contiguous row block each, created in
a ``ParameterServerStrategy`` scope, so each lands on a parameter server), with each block's
optimizer slots created beside it (``colocate_vars_with``), train exactly like one table.

Every read and write names the rows it needs, so it runs on the parameter server that holds
them and only those rows cross the network: `ShardedTable.gather` (training and queries),
``table[lo:hi]`` (evaluation's blocks of candidates, checkpoints), `ShardedTable.assign_rows`
(restoring a checkpoint). Blocks are initialised where they live, from a stateless seed, so
no process ever holds a whole table.

`ShardedLazyAdam` and `ShardedLazyAdagrad` apply, per block, the updates
`jobi_tf.optimizers.LazyAdam` and `~jobi_tf.optimizers.LazyAdagrad` make on one table: only the
rows a step touched move, repeated ids are summed first, Adam's bias correction is the global
step's.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import tensorflow as tf

from jobi_tf.optimizers import _unique_rows

__all__ = ["ShardedTable", "ShardedLazyAdam", "ShardedLazyAdagrad", "glorot_blocks", "make_sharded_optimizer"]

#: ``(lo, hi) -> [hi - lo, width]`` initial rows of a table (called once per block).
BlockInitializer = Callable[[int, int], tf.Tensor]

#: Rows per independently seeded draw of `glorot_blocks`.
INIT_CHUNK_ROWS = 1 << 14


def glorot_blocks(rows: int, width: int, seed: int, stream: int, kind: str = "table-glorot") -> BlockInitializer:
    """Initial rows drawn block by block, the distribution of `JoBiModel`'s ``init``.

    ``table-glorot``: Keras's Glorot normal over the whole ``[rows, width]`` table (truncated
    normal, stddev ``sqrt(2 / (rows + width)) / 0.8796``); ``row-glorot``: N(0, 2 / width).
    Rows are drawn in chunks of `INIT_CHUNK_ROWS`, each keyed on ``(seed, stream, chunk)``,
    and a block takes the chunks it overlaps: the same table for any number of shards, never
    materialised whole.
    """
    if kind == "table-glorot":
        stddev = math.sqrt(2.0 / (rows + width)) / 0.87962566103423978

        def draw(shape, key):
            return tf.random.stateless_truncated_normal(shape, key, stddev=stddev)
    elif kind == "row-glorot":
        stddev = math.sqrt(2.0 / width)

        def draw(shape, key):
            return tf.random.stateless_normal(shape, key, stddev=stddev)
    else:
        raise ValueError(f"init must be 'table-glorot' or 'row-glorot'. Received: {kind!r}")

    def initial(lo: int, hi: int) -> tf.Tensor:
        first, last = lo // INIT_CHUNK_ROWS, (hi - 1) // INIT_CHUNK_ROWS
        chunks = [
            draw(
                [min(INIT_CHUNK_ROWS, rows - c * INIT_CHUNK_ROWS), width],
                tf.constant([seed, stream << 40 | c], tf.int64),
            )
            for c in range(first, last + 1)
        ]
        skip = lo - first * INIT_CHUNK_ROWS
        drawn = chunks[0] if len(chunks) == 1 else tf.concat(chunks, 0)
        return drawn[skip : skip + hi - lo]

    return initial


class ShardedTable(tf.Module):
    """A ``[rows, width]`` table stored as ``num_shards`` contiguous row blocks.

    Block ``i`` holds rows ``[i * rows_per_shard, (i + 1) * rows_per_shard)`` (the last may
    be shorter). Under a ``ParameterServerStrategy`` scope each block is a variable on one
    parameter server; elsewhere blocks are ordinary local variables.

    Args:
        initial: the initial rows: a ``(rows, width)`` array, a `BlockInitializer` (run on
            each block's device, a chunk of `INIT_CHUNK_ROWS` rows at a time), or None for
            zeros; ``shape`` is required unless it is an array.
        num_shards: number of blocks (at most ``rows``).
        path: the table's name in checkpoints (``"jobi/entity_embeddings"``: the path the
            same table has as a Keras weight, so an unsharded model loads the weights).
        shape: ``(rows, width)`` when ``initial`` is a function.
        trainable: False for optimizer slots.
        fill: the value of every entry when ``initial`` is None (an optimizer slot's start).
        colocate_with: a table whose blocks this one's sit beside (an optimizer slot's rows
            live where their table's rows do).
    """

    def __init__(
        self,
        initial: np.ndarray | BlockInitializer | None,
        num_shards: int,
        path: str = "table",
        *,
        shape: tuple[int, int] | None = None,
        trainable: bool = True,
        fill: float = 0.0,
        colocate_with: ShardedTable | None = None,
    ) -> None:
        super().__init__(name=path.replace("/", "_"))
        if initial is None or callable(initial):
            if shape is None:
                raise ValueError("shape is required when initial is a function or None")
            make = initial
        else:
            array = np.asarray(initial, np.float32)
            shape = array.shape
            make = lambda lo, hi: array[lo:hi]  # noqa: E731
        rows = int(shape[0])
        if not 1 <= num_shards <= rows:
            raise ValueError(f"num_shards must be in [1, {rows}]. Received: num_shards={num_shards}")
        self.path = path
        self.shape = tf.TensorShape([rows, int(shape[1])])
        self.dtype = tf.float32
        self.rows_per_shard = math.ceil(rows / num_shards)
        self.num_shards = math.ceil(rows / self.rows_per_shard)  # no empty block
        if colocate_with is not None and colocate_with.rows_per_shard != self.rows_per_shard:
            raise ValueError(f"{path}: cannot sit beside {colocate_with.path}, whose blocks differ")
        self.shards: list[tf.Variable] = [
            self._new_block(i, make, trainable, fill, colocate_with) for i in range(self.num_shards)
        ]

    def _new_block(
        self,
        i: int,
        make: BlockInitializer | None,
        trainable: bool,
        fill: float,
        colocate_with: ShardedTable | None,
    ) -> tf.Variable:
        """Block ``i``'s variable, made where the strategy puts it, holding its initial rows."""
        lo, hi = self.block_range(i)
        # ``fill`` first, made by a callable so that it is made where the strategy puts the
        # variable (on its server); the initial rows then go in chunk by chunk, so a server
        # never holds more than its block and one chunk.
        zeros = lambda n=hi - lo: tf.fill([n, self.shape[1]], tf.constant(fill, tf.float32))  # noqa: E731
        name = f"{self.name}_shard{i}"
        if colocate_with is None:
            shard = tf.Variable(zeros, name=name, trainable=trainable)
        else:
            with tf.distribute.get_strategy().extended.colocate_vars_with(colocate_with.shards[i]):
                shard = tf.Variable(zeros, name=name, trainable=trainable)
        if make is not None:
            with tf.device(shard.device):
                for a in range(lo - lo % INIT_CHUNK_ROWS, hi, INIT_CHUNK_ROWS):
                    a, b = max(a, lo), min(a + INIT_CHUNK_ROWS, hi)
                    shard.scatter_update(tf.IndexedSlices(make(a, b), tf.range(a - lo, b - lo)))
        return shard

    def block_range(self, i: int) -> tuple[int, int]:
        """Rows ``[lo, hi)`` of block ``i``."""
        lo = i * self.rows_per_shard
        return lo, min(lo + self.rows_per_shard, self.shape[0])

    def filled_like(self, path: str, fill: float = 0.0) -> ShardedTable:
        """A non-trainable table of this shape holding ``fill`` (zeros by default), each block
        beside this table's."""
        return ShardedTable(
            None,
            self.num_shards,
            path,
            shape=tuple(self.shape),
            trainable=False,
            fill=fill,
            colocate_with=self,
        )

    def gather(self, ids: tf.Tensor) -> tf.Tensor:
        """Rows ``ids`` (int, any shape ``S``) as ``S + [width]``, read only from the blocks that hold them."""
        ids = tf.cast(ids, tf.int32)
        if self.num_shards == 1:
            return tf.gather(self.shards[0], ids)
        flat = tf.reshape(ids, [-1])
        block = flat // self.rows_per_shard
        local = tf.dynamic_partition(flat - block * self.rows_per_shard, block, self.num_shards)
        where = tf.dynamic_partition(tf.range(tf.size(flat)), block, self.num_shards)
        rows = tf.dynamic_stitch(where, [tf.gather(s, i) for s, i in zip(self.shards, local, strict=True)])
        return tf.reshape(rows, tf.concat([tf.shape(ids), [self.shape[1]]], 0))

    def __getitem__(self, key: slice) -> tf.Tensor:
        """Rows ``lo:hi`` (a step-1 slice), each block's part read on the block's device."""
        if not isinstance(key, slice) or key.step not in (None, 1):
            raise TypeError(f"{self.path}: only row slices table[lo:hi] are supported. Received: {key!r}")
        lo, hi, _ = key.indices(self.shape[0])
        parts = []
        for i in range(self.num_shards):
            start, stop = self.block_range(i)
            a, b = max(lo, start), min(hi, stop)
            if a < b:
                parts.append(tf.gather(self.shards[i], tf.range(a - start, b - start)))
        if not parts:
            return tf.zeros([0, self.shape[1]], self.dtype)
        return parts[0] if len(parts) == 1 else tf.concat(parts, 0)

    def assign_rows(self, lo: int, values: np.ndarray) -> None:
        """Overwrite rows ``lo : lo + len(values)`` (a checkpoint's block), on their servers."""
        hi = lo + len(values)
        for i in range(self.num_shards):
            start, stop = self.block_range(i)
            a, b = max(lo, start), min(hi, stop)
            if a < b:
                self.shards[i].scatter_update(tf.IndexedSlices(values[a - lo : b - lo], tf.range(a - start, b - start)))

    def assign(self, values: np.ndarray) -> None:
        """Overwrite the whole table (small tables; large ones go through `assign_rows`)."""
        self.assign_rows(0, np.asarray(values))

    def numpy(self) -> np.ndarray:
        """The whole table, block after block (small tables and tests; checkpoints read slices)."""
        return np.concatenate([s.numpy() for s in self.shards])


class _ShardedOptimizer:
    """What the sharded optimizers share: slot tables beside each table, a step counter, and
    an ``apply`` that visits each block the step read."""

    slot_names: tuple[str, ...] = ()
    slot_initial: float = 0.0  # every slot entry's value before the first update

    def __init__(self, learning_rate: float) -> None:
        self.learning_rate = learning_rate
        self.iterations: tf.Variable | None = None
        self.slots: dict[str, dict[str, ShardedTable]] = {}

    def build(self, tables: list[ShardedTable]) -> None:
        """Create the slots of ``tables`` (inside the strategy's scope, so they go to the servers)."""
        self.iterations = tf.Variable(0, dtype=tf.int64, trainable=False, name="iterations")
        for table in tables:
            self.slots[table.path] = {
                s: table.filled_like(f"{table.path}/{s}", fill=self.slot_initial) for s in self.slot_names
            }

    def variables(self) -> dict[str, object]:
        """Name → variable or slot table, for checkpoints (``iterations`` first)."""
        out: dict[str, object] = {"iterations": self.iterations}
        for path, slots in self.slots.items():
            out.update({f"{path}/{name}": table for name, table in slots.items()})
        return out

    def apply(self, updates: list[tuple[ShardedTable, list[tf.IndexedSlices | None]]]) -> None:
        """One step: for each table, its blocks' gradients (``tape.gradient(loss, table.shards)``;
        None for a block the step did not read)."""
        if self.iterations is None:
            raise ValueError(f"{type(self).__name__}.build(tables) must be called before apply")
        for table, gradients in updates:
            slots = self.slots[table.path]
            for i, (shard, gradient) in enumerate(zip(table.shards, gradients, strict=True)):
                if gradient is None:
                    continue
                if not isinstance(gradient, tf.IndexedSlices):
                    raise TypeError(f"{table.path}: a sharded table must be read through gather (a sparse gradient)")
                ids, grad = _unique_rows(gradient, shard.shape[0], shard.dtype)  # summed here: fewer rows to send
                with tf.device(shard.device):  # the slots' rows never leave their server
                    self._update_rows(shard, {name: slot.shards[i] for name, slot in slots.items()}, ids, grad)
        self.iterations.assign_add(1)

    def _update_rows(self, shard: tf.Variable, slots: dict[str, tf.Variable], ids, grad) -> None:
        raise NotImplementedError


class ShardedLazyAdam(_ShardedOptimizer):
    """`jobi_tf.optimizers.LazyAdam`'s update, block by block.

    Args:
        learning_rate, beta_1, beta_2, epsilon: as Keras's Adam (and so as ``LazyAdam``).
    """

    slot_names = ("momentum", "velocity")

    def __init__(self, learning_rate: float, beta_1: float = 0.9, beta_2: float = 0.999, epsilon: float = 1e-7) -> None:
        super().__init__(learning_rate)
        self.beta_1, self.beta_2, self.epsilon = beta_1, beta_2, epsilon

    def _update_rows(self, shard, slots, ids, grad) -> None:
        # The expressions of LazyAdam.update_step, on this block's rows.
        step = tf.cast(self.iterations + 1, tf.float32)
        alpha = self.learning_rate * tf.sqrt(1 - tf.pow(self.beta_2, step)) / (1 - tf.pow(self.beta_1, step))
        m, v = slots["momentum"], slots["velocity"]
        m_rows = tf.gather(m, ids)
        m_rows = m_rows + (grad - m_rows) * (1 - self.beta_1)
        v_rows = tf.gather(v, ids)
        v_rows = v_rows + (tf.square(grad) - v_rows) * (1 - self.beta_2)
        m.scatter_update(tf.IndexedSlices(m_rows, ids))
        v.scatter_update(tf.IndexedSlices(v_rows, ids))
        shard.scatter_sub(tf.IndexedSlices(m_rows * alpha / (tf.sqrt(v_rows) + self.epsilon), ids))


class ShardedLazyAdagrad(_ShardedOptimizer):
    """`jobi_tf.optimizers.LazyAdagrad`'s update (accumulators from 1e-10, epsilon 1e-10 outside
    the root), block by block."""

    slot_names = ("accumulator",)

    def __init__(self, learning_rate: float, epsilon: float = 1e-10, initial_accumulator_value: float = 1e-10) -> None:
        super().__init__(learning_rate)
        self.epsilon = epsilon
        self.slot_initial = initial_accumulator_value

    def _update_rows(self, shard, slots, ids, grad) -> None:
        accumulator = slots["accumulator"]
        acc_rows = tf.gather(accumulator, ids) + tf.square(grad)
        accumulator.scatter_update(tf.IndexedSlices(acc_rows, ids))
        shard.scatter_sub(tf.IndexedSlices(self.learning_rate * grad / (tf.sqrt(acc_rows) + self.epsilon), ids))


def make_sharded_optimizer(
    name: str, learning_rate: float, initial_accumulator_value: float = 1e-10
) -> _ShardedOptimizer:
    """The sharded optimizer for ``--optimizer``: ``lazy-adam`` (also what ``auto`` picks) or ``adagrad``.

    Dense ``adam`` is refused by the caller: it moves every row of every table each step,
    which on parameter servers means sending whole tables over the network.
    """
    if name in ("lazy-adam", "auto"):
        return ShardedLazyAdam(learning_rate)
    if name == "adagrad":
        return ShardedLazyAdagrad(learning_rate, initial_accumulator_value=initial_accumulator_value)
    raise ValueError(f"name must be 'lazy-adam', 'auto' or 'adagrad'. Received: name={name!r}")
