"""Which saved state a run goes on from: a finished run given more epochs or patience, or a
run some of whose files are damaged.

Why a finished run goes on: raising ``--epochs`` (or ``--patience``, after early stopping) on
the same command asks for a longer run of the same training; its last checkpoint is where that
run was after the shorter one's epochs, so it continues from there (`why_finished` says when
there is nothing more to train, and why, in one line).

Why damaged files are passed over: a crash mid-copy or a full disk can leave a checkpoint
truncated, empty or with overwritten bytes (`jobi_tf.training.checkpoints.verify` finds it). The
run names the file in one line and goes on from the last good state: the checkpoint before the
last (`RunFolder.previous_checkpoint`), else the best weights with a fresh optimizer. A file
passed over is kept as ``<name>.damaged``, never deleted, and out of the way of the next
checkpoint, which would otherwise keep it as the previous one in place of a good file.
"""

from __future__ import annotations

import contextlib
import logging
import os

import keras

from jobi_tf.config import TrainConfig
from jobi_tf.config.runs import RunFolder
from jobi_tf.runtime.errors import DamagedFileError, JobiError
from jobi_tf.training.callbacks import LoopState
from jobi_tf.training.checkpoints import checksum_path, load_checkpoint, load_weights, read_state, verify

__all__ = ["restore", "why_finished"]

logger = logging.getLogger(__name__)


def restore(folder: RunFolder, model: keras.Model, optimizer) -> LoopState | None:
    """Load the newest good saved state of ``folder`` into ``model`` (and ``optimizer``).

    In order: ``checkpoint.npz``, ``checkpoint.previous.npz``, then (only when checkpoints
    were there and all are damaged) ``best.weights.npz`` with the fresh ``optimizer``.

    Returns:
        The loop state to go on from; None when nothing was saved yet.

    Raises:
        JobiError: every saved state is damaged; the message names the files to delete.
    """
    damaged: list[DamagedFileError] = []
    for path in (folder.checkpoint, folder.previous_checkpoint):
        if not path.exists():
            continue
        try:
            state = LoopState.from_dict(load_checkpoint(path, model, optimizer))
        except DamagedFileError as exc:
            damaged.append(exc)
            continue
        if damaged:
            _warn(damaged, f"resuming from {path.name} ({_where(state)}) instead")
        elif path == folder.previous_checkpoint:  # a kill between the renames of a checkpoint
            logger.info("%s: no checkpoint.npz; resuming from %s", folder.path, path.name)
        _check_best_weights(folder, state)
        return state
    if not damaged:
        return None
    return _start_from_best_weights(folder, model, damaged)


def why_finished(folder: RunFolder, train: TrainConfig) -> str | None:
    """One line saying why the finished run in ``folder`` has nothing more to train under the
    training settings ``train`` and what would train it further; None when ``train`` asks for
    more (it goes on from its last checkpoint)."""
    state, ran = _last_state(folder), folder.read_config().train
    metrics = folder.read_metrics() or {}
    epochs = metrics.get("epochs", ran.epochs)
    done = f"{folder.path}: finished after {epochs} epoch{'s' * (epochs != 1)}, nothing trained"
    if state is None:
        return f"{done} (no readable checkpoint to train it further from)"
    if state.stopped_early(ran.patience):
        if not state.stopped_early(train.patience) and state.epoch < train.epochs:
            return None
        validations = f"{state.wait} validation{'s' * (state.wait != 1)}"
        return (
            f"{done}: early stopping ended it ({validations} without a better {ran.monitor}); "
            f"a --patience above {state.wait} trains it further"
        )
    if train.epochs > ran.epochs and state.epoch < train.epochs:
        return None
    return f"{done}; a --epochs above {ran.epochs} trains it further"


def _last_state(folder: RunFolder) -> LoopState | None:
    """The loop state of the newest readable checkpoint (no weight is loaded)."""
    for path in (folder.checkpoint, folder.previous_checkpoint):
        with contextlib.suppress(DamagedFileError, FileNotFoundError):
            saved = read_state(path)
            if saved is not None:
                return LoopState.from_dict(saved)
    return None


def _start_from_best_weights(folder: RunFolder, model: keras.Model, damaged: list[DamagedFileError]) -> LoopState:
    best = folder.best_weights
    try:
        if not best.exists():
            raise FileNotFoundError
        saved = read_state(best)
        load_weights(best, model)
    except (DamagedFileError, FileNotFoundError) as exc:
        if isinstance(exc, DamagedFileError):
            damaged.append(exc)
        reasons = "; ".join(f"{os.path.basename(d.path)}: {d.reason}" for d in damaged)
        files = " ".join(d.path for d in damaged)
        raise JobiError(
            f"{folder.path}: every saved state is damaged ({reasons}); delete {files} to train this run from the start"
        ) from None
    state = LoopState.from_dict(saved or {})
    _warn(damaged, f"starting again from {best.name} ({_where(state)}) with a fresh optimizer")
    return state


def _check_best_weights(folder: RunFolder, state: LoopState) -> None:
    """A damaged ``best.weights.npz`` beside a good checkpoint: set it aside and let the next
    validation choose the best weights again (the best metric is forgotten with them)."""
    if not folder.best_weights.exists():
        return
    try:
        verify(folder.best_weights)
    except DamagedFileError as exc:
        _warn([exc], "the next validation chooses the best weights again")
        state.best, state.best_epoch, state.best_step, state.best_valid, state.wait = -1.0, 0, None, None, 0


def _where(state: LoopState) -> str:
    return f"epoch {state.epoch + 1}, step {state.step}" if state.step else f"after epoch {state.epoch}"


def _warn(damaged: list[DamagedFileError], instead: str) -> None:
    """One line: each damaged file and why, what the run does instead, where the file is kept."""
    kept = []
    for exc in damaged:
        path = exc.path
        with contextlib.suppress(OSError):  # a read-only folder: the file stays where it is
            os.replace(path, path + ".damaged")
            checksum_path(path).unlink(missing_ok=True)  # it names the file, not the damaged copy
            kept.append(os.path.basename(path) + ".damaged")
    where = f"; kept as {', '.join(kept)}" if kept else ""
    logger.warning("%s; %s%s", ", ".join(str(exc) for exc in damaged), instead, where)
