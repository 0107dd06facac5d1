"""The optimizers (``--optimizer``): one module each, named by its file; sparse-aware, so
that a step costs the rows a batch uses, not the table.

``lazy_adam.py`` is ``--optimizer lazy-adam`` (`jobi_tf.runtime.plugins`): a Keras optimizer class
bound to the module's ``OPTIMIZER``, with a static ``slot_floats(rows, width, entity_table)``
(the floats of state a table costs it, which the memory guard counts before any table
exists). A new optimizer is a new module here and nothing else. ``auto`` is not a module:
`choose_optimizer` resolves it when the run starts.

Why the lazy ones: a table read with ``tf.gather`` gets a sparse gradient (`tf.IndexedSlices`: the rows
used and their gradients). Keras 3's Adam turns it into a dense ``[rows, width]`` tensor and
reads and writes every row of the table and of both moment tables each step
(keras-team/keras#19992; ``keras/src/optimizers/adam.py``, ``update_step``): one step on a
2M-row table then takes seconds, and step time grows with the number of entities.

How `LazyAdam` and `LazyAdagrad` update a sparse gradient (`_sparse`):

1. The gradients of a repeated id are summed (``tf.math.unsorted_segment_sum``): the same
   per-row gradient the dense tensor holds. `LazyAdam` then keeps each id once; the
   Adagrad ones keep the repeats as zero rows, whose additive update changes nothing.
2. Only those rows of the optimizer's slots are gathered, updated and scattered back.
3. Only those rows of the table change.

A dense gradient (a variable not read through a gather, or a table used whole, as in the
full-softmax loss) takes the dense update. Keras's ``apply`` passes a `tf.IndexedSlices`
through to ``update_step`` unchanged, as long as the optimizer has no ``clipvalue``,
``global_clipnorm``, ``loss_scale_factor`` or gradient accumulation (those may densify it;
the update is then the dense one, correct but not lazy); ``weight_decay`` would touch every
row every step.
"""

from __future__ import annotations

from typing import Any

import keras

from jobi_tf.config import LAZY_MIN_ROWS  # auto's threshold (bench/step_time_vs_size.py, docs/performance.md)
from jobi_tf.optimizers._sparse import unique_rows as _unique_rows  # noqa: F401 (jobi_tf.models.sharding imports it)
from jobi_tf.optimizers.adagrad import LazyAdagrad  # (the built-ins' names, where they were before the folder)
from jobi_tf.optimizers.adam import FusedAdam
from jobi_tf.optimizers.lazy_adam import LazyAdam
from jobi_tf.optimizers.row_adagrad import RowAdagrad
from jobi_tf.runtime import plugins

__all__ = [
    "FusedAdam",
    "LazyAdam",
    "LazyAdagrad",
    "RowAdagrad",
    "LAZY_MIN_ROWS",
    "OPTIMIZER_CLASSES",
    "names",
    "choose_optimizer",
    "make_optimizer",
    "slot_floats",
]


FRONT = plugins.Front("optimizer")
names = FRONT.names  # the concrete ``--optimizer`` choices (``auto`` aside): this folder's modules

#: The class behind each concrete ``--optimizer`` name (``auto`` is resolved by `choose_optimizer`).
OPTIMIZER_CLASSES: dict[str, type[keras.optimizers.Optimizer]] = FRONT.classes()


def slot_floats(name: str, rows: int, width: int, entity_table: bool) -> int:
    """Floats of optimizer state a ``[rows, width]`` table costs under a concrete ``--optimizer``
    (what the memory guard counts before any table exists): its class's ``slot_floats``."""
    return OPTIMIZER_CLASSES[name].slot_floats(rows, width, entity_table)


def choose_optimizer(name: str, num_entities: int, sharded: bool = False) -> str:
    """The concrete optimizer for a ``--optimizer`` value: ``auto`` becomes ``adam`` below
    `LAZY_MIN_ROWS` entity rows and ``lazy-adam`` from there on, and always on parameter
    servers (``sharded``), where dense Adam would move whole tables; other names are kept."""
    if name != "auto":
        return name
    return "lazy-adam" if sharded or num_entities >= LAZY_MIN_ROWS else "adam"


def make_optimizer(name: str, learning_rate: float, **settings: Any) -> keras.optimizers.Optimizer:
    """A fresh optimizer for a concrete name (one of `names`; resolve ``auto`` first), with
    those of ``settings`` its class lists in ``options`` (the others are dropped).

    ``adam`` is dense Adam, the paper's optimizer, as `FusedAdam`; ``adagrad`` is `LazyAdagrad`
    (dense Adagrad's updates, repeated ids handled correctly); ``row-adagrad`` is `RowAdagrad`
    (one accumulator per entity row, PyTorch-BigGraph's).
    """
    if name not in OPTIMIZER_CLASSES:
        choices = ", ".join(map(repr, OPTIMIZER_CLASSES))
        raise ValueError(f"name must be one of {choices} (resolve 'auto' first). Received: name={name!r}")
    cls = OPTIMIZER_CLASSES[name]
    taken = {k: v for k, v in settings.items() if k in getattr(cls, "options", ())}
    return cls(learning_rate=learning_rate, **taken)
