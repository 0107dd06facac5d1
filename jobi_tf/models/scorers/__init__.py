"""The scorers (``--model``): one module each, named by its file.

``complex.py`` is ``--model complex`` (`jobi_tf.runtime.plugins`): a `Scorer` subclass bound to the
module's ``SCORER``, whose ``kind`` is that name. A new scorer is a new module here and
nothing else: the flag, ``config.json``, the model, evaluation and export pick it up
(docs/extending.md walks through ``tucker.py``). The interface they implement, with the helpers they
share, is `jobi_tf.contracts.scorer` (a stage below the model: objectives and regularizers read it too).
"""

from __future__ import annotations

from jobi_tf.contracts.scorer import Scorer, heads_against_own_rows
from jobi_tf.models.scorers.complex import ComplEx  # (the built-ins' names, where they were before the folder)
from jobi_tf.models.scorers.distmult import DistMult
from jobi_tf.models.scorers.simple import SimplE
from jobi_tf.runtime import plugins

__all__ = [
    "Scorer",
    "DistMult",
    "ComplEx",
    "SimplE",
    "SCORERS",
    "names",
    "get_scorer",
    "check",
    "heads_against_own_rows",
]


FRONT = plugins.Front("scorer")
names = FRONT.names  # the ``--model`` choices: this folder's scorer modules
check = FRONT.check  # a run's ``--model`` checked (`jobi_tf.runtime.plugins.check`)

#: Every scorer of this folder by its ``--model`` name.
SCORERS: dict[str, type[Scorer]] = FRONT.classes()


def get_scorer(name: str | Scorer, dim: int | None = None) -> Scorer:
    """A new scorer called ``name`` (one of `names`) for rows of ``dim`` components; a
    `Scorer` instance (one of your own) is returned as is.

    Raises:
        ValueError: ``name`` is neither (the message lists the names).
    """
    if isinstance(name, Scorer):
        return name
    if not isinstance(name, str) or name not in SCORERS:
        raise ValueError(f"model must be one of {sorted(SCORERS)} or a Scorer. Received: model={name!r}")
    return SCORERS[name](dim=dim)
