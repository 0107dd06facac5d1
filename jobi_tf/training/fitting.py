"""The ``fit`` calls a run is cut into: the rest of an interrupted epoch, then the remaining
epochs, and with ``steps_per_execution`` one ``fit`` per epoch (`jobi_tf.training.trainer` runs them)."""

from __future__ import annotations

import sys

from jobi_tf.config import TrainConfig
from jobi_tf.training.callbacks import EndAfterOneEpoch, LoopState, StopGuard

__all__ = ["fit_what_is_left", "keras_fit"]


def fit_what_is_left(fit, model, guard: StopGuard, state: LoopState, train: TrainConfig, steps: int, announce: bool):
    """The rest of an interrupted epoch (its own ``fit``), then the remaining epochs."""
    patience = train.patience
    if state.step and not state.stopped_early(patience):
        resumed = state.epoch
        if announce:
            print(f"Resuming epoch {resumed + 1} after step {state.step} of {steps}", file=sys.stderr)
        fit(resumed, state.step, resumed + 1)
        if not (model.stop_training or guard.signal or guard.bad_loss is not None):
            state.epoch, state.step = resumed + 1, 0  # (a validation may have set it already)
            guard.first = (resumed + 1, 0)
    stopped = model.stop_training or guard.signal is not None or guard.bad_loss is not None
    if not stopped and state.epoch < train.epochs and not state.stopped_early(patience):
        fit(state.epoch, 0, train.epochs)


def keras_fit(
    model, batches, steps: int, train: TrainConfig, callbacks: list, verbose, span: tuple[int, int, int]
) -> None:
    """Keras's ``fit`` over epochs ``first..last - 1`` of ``span = (first, first_step, last)``.

    Why more than one ``fit``: with ``steps_per_execution`` N > 1 Keras runs a call's N steps
    from one iterator, and across an epoch's end they would take the next epoch's batches, so
    each epoch gets a ``fit`` over its own batches. A resumed epoch's rest is a ``fit`` of its own
    too (Keras counts whole epochs). `EndAfterOneEpoch` keeps the progress bar counting to the
    run's epochs in both cases.
    """
    first, first_step, last = span
    if train.steps_per_execution > 1:
        fits = [(epoch, first_step if epoch == first else 0, epoch + 1) for epoch in range(first, last)]
    else:
        fits = [span]
    for epoch, step, end in fits:
        rest_of_epoch = EndAfterOneEpoch() if step or train.steps_per_execution > 1 else None
        model.fit(
            batches(initial_epoch=epoch, initial_step=step, epochs=end),
            epochs=train.epochs if rest_of_epoch else end,
            initial_epoch=epoch,
            steps_per_epoch=steps - step,
            callbacks=callbacks + [rest_of_epoch] if rest_of_epoch else callbacks,
            shuffle=False,
            verbose=verbose,
        )
        if rest_of_epoch:
            model.stop_training = rest_of_epoch.asked
        if model.stop_training:
            return
