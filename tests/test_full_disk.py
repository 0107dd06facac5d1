"""A full disk loses nothing: each writer of a run (checkpoint, best weights, metrics, TensorBoard
events, the SavedModel export) meets ``ENOSPC`` and the run says so in one line, its previous
files intact. The error is raised inside the writer, as the disk would."""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import pytest
import tensorflow as tf
from click.testing import CliRunner
from jobi_tf.cli.main import main
from tiny_runs import tiny_config

from jobi_tf.runtime.errors import JobiError
from jobi_tf.training.checkpoints import read_state, verify
from jobi_tf.training.trainer import train

FULL = os.strerror(errno.ENOSPC)


@pytest.fixture(scope="module")
def two_epochs(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("full") / "run"
    train(tiny_config(2), run, verbose=0)
    return run


def _unfinished_copy(run: Path, to: Path) -> Path:
    shutil.copytree(run, to)
    (to / "metrics.json").unlink()
    return to


def _snapshot(run: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in run.iterdir() if p.is_file() and p.name != ".lock"}


def test_a_full_disk_while_a_checkpoint_is_written_keeps_both_kept_checkpoints(tmp_path, two_epochs, monkeypatch):
    run = _unfinished_copy(two_epochs, tmp_path / "run")
    before = {k: v for k, v in _snapshot(run).items() if k.startswith("checkpoint")}
    assert set(before) == {
        "checkpoint.npz",
        "checkpoint.npz.sha256",
        "checkpoint.previous.npz",
        "checkpoint.previous.npz.sha256",
    }

    def full(fd):
        raise OSError(errno.ENOSPC, FULL)

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(JobiError, match=rf"checkpoint\.npz: cannot write \({FULL}\); the previous version is kept"):
        train(tiny_config(3), run, verbose=0)
    after = _snapshot(run)
    assert {k: after[k] for k in before} == before and not list(run.glob("*.tmp"))
    verify(run / "checkpoint.npz")
    assert read_state(run / "checkpoint.npz")["epoch"] == 2


def test_tensorboard_events_on_a_full_disk_are_one_line_and_the_checkpoint_is_kept(tmp_path, two_epochs, monkeypatch):
    run = _unfinished_copy(two_epochs, tmp_path / "run")
    scalar = tf.summary.scalar

    def full_disk_scalar(name, *args, **kwargs):
        if name.startswith("loss/"):  # the epoch's scalars: the callback after the checkpoint
            raise tf.errors.ResourceExhaustedError(None, None, f"events.out.tfevents; {FULL}\n\tFailed to flush")
        return scalar(name, *args, **kwargs)

    monkeypatch.setattr(tf.summary, "scalar", full_disk_scalar)
    with pytest.raises(JobiError) as info:
        train(tiny_config(3), run, verbose=0)
    assert str(info.value) == (
        f"{run / 'tensorboard'}: cannot write TensorBoard events ({FULL}); the last checkpoint is kept; rerun to resume"
    )
    assert read_state(run / "checkpoint.npz")["epoch"] == 3  # written before the events
    assert not (run / ".lock").exists()


def test_an_export_on_a_full_disk_is_one_line_and_the_earlier_version_is_intact(tmp_path, two_epochs, monkeypatch):
    base = tmp_path / "exports"
    runner = CliRunner()
    first = runner.invoke(main, ["-q", "export", str(two_epochs), "--out", str(base)])
    assert first.exit_code == 0, first.output
    version_1 = {p.relative_to(base): p.read_bytes() for p in base.rglob("*") if p.is_file()}
    save = tf.saved_model.save

    def full_disk_save(obj, export_dir, *args, **kwargs):
        Path(export_dir).mkdir(parents=True)
        (Path(export_dir) / "saved_model.pb").write_bytes(b"half")
        raise tf.errors.ResourceExhaustedError(None, None, f"{export_dir}/variables; {FULL}")

    monkeypatch.setattr(tf.saved_model, "save", full_disk_save)
    full = runner.invoke(main, ["-q", "export", str(two_epochs), "--out", str(base)])
    monkeypatch.setattr(tf.saved_model, "save", save)
    assert full.exit_code == 1
    assert full.output.strip().splitlines() == [
        f"Error: {base}: cannot write the SavedModel ({FULL}); its earlier versions are intact"
    ]
    assert {p.relative_to(base): p.read_bytes() for p in base.rglob("*") if p.is_file()} == version_1
    assert sorted(p.name for p in base.iterdir()) == ["1"]  # no half version, no staging folder


@pytest.mark.parametrize("name", ["best.weights.npz", "metrics.json"])
def test_best_weights_and_metrics_on_a_full_disk_keep_the_previous_version(tmp_path, two_epochs, monkeypatch, name):
    """Guards the atomic writes (`jobi_tf.runtime.atomic.replacing`) the new writers sit beside."""
    run = _unfinished_copy(two_epochs, tmp_path / "run")
    (run / "best.weights.npz").unlink()  # the next validation writes it again
    before = _snapshot(run)
    replace = os.replace

    def full_when_named(src, dst, *args, **kwargs):
        if Path(dst).name == name:
            raise OSError(errno.ENOSPC, FULL)
        return replace(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", full_when_named)
    with pytest.raises(JobiError, match=rf"{name}: cannot write \({FULL}\); the previous version is kept"):
        train(tiny_config(2), run, verbose=0)
    after = _snapshot(run)
    assert not list(run.glob("*.tmp")) and not (run / "metrics.json").exists()
    assert {k: after[k] for k in before if k.startswith("checkpoint")} == {
        k: v for k, v in before.items() if k.startswith("checkpoint")
    }
