"""Keep a caller's global random states across jobi-tf's work.

Why: training seeds every global generator (Keras's ``set_random_seed``, for reproducible
initial weights), and building a model draws from them; a program that calls `jobi_tf.train`
or `jobi_tf.load_run` must not see its own draws change because of it.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator

import numpy as np
import tensorflow as tf

__all__ = ["caller_random_state_kept"]


@contextlib.contextmanager
def caller_random_state_kept() -> Iterator[None]:
    """Run the block, then give Python's, NumPy's, TensorFlow's and Keras's global generators
    back the states they had before it."""
    from keras.src.backend.common import global_state
    from keras.src.random import seed_generator
    from keras.src.utils.rng_utils import GLOBAL_RANDOM_SEED
    from tensorflow.python.eager import context

    python_state, numpy_state = random.getstate(), np.random.get_state()
    tf_seed = context.global_seed()
    keras_seed = global_state.get_global_attribute(GLOBAL_RANDOM_SEED)
    keras_generator = global_state.get_global_attribute(seed_generator.GLOBAL_SEED_GENERATOR)
    try:
        yield
    finally:
        random.setstate(python_state)
        np.random.set_state(numpy_state)
        tf.random.set_seed(tf_seed)
        global_state.set_global_attribute(GLOBAL_RANDOM_SEED, keras_seed)
        global_state.set_global_attribute(seed_generator.GLOBAL_SEED_GENERATOR, keras_generator)
