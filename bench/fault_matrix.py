"""The fault matrix of docs/reliability.md: each fault met by a tiny ``jobi-tf train --joint --p 0.3``
run on the built-in synthetic graph, what the command printed and exited with, and whether the
run's final metrics equal those of the same run left alone.

Each fault is made the way a user meets it (a signal, bytes cut from a file, a rerun with other
flags) on the real command, in a subprocess; a full disk is a small tmpfs when this machine lets
us mount one (root), else that row says it was skipped.

    python bench/fault_matrix.py --out docs/results/reliability/fault-matrix.json

Prints one JSON line (the summary); the full matrix goes to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import provenance, versions  # noqa: E402, I001

#: The run every fault is made on: 20 epochs of 18 steps on 300 entities, a checkpoint every epoch.
TRAIN = [
    "train", "--dataset", "synthetic", "--synthetic-entities", "300", "--synthetic-relations", "6",
    "--synthetic-triples", "4000", "--dim", "16", "--batch-size", "100", "--neg", "20", "--joint", "--p", "0.3",
    "--epochs", "20", "--eval-every", "1", "--patience", "100", "--seed", "5", "--no-jit",
]  # fmt: skip
#: Keras's progress lines (on stderr): not what the command says about the fault.
PROGRESS = re.compile(r"^(Epoch \d+/\d+|\d+/\d+ |Resuming epoch )")


def _env() -> dict:
    return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", JOBI_TF_LOGICAL_CPUS="")


def _jobi(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "jobi_tf.cli", *args]
    return subprocess.run(command, capture_output=True, text=True, env=_env(), timeout=timeout)


def _train(out: Path, *extra: str) -> subprocess.CompletedProcess:
    return _jobi(*TRAIN, *extra, "--out", str(out))


def _first_line(done: subprocess.CompletedProcess) -> str:
    lines = [line for line in done.stderr.splitlines() if line.strip() and not PROGRESS.match(line)]
    return lines[0] if lines else ""


def _final(out: Path) -> dict | None:
    path = out / "metrics.json"
    if not path.exists():
        return None
    metrics = json.loads(path.read_text())
    keys = ("mrr", "hits@1", "hits@3", "hits@10")
    return {split: {k: metrics[split][k] for k in keys} for split in ("valid", "test")}


def _unfinished(straight: Path, to: Path) -> Path:
    """A copy of the finished run as a crash before its test evaluation leaves it."""
    shutil.copytree(straight, to)
    (to / "metrics.json").unlink()
    return to


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _overwrite(path: Path) -> None:
    with open(path, "r+b") as f:
        f.seek(200)
        f.write(b"\xff" * 16)


def _row(fault: str, done: subprocess.CompletedProcess, kept: str, final: dict | None, reference: dict) -> dict:
    return {
        "fault": fault,
        "exit_code": done.returncode,
        "first_line": _first_line(done),
        "kept": kept,
        "traceback": "Traceback" in done.stderr,
        "final_metrics_equal_uninterrupted": None if final is None else final == reference,
    }


def _kill_after_first_checkpoint(out: Path, sig: int, delay: float) -> subprocess.CompletedProcess:
    """``jobi-tf train`` sent ``sig`` ``delay`` seconds after its first checkpoint appears."""
    command = [sys.executable, "-m", "jobi_tf.cli", *TRAIN, "--out", str(out)]
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
    while not (out / "checkpoint.npz").exists() and child.poll() is None:
        time.sleep(0.05)
    time.sleep(delay)
    if child.poll() is None:
        child.send_signal(sig)
    stdout, stderr = child.communicate(timeout=600)
    return subprocess.CompletedProcess(command, child.returncode, stdout, stderr)


def _damaged_checkpoints(work: Path, straight: Path, reference: dict) -> list[dict]:
    rows = []
    for fault, damage in [
        ("checkpoint.npz truncated, then rerun", _truncate),
        ("checkpoint.npz of 0 bytes, then rerun", lambda p: p.write_bytes(b"")),
        ("checkpoint.npz with 16 bytes overwritten (bad CRC), then rerun", _overwrite),
    ]:
        run = _unfinished(straight, work / f"damaged-{len(rows)}")
        damage(run / "checkpoint.npz")
        done = _train(run)
        rows.append(_row(fault, done, "checkpoint.previous.npz; the damaged file as .damaged", _final(run), reference))
    run = _unfinished(straight, work / "both-damaged")
    _truncate(run / "checkpoint.npz")
    (run / "checkpoint.previous.npz").write_bytes(b"")
    done = _train(run)
    kept = "best.weights.npz (a fresh optimizer)"
    rows.append(_row("both checkpoints damaged, then rerun", done, kept, _final(run), reference))
    run = _unfinished(straight, work / "all-damaged")
    for name in ("checkpoint.npz", "checkpoint.previous.npz", "best.weights.npz"):
        _truncate(run / name)
    done = _train(run)
    rows.append(_row("every saved state damaged, then rerun", done, "every file, for the user", None, reference))
    for command in ("evaluate", "export"):
        run = work / f"best-damaged-{command}"
        shutil.copytree(straight, run)
        _truncate(run / "best.weights.npz")
        args = [command, str(run)] + (["--out", str(work / "exports")] if command == "export" else [])
        done = _jobi(*args)
        rows.append(_row(f"best.weights.npz truncated, then {command}", done, "everything", None, reference))
    return rows


def _longer_runs(work: Path, straight: Path, reference: dict) -> list[dict]:
    rows = []
    run = work / "rerun"
    shutil.copytree(straight, run)
    done = _train(run)
    rows.append(_row("a finished run, the same command again", done, "everything", _final(run), reference))
    longer_reference = work / "straight-6"
    assert _train(longer_reference, "--epochs", "25").returncode == 0
    run = work / "longer"
    shutil.copytree(straight, run)
    done = _train(run, "--epochs", "25")
    rows.append(_row("a finished run, --epochs 20 -> 25", done, "everything", _final(run), _final(longer_reference)))
    return rows


def _full_disk(work: Path, reference: dict) -> dict:
    """A real small filesystem: a tmpfs smaller than the run's folder."""
    mount = work / "tinyfs"
    mount.mkdir()
    size_kb = 200  # the run needs about 380 KB: its first checkpoint fits, the second one beside it does not
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_kb}k", "tmpfs", str(mount)], capture_output=True
    )
    if mounted.returncode:
        return {"fault": "a full disk (tmpfs)", "skipped": "cannot mount a tmpfs here (needs root)"}
    try:
        run = mount / "run"
        done = _train(run)
        moved = work / "moved"
        shutil.copytree(run, moved, ignore=shutil.ignore_patterns(".lock"))
    finally:
        subprocess.run(["umount", str(mount)], check=False)
    rerun = _train(moved)  # the same run on a disk with room: it resumes from what the full one kept
    kept = f"the files written before the disk filled ({size_kb} KB tmpfs); the run resumed elsewhere"
    row = _row("a full disk (tmpfs)", done, kept, _final(moved), reference)
    row["rerun_exit_code"] = rerun.returncode
    return row


def _soak(work: Path, kills: int, reference: dict, seed: int = 0) -> dict:
    """``kills`` SIGKILLs of one run, each at a random moment (0 to 0.5 s) after the run's first
    new checkpoint of that session (so each lands in training, validation or a checkpoint being
    written: the run also checkpoints every 5 steps), each followed by the same command, then
    one last rerun left to finish."""
    rng = random.Random(seed)
    run = work / "soak"
    checkpoint = run / "checkpoint.npz"
    command = [sys.executable, "-m", "jobi_tf.cli", *TRAIN, "--checkpoint-steps", "5", "--out", str(run)]
    landed = attempts = 0
    while landed < kills and attempts < 2 * kills and not (run / "metrics.json").exists():
        attempts += 1
        before = checkpoint.stat().st_mtime_ns if checkpoint.exists() else None
        child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=_env())
        while child.poll() is None and (not checkpoint.exists() or checkpoint.stat().st_mtime_ns == before):
            time.sleep(0.02)
        time.sleep(rng.uniform(0.0, 0.5))
        if child.poll() is None:
            child.kill()
            landed += 1
        child.wait()
    done = _train(run)
    row = _row(f"{landed} kill -9 at random moments, each followed by a rerun", done, "the last checkpoint",
               _final(run), reference)  # fmt: skip
    row["attempts"] = attempts  # the others ended before their kill (the run had finished)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs/results/reliability/fault-matrix.json"))
    parser.add_argument("--soak", type=int, default=20, help="SIGKILLs of the soak row (0: no soak)")
    args = parser.parse_args()
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="fault-matrix-") as tmp:
        work = Path(tmp)
        straight = work / "straight"
        assert _train(straight).returncode == 0
        reference = _final(straight)
        rows = []
        killed = work / "sigkill"
        done = _kill_after_first_checkpoint(killed, signal.SIGKILL, 0.2)
        rows.append(_row("SIGKILL after the first checkpoint", done, "the last checkpoint", None, reference))
        rows[-1]["final_metrics_equal_uninterrupted"] = _train(killed).returncode == 0 and _final(killed) == reference
        stopped = work / "sigint"
        done = _kill_after_first_checkpoint(stopped, signal.SIGINT, 0.2)
        rows.append(_row("SIGINT (Ctrl-C) after the first checkpoint", done, "a checkpoint of that batch", None, {}))
        rows[-1]["final_metrics_equal_uninterrupted"] = _train(stopped).returncode == 0 and _final(stopped) == reference
        rows += _damaged_checkpoints(work, straight, reference)
        rows += _longer_runs(work, straight, reference)
        rows.append(_full_disk(work, reference))
        if args.soak:
            rows.append(_soak(work, args.soak, reference))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    matrix = {"bench": "fault_matrix", "train_command": ["jobi-tf", *TRAIN], "faults": rows}
    matrix.update(seconds=round(time.time() - started, 1), **provenance(__file__), versions=versions())
    args.out.write_text(json.dumps(matrix) + "\n", encoding="utf-8")  # one line, as every raw file
    summary = {
        "bench": "fault_matrix",
        "metric": "faults whose run ended with the uninterrupted run's metrics (of those that finish)",
        "value": sum(r.get("final_metrics_equal_uninterrupted") is True for r in rows),
        "of": sum(r.get("final_metrics_equal_uninterrupted") is not None for r in rows),
        "faults": len(rows),
        "tracebacks": sum(bool(r.get("traceback")) for r in rows),
        "seconds": round(time.time() - started, 1),
        "out": str(args.out),
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
