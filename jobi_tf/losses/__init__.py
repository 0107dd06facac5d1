"""The triple head's losses (``--loss``): one module each, named by its file.

``full_softmax.py`` is ``--loss full-softmax`` (`jobi_tf.runtime.plugins`): an
`jobi_tf.contracts.objectives.Objective` subclass bound to the module's ``LOSS``. The class says which
regime trains it (``regime``: sampled negatives, 1-vs-all or k-vs-all, `jobi_tf.regimes`),
which features it reads and which `jobi_tf.config.TrainConfig` fields it takes
(``options``); a new loss is a new module here and nothing else. The pair head's loss
(`jobi_tf.contracts.objectives.PairBCE`) and relation prediction are not ``--loss`` choices: they
live in `jobi_tf.contracts.objectives`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from jobi_tf.runtime import plugins

if TYPE_CHECKING:
    from jobi_tf.contracts.objectives import Objective

__all__ = ["names", "loss_class", "get", "name_of", "check"]


FRONT = plugins.Front("loss")
names = FRONT.names  # the ``--loss`` choices: this folder's modules
loss_class = FRONT.load  # the objective class of a ``--loss`` name
check = FRONT.check  # a run's ``--loss`` checked (`jobi_tf.runtime.plugins.check`)


def get(name: str | Objective, **settings: Any) -> Objective:
    """The triple head's objective for a ``--loss`` name, given the
    `jobi_tf.config.TrainConfig` settings a model holds (``label_smoothing=...``); an
    `Objective` is returned as is.

    Raises:
        ValueError: a setting moved from its off value that this loss does not take (the
            message names the losses that do).
    """
    from jobi_tf.contracts.objectives import Objective  # (the base class imports TensorFlow)

    if isinstance(name, Objective):
        return name
    wrong = plugins.misplaced("loss", name, settings)
    if wrong:
        option, takers = wrong
        raise ValueError(f"{option} needs loss={' or '.join(map(repr, takers))}. Received: loss={name!r}")
    return FRONT.build(name, **settings)


def name_of(objective: Objective) -> str | None:
    """The ``--loss`` name of ``objective``'s class (None for an objective of your own)."""
    return next((n for n in names() if type(objective) is loss_class(n)), None)
