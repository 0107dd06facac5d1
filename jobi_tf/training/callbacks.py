"""The training loop's callbacks and the state they share.

``fit`` (or the parameter-server loop, `jobi_tf.distributed.ps_training`) runs them in this order:
`StopGuard` (signals, NaN), `Throughput`, `jobi_tf.training.validation.EvaluationCallback` (validation, early stopping,
best weights, the resumable checkpoint; it calls `jobi_tf.training.stalls.StallCheck` at each epoch's
end), `jobi_tf.training.stalls.FirstCheck` (``--first-check-steps``), `PeriodicCheckpoint` and the
TensorBoard summaries (`jobi_tf.training.summaries.RunSummaries`). What they share is one `LoopState`, saved in every
checkpoint, so a resumed run continues exactly where the last one stopped.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import signal
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import keras

from jobi_tf.training.checkpoints import save_run_checkpoint

__all__ = [
    "LoopState",
    "StopGuard",
    "stop_on_signals",
    "Throughput",
    "PeriodicCheckpoint",
    "EndAfterOneEpoch",
    "checkpoint_interrupted",
]

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class LoopState:
    """Where a run is and what early stopping knows, kept in every checkpoint.

    Attributes:
        epoch: epochs finished.
        step: batches done of epoch ``epoch`` (0 except after an interruption).
        best: the best validation ``--monitor`` so far (-1 before the first validation).
        best_epoch: the epoch of ``best``.
        wait: validations since ``best`` improved (early stopping at ``--patience``).
        history: one entry per validation: its metrics and the epoch's logs.
        train_seconds: wall seconds of training over every session of the run, per-epoch
            validations included (bench/accuracy_per_hour.py's points leave them out).
        best_valid: the validation metrics of ``best`` (None before the first validation).
        warm_start: what ``--init-from`` carried over (None without it).
        final_weights_sha256: multi-worker runs: the digest every worker must agree on.
        warnings: what `jobi_tf.training.stalls` warned of (None before a warning), ``metrics.json``'s ``warnings``.
        first_check: the result of ``--first-check-steps`` (`jobi_tf.training.stalls.FirstCheck`; None without it).
        best_step: with ``--eval-every-steps``, the step of epoch ``best_epoch`` whose weights
            are ``best`` (None: that epoch's end).
    """

    epoch: int = 0
    step: int = 0
    best: float = -1.0
    best_epoch: int = 0
    wait: int = 0
    history: list[dict] = dataclasses.field(default_factory=list)
    train_seconds: float = 0.0
    best_valid: dict | None = None
    warm_start: dict | None = None
    final_weights_sha256: str | None = None
    warnings: list[dict] | None = None
    first_check: dict | None = None
    best_step: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """The checkpoint's JSON (fields still None are left out, as before they existed)."""
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LoopState:
        """From a checkpoint's JSON (keys it lacks take their defaults)."""
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    def stopped_early(self, patience: int) -> bool:
        return self.wait >= patience


def steps_done(callback: keras.callbacks.Callback, batch: int) -> int:
    """Steps a ``fit`` has run in its current epoch after the call that ended at ``batch``.

    Why not count calls: with ``steps_per_execution`` N, Keras reports one batch end per N
    steps, numbered by the call's last step (``N - 1``, ``2N - 1``, ...), and the epoch's last
    call may run fewer than N; its number is capped at the epoch's steps.
    """
    total = (callback.params or {}).get("steps")
    return min(batch + 1, total) if total else batch + 1


class StopGuard(keras.callbacks.Callback):
    """Stops ``fit`` at the next batch boundary on SIGINT/SIGTERM or a NaN/Inf loss.

    Why a callback and not Keras's ``TerminateOnNaN``: the run must know *where* it stopped
    (epoch and step, for the message and for a mid-epoch checkpoint) and must not let the
    epoch's end validate or checkpoint weights of an epoch that did not finish.

    Args:
        steps: batches per epoch.
        first: ``(epoch, step)`` where this session starts (a resumed run may start mid-epoch).
    """

    def __init__(self, steps: int, first: tuple[int, int] = (0, 0)) -> None:
        super().__init__()
        self.steps = steps
        self.first = first
        self.epoch, self.step = first
        self._start = first[1]
        self.signal: int | None = None  # set by the signal handler
        self.bad_loss: float | None = None

    @property
    def cut_short(self) -> bool:
        """The current epoch stopped before its last batch (or on a bad loss)."""
        return self.bad_loss is not None or (self.signal is not None and self.step < self.steps)

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        self.epoch = epoch
        self.step = self._start = self.first[1] if epoch == self.first[0] else 0

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        self.step = self._start + steps_done(self, batch)
        loss = (logs or {}).get("loss")
        if loss is not None and not math.isfinite(float(loss)):
            self.bad_loss = float(loss)
            self.model.stop_training = True
        elif self.signal is not None:
            self.model.stop_training = True

    def request_stop(self, signum: int, frame=None) -> None:
        """Signal handler: the first signal stops at the next batch; a second one aborts."""
        if self.signal is not None:
            raise KeyboardInterrupt
        self.signal = signum
        logger.warning("%s received: stopping after this batch (again to abort)", signal.Signals(signum).name)


@contextlib.contextmanager
def stop_on_signals(guard: StopGuard):
    """Route SIGINT and SIGTERM to ``guard`` while training (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, guard.request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class Throughput(keras.callbacks.Callback):
    """Positives per second of each epoch, added to the epoch's logs (TensorBoard, history).

    Two figures, both over the training steps only (validation excluded):
    ``positives_per_second`` is the epoch's positives over its wall time;
    ``positives_per_second_median`` is the median over windows of `WINDOW_POSITIVES`
    positives, which a busy neighbour on a shared machine moves less (the first window,
    where XLA compiles, is left out when there are others).

    Args:
        batch_size: positives per step.
        paused: seconds spent so far in validations inside the epoch (``--eval-every-steps``),
            left out of the clock; None: there are none.
    """

    WINDOW_POSITIVES = 75_000

    def __init__(self, batch_size: int, paused: Callable[[], float] | None = None) -> None:
        super().__init__()
        self.batch_size = batch_size
        self.paused = paused
        self._marks: list[tuple[int, float]] = []  # (steps done in this fit's epoch, time)

    def _now(self) -> float:
        return time.perf_counter() - (self.paused() if self.paused is not None else 0.0)

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        self._marks = [(0, self._now())]

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        self._marks.append((steps_done(self, batch), self._now()))

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        steps, end = self._marks[-1]
        if logs is None or steps < 1:
            return
        seconds = end - self._marks[0][1]
        per_window = max(1, self.WINDOW_POSITIVES // self.batch_size)
        edges = [self._marks[0]]  # the first mark at or past each multiple of per_window steps
        for count, when in self._marks[1:]:
            if count // per_window > edges[-1][0] // per_window:
                edges.append((count, when))
        rates = [(b - a) * self.batch_size / (tb - ta) for (a, ta), (b, tb) in zip(edges[:-1], edges[1:], strict=True)]
        rates = rates[1:] if len(rates) > 1 else rates
        logs["epoch_seconds"] = seconds
        logs["positives_per_second"] = steps * self.batch_size / seconds
        logs["positives_per_second_median"] = statistics.median(rates) if rates else logs["positives_per_second"]
        logger.info(
            "epoch %d: %d steps in %.1f s, %.0f positives/s (median over windows of %d steps: %.0f)",
            epoch + 1,
            steps,
            seconds,
            logs["positives_per_second"],
            per_window,
            logs["positives_per_second_median"],
        )


class EndAfterOneEpoch(keras.callbacks.Callback):
    """Ends a ``fit`` after its first epoch, keeping whether another callback asked to stop.

    Why: a resumed run finishes its interrupted epoch in a ``fit`` of its own; given the run's
    epochs instead of one, Keras's progress bar reads "Epoch 29/100", not "Epoch 29/29".
    Appended last, so ``asked`` sees the stop that validation or a signal set in that epoch.
    """

    asked = False

    def on_epoch_end(self, epoch, logs=None):
        self.asked = bool(self.model.stop_training)
        self.model.stop_training = True


class PeriodicCheckpoint(keras.callbacks.Callback):
    """A resumable checkpoint every ``every`` steps inside an epoch (``--checkpoint-steps``).

    Why: a run resumes from its last checkpoint, which validation writes once per
    ``eval_every`` epochs; at Freebase size an epoch takes hours, and a crash (a lost
    parameter server, a rebooted machine) would cost all of it. The checkpoint records
    ``(epoch, step)`` like a signal's, so the resumed run sees the batches an uninterrupted one
    would. Runs after `StopGuard` in the callback list (it reads the guard's position).
    """

    def __init__(self, every: int, run_dir: Path, state: LoopState, guard: StopGuard, write: bool) -> None:
        super().__init__()
        self.every, self.run_dir, self.state, self.guard, self.write = every, run_dir, state, guard, write
        self._last = guard.step

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        self._last = self.guard.step  # runs after the guard's own on_epoch_begin

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        guard = self.guard
        crossed = guard.step // self.every > self._last // self.every  # N steps a call may jump one
        if not crossed or guard.step >= guard.steps or guard.cut_short:
            return  # not yet; or the epoch's end and a stop, which save on their own
        self._last = guard.step
        if self.write:
            self.state.epoch, self.state.step = guard.epoch, guard.step
            save_run_checkpoint(self.run_dir, self.model, self.state.to_dict())
            logger.info("epoch %d, step %d: checkpoint written", guard.epoch + 1, guard.step)


def checkpoint_interrupted(run_dir: Path, model, state: LoopState, guard: StopGuard, chief: bool) -> None:
    """Checkpoint the batch where a signal stopped the run, unless a validation just did."""
    epoch, step = guard.epoch, guard.step
    if step >= guard.steps:  # the epoch had finished: the next one starts from its beginning
        epoch, step = epoch + 1, 0
    if (epoch, step) == (state.epoch, state.step) or not chief:
        return  # already saved (a validation at this epoch's end), or not ours to write
    state.epoch, state.step = epoch, step
    save_run_checkpoint(run_dir, model, state.to_dict())
