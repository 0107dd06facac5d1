"""Regularizers: a penalty on the rows a training batch was scored with.

Each module of this folder is one regularizer, named by its file (``n3.py`` is
``--regularizer n3``; `jobi_tf.runtime.plugins`): a `Regularizer` subclass bound to the module's
``REGULARIZER``. A new one is a new module here and nothing else: the flag, ``config.json``,
the model and every regime pick it up.

A regularizer sees the batch's `jobi_tf.contracts.scored_batch.Factors` (the positive's head and tail
rows, the relation rows its scores used, the sampled candidates' rows) and returns one value
per positive; the model weighs their mean by ``--regularization`` (kbc's ``Regularizer``
consumes its model's factors the same way).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from jobi_tf.runtime import plugins

if TYPE_CHECKING:
    import tensorflow as tf

    from jobi_tf.config import RunConfig
    from jobi_tf.contracts.scored_batch import Factors

__all__ = ["Regularizer", "get", "names", "check"]


class Regularizer:
    """A penalty per positive over the rows its scores used.

    Subclasses implement `penalty` and may name, in ``options``, the `jobi_tf.config.TrainConfig`
    fields they read besides ``regularization`` (their constructor's keyword arguments); a
    run that sets such a field without choosing a regularizer that reads it is refused.
    """

    options: ClassVar[tuple[str, ...]] = ()

    def __init__(self, **options: Any) -> None:
        unknown = sorted(set(options) - set(self.options))
        if unknown:
            raise ValueError(f"{type(self).__name__} takes no {unknown}. Received: {options!r}")
        self.settings = options

    def penalty(self, factors: Factors) -> tf.Tensor:
        """``[B]``: the penalty of each positive (unweighted)."""
        raise NotImplementedError

    @classmethod
    def check(cls, cfg: RunConfig) -> None:
        """Refuse, as a `jobi_tf.runtime.errors.ConfigError`, a run this regularizer cannot train."""

    @classmethod
    def from_settings(cls, settings: Any) -> Regularizer:
        """The regularizer with its ``options`` read from a `jobi_tf.config.TrainConfig`."""
        return cls(**{name: getattr(settings, name) for name in cls.options})

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self.settings.items())})"


FRONT = plugins.Front("regularizer")
names = FRONT.names  # the ``--regularizer`` choices: this folder's modules
check = FRONT.check  # a run's ``--regularizer`` checked (`jobi_tf.runtime.plugins.check`)


def get(name: str | Regularizer, **settings: Any) -> Regularizer:
    """The regularizer ``name`` with the settings it takes (a model passes every regularizer
    setting it holds; the others are dropped); a `Regularizer` is returned as is."""
    if isinstance(name, Regularizer):
        return name
    return FRONT.build(name, **settings)
