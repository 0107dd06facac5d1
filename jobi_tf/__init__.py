"""jobi-tf: JoBi (joint model with biased negatives) knowledge-graph completion in TensorFlow/Keras.

The Python API (`jobi_tf.api`): ``load_dataset``, ``train`` → `Run`, ``load_run``; and
``train_from_config`` (a whole `jobi_tf.config.RunConfig` → metrics), what the CLI calls; ``advise``
(1-vs-all or sampled JoBi for a graph and a budget, measured on this CPU).

Importing the package sets TensorFlow's pooled CPU allocator as the default before
TensorFlow starts (see `jobi_tf.runtime.tf_settings`); it does not import TensorFlow itself, so
``jobi-tf --help`` stays fast.
"""

from __future__ import annotations

from importlib import metadata as _metadata

from jobi_tf.runtime.tf_settings import use_pooled_cpu_allocator as _use_pooled_cpu_allocator

_use_pooled_cpu_allocator()

try:
    __version__ = _metadata.version("jobi-tf")
except _metadata.PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"

from jobi_tf.api import (  # noqa: E402  (after the allocator)
    Advice,
    Dataset,
    Embeddings,
    Run,
    advise,
    load_dataset,
    load_run,
    train,
    train_from_config,
)

__all__ = [
    "__version__",
    "Dataset",
    "Embeddings",
    "Run",
    "load_dataset",
    "load_run",
    "train",
    "train_from_config",
    "advise",
    "Advice",
]
