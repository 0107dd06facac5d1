"""Exact dense Adam with one densification (`FusedAdam`), and sparse ("lazy") Adam and Adagrad,
so that a step costs the rows a batch uses, not the table.

Why `FusedAdam`: Keras 3's Adam applies a sparse gradient (`tf.IndexedSlices`) by turning it
into a dense tensor twice, once as it is (first moment) and once with each slice squared
(second moment), so a row that a batch uses twice gets ``g1² + g2²`` where dense Adam (and
PyTorch's, the paper's code) takes ``(g1 + g2)²``. `FusedAdam` sums the slices into one dense
gradient and computes the moments and the weights from it: exact dense Adam, and on FB15k-237
(ComplEx 200, JoBi 500 x 50) a step's CPU time fell from 133 ms to 97 ms (docs/performance.md).
Its slots are Keras's Adam's variables, so checkpoints of either resume with the other.

Why the lazy ones: a table read with ``tf.gather`` gets a sparse gradient (`tf.IndexedSlices`: the rows
used and their gradients). Keras 3's Adam turns it into a dense ``[rows, width]`` tensor and
reads and writes every row of the table and of both moment tables each step
(keras-team/keras#19992; ``keras/src/optimizers/adam.py``, ``update_step``): one step on a
2M-row table then takes seconds, and step time grows with the number of entities.

How `LazyAdam` and `LazyAdagrad` update a sparse gradient:

1. The gradients of a repeated id are summed (``tf.math.unsorted_segment_sum``): the same
   per-row gradient the dense tensor holds. `LazyAdam` then keeps each id once; the
   Adagrad ones keep the repeats as zero rows, whose additive update changes nothing.
2. Only those rows of the optimizer's slots are gathered, updated and scattered back.
3. Only those rows of the table change.

A dense gradient (a variable not read through a gather, or a table used whole, as in the
full-softmax loss) takes the parent class's dense update, except in `LazyAdagrad`, which
applies it with TensorFlow's fused Adagrad kernel: one pass over the table instead of one per
Keras op (a 1-vs-all step updates the whole entity table; a dense 14,541 x 2,000 update took
68 ms with Keras's ops and 20 ms fused, bench/adagrad_update.py). Keras's ``apply`` passes a
`tf.IndexedSlices` through to ``update_step`` unchanged, as long as the optimizer has no
``clipvalue``, ``global_clipnorm``, ``loss_scale_factor`` or gradient accumulation (those may
densify it; the update is then the dense one, correct but not lazy); ``weight_decay`` would
touch every row every step.

Semantics of lazy Adam (as TF-Addons' ``LazyAdam``): a row's moments decay only on the
steps that use it, while the bias correction uses the global step count. A row used by every
step is updated as dense Adam updates it (to float rounding); a row a step does not use keeps
its weights and moments exactly, where dense Adam would still move it by its decaying
momentum. Adagrad has no decay, so `LazyAdagrad` equals dense Adagrad on every row; it exists
because Keras's Adagrad squares each slice of a sparse gradient separately, which differs from
dense Adagrad when a batch repeats an id.

Which optimizer ``--optimizer auto`` picks: `choose_optimizer`.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from jobi_tf.config import LAZY_MIN_ROWS  # auto's threshold (bench/step_time_vs_size.py, docs/performance.md)

__all__ = [
    "FusedAdam",
    "LazyAdam",
    "LazyAdagrad",
    "RowAdagrad",
    "LAZY_MIN_ROWS",
    "OPTIMIZER_CLASSES",
    "choose_optimizer",
    "make_optimizer",
    "slot_floats",
]


def _first_positions(gradient: tf.IndexedSlices, num_rows: int) -> tuple[tf.Tensor, tf.Tensor]:
    """``(ids [n], owner [n])`` of a sparse gradient: its ids as int32 and, for each, the
    first position holding the same id, found with one scatter-min into an int32
    ``[num_rows]`` scratch vector (under XLA on CPU ``tf.unique`` sorts, and cost a third of
    the whole lazy update in a 100k-lookup step)."""
    ids = tf.cast(gradient.indices, tf.int32)
    n = tf.shape(ids)[0]
    first = tf.tensor_scatter_nd_min(tf.fill([num_rows], n), ids[:, None], tf.range(n))
    return ids, tf.gather(first, ids)


def _unique_rows(gradient: tf.IndexedSlices, num_rows: int, dtype: tf.DType) -> tuple[tf.Tensor, tf.Tensor]:
    """``(ids [U], summed gradients [U, W])`` of a sparse gradient whose ids may repeat, the
    ids in order of first appearance, as from ``tf.unique`` (`_first_positions`)."""
    ids, owner = _first_positions(gradient, num_rows)
    is_first = tf.equal(owner, tf.range(tf.shape(ids)[0]))
    slot = tf.cumsum(tf.cast(is_first, tf.int32)) - 1  # [n] rank of each first position
    unique_ids = tf.boolean_mask(ids, is_first)
    values = tf.math.unsorted_segment_sum(
        tf.cast(gradient.values, dtype), tf.gather(slot, owner), tf.shape(unique_ids)[0]
    )
    return unique_ids, values


def _summed_at_first(gradient: tf.IndexedSlices, num_rows: int, dtype: tf.DType) -> tuple[tf.Tensor, tf.Tensor]:
    """``(ids [n], gradients [n, W])`` of a sparse gradient whose ids may repeat: each id's
    gradients summed at its first position, zeros at its later ones.

    Why not `_unique_rows`: an additive update (Adagrad's accumulator and step) of a zero
    gradient row changes nothing, so the repeats can stay, and the compaction to unique ids
    (a cumulative sum, a boolean mask and a gather of n rows) goes; the sums are the same.
    """
    ids, owner = _first_positions(gradient, num_rows)
    return ids, tf.math.unsorted_segment_sum(tf.cast(gradient.values, dtype), owner, tf.shape(ids)[0])


def _rows(slot: keras.Variable, ids: tf.Tensor) -> tf.Tensor:
    """Rows ``ids`` of an optimizer slot, read as a sparse gather (never the whole slot)."""
    return tf.gather(slot.value if isinstance(slot, keras.Variable) else slot, ids)


@keras.saving.register_keras_serializable(package="jobi_tf")
class FusedAdam(keras.optimizers.Adam):
    """Keras's Adam with a sparse gradient densified once, its slices summed before squaring.

    The sum is one ``unsorted_segment_sum``; the moments and weights then follow Keras's dense
    expressions: every row moves every step, as in dense Adam (see the module docstring).

    Args:
        Those of `keras.optimizers.Adam`, except ``amsgrad``, which is not supported.

    >>> opt = FusedAdam(learning_rate=0.1)
    >>> table = keras.Variable(tf.ones([3, 1]))
    >>> _ = opt.apply_gradients([(tf.IndexedSlices(tf.ones([1, 1]), tf.constant([1])), table)])
    >>> table.numpy().ravel().astype(float).round(2).tolist()
    [1.0, 0.9, 1.0]
    """

    def __init__(self, *args, **kwargs) -> None:
        if kwargs.get("amsgrad"):
            raise ValueError(f"{type(self).__name__} does not support amsgrad. Received: amsgrad=True")
        super().__init__(*args, **kwargs)

    def _alpha(self, learning_rate, dtype: tf.DType) -> tf.Tensor:
        """The bias-corrected step size of the global step, as Keras's Adam computes it."""
        step = tf.cast(self.iterations + 1, dtype)
        beta_1_power = tf.pow(tf.cast(self.beta_1, dtype), step)
        beta_2_power = tf.pow(tf.cast(self.beta_2, dtype), step)
        return tf.cast(learning_rate, dtype) * tf.sqrt(1 - beta_2_power) / (1 - beta_1_power)

    def update_step(self, gradient, variable, learning_rate) -> None:
        dtype = variable.dtype
        if isinstance(gradient, tf.IndexedSlices):
            gradient = tf.math.unsorted_segment_sum(
                tf.cast(gradient.values, dtype), gradient.indices, tf.shape(variable)[0]
            )
        gradient = tf.cast(gradient, dtype)
        index = self._get_variable_index(variable)
        m, v = self._momentums[index], self._velocities[index]
        # Keras's dense expressions, on the one dense gradient.
        m_new = tf.convert_to_tensor(m) + (gradient - tf.convert_to_tensor(m)) * (1 - self.beta_1)
        v_new = tf.convert_to_tensor(v) + (tf.square(gradient) - tf.convert_to_tensor(v)) * (1 - self.beta_2)
        step = m_new * self._alpha(learning_rate, dtype) / (tf.sqrt(v_new) + self.epsilon)
        self.assign(m, m_new)
        self.assign(v, v_new)
        self.assign_sub(variable, step)


@keras.saving.register_keras_serializable(package="jobi_tf")
class LazyAdam(FusedAdam):
    """Adam that updates only the rows of a sparse gradient (see the module docstring).

    Args:
        Those of `keras.optimizers.Adam`, except ``amsgrad``, which is not supported.

    >>> opt = LazyAdam(learning_rate=0.1)
    >>> table = keras.Variable(tf.ones([4, 2]))
    >>> _ = opt.apply_gradients([(tf.IndexedSlices(tf.ones([1, 2]), tf.constant([1])), table)])
    >>> table.numpy()[:, 0].astype(float).round(2).tolist()
    [1.0, 0.9, 1.0, 1.0]
    """

    def update_step(self, gradient, variable, learning_rate) -> None:
        if not isinstance(gradient, tf.IndexedSlices):
            return super().update_step(gradient, variable, learning_rate)  # fused dense update
        dtype = variable.dtype
        alpha = self._alpha(learning_rate, dtype)  # the global step's, as dense Adam
        ids, grad = _unique_rows(gradient, variable.shape[0], dtype)
        index = self._get_variable_index(variable)
        m, v = self._momentums[index], self._velocities[index]
        # The expressions of Keras's dense Adam, so a touched row follows it to float rounding.
        m_rows = _rows(m, ids)
        m_rows = m_rows + (grad - m_rows) * (1 - self.beta_1)
        v_rows = _rows(v, ids)
        v_rows = v_rows + (tf.square(grad) - v_rows) * (1 - self.beta_2)
        self.assign(m, tf.IndexedSlices(m_rows, ids))
        self.assign(v, tf.IndexedSlices(v_rows, ids))
        self.assign_sub(variable, tf.IndexedSlices(m_rows * alpha / (tf.sqrt(v_rows) + self.epsilon), ids))


@keras.saving.register_keras_serializable(package="jobi_tf")
class LazyAdagrad(keras.optimizers.Adagrad):
    """Adagrad that updates only the rows of a sparse gradient, with repeated ids summed first,
    and a dense gradient in one fused kernel.

    The update is PyTorch's (and so kbc's), ``lr * g / (sqrt(G) + eps)`` with eps 1e-10, and
    the accumulators ``G`` start at 1e-10, not at Keras's 0.1. With Keras's 0.1, a gradient of
    1e-4 (the size a batch-averaged 1-vs-all softmax gives an entity row) moves the row by
    ``lr * 3e-4`` instead of about ``lr`` on its first update, and 1-vs-all training with
    kbc's lr 0.1 barely moved in its first epoch (loss 19.17 against 19.17 for uniform scores,
    FB15k-237). Starting at 1e-10 instead of kbc's 0 damps the first steps of coordinates whose
    gradients stay below about 1e-5 (most entities' in a 1-vs-all step), as Keras's
    ``sqrt(G + 1e-10)`` did in every 1-vs-all run of docs/results.md; from 0, every coordinate's
    first step is about ``lr`` whatever its gradient, and kbc's recipe on FB15k-237 at rank 1000
    was behind after 2 epochs (validation MRR 0.3078 against 0.3133). ``initial_accumulator_value=0``
    gives kbc's.

    Args:
        initial_accumulator_value: default 1e-10.
        epsilon: default 1e-10.
        Others: those of `keras.optimizers.Adagrad`.

    >>> opt = LazyAdagrad(learning_rate=0.1)
    >>> table = keras.Variable(tf.ones([3, 1]))
    >>> _ = opt.apply_gradients([(tf.IndexedSlices(tf.ones([2, 1]), tf.constant([0, 0])), table)])
    >>> table.numpy().ravel().astype(float).round(3).tolist()  # one update with gradient 2, not two of 1
    [0.9, 1.0, 1.0]
    """

    def __init__(self, *args, initial_accumulator_value: float = 1e-10, epsilon: float = 1e-10, **kwargs) -> None:
        super().__init__(*args, initial_accumulator_value=initial_accumulator_value, epsilon=epsilon, **kwargs)

    def update_step(self, gradient, variable, learning_rate) -> None:
        dtype = variable.dtype
        lr = tf.cast(learning_rate, dtype)
        accumulator = self._accumulators[self._get_variable_index(variable)]
        if not isinstance(gradient, tf.IndexedSlices):
            # ``accum += g²; var -= lr * g / (sqrt(accum) + eps)`` in one pass.
            tf.raw_ops.ResourceApplyAdagradV2(
                var=variable.handle,
                accum=accumulator.handle,
                lr=lr,
                epsilon=tf.cast(self.epsilon, dtype),
                grad=tf.cast(gradient, dtype),
                use_locking=False,
            )
            return
        ids, grad = _summed_at_first(gradient, variable.shape[0], dtype)  # repeats: zero rows, no change
        increment = tf.square(grad)
        acc_rows = _rows(accumulator, ids) + increment
        self.assign_add(accumulator, tf.IndexedSlices(increment, ids))
        self.assign_sub(variable, tf.IndexedSlices(lr * grad / (tf.sqrt(acc_rows) + self.epsilon), ids))


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

    def __init__(self, *args, row_tables: tuple[str, ...] = ("entity_embeddings",), **kwargs) -> None:
        super().__init__(*args, **kwargs)
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
            ids, grad = _summed_at_first(gradient, variable.shape[0], dtype)  # repeats: zero rows, no change
            increment = tf.reduce_mean(tf.square(grad), axis=-1)
            acc_rows = _rows(accumulator, ids) + increment
            self.assign_add(accumulator, tf.IndexedSlices(increment, ids))
            self.assign_sub(variable, tf.IndexedSlices(lr * grad / (tf.sqrt(acc_rows) + self.epsilon)[:, None], ids))
            return
        grad = tf.cast(gradient, dtype)
        acc = tf.convert_to_tensor(accumulator) + tf.reduce_mean(tf.square(grad), axis=-1)
        self.assign(accumulator, acc)
        self.assign_sub(variable, lr * grad / (tf.sqrt(acc) + self.epsilon)[:, None])

    def get_config(self) -> dict:
        return {**super().get_config(), "row_tables": list(self.row_tables)}


#: The class behind each concrete ``--optimizer`` name (``auto`` is resolved by `choose_optimizer`).
OPTIMIZER_CLASSES: dict[str, type[keras.optimizers.Optimizer]] = {
    "adam": FusedAdam,
    "lazy-adam": LazyAdam,
    "adagrad": LazyAdagrad,
    "row-adagrad": RowAdagrad,
}


def slot_floats(name: str, rows: int, width: int, entity_table: bool) -> int:
    """Floats of optimizer state a ``[rows, width]`` table costs under a concrete ``--optimizer``
    (what the memory guard counts before any table exists): two moments for Adam, one
    accumulator for Adagrad, one per row for the entity table under ``row-adagrad``."""
    if name == "row-adagrad" and entity_table:
        return rows
    return rows * width * (1 if name in ("adagrad", "row-adagrad") else 2)


def choose_optimizer(name: str, num_entities: int) -> str:
    """The concrete optimizer for a ``--optimizer`` value: ``auto`` becomes ``adam`` below
    `LAZY_MIN_ROWS` entity rows and ``lazy-adam`` from there on; other names are kept."""
    if name != "auto":
        return name
    return "lazy-adam" if num_entities >= LAZY_MIN_ROWS else "adam"


def make_optimizer(name: str, learning_rate: float) -> keras.optimizers.Optimizer:
    """A fresh optimizer for a concrete name (``adam``, ``lazy-adam``, ``adagrad`` or ``row-adagrad``).

    ``adagrad`` is `LazyAdagrad`: the same updates as dense Adagrad, with repeated ids
    handled correctly. ``row-adagrad`` is `RowAdagrad` (one accumulator per entity row,
    PyTorch-BigGraph's). ``adam`` is dense Adam, the paper's optimizer, as `FusedAdam`.
    """
    if name not in OPTIMIZER_CLASSES:
        names = ", ".join(map(repr, OPTIMIZER_CLASSES))
        raise ValueError(f"name must be one of {names} (resolve 'auto' first). Received: name={name!r}")
    return OPTIMIZER_CLASSES[name](learning_rate=learning_rate)
