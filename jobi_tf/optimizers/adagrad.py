"""Adagrad as PyTorch's (kbc's), sparse rows updated lazily and dense ones in one fused kernel.

Adagrad has no decay, so the lazy update equals dense Adagrad on every row; it exists because
Keras's Adagrad squares each slice of a sparse gradient separately, which differs from dense
Adagrad when a batch repeats an id. A dense gradient (1-vs-all updates the whole entity
table) goes through TensorFlow's fused Adagrad kernel: one pass over the table instead of one
per Keras op (a dense 14,541 x 2,000 update took 68 ms with Keras's ops and 20 ms fused,
bench/adagrad_update.py).
"""

from __future__ import annotations

import keras
import tensorflow as tf

from jobi_tf.optimizers._sparse import slot_rows, summed_at_first

__all__ = ["LazyAdagrad"]


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
    gives kbc's (``--initial-accumulator-value 0``). The damping has a scale: a 1-vs-all
    gradient shrinks with the rows, the batch and the number of entities, so on a sparse graph
    whole epochs are damped (docs/studies/adagrad-start.md).

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

    options = ("initial_accumulator_value",)  # --initial-accumulator-value (jobi_tf.runtime.plugins)

    @staticmethod
    def slot_floats(rows: int, width: int, entity_table: bool) -> int:
        """Floats of state a ``[rows, width]`` table costs (the memory guard's count): one accumulator."""
        return rows * width

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
        ids, grad = summed_at_first(gradient, variable.shape[0], dtype)  # repeats: zero rows, no change
        # Add first, then read the rows back: a read of the rows before the add made XLA copy the
        # whole accumulator and table every step (167 ms against 5 ms a step at 1.85M x 200 floats,
        # docs/performance.md); the rows read back are the same sums.
        self.assign_add(accumulator, tf.IndexedSlices(tf.square(grad), ids))
        acc_rows = slot_rows(accumulator, ids)
        self.assign_sub(variable, tf.IndexedSlices(lr * grad / (tf.sqrt(acc_rows) + self.epsilon), ids))


OPTIMIZER = LazyAdagrad
