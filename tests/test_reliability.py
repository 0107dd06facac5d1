"""Faults a long run meets: kills, signals, NaN, a second process, a full or read-only disk.

The process-level tests run ``jobi-tf train`` as a subprocess on a small synthetic graph and
compare with an uninterrupted run of the same command. The fault (a signal, SIGKILL, a kill
while a checkpoint is written) is raised by the child itself at a fixed batch
(`tests/fault_child.py`), so no test races the child's training: they pass the same with the
other core busy.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from jobi_tf.config import DataConfig, ModelConfig, RunConfig, SamplerConfig, TrainConfig
from jobi_tf.runtime.errors import JobiError, TrainingStopped
from jobi_tf.runtime.runlock import RunLock, RunLockedError
from jobi_tf.training.checkpoints import load_checkpoint, save_checkpoint
from jobi_tf.training.trainer import build_model, make_optimizer, train

FAULT_CHILD = Path(__file__).resolve().parent / "fault_child.py"
#: jobi-tf's arguments: 3 batches of 500 positives per epoch, validation (and a
#: checkpoint) every epoch; the faults land in epoch 2, after the first checkpoint.
ARGS = [
    "train", "--dataset", "synthetic",
    "--synthetic-entities", "300", "--synthetic-relations", "6", "--synthetic-triples", "4000",
    "--dim", "32", "--batch-size", "500", "--neg", "20", "--joint", "--p", "0.3",
    "--epochs", "4", "--eval-every", "1", "--patience", "100", "--seed", "5",
]  # fmt: skip
COMMAND = [sys.executable, "-m", "jobi_tf.cli", *ARGS]


def _env() -> dict:
    return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", JOBI_TF_LOGICAL_CPUS="")


def _run(out: Path, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(COMMAND + ["--out", str(out)], capture_output=True, text=True, env=_env(), timeout=timeout)


def _faulty(fault: str, args: list[str], timeout: float = 240) -> subprocess.CompletedProcess:
    """``jobi-tf ARGS`` meeting ``fault`` (`tests/fault_child.py`)."""
    command = [sys.executable, str(FAULT_CHILD), fault, *args]
    return subprocess.run(command, capture_output=True, text=True, env=_env(), timeout=timeout)


def _final(out: Path) -> dict:
    metrics = json.loads((out / "metrics.json").read_text())
    keys = ("mrr", "hits@1", "hits@3", "hits@10")
    return {split: {k: metrics[split][k] for k in keys} for split in ("valid", "test")}


@pytest.fixture(scope="module")
def straight(tmp_path_factory) -> dict:
    """Final metrics of the uninterrupted run."""
    out = tmp_path_factory.mktemp("straight") / "run"
    done = _run(out)
    assert done.returncode == 0, done.stderr[-2000:]
    return _final(out)


def test_sigkill_mid_epoch_then_rerun_ends_like_an_uninterrupted_run(tmp_path, straight):
    """Killed (SIGKILL) in epoch 2, after the first checkpoint, the same command resumes from
    the last complete checkpoint and ends with identical metrics."""
    out = tmp_path / "run"
    killed = _faulty("kill:2:1", ARGS + ["--out", str(out)])
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    state = load_checkpoint_state(out / "checkpoint.npz")
    assert state["epoch"] == 1  # at most one evaluation interval (one epoch) is lost
    assert not (out / "metrics.json").exists()
    done = _run(out)
    assert done.returncode == 0, done.stderr[-2000:]
    assert _final(out) == straight


def test_sigkill_while_a_checkpoint_is_written_keeps_the_previous_one(tmp_path, straight):
    """Killed while ``checkpoint.npz.tmp`` is being written: the previous checkpoint is
    intact, the half file is ignored, and the rerun ends like the uninterrupted run."""
    out = tmp_path / "run"
    killed = _faulty("kill-in-checkpoint:2", ARGS + ["--out", str(out)])
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert (out / "checkpoint.npz.tmp").is_file()  # the second checkpoint, half written
    assert load_checkpoint_state(out / "checkpoint.npz")["epoch"] == 1  # the first, complete
    done = _run(out)
    assert done.returncode == 0, done.stderr[-2000:]
    assert _final(out) == straight


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_stops_at_a_batch_writes_a_checkpoint_and_says_how_to_resume(tmp_path, straight, sig):
    out = tmp_path / "run"
    stopped = _faulty(f"signal:{int(sig)}:2:1", ARGS + ["--out", str(out)])
    stderr = stopped.stderr
    assert stopped.returncode == 128 + sig, stderr[-2000:]
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("Error: ") and f"stopped by {signal.Signals(sig).name} at epoch 2, step 2" in last
    assert "rerun the same command to resume" in last and "Traceback" not in stderr
    assert not (out / ".lock").exists()
    done = _run(out)
    assert done.returncode == 0, done.stderr[-2000:]
    assert _final(out) == straight


def load_checkpoint_state(path: Path) -> dict:
    with np.load(path) as data:
        return json.loads(data["__state__"].tobytes().decode("utf-8"))


# -- in-process faults ---------------------------------------------------------------------


def _cfg(batch_size: int = 100, **train_kw) -> RunConfig:
    return RunConfig(
        data=DataConfig(dataset="synthetic", synthetic_entities=80, synthetic_relations=4, synthetic_triples=800),
        sampler=SamplerConfig(batch_size=batch_size, neg=8, p=0.3),
        model=ModelConfig(model="complex", dim=8, joint=True),
        # Hits@10, the monitor these cases were written with: epoch 2 then writes no new best
        # weights, so the first file a full disk refuses is checkpoint.npz.
        train=TrainConfig(**{"eval_every": 1, "patience": 10, "jit_compile": False, "monitor": "hits@10", **train_kw}),
        seed=3,
    )


def test_nan_loss_stops_naming_epoch_and_step_and_writes_no_nan_weights(tmp_path):
    with pytest.raises(TrainingStopped, match=r"loss became (nan|inf) at epoch 1, step \d+; training stopped"):
        train(_cfg(epochs=3, lr=1e30), tmp_path / "run", verbose=0)
    for name in ("checkpoint.npz", "best.weights.npz"):
        path = tmp_path / "run" / name
        if path.exists():
            with np.load(path) as data:
                assert all(np.isfinite(data[k]).all() for k in data.files if data[k].dtype.kind == "f")
    assert not (tmp_path / "run" / ".lock").exists()


def test_a_checkpoint_with_nan_weights_is_refused_and_the_previous_kept(tmp_path):
    cfg = _cfg(epochs=1)
    from jobi_tf.training.trainer import load_data

    _, _, index = load_data(cfg)
    model = build_model(index, cfg)
    optimizer = make_optimizer(cfg.train, index.num_entities)
    optimizer.build(model.trainable_variables)
    path = tmp_path / "checkpoint.npz"
    save_checkpoint(path, model, optimizer, {"epoch": 1})
    before = path.read_bytes()
    bad = model.entity_embeddings.numpy()
    bad[3, 0] = np.nan
    model.entity_embeddings.assign(bad)
    with pytest.raises(JobiError, match=r"checkpoint\.npz: model/.*entity_embeddings holds NaN or Inf, not written"):
        save_checkpoint(path, model, optimizer, {"epoch": 2})
    assert path.read_bytes() == before and not path.with_name("checkpoint.npz.tmp").exists()
    assert load_checkpoint(path, model, optimizer)["epoch"] == 1


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS])
def test_a_full_or_read_only_disk_fails_clearly_and_keeps_the_previous_checkpoint(tmp_path, monkeypatch, code):
    cfg = _cfg(epochs=1)
    train(cfg, tmp_path / "run", verbose=0)
    path = tmp_path / "run" / "checkpoint.npz"
    before = path.read_bytes()
    import jobi_tf.training.checkpoints as checkpoints

    def failing_fsync(fd):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(checkpoints.os, "fsync", failing_fsync)
    (tmp_path / "run" / "metrics.json").unlink()
    with pytest.raises(JobiError, match=rf"checkpoint\.npz: cannot write \({os.strerror(code)}\); the previous"):
        train(_cfg(epochs=2), tmp_path / "run", verbose=0)
    assert path.read_bytes() == before and not path.with_name("checkpoint.npz.tmp").exists()


def test_an_unwritable_out_folder_is_a_one_line_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(JobiError, match=r"file/run: cannot create the run folder"):
        train(_cfg(epochs=1), blocker / "run", verbose=0)


def test_a_second_process_on_the_same_folder_is_refused(tmp_path):
    keeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        run = tmp_path / "run"
        run.mkdir()
        (run / ".lock").write_text(json.dumps({"host": os.uname().nodename, "pid": keeper.pid}))
        with pytest.raises(RunLockedError, match=rf"another jobi-tf train \(pid {keeper.pid}\) is using this run"):
            train(_cfg(epochs=1), run, verbose=0)
        assert not (run / "config.json").exists()  # refused before writing anything
    finally:
        keeper.kill()
        keeper.wait()


def test_a_lock_left_by_a_dead_process_is_taken_over(tmp_path, caplog):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    (tmp_path / ".lock").write_text(json.dumps({"host": os.uname().nodename, "pid": gone.pid}))
    with RunLock(tmp_path):
        owner = json.loads((tmp_path / ".lock").read_text())
        assert owner["pid"] == os.getpid()
    assert not (tmp_path / ".lock").exists()
    assert "stale lock" in caplog.text


def test_a_lock_from_another_host_names_the_file_to_delete(tmp_path):
    (tmp_path / ".lock").write_text(json.dumps({"host": "elsewhere", "pid": 1}))
    with pytest.raises(RunLockedError, match=r"in use by pid 1 on elsewhere; if that run is dead, delete .*\.lock"):
        with RunLock(tmp_path):
            pass


def _resumes_at_epoch_2_step_4_and_ends_like(straight: dict, run: Path, verbose: int = 0) -> None:
    """The checkpoint holds (epoch 1, step 4); the rerun ends with ``straight``'s metrics."""
    state = load_checkpoint_state(run / "checkpoint.npz")
    assert (state["epoch"], state["step"]) == (1, 4)
    resumed = train(_cfg(batch_size=40, epochs=3), run, verbose=verbose).metrics
    assert [h["epoch"] for h in resumed["history"]] == [1, 2, 3]
    for split in ("valid", "test"):
        assert resumed[split]["mrr"] == straight[split]["mrr"]
        assert resumed[split]["hits@10"] == straight[split]["hits@10"]


def test_a_run_stopped_mid_epoch_resumes_at_that_batch(tmp_path, monkeypatch, capsys):
    """A signal during epoch 2 stops after the next batch; the checkpoint records (epoch 1,
    step 4) and the resumed run finishes that epoch from batch 5, ending exactly where an
    uninterrupted run ends (every batch is a function of (seed, global step)). Its progress
    says where it resumed and counts epochs to the run's 3, not to the interrupted one's."""
    from jobi_tf.training.trainer import StopGuard

    straight = train(_cfg(batch_size=40, epochs=3), tmp_path / "straight", verbose=0).metrics
    original = StopGuard.on_train_batch_end

    def signal_in_epoch_2(self, batch, logs=None):
        original(self, batch, logs)
        if (self.epoch, self.step) == (1, 3) and self.signal is None:
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(StopGuard, "on_train_batch_end", signal_in_epoch_2)
    with pytest.raises(TrainingStopped, match=r"stopped by SIGINT at epoch 2, step 4; checkpoint written") as info:
        train(_cfg(batch_size=40, epochs=3), tmp_path / "run", verbose=0)
    assert info.value.exit_code == 130
    monkeypatch.setattr(StopGuard, "on_train_batch_end", original)
    capsys.readouterr()
    _resumes_at_epoch_2_step_4_and_ends_like(straight, tmp_path / "run", verbose=2)
    shown = capsys.readouterr()
    assert "Resuming epoch 2 after step 4 of " in shown.err
    assert [line for line in shown.out.splitlines() if line.startswith("Epoch ")] == ["Epoch 2/3", "Epoch 3/3"]


def test_checkpoint_steps_bound_what_a_crash_loses_and_the_rerun_ends_like_an_uninterrupted_run(tmp_path, monkeypatch):
    """With ``--checkpoint-steps 2`` a crash at epoch 2, step 5 (no handler runs) leaves the
    checkpoint of step 4; the rerun (which may save on another cadence) resumes there and
    ends exactly where an uninterrupted run ends."""
    from jobi_tf.training.trainer import StopGuard

    straight = train(_cfg(batch_size=40, epochs=3), tmp_path / "straight", verbose=0).metrics
    original = StopGuard.on_train_batch_end

    def crash_in_epoch_2(self, batch, logs=None):
        original(self, batch, logs)
        if (self.epoch, self.step) == (1, 5):
            raise RuntimeError("power cut")

    monkeypatch.setattr(StopGuard, "on_train_batch_end", crash_in_epoch_2)
    with pytest.raises(RuntimeError, match="power cut"):
        train(_cfg(batch_size=40, epochs=3, checkpoint_steps=2), tmp_path / "run", verbose=0)
    monkeypatch.setattr(StopGuard, "on_train_batch_end", original)
    _resumes_at_epoch_2_step_4_and_ends_like(straight, tmp_path / "run")


def test_sigint_stops_a_grid_which_exits_and_resumes(tmp_path, straight):
    """A stopped ``jobi-tf grid`` exits (130) instead of hanging in the tf.data iterator's
    teardown, and the same command finishes the cell exactly like an uninterrupted run."""
    fixed = {  # ARGS' settings
        "dataset": "synthetic", "synthetic_entities": 300, "synthetic_relations": 6, "synthetic_triples": 4000,
        "dim": 32, "batch_size": 500, "neg": 20, "joint": True, "p": 0.3, "epochs": 4, "eval_every": 1,
        "patience": 100,
    }  # fmt: skip
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"fixed": fixed, "grid": {"seed": [5]}}))
    args = ["grid", str(spec), "--out", str(tmp_path / "grid")]
    stopped = _faulty(f"signal:{int(signal.SIGINT)}:2:1", args)
    assert stopped.returncode == 130, stopped.stderr[-2000:]
    assert "stopped by SIGINT" in stopped.stderr.strip().splitlines()[-1]
    done = subprocess.run([*COMMAND[:3], *args], capture_output=True, text=True, env=_env(), timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    assert _final(tmp_path / "grid" / "seed-5") == straight


def test_steps_per_execution_trains_the_same_steps_and_a_stop_resumes_at_a_call_boundary(tmp_path, monkeypatch, caplog):
    """``--steps-per-execution 5`` on epochs of 12 steps (calls of 5, 5 and 2: an epoch's last
    call does not run into the next epoch) trains exactly the batches of one step per call; a
    signal in epoch 2 takes effect at the end of the call in flight (step 10), and the resumed
    run ends like the uninterrupted one."""
    from jobi_tf.training.trainer import StopGuard

    straight = train(_cfg(batch_size=20, epochs=3), tmp_path / "straight", verbose=0).metrics
    with caplog.at_level("INFO", logger="jobi_tf.training.callbacks"):
        grouped = train(_cfg(batch_size=20, epochs=3, steps_per_execution=5), tmp_path / "grouped", verbose=0).metrics
    counted = [int(r.getMessage().split()[2]) for r in caplog.records if " steps in " in r.getMessage()]
    assert counted == [12, 12, 12]  # every epoch's steps, none borrowed from the next
    for split in ("valid", "test"):
        assert grouped[split]["mrr"] == pytest.approx(straight[split]["mrr"], abs=1e-6)

    original = StopGuard.on_train_batch_end
    seen = []

    def signal_in_epoch_2(self, batch, logs=None):
        original(self, batch, logs)
        seen.append((self.epoch, self.step))
        if (self.epoch, self.step) == (1, 5) and self.signal is None:
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(StopGuard, "on_train_batch_end", signal_in_epoch_2)
    cfg = _cfg(batch_size=20, epochs=3, steps_per_execution=5)
    with pytest.raises(TrainingStopped, match=r"stopped by SIGINT at epoch 2, step 10; checkpoint written"):
        train(cfg, tmp_path / "run", verbose=0)
    assert seen == [(0, 5), (0, 10), (0, 12), (1, 5), (1, 10)]
    monkeypatch.setattr(StopGuard, "on_train_batch_end", original)
    state = load_checkpoint_state(tmp_path / "run" / "checkpoint.npz")
    assert (state["epoch"], state["step"]) == (1, 10)
    resumed = train(cfg, tmp_path / "run", verbose=0).metrics
    assert [h["epoch"] for h in resumed["history"]] == [1, 2, 3]
    for split in ("valid", "test"):
        assert resumed[split]["mrr"] == pytest.approx(straight[split]["mrr"], abs=1e-6)


def test_periodic_checkpoints_are_taken_when_a_call_of_several_steps_passes_the_mark(tmp_path, caplog):
    """With calls of 5 steps, ``--checkpoint-steps 4`` saves at the first call end past each
    multiple of 4 inside an epoch of 12 (steps 5 and 10), recording the step reached."""
    with caplog.at_level("INFO", logger="jobi_tf.training.callbacks"):
        train(_cfg(batch_size=20, epochs=1, steps_per_execution=5, checkpoint_steps=4), tmp_path / "run", verbose=0)
    written = [r.getMessage() for r in caplog.records if "checkpoint written" in r.getMessage()]
    assert written == ["epoch 1, step 5: checkpoint written", "epoch 1, step 10: checkpoint written"]


def test_steps_per_execution_below_one_is_a_one_line_error_naming_the_flag(tmp_path):
    from click.testing import CliRunner
    from jobi_tf.cli.main import main

    args = ["train", "--dataset", "synthetic", "--steps-per-execution", "0", "--out", str(tmp_path)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code != 0
    assert "--steps-per-execution: must be an integer >= 1. Received: 0" in result.output
    assert not any(tmp_path.iterdir())  # nothing written


def test_steps_per_execution_with_several_replicas_is_refused_before_anything_is_written(tmp_path):
    """TensorFlow 2.21 fails inside Keras's multi-step loop under MirroredStrategy; the run says
    so in one line, naming the flag, before it writes anything."""
    command = [*COMMAND[:4], "--synthetic-entities", "300", "--strategy", "mirrored", "--logical-cpus", "2"]
    command += ["--steps-per-execution", "8", "--out", str(tmp_path / "run")]
    done = subprocess.run(command, capture_output=True, text=True, env=_env(), timeout=240)
    assert done.returncode != 0
    assert "--steps-per-execution: must be 1 with several replicas" in done.stderr
    assert not (tmp_path / "run").exists()


def test_a_signal_in_an_epochs_last_batch_says_after_which_epoch_it_stopped(tmp_path, monkeypatch):
    """Not "at epoch 2, step 0": the epoch it names is the last one trained."""
    from jobi_tf.training.trainer import StopGuard

    original = StopGuard.on_train_batch_end

    def signal_at_the_end_of_epoch_1(self, batch, logs=None):
        if (self.epoch, batch + 1) == (0, self.steps) and self.signal is None:  # during the last batch
            os.kill(os.getpid(), signal.SIGINT)
        original(self, batch, logs)

    monkeypatch.setattr(StopGuard, "on_train_batch_end", signal_at_the_end_of_epoch_1)
    with pytest.raises(TrainingStopped) as info:
        train(_cfg(batch_size=40, epochs=3), tmp_path / "run", verbose=0)
    assert str(info.value) == (
        f"{tmp_path / 'run'}: stopped by SIGINT after epoch 1; checkpoint written, rerun the same command to resume"
    )
    assert (load_checkpoint_state(tmp_path / "run" / "checkpoint.npz")["epoch"], info.value.exit_code) == (1, 130)
