"""Damaged run files: a truncated, empty or overwritten checkpoint or best-weights file is named
in one line, and the run goes on from the last good state (`jobi_tf.training.resume`)."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from jobi_tf.cli.main import main
from tiny_cli import tiny_flags
from tiny_runs import tiny_config

from jobi_tf.runtime.errors import DamagedFileError, JobiError
from jobi_tf.training.checkpoints import checksum_path, read_state, verify
from jobi_tf.training.trainer import train


def truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def empty(path: Path) -> None:
    path.write_bytes(b"")


def overwrite(path: Path) -> None:
    """16 bytes in the middle of the first array: the zip stays readable, its CRC-32 does not match."""
    with open(path, "r+b") as f:
        f.seek(200)
        f.write(b"\xff" * 16)


DAMAGES = [truncate, empty, overwrite]


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> tuple[Path, dict]:
    """A finished 3-epoch run (checkpoints after epochs 2 and 3) and its metrics."""
    run = tmp_path_factory.mktemp("straight") / "run"
    return run, train(tiny_config(3), run, verbose=0).metrics


def _copy(run: Path, to: Path) -> Path:
    import shutil

    shutil.copytree(run, to)
    (to / "metrics.json").unlink()  # as if killed before the test evaluation: it resumes
    return to


def _final(metrics: dict) -> dict:
    return {split: {k: metrics[split][k] for k in ("mrr", "hits@10")} for split in ("valid", "test")}


def test_checkpoints_keep_the_one_before_and_a_sha256sum_file_beside_each(finished):
    run, _ = finished
    for name in ("checkpoint.npz", "checkpoint.previous.npz", "best.weights.npz"):
        digest, file_name = checksum_path(run / name).read_text().split()
        assert digest == hashlib.sha256((run / name).read_bytes()).hexdigest() and file_name == name
    assert read_state(run / "checkpoint.npz")["epoch"] == 3
    assert read_state(run / "checkpoint.previous.npz")["epoch"] == 2
    assert not list(run.glob("*.tmp"))


@pytest.mark.parametrize("damage", DAMAGES)
@pytest.mark.parametrize("with_digest", [True, False], ids=["sha256", "crc-only"])
def test_verify_finds_each_damage(tmp_path, finished, damage, with_digest):
    path = tmp_path / "checkpoint.npz"
    path.write_bytes((finished[0] / "checkpoint.npz").read_bytes())
    if with_digest:
        checksum_path(path).write_bytes(checksum_path(finished[0] / "checkpoint.npz").read_bytes())
    verify(path)
    damage(path)
    with pytest.raises(DamagedFileError, match=r"checkpoint\.npz: damaged \(.+\)$"):
        verify(path)


@pytest.mark.parametrize("damage", DAMAGES)
def test_a_damaged_checkpoint_resumes_from_the_previous_one_and_ends_like_the_straight_run(
    tmp_path, finished, caplog, damage
):
    run = _copy(finished[0], tmp_path / "run")
    damage(run / "checkpoint.npz")
    with caplog.at_level(logging.WARNING):
        metrics = train(tiny_config(3), run, verbose=0).metrics
    warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith("jobi_tf")]
    assert len(warned) == 1 and "\n" not in warned[0], warned
    assert f"{run / 'checkpoint.npz'}: damaged (" in warned[0]
    assert "resuming from checkpoint.previous.npz (after epoch 2) instead; kept as checkpoint.npz.damaged" in warned[0]
    assert _final(metrics) == _final(finished[1])
    assert (run / "checkpoint.npz.damaged").exists()
    verify(run / "checkpoint.npz")
    verify(run / "checkpoint.previous.npz")  # the good one, not the damaged file, is the one before


def test_both_checkpoints_damaged_start_again_from_the_best_weights_with_a_fresh_optimizer(tmp_path, finished, caplog):
    run = _copy(finished[0], tmp_path / "run")
    truncate(run / "checkpoint.npz")
    empty(run / "checkpoint.previous.npz")
    best_epoch = read_state(run / "best.weights.npz")["epoch"]
    with caplog.at_level(logging.WARNING):
        metrics = train(tiny_config(3), run, verbose=0).metrics
    warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith("jobi_tf")]
    assert len(warned) == 1, warned
    assert "checkpoint.npz: damaged" in warned[0] and "checkpoint.previous.npz: damaged (0 bytes)" in warned[0]
    assert f"starting again from best.weights.npz (after epoch {best_epoch}) with a fresh optimizer" in warned[0]
    assert metrics["epochs"] == 3 and 0 <= metrics["test"]["mrr"] <= 1


def test_damaged_best_weights_beside_a_good_checkpoint_are_chosen_again_by_the_next_validation(
    tmp_path, finished, caplog
):
    run = _copy(finished[0], tmp_path / "run")
    (run / "metrics.json").write_text("{}")  # finished, so that more epochs continue it from its checkpoint
    overwrite(run / "best.weights.npz")
    with caplog.at_level(logging.WARNING):
        metrics = train(tiny_config(4), run, verbose=0).metrics
    warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith("jobi_tf")]
    assert len(warned) == 1 and f"{run / 'best.weights.npz'}: damaged (bad CRC-32 of " in warned[0], warned
    assert warned[0].endswith("; the next validation chooses the best weights again; kept as best.weights.npz.damaged")
    assert metrics["best_epoch"] == 4 and read_state(run / "best.weights.npz")["epoch"] == 4
    verify(run / "best.weights.npz")


def test_a_run_whose_every_saved_state_is_damaged_says_what_to_delete(tmp_path, finished):
    run = _copy(finished[0], tmp_path / "run")
    for name, damage in [("checkpoint.npz", truncate), ("checkpoint.previous.npz", overwrite)]:
        damage(run / name)
    empty(run / "best.weights.npz")
    with pytest.raises(JobiError) as info:
        train(tiny_config(3), run, verbose=0)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{run}: every saved state is damaged (")
    names = ("checkpoint.npz", "checkpoint.previous.npz", "best.weights.npz")
    assert message.endswith(f"delete {' '.join(str(run / n) for n in names)} to train this run from the start")
    assert all((run / name).exists() for name in names)  # nothing is deleted for the user


@pytest.mark.parametrize("command", ["evaluate", "export"])
def test_export_and_evaluate_of_damaged_best_weights_is_one_line_exit_1(tmp_path, finished, command):
    run = _copy(finished[0], tmp_path / "run")
    truncate(run / "best.weights.npz")
    args = [command, str(run)] + (["--out", str(tmp_path / "export")] if command == "export" else [])
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1, result.output
    errors = [line for line in result.output.splitlines() if line.strip()]
    assert errors == [f"Error: {run / 'best.weights.npz'}: damaged (File is not a zip file)"], result.output
    assert not (tmp_path / "export").exists()


def test_the_command_line_names_a_truncated_checkpoint_in_one_line_without_a_traceback(tmp_path):
    """Through ``jobi-tf train`` itself: stderr holds one line naming the file, and the run finishes;
    the same command once more trains nothing and says so in one line."""
    run = tmp_path / "run"
    command = [sys.executable, "-m", "jobi_tf.cli", "train", *tiny_flags(2), "--out", str(run)]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", JOBI_TF_LOGICAL_CPUS="")
    first = subprocess.run(command, capture_output=True, text=True, env=env, timeout=240)
    assert first.returncode == 0, first.stderr[-2000:]
    (run / "metrics.json").unlink()
    truncate(run / "checkpoint.npz")
    again = subprocess.run(command, capture_output=True, text=True, env=env, timeout=240)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "Traceback" not in again.stderr
    named = [line for line in again.stderr.splitlines() if "checkpoint.npz" in line]
    assert len(named) == 1 and "damaged (File is not a zip file); resuming from checkpoint.previous.npz" in named[0]
    assert json.loads(again.stdout.strip().splitlines()[-1])["epochs"] == 2
    skipped = subprocess.run(command, capture_output=True, text=True, env=env, timeout=240)  # finished: one line
    assert skipped.returncode == 0 and skipped.stdout == again.stdout, skipped.stderr[-2000:]
    assert [line for line in skipped.stderr.splitlines() if "nothing trained" in line] == [
        f"WARNING jobi_tf.training.trainer: {run}: finished after 2 epochs, nothing trained; "
        "a --epochs above 2 trains it further"
    ]
