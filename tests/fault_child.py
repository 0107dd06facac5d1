"""Run a ``jobi-tf`` command (``python tests/fault_child.py FAULT train ...``) that meets one
fault at a fixed point of its training, for the process-level tests of test_reliability.py.

Why not a signal sent from the test: a test that waits for a file and then signals the child
races the child's training. With the other core busy, the run may finish, or write its next
checkpoint, before the signal lands, and the test then checks nothing or fails. Here the fault
is raised by the child itself at a named batch, so every run meets it at the same point; what
is tested (the handler, the exit code, the checkpoint left behind, the rerun) is the same.

FAULT is one of:

* ``signal:SIG:EPOCH:STEP``: the process sends itself signal SIG (e.g. 2 for SIGINT) after
  batch STEP of epoch EPOCH (both from 1);
* ``kill:EPOCH:STEP``: SIGKILL there (no handler runs);
* ``kill-in-checkpoint:N``: SIGKILL while the N-th ``checkpoint.npz`` is being written, after
  its first array (``checkpoint.npz.tmp`` is left half written).
"""

from __future__ import annotations

import os
import signal
import sys


def _at_batch(epoch: int, step: int, act) -> None:
    from jobi_tf.training.callbacks import StopGuard

    original = StopGuard.on_train_batch_end

    def on_train_batch_end(self, batch, logs=None):
        original(self, batch, logs)
        if (self.epoch + 1, self.step) == (epoch, step) and self.signal is None:
            act()

    StopGuard.on_train_batch_end = on_train_batch_end


def _in_checkpoint(nth: int) -> None:
    import jobi_tf.training.checkpoints as checkpoints

    write_npz, write_npy = checkpoints._write_npz, checkpoints._write_npy
    seen = {"checkpoints": 0, "arrays": 0}

    def counting_npz(path, arrays, previous=None):
        if os.path.basename(path) == "checkpoint.npz":
            seen["checkpoints"] += 1
            seen["arrays"] = 0
        return write_npz(path, arrays, previous)

    def killing_npy(f, value, name="array"):
        write_npy(f, value, name)
        seen["arrays"] += 1
        if seen["checkpoints"] == nth and seen["arrays"] == 1:
            os.kill(os.getpid(), signal.SIGKILL)

    checkpoints._write_npz, checkpoints._write_npy = counting_npz, killing_npy


def install(fault: str) -> None:
    """Arrange ``fault`` (see the module docstring) in this process."""
    kind, *args = fault.split(":")
    numbers = [int(a) for a in args]
    if kind == "signal":
        sig, epoch, step = numbers
        _at_batch(epoch, step, lambda: os.kill(os.getpid(), sig))
    elif kind == "kill":
        _at_batch(*numbers, lambda: os.kill(os.getpid(), signal.SIGKILL))
    elif kind == "kill-in-checkpoint":
        _in_checkpoint(*numbers)
    else:
        raise SystemExit(f"unknown fault {fault!r}")


if __name__ == "__main__":
    install(sys.argv[1])
    from jobi_tf.cli.main import main

    main(args=sys.argv[2:], prog_name="jobi-tf")
