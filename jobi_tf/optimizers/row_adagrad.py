"""Adagrad with one accumulator per entity row (PyTorch-BigGraph's RowAdagrad)."""

from __future__ import annotations

import keras
import tensorflow as tf

from jobi_tf.optimizers._sparse import slot_rows, summed_at_first
from jobi_tf.optimizers.adagrad import LazyAdagrad

__all__ = ["RowAdagrad"]


@keras.saving.register_keras_serializable(package="jobi_tf")
class RowAdagrad(LazyAdagrad):
    """`LazyAdagrad` with one accumulator per row of the entity table: PyTorch-BigGraph's
    optimizer for embeddings (its ``RowAdagrad``).

    Why: element-wise Adagrad keeps a second table as large as the entity table (1.9M rows of
    200 floats: 1.5 GB more); one float per row is 7.6 MB, and a step reads and writes one
    accumulator per row it touches instead of a row's worth of them (at PyTorch-BigGraph's work per
    positive on FB15k-237 the baseline trained 1.25x as many positives per second, JoBi 1.13x,
    docs/performance.md). It is also what PBG trains with, so a comparison with PBG can run the
    same optimizer on both sides.

    A row's update, its ids deduplicated and their gradients summed first (as PBG coalesces
    them): ``G_row += mean(g ** 2)`` over the row's components, then
    ``row -= lr * g / (sqrt(G_row) + eps)``. Tables not named in ``row_tables`` (the relation
    tables, like PBG's relation operators) take `LazyAdagrad`'s element-wise update.

    Args:
        row_tables: names of the variables that get one accumulator per row. Default: the
            model's entity table.
        Others: those of `LazyAdagrad`.

    >>> opt = RowAdagrad(learning_rate=0.1, row_tables=("table",))
    >>> table = keras.Variable(tf.ones([2, 2]), name="table")
    >>> _ = opt.apply_gradients([(tf.IndexedSlices(tf.constant([[3.0, 4.0]]), tf.constant([1])), table)])
    >>> opt.variables[-1].numpy().round(2).tolist()  # one accumulator per row: 1e-10 + (9 + 16) / 2
    [0.0, 12.5]
    """

    @staticmethod
    def slot_floats(rows: int, width: int, entity_table: bool) -> int:
        """Floats of state a ``[rows, width]`` table costs (the memory guard's count): one
        accumulator per row of the entity table, one per float elsewhere."""
        return rows if entity_table else rows * width

    def __init__(
        self,
        *args,
        row_tables: tuple[str, ...] = ("entity_embeddings",),
        initial_accumulator_value: float = 1e-10,
        **kwargs,
    ) -> None:
        super().__init__(*args, initial_accumulator_value=initial_accumulator_value, **kwargs)
        self.row_tables = tuple(row_tables)

    def build(self, var_list) -> None:
        if self.built:
            return
        keras.optimizers.Optimizer.build(self, var_list)  # Adagrad's own build would make full-size slots
        # By position, because ``update_step`` gets the backend's variable, not the Keras one.
        self._by_row = [v.name in self.row_tables and len(v.shape) == 2 for v in var_list]
        initializer = keras.initializers.Constant(self.initial_accumulator_value)
        self._accumulators = [
            self.add_variable(
                shape=(v.shape[0],) if by_row else v.shape,
                initializer=initializer,
                dtype=v.dtype,
                name=f"{v.path.replace('/', '_')}_accumulator",
            )
            for v, by_row in zip(var_list, self._by_row, strict=True)
        ]

    def update_step(self, gradient, variable, learning_rate) -> None:
        index = self._get_variable_index(variable)
        if not self._by_row[index]:
            return super().update_step(gradient, variable, learning_rate)
        dtype = variable.dtype
        lr = tf.cast(learning_rate, dtype)
        accumulator = self._accumulators[index]
        if isinstance(gradient, tf.IndexedSlices):
            ids, grad = summed_at_first(gradient, variable.shape[0], dtype)  # repeats: zero rows, no change
            self.assign_add(accumulator, tf.IndexedSlices(tf.reduce_mean(tf.square(grad), axis=-1), ids))
            acc_rows = slot_rows(accumulator, ids)  # added first, then read (`LazyAdagrad.update_step`: no copy)
            self.assign_sub(variable, tf.IndexedSlices(lr * grad / (tf.sqrt(acc_rows) + self.epsilon)[:, None], ids))
            return
        grad = tf.cast(gradient, dtype)
        acc = tf.convert_to_tensor(accumulator) + tf.reduce_mean(tf.square(grad), axis=-1)
        self.assign(accumulator, acc)
        self.assign_sub(variable, lr * grad / (tf.sqrt(acc) + self.epsilon)[:, None])

    def get_config(self) -> dict:
        return {**super().get_config(), "row_tables": list(self.row_tables)}


OPTIMIZER = RowAdagrad
