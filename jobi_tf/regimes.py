"""Training regimes: what a batch holds and how many batches make an epoch.

The triple head's objective names its regime (`jobi_tf.objectives.Objective.regime`, so
``--loss`` picks it), and the regime is the one place that knows, for its kind of training,
which pipeline builds the batches (`jobi_tf.sampling`), how an epoch is counted and which
settings have no meaning there:

* ``sampled``: batches of training triples, each with sampled (biased) negatives and, for
  the pair head, their pair labels; an epoch visits every training triple once.
* ``1-vs-all``: batches of training triples, every entity a candidate for both directions
  (the pair head reads dense slot rows); an epoch as above.
* ``k-vs-all``: batches of distinct training queries with their answer rows; an epoch
  visits every query once.

`check` runs every check a run's settings get beyond their own ranges (those of the loss,
the regularizer and the regime), before anything is written.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import tensorflow as tf

from jobi_tf import losses, plugins
from jobi_tf.config import RunConfig, TrainConfig
from jobi_tf.data.index import KGIndex
from jobi_tf.errors import ConfigError
from jobi_tf.objectives import K_VS_ALL, ONE_VS_ALL, SAMPLED, Objective
from jobi_tf.sampling import (
    EpochRows,
    TrainingQueries,
    make_query_dataset,
    make_train_dataset,
    query_steps_per_epoch,
    steps_per_epoch,
)

__all__ = ["Regime", "REGIMES", "regime_of", "resolve", "check"]


class Regime:
    """How one kind of training builds its batches.

    ``options`` lists the `jobi_tf.config.TrainConfig` fields only some regimes read; a run
    that moves one from its default under a regime that does not read it is refused.
    """

    name: ClassVar[str]
    options: ClassVar[tuple[str, ...]] = ()

    def steps(self, index: KGIndex, cfg: RunConfig, rows: EpochRows | None = None) -> int:
        """Batches per epoch."""
        return steps_per_epoch(index, cfg.sampler.batch_size, rows)

    def dataset(
        self, index: KGIndex, cfg: RunConfig, reads: set[str], rows: EpochRows | None = None, **where
    ) -> tf.data.Dataset:
        """The batches from ``where`` (``seed``, ``initial_epoch``, ``initial_step``, ``epochs``)
        on, holding the features in ``reads`` (what the model's objectives read)."""
        raise NotImplementedError

    def check(self, cfg: RunConfig) -> None:
        """Refuse, as a `jobi_tf.errors.ConfigError`, what this regime cannot train."""


class Sampled(Regime):
    name = SAMPLED
    options = ("pair_every",)

    def dataset(self, index, cfg, reads, rows=None, **where):
        labels = {"pair_labels": "pair_labels" in reads, "pair_every": cfg.train.pair_every}
        return make_train_dataset(index, cfg.sampler, rows=rows, **labels, **where)

    def check(self, cfg):
        if cfg.model.reciprocal and cfg.sampler.corrupt_side != "per-positive":
            # A softmax mixing head and tail corruptions would compare scores of two
            # different queries (forward and inverse relation) against one positive.
            raise ConfigError("reciprocal", f"needs --corrupt-side per-positive with --loss {cfg.train.loss}")
        _check_pair_every(cfg)


def _check_pair_every(cfg: RunConfig) -> None:
    """The pair head's every n-th positive keeps its chunk's candidates only when n divides
    every chunk (`jobi_tf.scored_batch.every_nth_positive`)."""
    every = cfg.train.pair_every
    if every == 1:
        return
    if not cfg.model.joint:
        raise ConfigError("pair_every", "needs --joint (it thins the pair head's positives)")
    chunks = {
        "--batch-size": cfg.sampler.batch_size,
        "--shared-negatives": cfg.sampler.shared_negatives,
        "--biased-chunk": cfg.sampler.biased_chunk,
    }
    for flag, size in chunks.items():
        if size and size % every:
            raise ConfigError("pair_every", f"must divide {flag} {size}. Received: {every}")


class _EveryEntity(Regime):
    """Every entity is a candidate: the sampler's negatives have no meaning."""

    options = ("matmul_dtype",)

    def check(self, cfg):
        for name in ("shared_negatives", "biased_chunk"):  # None: chosen as 0 here (`resolve`)
            if getattr(cfg.sampler, name):
                raise ConfigError(name, f"has no meaning with --loss {cfg.train.loss}")


class OneVsAll(_EveryEntity):
    name = ONE_VS_ALL

    def dataset(self, index, cfg, reads, rows=None, **where):
        slot_rows = "pair_labels_tail" in reads
        return make_train_dataset(index, cfg.sampler, full_softmax=True, slot_rows=slot_rows, rows=rows, **where)


class KvsAll(_EveryEntity):
    name = K_VS_ALL

    def steps(self, index, cfg, rows=None):
        return query_steps_per_epoch(TrainingQueries.from_index(index), cfg.sampler.batch_size)

    def dataset(self, index, cfg, reads, rows=None, **where):
        return make_query_dataset(index, cfg.sampler, joint="query_pair_labels" in reads, **where)

    def check(self, cfg):
        super().check(cfg)
        if cfg.train.init_from is not None:
            raise ConfigError(
                "init_from", f"is not supported with --loss {cfg.train.loss} (its epochs are queries, not triples)"
            )


REGIMES: dict[str, Regime] = {r.name: r for r in (Sampled(), OneVsAll(), KvsAll())}


def regime_of(loss: str | Objective) -> Regime:
    """The regime that trains ``loss`` (a ``--loss`` name or an objective)."""
    cls = type(loss) if isinstance(loss, Objective) else losses.loss_class(loss)
    return REGIMES[cls.regime]


def resolve(cfg: RunConfig, replicas: int = 1) -> RunConfig:
    """``cfg`` with the sampler's settings left to the run (``None``) chosen for its loss's
    regime and ``replicas`` (`jobi_tf.config.SamplerConfig.resolved`): what ``config.json``
    records and what trains."""
    return cfg.resolved(sampled=regime_of(cfg.train.loss).name == SAMPLED, replicas=replicas)


def check(cfg: RunConfig) -> None:
    """Every check a run's settings get beyond their own ranges: each chosen plug-in's (loss,
    regularizer, scorer: `jobi_tf.plugins.check_all`) and the regime's. Raises
    `jobi_tf.errors.ConfigError` naming the flag."""
    plugins.check_all(cfg)
    regime = regime_of(cfg.train.loss)
    defaults = {f.name: f.default for f in dataclasses.fields(TrainConfig)}
    for option in sorted({o for r in REGIMES.values() for o in r.options} - set(regime.options)):
        if getattr(cfg.train, option) != defaults[option]:
            takers = [n for n in losses.names() if option in regime_of(n).options]
            raise ConfigError(option, f"needs --loss {' or '.join(takers)}")
    regime.check(cfg)
