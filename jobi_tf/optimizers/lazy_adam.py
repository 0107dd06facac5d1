"""Adam that reads and writes only the rows a batch used (TF-Addons' LazyAdam semantics).

A row's moments decay only on the steps that use it, while the bias correction uses the
global step count. A row used by every step is updated as dense Adam updates it (to float
rounding); a row a step does not use keeps its weights and moments exactly, where dense Adam
would still move it by its decaying momentum. ``--optimizer auto`` picks it from
`jobi_tf.config.LAZY_MIN_ROWS` entities on.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from jobi_tf.optimizers._sparse import slot_rows, unique_rows
from jobi_tf.optimizers.adam import FusedAdam

__all__ = ["LazyAdam"]


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
        ids, grad = unique_rows(gradient, variable.shape[0], dtype)
        index = self._get_variable_index(variable)
        m, v = self._momentums[index], self._velocities[index]
        # The expressions of Keras's dense Adam, so a touched row follows it to float rounding.
        m_rows = slot_rows(m, ids)
        m_rows = m_rows + (grad - m_rows) * (1 - self.beta_1)
        v_rows = slot_rows(v, ids)
        v_rows = v_rows + (tf.square(grad) - v_rows) * (1 - self.beta_2)
        self.assign(m, tf.IndexedSlices(m_rows, ids))
        self.assign(v, tf.IndexedSlices(v_rows, ids))
        self.assign_sub(variable, tf.IndexedSlices(m_rows * alpha / (tf.sqrt(v_rows) + self.epsilon), ids))


OPTIMIZER = LazyAdam
