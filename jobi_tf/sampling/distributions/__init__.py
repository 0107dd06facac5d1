"""Negative distributions (``--negative-distribution``): how a negative that is not biased picks
its entity. One module each, named by its file (`jobi_tf.runtime.plugins`): a
`NegativeDistribution` subclass bound to the module's ``DISTRIBUTION``.

A distribution is a draw and its log-probability: ``draw(shape, seed)`` gives int32 entity ids
(stateless: the same ``seed`` draws the same ids), and ``log_q()`` each entity's
``log(Q(e) * E)``, the log of its draw probability over a uniform draw's, which
``--logq-correction`` subtracts from a softmax's logits (None: a uniform draw, nothing to
correct). A new distribution is one module here (docs/extending.md).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from jobi_tf.data.index import KGIndex
from jobi_tf.runtime import plugins
from jobi_tf.runtime.types import HEAD, TAIL

__all__ = ["NegativeDistribution", "names", "get_distribution", "training_ends"]


class NegativeDistribution:
    """Interface of a negative distribution, built once per run from its graph.

    Args:
        index: the graph; a distribution reads its training triples (degrees) here, once.
    """

    kind: str | None = None

    def __init__(self, index: KGIndex) -> None:
        self.num_entities = index.num_entities

    @classmethod
    def check(cls, cfg) -> None:
        """Refuse, as a `jobi_tf.runtime.errors.ConfigError`, settings this draw cannot serve
        (`jobi_tf.runtime.plugins.check`); called before anything is written."""

    def draw(self, shape: tf.Tensor, seed: tf.Tensor) -> tf.Tensor:
        """int32 entity ids of ``shape``, drawn with the stateless ``seed``."""
        raise NotImplementedError

    def log_q(self) -> np.ndarray | None:
        """float32 ``(E,)``: ``log(Q(e) * E)`` of every entity; None for a uniform draw."""
        raise NotImplementedError

    def uniform(self, shape: tf.Tensor, seed: tf.Tensor) -> tf.Tensor:
        """Entities drawn uniformly: the building block most draws mix in."""
        return tf.random.stateless_uniform(shape, seed, minval=0, maxval=self.num_entities, dtype=tf.int32)


def training_ends(index: KGIndex) -> np.ndarray:
    """int32: every training triple's head, then every tail. A uniform pick among them is a pick
    in proportion to degree; their counts are the degrees."""
    train = index.train
    return np.concatenate([train[:, HEAD], train[:, TAIL]]).astype(np.int32)


FRONT = plugins.Front("negatives")
names = FRONT.names  # the ``--negative-distribution`` choices: this folder's modules


def get_distribution(name: str, index: KGIndex) -> NegativeDistribution:
    """The distribution ``name`` (one of `names`) built for ``index``."""
    return FRONT.load(name)(index)
