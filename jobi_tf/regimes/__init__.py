"""Training regimes: what a batch holds and how many batches make an epoch.

Each module of this folder is one regime, named by its file (``k_vs_all.py`` is ``k-vs-all``;
found as losses and regularizers are, `jobi_tf.runtime.plugins`): a `Regime` subclass bound to the
module's ``REGIME``. The triple head's objective names its regime
(`jobi_tf.contracts.objectives.Objective.regime`, so ``--loss`` picks it):

* ``sampled``: batches of training triples, each with sampled (biased) negatives and, for
  the pair head, their pair labels; an epoch visits every training triple once.
* ``1-vs-all``: batches of training triples, every entity a candidate for both directions
  (the pair head reads dense slot rows); an epoch as above.
* ``k-vs-all``: batches of distinct training queries with their answer rows; an epoch
  visits every query once.

A regime declares what it is (which settings it reads, whether negatives are sampled, what
an epoch visits); the checks that follow from that live with every other check in
`jobi_tf.regimes.checks` (`check` is that module's). What its batches hold is the run's
`jobi_tf.sampling.batch_plan.BatchPlan`.
"""

from __future__ import annotations

from typing import ClassVar

import tensorflow as tf

from jobi_tf import losses
from jobi_tf.config import RunConfig
from jobi_tf.contracts.objectives import SAMPLED, Objective
from jobi_tf.data.index import KGIndex
from jobi_tf.regimes.checks import check
from jobi_tf.runtime import plugins
from jobi_tf.sampling.batch_plan import BatchPlan
from jobi_tf.sampling.pipelines import EpochRows, steps_per_epoch, triple_batches

__all__ = ["Regime", "REGIMES", "names", "get", "regime_of", "resolve", "check"]


class Regime:
    """How one kind of training builds its batches; subclasses declare what they are.

    Attributes:
        name: the regime's name (its module's, with ``-`` for ``_``).
        options: the `jobi_tf.config.TrainConfig` fields only some regimes read; a run that
            moves one from its default under a regime that does not read it is refused.
        samples_negatives: the sampler's negatives are candidates (``--shared-negatives``,
            ``--biased-chunk``, ``--corrupt-side`` mean something).
        epoch_of: what an epoch visits, ``"triples"`` or ``"queries"`` (a warm start, which
            replays triples, needs ``"triples"``).
    """

    name: ClassVar[str]
    options: ClassVar[tuple[str, ...]] = ()
    samples_negatives: ClassVar[bool] = False
    epoch_of: ClassVar[str] = "triples"

    def steps(self, index: KGIndex, plan: BatchPlan, rows: EpochRows | None = None) -> int:
        """Batches per epoch."""
        return steps_per_epoch(index, plan.sampler.batch_size, rows)

    def dataset(self, index: KGIndex, plan: BatchPlan, rows: EpochRows | None = None, **where) -> tf.data.Dataset:
        """``plan``'s batches from ``where`` (``seed``, ``initial_epoch``, ``initial_step``,
        ``epochs``) on; by default batches of training triples (`jobi_tf.sampling.pipelines.triple_batches`)."""
        return triple_batches(index, plan, rows=rows, **where)

    @classmethod
    def check(cls, cfg: RunConfig) -> None:
        """Refuse, as a `jobi_tf.runtime.errors.ConfigError`, what this regime cannot train beyond what
        its declarations imply (`jobi_tf.regimes.checks` runs this last)."""


FRONT = plugins.Front("regime")
names = FRONT.names  # the regimes: this folder's modules


def get(name: str) -> Regime:
    """The regime called ``name``."""
    return REGIMES[name]


def regime_of(loss: str | Objective) -> Regime:
    """The regime that trains ``loss`` (a ``--loss`` name or an objective)."""
    cls = type(loss) if isinstance(loss, Objective) else losses.loss_class(loss)
    return REGIMES[cls.regime]


def resolve(cfg: RunConfig, replicas: int = 1) -> RunConfig:
    """``cfg`` with the sampler's settings left to the run (``None``) chosen for its loss's
    regime and ``replicas`` (`jobi_tf.config.SamplerConfig.resolved`): what ``config.json``
    records and what trains."""
    return cfg.resolved(sampled=regime_of(cfg.train.loss).name == SAMPLED, replicas=replicas)


#: Every regime, by name (loaded now: each is a few lines, and `regime_of` is on every run's path).
REGIMES: dict[str, Regime] = {name: cls() for name, cls in FRONT.classes().items()}
