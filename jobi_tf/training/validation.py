"""Validation during training: when to rank the validation triples, on which, and what a
result changes (early stopping, best weights, the resumable checkpoint).

A module of its own: the loop's other callbacks (`jobi_tf.training.callbacks`) keep the loop
going; this one decides when it stops and which weights it keeps.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import keras

from jobi_tf.config import EvalConfig
from jobi_tf.config.runs import RunFolder
from jobi_tf.evaluation.ranking import FilteredEvaluator
from jobi_tf.runtime.types import RANK_METRICS
from jobi_tf.training.callbacks import LoopState, StopGuard
from jobi_tf.training.checkpoints import save_run_checkpoint, save_weights

__all__ = ["EvaluationCallback", "validation_evaluator"]

logger = logging.getLogger(__name__)


class EvaluationCallback(keras.callbacks.Callback):
    """Filtered validation every ``eval_every`` epochs (and every ``every_steps`` steps inside
    one), early stopping, best weights, checkpoint.

    After each validation it adds ``val_mrr``, ``val_hits_at_{1,3,10}`` to the epoch logs
    (so TensorBoard, placed after it, records them), saves ``best.weights.npz`` when the
    monitored validation metric (Hits@10 by default, as the paper) improves, stops after
    ``patience`` validations without improvement, and writes the resumable ``checkpoint.npz``.

    Why validations inside an epoch (``--eval-every-steps``): on a graph of millions of
    entities an epoch takes hours and the best model can come within the first; validating
    once an epoch misses it. Those validations rank ``triples`` (a fixed sample, with
    ``--valid-sample``) so that they cost little; each one's seconds go in the log and the
    history.

    ``on_epoch_done(epoch, logs)``, if given, sees every epoch that ran to its end (1-based,
    with the ``val_*`` logs when it was validated) before the checkpoint is written, so what
    it records in the loop state is saved with it (`jobi_tf.training.stalls.StallCheck.epoch_end`).
    ``on_validated(step, metrics)``, if given, sees every validation with the run's global step
    (TensorBoard's validation-by-step scalars).
    """

    def __init__(
        self,
        evaluator: FilteredEvaluator,
        run_dir: Path,
        eval_every: int,
        patience: int,
        state: LoopState,
        monitor: str = "hits@10",
        write: bool = True,
        guard: StopGuard | None = None,
        on_epoch_done: Callable[[int, dict], Any] | None = None,
        *,
        triples=None,
        every_steps: int = 0,
        on_validated: Callable[[int, dict], Any] | None = None,
    ):
        super().__init__()
        self.on_epoch_done = on_epoch_done
        self.on_validated = on_validated
        self.guard = guard  # an epoch it cut short is neither validated nor checkpointed
        self.write = write  # False on the workers of a cluster that are not the chief
        self.monitor = monitor
        self.evaluator = evaluator
        self.triples = triples  # None: the whole validation set
        self.run_dir = run_dir
        self.eval_every = eval_every
        self.every_steps = every_steps
        self.patience = patience
        self.state = state  # restored on resume
        self._clock = (time.monotonic(), state.train_seconds)
        self._last = guard.step if guard is not None else 0
        self._stopped_inside = False  # early stopping at a validation inside this epoch
        self.seconds_inside = 0.0  # this epoch's validations inside it (`Throughput` leaves them out)

    def elapsed(self) -> float:
        """Training seconds of this run, over every session that worked on it."""
        started, before = self._clock
        return before + time.monotonic() - started

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        self._last = self.guard.step if self.guard is not None else 0  # after the guard's own
        self._stopped_inside = False
        self.seconds_inside = 0.0

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        guard = self.guard
        if not self.every_steps or guard is None:
            return
        crossed = guard.step // self.every_steps > self._last // self.every_steps  # N steps a call may jump one
        if not crossed or guard.step >= guard.steps or guard.cut_short:
            return  # not yet; or the epoch's end (its own validation) or a stop
        self._last = guard.step
        if any(isinstance(v, float) and not math.isfinite(v) for v in (logs or {}).values()):
            return
        started = time.perf_counter()
        self._validate(guard.epoch, guard.step, dict(logs or {}))
        self.seconds_inside += time.perf_counter() - started
        self._stopped_inside = bool(self.model.stop_training)
        if self._stopped_inside and self.write:  # else --checkpoint-steps' to write: a large graph's
            self.state.epoch, self.state.step = guard.epoch, guard.step  # checkpoint is gigabytes
            self.state.train_seconds = self.elapsed()
            save_run_checkpoint(self.run_dir, self.model, self.state.to_dict())

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        logs = logs if logs is not None else {}
        done = epoch + 1
        if self.guard is not None and self.guard.cut_short or self._stopped_inside:
            return  # cut short, or stopped (and checkpointed) by a validation inside the epoch
        if done % self.eval_every:
            if self.on_epoch_done is not None:
                self.on_epoch_done(done, logs)
            return
        if any(isinstance(v, float) and not math.isfinite(v) for v in logs.values()):
            return  # never checkpoint non-finite weights
        self._validate(epoch, None, logs)
        if self.on_epoch_done is not None:
            self.on_epoch_done(done, logs)
        state = self.state
        state.epoch, state.step = done, 0
        state.train_seconds = self.elapsed()
        if self.write:
            save_run_checkpoint(self.run_dir, self.model, state.to_dict())

    def _validate(self, epoch: int, step: int | None, logs: dict) -> dict:
        """Rank the validation triples; record (also in ``logs``), keep the best weights, stop
        after ``patience``. ``step``: the step of epoch ``epoch`` (0-based) it follows, None at
        the epoch's end."""
        started = time.monotonic()
        metrics = self.evaluator.evaluate(self.model, "valid", triples=self.triples)
        seconds = time.monotonic() - started
        for k in (*RANK_METRICS, "type_inconsistent"):
            logs["val_" + k.replace("@", "_at_")] = metrics[k]  # the epoch's logs: TensorBoard, history
        done = epoch + 1
        summary = {k: metrics[k] for k in RANK_METRICS}
        state = self.state
        where = {"epoch": done} if step is None else {"epoch": done, "step": step}
        state.history.append({**where, **summary, "valid_seconds": seconds, **{k: float(v) for k, v in logs.items()}})
        at = f"epoch {done}" if step is None else f"epoch {done}, step {step}"
        logger.info("%s validation (%.1f s, %d queries): %s", at, seconds, metrics["count"], json.dumps(summary))
        if self.on_validated is not None:
            steps = self.guard.steps if self.guard is not None else 0
            self.on_validated(epoch * steps + (steps if step is None else step), metrics)
        if metrics[self.monitor] > state.best:
            state.best, state.best_epoch, state.wait, state.best_valid = metrics[self.monitor], done, 0, metrics
            state.best_step = step
            if self.write:  # with the state to go on from, should every checkpoint be damaged
                at = (done, 0) if step is None else (epoch, step)
                reached = {**state.to_dict(), "epoch": at[0], "step": at[1], "train_seconds": self.elapsed()}
                save_weights(RunFolder(self.run_dir).best_weights, self.model, reached)
        else:
            state.wait += 1
            if state.stopped_early(self.patience):
                logger.info("early stopping: no better validation %s for %d validations", self.monitor, self.patience)
                self.model.stop_training = True
        return metrics


def validation_evaluator(settings: EvalConfig, evaluator: FilteredEvaluator) -> FilteredEvaluator:
    """The evaluator validation ranks with: ``evaluator`` itself, or with ``--valid-dtype``
    bfloat16 one of its own (the test set is ranked by ``evaluator``, in float32)."""
    if settings.valid_dtype == "float32":
        return evaluator
    return FilteredEvaluator(evaluator.index, settings, evaluator.relation_labels, dtype=settings.valid_dtype)
