"""Training runs: data → model → ``model.fit`` with callbacks → metrics.json.

A run lives in a run folder (`jobi_tf.config.runs.RunFolder`: config, vocabularies, checkpoint,
best weights, metrics, TensorBoard logs), which is enough to resume, evaluate or export it.

The loop is Keras's own ``fit``; behaviour is added by callbacks: `EvaluationCallback`
(filtered validation every ``eval_every`` epochs, early stopping on the monitored metric,
best weights, resumable checkpoint), `StopGuard` (signals, NaN), `Throughput`,
`jobi_tf.training.summaries.RunSummaries` (TensorBoard) and `jobi_tf.training.stalls` (a run that has not
started to learn says so: at each epoch's end, and with ``--first-check-steps`` early in the first).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import signal
import sys
from pathlib import Path

import keras
import tensorflow as tf

from jobi_tf import regimes
from jobi_tf.config import RunConfig, TrainConfig
from jobi_tf.config.runs import RunFolder
from jobi_tf.data.index import KGIndex
from jobi_tf.data.vocab import Vocab
from jobi_tf.datasets.loading import load_index
from jobi_tf.distributed import ps_training
from jobi_tf.distributed.strategy import configure_devices, is_chief, make_strategy, num_replicas, weights_digest
from jobi_tf.evaluation.ranking import FilteredEvaluator, validation_sample
from jobi_tf.growth.warm_start import carry_over, plan_growth
from jobi_tf.models import JoBiModel
from jobi_tf.models.neighbourhood import Neighbourhood
from jobi_tf.optimizers import choose_optimizer
from jobi_tf.optimizers import make_optimizer as _new_optimizer
from jobi_tf.regimes import checks
from jobi_tf.runtime import plugins
from jobi_tf.runtime.atomic import disk_errors, write_json_atomic
from jobi_tf.runtime.errors import TrainingStopped
from jobi_tf.runtime.rng import caller_random_state_kept
from jobi_tf.runtime.runlock import RunLock
from jobi_tf.sampling.batch_plan import BatchPlan
from jobi_tf.sampling.pipelines import EpochRows
from jobi_tf.training import stalls, summaries
from jobi_tf.training.callbacks import (
    LoopState,
    PeriodicCheckpoint,
    StopGuard,
    Throughput,
    checkpoint_interrupted,
    stop_on_signals,
)
from jobi_tf.training.checkpoints import load_weights, save_weights
from jobi_tf.training.fitting import fit_what_is_left, keras_fit
from jobi_tf.training.prior_weight import choose_prior_weight
from jobi_tf.training.products import check_matmul_dtype, resolve_dtypes
from jobi_tf.training.resume import restore, why_finished
from jobi_tf.training.validation import EvaluationCallback, validation_evaluator

__all__ = ["TrainResult", "EvaluationCallback", "StopGuard", "train", "build_model", "make_optimizer"]

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class TrainResult:
    """What `train` returns: the run folder and the content of its ``metrics.json``."""

    run_dir: Path
    metrics: dict


def build_model(index: KGIndex, cfg: RunConfig) -> JoBiModel:
    return JoBiModel.for_run(cfg.model, cfg.train, index.num_entities, index.num_relations)


def make_optimizer(train: TrainConfig, num_entities: int | None = None) -> keras.optimizers.Optimizer:
    """The run's optimizer, from its training settings; ``--optimizer auto`` needs
    ``num_entities`` to choose."""
    name = train.optimizer if num_entities is None else choose_optimizer(train.optimizer, num_entities)
    return _new_optimizer(name, train.lr, initial_accumulator_value=train.initial_accumulator_value)


def load_data(cfg: RunConfig) -> tuple[Vocab, Vocab, KGIndex]:
    return load_index(cfg.data, seed=cfg.seed)


def train(
    cfg: RunConfig,
    run_dir: str | Path,
    *,
    verbose: int | None = None,
    strategy: tf.distribute.Strategy | None = None,
    data: tuple[Vocab, Vocab, KGIndex] | None = None,
) -> TrainResult:
    """Train (or resume) a run in ``run_dir`` and evaluate its best weights on test.

    Rerunning with the same config and folder continues from the last checkpoint: the last
    validation, or the batch where SIGINT/SIGTERM stopped the run (`TrainingStopped` is
    raised after that checkpoint is written). One process per folder (`RunLock`).
    ``strategy`` overrides the one ``cfg.distribute`` describes (`jobi_tf.distributed.strategy`).
    ``data``: the graph ``cfg.data`` names, already loaded (``(entities, relations, index)``).
    Under a multi-worker strategy only the chief writes files and evaluates on test; the
    other workers return an empty ``metrics``.

    The caller's global random states are left as they were (`jobi_tf.runtime.rng`).
    """
    with caller_random_state_kept():
        return _prepare_and_train(cfg, Path(run_dir), verbose, strategy, data)


def _prepare_and_train(cfg, run_dir, verbose, strategy, data) -> TrainResult:
    folder = RunFolder(run_dir)
    if strategy is None:
        if cfg.distribute.strategy == "parameter-server":
            checks.check_parameter_server(cfg)
            if ps_training.serves_only():  # a ps or worker task: serve until the cluster is done
                ps_training.serve()
        configure_devices(cfg.distribute.logical_cpus or None)
        strategy = make_strategy(cfg.distribute.strategy, cfg.distribute.gpus)
    sharded = ps_training.is_parameter_server(strategy)
    checks.check(cfg)  # the settings as given
    # The settings left to the run (None, "auto") are chosen now, so config.json says what ran.
    cfg = regimes.resolve(cfg, num_replicas(strategy))
    train, evaluation = resolve_dtypes(cfg.train, cfg.eval)
    cfg = dataclasses.replace(cfg, train=train, eval=evaluation)
    checks.check_run(cfg, num_replicas(strategy), sharded)  # the chosen values, where they train
    check_matmul_dtype(cfg.train, cfg.eval)  # at startup, before the data load
    chief = is_chief(strategy)
    entities, relations, index = data if data is not None else load_data(cfg)  # validate before writing
    chosen = choose_optimizer(cfg.train.optimizer, index.num_entities, sharded)  # config.json says what ran
    cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, optimizer=chosen))
    plugins.check("optimizer", cfg)  # what auto chose takes the optimizer settings given, or says so
    if not sharded:  # sharded tables live on the parameter servers, not here
        checks.check_memory(cfg, index.num_entities, index.num_relations)
    # Before anything is written: a source run that does not fit is refused on an empty --out.
    growth = (
        plan_growth(cfg, run_dir, entities, relations, index) if cfg.train.init_from and not folder.finished else None
    )
    with RunLock(run_dir) if chief else contextlib.nullcontext():
        if folder.finished:  # config.json is rewritten only when there is training to describe
            folder.check_same_run(cfg, entities, relations)
            skipped = why_finished(folder, cfg.train)
            if skipped is not None:
                logger.warning("%s", skipped)
                return TrainResult(run_dir, folder.read_metrics())
        if chief:
            folder.prepare(cfg, entities, relations)
        return _train(cfg, run_dir, index, relations, strategy, chief, verbose, growth)


def _train(cfg, run_dir, index, relations, strategy, chief, verbose, growth=None) -> TrainResult:
    """The body of `train` once the folder is locked: build or restore, fit, stop or finish.

    A run interrupted mid-epoch resumes with one ``fit`` over the rest of that epoch, then
    one over the remaining epochs (Keras's ``fit`` counts whole epochs). A warm start
    (``--init-from``) carries the source run's rows over before its first step.
    """
    folder = RunFolder(run_dir)
    rows = EpochRows.with_replay(growth.new_triples, growth.old_triples, cfg.train.replay) if growth else None
    regime, plan = regimes.regime_of(cfg.train.loss), BatchPlan.for_run(cfg.sampler, cfg.train, joint=cfg.model.joint)
    steps = regime.steps(index, plan, rows)
    keras.utils.set_random_seed(cfg.seed)
    model, optimizer, trainer, state = _build_or_restore(cfg, plan, run_dir, index, strategy, growth)
    plan.check_model(model)  # the batches and the model agree before the first step
    evaluator = FilteredEvaluator(index, cfg.eval, relation_labels=relations.labels)
    if chief:
        summaries.write_hparams(folder.tensorboard, cfg.hparams())
    if verbose is None:
        verbose = 1 if sys.stderr.isatty() else 2
    verbose = verbose if chief else 0
    callbacks, guard, validation = _callbacks(cfg, run_dir, model, evaluator, state, steps, chief, bool(verbose))

    def fit(first_epoch: int, first_step: int, last_epoch: int) -> None:
        if trainer is not None:
            trainer.fit(last_epoch, first_epoch, first_step, callbacks, verbose)
            return

        def batches(**where) -> tf.data.Dataset:
            return regime.dataset(index, plan, rows=rows, seed=cfg.seed, **where)

        keras_fit(model, batches, steps, cfg.train, callbacks, verbose, (first_epoch, first_step, last_epoch))

    with stop_on_signals(guard):
        fit_what_is_left(fit, model, guard, state, cfg.train, steps, announce=bool(verbose))
    state.train_seconds = validation.elapsed()
    _raise_if_stopped(run_dir, model, state, guard, chief)
    if cfg.distribute.strategy == "multi-worker":
        state.final_weights_sha256 = weights_digest(model.weights)  # must agree on every worker
        logger.info("final weights sha256 %s", state.final_weights_sha256)
    if not chief:
        kept = ("epoch", "final_weights_sha256")
        return TrainResult(run_dir, {k: v for k, v in state.to_dict().items() if k in kept})
    return TrainResult(run_dir, _finish(model, evaluator, run_dir, state, cfg))


def _callbacks(
    cfg, run_dir, model, evaluator, state: LoopState, steps: int, chief: bool, announce: bool
) -> tuple[list, StopGuard, EvaluationCallback]:
    """The ``fit`` callbacks, in the order they must run: `StopGuard`, `Throughput`,
    `EvaluationCallback` (with the end-of-epoch `jobi_tf.training.stalls.StallCheck`), then the optional
    `jobi_tf.training.stalls.FirstCheck` and `PeriodicCheckpoint`, and the chief's TensorBoard summaries;
    with the guard and the validation callback, which the loop reads again."""
    guard = StopGuard(steps, first=(state.epoch, state.step))
    stall = stalls.StallCheck.for_model(model, cfg.train, evaluator, steps, state)
    train = cfg.train
    tensorboard = summaries.RunSummaries(RunFolder(run_dir).tensorboard, state) if chief else None
    validation = EvaluationCallback(
        validation_evaluator(cfg.eval, evaluator),
        run_dir,
        train.eval_every,
        train.patience,
        state,
        train.monitor,
        chief,
        guard,
        stall.epoch_end,
        triples=validation_sample(evaluator.index.valid, cfg.eval.valid_sample),
        every_steps=train.eval_every_steps,
        on_validated=tensorboard.validation_scalars if tensorboard is not None and train.eval_every_steps else None,
    )
    callbacks = [guard, Throughput(cfg.sampler.batch_size, lambda: validation.seconds_inside), validation]
    if train.first_check_steps:
        callbacks.append(stalls.FirstCheck(train.first_check_steps, evaluator, stall, guard, announce))
    if train.checkpoint_steps:
        callbacks.append(PeriodicCheckpoint(train.checkpoint_steps, run_dir, state, guard, write=chief))
    if tensorboard is not None:
        callbacks.append(tensorboard)
    return callbacks, guard, validation


def _build_or_restore(cfg, plan, run_dir, index, strategy, growth):
    """The model and optimizer (a `ps_training.ShardedTrainer` too, on parameter servers),
    restored from the run's checkpoint or warm-started, and the loop state to go on from."""
    folder = RunFolder(run_dir)
    trainer = None
    if ps_training.is_parameter_server(strategy):  # tables and slots row-sharded over the servers
        model, optimizer = ps_training.build(
            index, cfg.model, cfg.train, strategy, ps_shards=cfg.distribute.ps_shards, seed=cfg.seed
        )
        trainer = ps_training.ShardedTrainer(
            model, optimizer, strategy, index, plan, seed=cfg.seed, checkpoint_steps=cfg.train.checkpoint_steps
        )
    with strategy.scope():  # variables (tables, optimizer slots, metrics) mirrored per replica
        if trainer is None:
            model = build_model(index, cfg)
            optimizer = make_optimizer(cfg.train)
            model.compile(
                optimizer=optimizer,
                jit_compile=_jit_compile(cfg, strategy),
                steps_per_execution=cfg.train.steps_per_execution,
            )
            optimizer.build(model.trainable_variables)
        if getattr(model, "prior", None) is not None:  # counted from this graph; a checkpoint holds the same
            model.prior.fill(index.train)
            if not model.prior.in_loss and is_chief(strategy):  # sparse counts: beside the weights, for `load_run`
                model.prior.save(folder.slot_counts)
        if cfg.train.neighbourhood:  # ranking's term, from this graph's training triples
            model.neighbourhood = Neighbourhood(index.train, index.num_entities, cfg.train.neighbourhood)
        restored = restore(folder, model, optimizer)  # the newest good saved state, or None
        state = restored or LoopState()
        if restored is not None:
            logger.info(  # 1-based, as the stop messages count: the next batch is step + 1 of that epoch
                "resuming %s at epoch %d after step %d", run_dir, state.epoch + 1, state.step
            )
        elif growth is not None:
            carry_over(growth, model, optimizer, cfg.train.optimizer)
            state.warm_start = {"from": str(growth.source.path), **growth.summary()}
    return model, optimizer, trainer, state


def _raise_if_stopped(run_dir: Path, model, state: LoopState, guard: StopGuard, chief: bool) -> None:
    """`TrainingStopped` when a bad loss or a signal ended the run (after checkpointing a
    signal's batch), naming where and what to do."""
    if guard.bad_loss is not None:
        kept = (
            f"the last good checkpoint (epoch {state.epoch}) is kept"
            if RunFolder(run_dir).checkpoint.exists()
            else "no checkpoint had been written yet"
        )
        raise TrainingStopped(
            f"{run_dir}: loss became {guard.bad_loss} at epoch {guard.epoch + 1}, step {guard.step}; "
            f"training stopped and {kept} (try a lower --lr)"
        )
    if guard.signal is not None:
        checkpoint_interrupted(run_dir, model, state, guard, chief)
        name = signal.Signals(guard.signal).name
        where = f"at epoch {state.epoch + 1}, step {state.step}" if state.step else f"after epoch {state.epoch}"
        raise TrainingStopped(
            f"{run_dir}: stopped by {name} {where}; checkpoint written, rerun the same command to resume",
            exit_code=128 + guard.signal,
        )


def _jit_compile(cfg: RunConfig, strategy: tf.distribute.Strategy) -> bool:
    """XLA for the train step, except across several devices.

    Why: an XLA-compiled step that updates mirrored variables fails with "Trying to access
    resource ... located in device CPU:1 from device CPU:0" (TensorFlow's XLA known issue of
    variables on another device), so steps under a multi-device strategy run uncompiled.
    """
    if cfg.train.jit_compile and num_replicas(strategy) > 1:
        logger.info("XLA is off under %d replicas (--strategy %s)", num_replicas(strategy), cfg.distribute.strategy)
        return False
    return cfg.train.jit_compile


def _finish(model: JoBiModel, evaluator: FilteredEvaluator, run_dir: Path, state: LoopState, cfg: RunConfig) -> dict:
    """Restore the best weights, evaluate on test, write ``metrics.json`` atomically."""
    folder = RunFolder(run_dir)
    best = folder.best_weights
    if best.exists():
        load_weights(best, model)
    else:  # fewer epochs than one validation interval: evaluate the last weights
        save_weights(best, model)
        state.best_valid = evaluator.evaluate(model, "valid")
        state.best_epoch = state.epoch = cfg.train.epochs
    chosen = None
    if cfg.train.choose_slot_prior:  # before the test: the test ranks with the chosen weight
        sample = validation_sample(evaluator.index.valid, cfg.eval.valid_sample)
        chosen = choose_prior_weight(model, evaluator, sample, folder.slot_counts, folder.neighbourhood)
    metrics = {
        "valid": state.best_valid,
        "test": evaluator.evaluate(model, "test"),
        **({"slot_prior": chosen} if chosen is not None else {}),
        "epochs": state.epoch,
        "best_epoch": state.best_epoch,
        **({"best_step": state.best_step} if state.best_step is not None else {}),
        "train_seconds": round(state.train_seconds, 1),
        "history": state.history,
        **({"warm_start": state.warm_start} if state.warm_start is not None else {}),
        **({"final_weights_sha256": state.final_weights_sha256} if state.final_weights_sha256 else {}),
        **({"first_check": state.first_check} if state.first_check is not None else {}),
        **({"warnings": state.warnings} if state.warnings else {}),
    }
    write_json_atomic(folder.metrics, metrics)
    with disk_errors(folder.tensorboard, "TensorBoard's test, Projector and graph", f"{folder.metrics} is written"):
        summaries.write_test(folder.tensorboard, metrics["test"], metrics["valid"], metrics["best_epoch"])
        entities, relations = folder.read_vocabs()
        summaries.write_projector(folder.tensorboard, model, entities.labels, relations.labels, evaluator.index.train)
        if model.table_shards:  # tracing would collect run metadata from every task, lost workers included
            logger.info("parameter-server run: no Graphs tab (the graph is the single-device one: `jobi-tf export`)")
        else:
            summaries.write_graph(folder.tensorboard, model)
    return metrics
