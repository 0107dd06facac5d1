"""Every check a run's config gets beyond its fields' own ranges, in one place.

A section's ``__post_init__`` checks each field alone (a type, a range, a choice) and the
sampler's chunks against its own batch; everything that relates settings of different
sections, or the settings to where the run trains, is here, each as one function whose
`jobi_tf.runtime.errors.ConfigError` names the flag to change in one line:

* `check`: the settings as such: every chosen plug-in's and the regime's (plug-ins
  refuse what they alone know in their own ``check``), ``--pair-every``, ``--reciprocal``.
* `check_placement`: the settings on ``replicas`` devices: each replica's slice of the batch
  must hold whole groups of every feature that has a row per group (`jobi_tf.sampling.batch_plan`).
* `check_parameter_server`: what tables sharded over parameter servers cannot train.
* `check_memory`: the tables and optimizer slots against this machine's memory.

`check_run` runs them in the order a run needs; `jobi_tf.training.trainer.train` calls it before
anything is written.
"""

from __future__ import annotations

import dataclasses
import os

from jobi_tf import losses
from jobi_tf.config import RunConfig, TrainConfig
from jobi_tf.runtime import plugins
from jobi_tf.runtime.errors import ConfigError
from jobi_tf.sampling.batch_plan import BatchPlan

__all__ = ["check", "check_run", "check_placement", "check_parameter_server", "check_memory"]


def check_run(cfg: RunConfig, replicas: int = 1, sharded: bool = False) -> None:
    """Every check of a resolved run that trains on ``replicas`` devices (``sharded``: tables
    on parameter servers)."""
    check(cfg)
    if sharded:
        check_parameter_server(cfg)
    check_placement(cfg, replicas)


def check(cfg: RunConfig) -> None:
    """The run's settings together: each chosen plug-in's own check (loss, regularizer,
    scorer, optimizer: `jobi_tf.runtime.plugins.check_all`), the settings only some regimes read,
    then what the regime's declarations imply and its own check."""
    plugins.check_all(cfg)
    _check_relation_query(cfg)
    regime = _regime(cfg)
    _check_regime_options(cfg, regime)
    if regime.samples_negatives:
        _check_reciprocal_sides(cfg)
        _check_pair_every(cfg)
        if cfg.sampler.logq_correction and cfg.train.loss != "sampled-softmax":
            raise ConfigError("logq_correction", "needs --loss sampled-softmax (a correction of a softmax's logits)")
        if cfg.train.slot_prior_in_loss and cfg.train.loss != "sampled-softmax":
            raise ConfigError("slot_prior_in_loss", "needs --loss sampled-softmax (an offset of a softmax's logits)")
    else:
        for name in ("shared_negatives", "biased_chunk"):  # None: chosen as 0 (`SamplerConfig.resolved`)
            if getattr(cfg.sampler, name):
                raise ConfigError(name, f"has no meaning with --loss {cfg.train.loss}")
        for name, default in (("negative_distribution", "uniform"), ("biased_draw", "distinct")):
            if getattr(cfg.sampler, name) != default:
                raise ConfigError(name, f"has no meaning with --loss {cfg.train.loss} (it draws no negatives)")
    if regime.epoch_of != "triples" and cfg.train.init_from is not None:
        epochs = f"its epochs are {regime.epoch_of}, not triples"
        raise ConfigError("init_from", f"is not supported with --loss {cfg.train.loss} ({epochs})")
    regime.check(cfg)


def _regime(cfg: RunConfig):
    """The class of the run's regime (`jobi_tf.regimes`, loaded by name: that package imports this one)."""
    return plugins.load("regime", losses.loss_class(cfg.train.loss).regime)


def _check_regime_options(cfg: RunConfig, regime) -> None:
    """A `jobi_tf.config.TrainConfig` field moved from its default that only other regimes read."""
    defaults = {f.name: f.default for f in dataclasses.fields(TrainConfig)}
    readers = {name: plugins.load("regime", name) for name in plugins.names("regime")}
    for option in sorted({o for r in readers.values() for o in r.options} - set(regime.options)):
        if getattr(cfg.train, option) != defaults[option]:
            takers = [n for n in losses.names() if option in readers[losses.loss_class(n).regime].options]
            raise ConfigError(option, f"needs --loss {' or '.join(takers)}")


def _check_reciprocal_sides(cfg: RunConfig) -> None:
    # A softmax mixing head and tail corruptions would compare scores of two different
    # queries (forward and inverse relation) against one positive.
    if cfg.model.reciprocal and cfg.sampler.corrupt_side != "per-positive":
        raise ConfigError("reciprocal", f"needs --corrupt-side per-positive with --loss {cfg.train.loss}")


def _check_pair_every(cfg: RunConfig) -> None:
    """The pair head's every n-th positive keeps its chunk's candidates only when n divides
    every chunk (`jobi_tf.contracts.scored_batch.every_nth_positive`)."""
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


def _check_relation_query(cfg: RunConfig) -> None:
    """Relation prediction scores relations through the scorer's ``relation_query``, which a
    scorer may leave out (`jobi_tf.contracts.scorer.Scorer.has_relation_query`)."""
    name = cfg.model.model
    if cfg.train.relation_prediction and name in plugins.names("scorer"):
        if not plugins.load("scorer", name).has_relation_query():
            raise ConfigError("relation_prediction", f"the {name} scorer has no relation query; leave it at 0")


def check_placement(cfg: RunConfig, replicas: int) -> None:
    """Each replica must get an equal slice of the batch holding whole groups of positives.

    Why: a strategy splits every feature of a batch into equal slices along its rows; each
    replica averages its own slice's loss and the strategy sums the replicas' gradients,
    which equals the global batch's mean only for equal slices. Features with a row per
    group of positives (a chunk's shared negatives, a biased run's, the pair head's every
    n-th positive: `jobi_tf.sampling.batch_plan.BatchPlan.row_units`) split with their positives only
    when a slice holds whole groups. Also: TensorFlow 2.21 fails in a multi-step loop across
    replicas.
    """
    if replicas == 1:
        return
    if cfg.train.steps_per_execution > 1:
        raise ConfigError("steps_per_execution", "must be 1 with several replicas (--strategy mirrored/multi-worker)")
    batch = cfg.sampler.batch_size
    for name, unit in BatchPlan.for_run(cfg.sampler, cfg.train, joint=cfg.model.joint).row_units().items():
        if batch % (replicas * unit):
            what = f"{replicas} replicas" + (f" x --{name.replace('_', '-')} {unit}" if name != "batch_size" else "")
            raise ConfigError("batch_size", f"must be a multiple of {replicas * unit} ({what}). Received: {batch}")


def check_parameter_server(cfg: RunConfig) -> None:
    """Refuse what tables sharded over parameter servers cannot train (`jobi_tf.distributed.ps_training`)."""
    if not _regime(cfg).samples_negatives:
        raise ConfigError(
            "loss",
            f"{cfg.train.loss} scores every entity each step; --strategy parameter-server trains sampled losses",
        )
    train = cfg.train
    if train.relation_prediction:
        raise ConfigError(
            "relation_prediction", "reads the whole relation table each step; not available with parameter servers"
        )
    if train.optimizer == "adam":
        raise ConfigError(
            "optimizer",
            "dense adam moves every row of every table each step (whole tables over the network); "
            "use lazy-adam or adagrad with --strategy parameter-server",
        )
    if train.optimizer == "row-adagrad":
        raise ConfigError(
            "optimizer", "row-adagrad is not available with --strategy parameter-server; use lazy-adam or adagrad"
        )
    if train.init_from:
        raise ConfigError("init_from", "warm starts are not available with --strategy parameter-server")
    if train.steps_per_execution > 1:
        raise ConfigError(
            "steps_per_execution", "has no effect with --strategy parameter-server (workers run one step per call)"
        )


def check_memory(cfg: RunConfig, num_entities: int, num_relations: int) -> None:
    """Refuse a model whose tables cannot fit this machine's memory, before allocating them.

    Why: ``--dim 1e9`` would otherwise end in an out-of-memory kill or a TensorFlow
    traceback. Counted: the entity and relation tables and the optimizer's state
    (`jobi_tf.optimizers.slot_floats`, for a concrete ``--optimizer``), float32.
    """
    from jobi_tf.models.scorers import get_scorer  # (TensorFlow: only when a run starts)
    from jobi_tf.optimizers import slot_floats

    scorer = get_scorer(cfg.model.model)  # no dim: widths only, no weights made for a check
    relation_tables = (2 if cfg.model.joint else 1) * (2 if cfg.model.reciprocal else 1)
    entity = (num_entities, scorer.entity_width(cfg.model.dim))
    relation = (relation_tables * num_relations, scorer.relation_width(cfg.model.dim))
    name = cfg.train.optimizer
    floats = entity[0] * entity[1] + slot_floats(name, *entity, entity_table=True)
    floats += relation[0] * relation[1] + slot_floats(name, *relation, entity_table=False)
    need = 4 * floats
    try:
        have = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return
    if need > have:
        raise ConfigError(
            "dim",
            f"the tables and optimizer slots of {num_entities} entities at --dim {cfg.model.dim} need "
            f"{need / 2**30:.1f} GiB, more than this machine's {have / 2**30:.1f} GiB",
        )
