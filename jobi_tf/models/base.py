"""`DistributedModel`: a Keras model that trains under every ``tf.distribute`` strategy here.

Keras's ``fit`` needs two adjustments for this package's models under a strategy (both are
Keras behaviours, not this model's), kept apart from the model so that it holds its heads only.
"""

from __future__ import annotations

import keras
import tensorflow as tf

__all__ = ["DistributedModel"]


class DistributedModel(keras.Model):
    """``keras.Model`` with the step and build hooks a strategy needs (see each method)."""

    def train_step(self, data):
        """Keras's own step; across workers, its scalar logs come back as ``[1]`` vectors.

        Why: under a multi-worker strategy Keras's ``fit`` averages the replicas' logs with
        ``strategy.reduce("MEAN", value, axis=0)``, which fails on a scalar ("Invalid
        reduction dimension 0 for input with 0 dimensions"); a ``[1]`` vector reduces to the
        scalar every callback expects.
        """
        logs = super().train_step(data)
        strategy = tf.distribute.get_strategy()
        if getattr(strategy.extended, "_in_multi_worker_mode", lambda: False)():
            logs = {k: tf.reshape(v, [1]) if v.shape.rank == 0 else v for k, v in logs.items()}
        return logs

    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        """Under a strategy, Keras's ``fit`` averages the first batch over the replicas
        just to read its shapes, which fails on the sampler's bool features (``AddN`` of
        bool). This model is built in ``__init__``: only the optimizer may still need it."""
        if self.optimizer is not None and not self.optimizer.built:
            with self.distribute_strategy.scope():
                self.optimizer.build(self.trainable_variables)
