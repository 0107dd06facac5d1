"""The model stage: scorers (`scorers/`, one module per ``--model``), the tables and their
queries (`tables`), row-sharded tables for parameter servers (`sharding`) and the JoBi Keras
model (`jobi`). What its heads are trained to do, and the scores they share, are contracts
below it (`jobi_tf.contracts`).

The names below load on first use, so that importing one module of this package (evaluation
reads `tables`) does not build the model's whole import chain.
"""

import importlib

__all__ = ["JoBiModel", "SCORERS", "Scorer", "get_scorer"]
_HOMES = {"JoBiModel": "jobi_tf.models.jobi", "SCORERS": "jobi_tf.models.scorers", "Scorer": "jobi_tf.models.scorers",
          "get_scorer": "jobi_tf.models.scorers"}  # fmt: skip


def __getattr__(name: str):
    if name in _HOMES:
        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError(f"module 'jobi_tf.models' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
