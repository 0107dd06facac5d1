"""Keras callbacks that time ``fit`` from the inside (one iterator, no per-call start-up)."""

from __future__ import annotations

import time

import _common  # noqa: F401  (imports jobi_tf, which sets the allocator default, before Keras)
import keras


class BatchClock(keras.callbacks.Callback):
    """The clock after every batch (for `_steady.window_rates`)."""

    def __init__(self) -> None:
        super().__init__()
        self.ends: list[float] = []

    def on_train_batch_end(self, batch, logs=None):
        self.ends.append(time.perf_counter())
