"""``--strategy parameter-server`` as 5 processes on 127.0.0.1 (1 chief, 2 parameter servers,
2 workers), each started with the same ``jobi-tf train`` command and its own ``TF_CONFIG``,
under a memory cap that every process must respect.

A watchdog samples each process's resident memory (``VmRSS``) every 0.2 s and SIGKILLs any
process above ``--cap-gib`` (a cgroup limit is the better tool where the machine allows one;
an address-space limit does not suit TensorFlow's reservations). Choose a graph whose entity
table and optimizer moments are larger than the cap: the run can then only succeed because
the tables are sharded.

Faults (optional):
* ``--kill-worker-after S``: SIGKILL worker 1 S seconds into training and start it again
  10 s later; training must go on and end.
* ``--kill-ps-after S``: SIGKILL parameter server 1 S seconds into training; the chief must
  stop with one line naming it; then every process is stopped and the same 5 commands are
  started again, which must resume from the last checkpoint and end with metrics.

Prints one JSON line: per phase, each process's exit code and peak RSS (GiB), the chief's
last stderr line, wall time; the run's metrics (steps/s from its history), the size of the
entity table and its moments, and bytes through the loopback interface per training step.

Run:  python bench/ps_loopback.py --data-dir /work/pskg --out /tmp/ps-run --cap-gib 2.5 \\
          --dim 64 --batch-size 1000 --neg 100 --shared-negatives 1000
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _ports import free_ports  # noqa: E402

ROLES = [("ps", 0), ("ps", 1), ("worker", 0), ("worker", 1), ("chief", 0)]


def rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def loopback_bytes() -> int:
    with open("/proc/net/dev") as f:
        for line in f:
            if line.strip().startswith("lo:"):
                return int(line.split(":", 1)[1].split()[0])  # received = sent on loopback
    return 0


class Cluster:
    """The 5 processes of one phase, their logs, and the watchdog that enforces the cap."""

    def __init__(self, command: list[str], spec: dict, log_dir: Path, cap: int, phase: str) -> None:
        self.command, self.spec, self.log_dir, self.cap, self.phase = command, spec, log_dir, cap, phase
        self.procs: dict[str, subprocess.Popen] = {}
        self.peak: dict[str, int] = {}
        self.over_cap: list[str] = []
        self._stop = threading.Event()
        self._watch = threading.Thread(target=self._watchdog, daemon=True)

    def start(self, role: tuple[str, int]) -> None:
        name = f"{role[0]}{role[1]}"
        env = dict(
            os.environ, TF_CONFIG=json.dumps({"cluster": self.spec, "task": {"type": role[0], "index": role[1]}})
        )
        log = open(self.log_dir / f"{self.phase}-{name}.log", "ab")
        self.procs[name] = subprocess.Popen(self.command, env=env, stdout=log, stderr=subprocess.STDOUT)
        self.peak.setdefault(name, 0)

    def start_all(self) -> None:
        for role in ROLES:
            self.start(role)
        self._watch.start()

    def _watchdog(self) -> None:
        """Enforce the cap; every 10 s also log each process's RSS to ``<phase>-rss.tsv``
        (what a process holds while it sets up, trains and evaluates)."""
        started = next_line = time.monotonic()
        with open(self.log_dir / f"{self.phase}-rss.tsv", "w") as timeline:
            timeline.write("seconds\tprocess\trss_gib\n")
            while not self._stop.is_set():
                now = time.monotonic()
                for name, proc in list(self.procs.items()):
                    if proc.poll() is not None:
                        continue
                    rss = rss_bytes(proc.pid)
                    self.peak[name] = max(self.peak[name], rss)
                    if rss > self.cap:
                        self.over_cap.append(name)
                        proc.send_signal(signal.SIGKILL)
                    if now >= next_line:
                        timeline.write(f"{now - started:.0f}\t{name}\t{rss / 2**30:.3f}\n")
                if now >= next_line:
                    timeline.flush()
                    next_line = now + 10
                time.sleep(0.2)

    def kill(self, name: str) -> None:
        proc = self.procs[name]
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait()

    def stop_all(self) -> dict:
        self._stop.set()
        codes = {}
        for name, proc in self.procs.items():
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
            codes[name] = proc.wait()
        return codes

    def last_line(self, name: str, containing: str | None = None) -> str:
        """The last ``Error:`` line of a process's log (else its last line), or the last one ``containing``."""
        lines = (self.log_dir / f"{self.phase}-{name}.log").read_text(errors="replace").strip().splitlines()
        if containing is not None:
            return next((x for x in reversed(lines) if containing in x), "")
        errors = [x for x in lines if x.startswith("Error:")]
        useful = errors or [x for x in lines if x.strip() and "cuda" not in x.lower() and "absl" not in x]
        return useful[-1] if useful else ""


def training_started(log: Path) -> bool:
    """The chief has scheduled steps (its log shows the first progress line or epoch)."""
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return False
    return "blocks on" in text and ("step" in text.lower() or "Epoch" in text)


def run_phase(args, command, spec, log_dir, phase, kill_worker_after=None, kill_ps_after=None) -> dict:
    cluster = Cluster(command, spec, log_dir, int(args.cap_gib * 2**30), phase)
    started = time.monotonic()
    lo_before = loopback_bytes()
    cluster.start_all()
    chief = cluster.procs["chief0"]
    events = []
    fault_at = kill_worker_after if kill_worker_after is not None else kill_ps_after
    train_began = None
    while chief.poll() is None and time.monotonic() - started < args.timeout:
        time.sleep(0.5)
        if train_began is None and training_started(log_dir / f"{phase}-chief0.log"):
            train_began = time.monotonic()
        if fault_at is not None and train_began is not None and time.monotonic() - train_began >= fault_at:
            victim = "worker1" if kill_worker_after is not None else "ps1"
            cluster.kill(victim)
            events.append({"killed": victim, "at_s": round(time.monotonic() - started, 1)})
            fault_at = None
            if victim == "worker1":
                time.sleep(10)
                cluster.start(("worker", 1))
                events.append({"restarted": victim, "at_s": round(time.monotonic() - started, 1)})
    timed_out = chief.poll() is None
    wall = time.monotonic() - started
    lo_bytes = loopback_bytes() - lo_before
    codes = cluster.stop_all()
    return {
        "phase": phase,
        "chief_exit": None if timed_out else codes["chief0"],
        "timed_out": timed_out,
        "wall_s": round(wall, 1),
        "chief_last_line": cluster.last_line("chief0"),
        "chief_resumed": cluster.last_line("chief0", "resuming "),
        "chief_last_checkpoint": cluster.last_line("chief0", "checkpoint written"),
        "peak_rss_gib": {k: round(v / 2**30, 3) for k, v in cluster.peak.items()},
        "over_cap": cluster.over_cap,
        "events": events,
        "loopback_bytes": lo_bytes,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--out", required=True, help="the run folder (removed first unless --resume)")
    ap.add_argument("--log-dir", default=None, help="per-process logs (default: <out>-logs)")
    ap.add_argument("--cap-gib", type=float, default=2.5)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--model", default="complex")
    ap.add_argument("--batch-size", type=int, default=1000)
    ap.add_argument("--neg", type=int, default=100)
    ap.add_argument("--shared-negatives", type=int, default=1000)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--checkpoint-steps", type=int, default=0, help="passed on: checkpoint every N steps")
    ap.add_argument("--kill-worker-after", type=float, default=None)
    ap.add_argument("--kill-ps-after", type=float, default=None)
    ap.add_argument("--timeout", type=float, default=3600)
    ap.add_argument("--resume", action="store_true", help="keep --out (resume an earlier run)")
    args = ap.parse_args()
    out = Path(args.out)
    if out.exists() and not args.resume:
        shutil.rmtree(out)
    log_dir = Path(args.log_dir or f"{args.out}-logs")
    log_dir.mkdir(parents=True, exist_ok=True)
    for stale in log_dir.glob("*.log"):  # a restarted process appends; an earlier invocation must not
        stale.unlink()
    ports = free_ports(5)
    spec = {
        "chief": [f"127.0.0.1:{ports[0]}"],
        "ps": [f"127.0.0.1:{p}" for p in ports[1:3]],
        "worker": [f"127.0.0.1:{p}" for p in ports[3:5]],
    }
    exe = shutil.which("jobi-tf")
    command = [exe] if exe else [sys.executable, "-m", "cli"]
    command += [
        "-v", "train", "--strategy", "parameter-server", "--data-dir", args.data_dir, "--model", args.model,
        "--dim", str(args.dim), "--batch-size", str(args.batch_size), "--neg", str(args.neg),
        "--shared-negatives", str(args.shared_negatives), "--biased-chunk", "0", "--joint", "--p", "0.3",
        "--epochs", str(args.epochs), "--eval-every", "1", "--patience", "3", "--monitor", "hits@10",
        "--checkpoint-steps", str(args.checkpoint_steps),
        "--out", str(out),
    ]  # fmt: skip
    phases = [run_phase(args, command, spec, log_dir, "run", args.kill_worker_after, args.kill_ps_after)]
    if args.kill_ps_after is not None:
        phases.append(run_phase(args, command, spec, log_dir, "rerun"))
    record = {"command": command, "cap_gib": args.cap_gib, "phases": phases}
    metrics_path = out / "metrics.json"
    if metrics_path.exists():
        metrics = json.loads(metrics_path.read_text())
        config = json.loads((out / "config.json").read_text())
        with open(out / "entities.txt") as f:
            entities = sum(1 for _ in f)
        width = (2 if args.model == "complex" else 1) * args.dim
        record["entities"] = entities
        record["entity_table_and_moments_gib"] = round(entities * width * 4 * 3 / 2**30, 3)
        record["test"] = {k: metrics["test"][k] for k in ("mrr", "hits@1", "hits@3", "hits@10")}
        history = metrics["history"]
        record["positives_per_second"] = [round(h["positives_per_second"], 1) for h in history]
        record["steps_per_second"] = [round(h["positives_per_second"] / args.batch_size, 2) for h in history]
        record["optimizer"] = config["train"]["optimizer"]
        steps = sum(h["epoch_seconds"] * h["positives_per_second"] / args.batch_size for h in history)
        record["loopback_bytes_per_step_upper_bound"] = round(sum(p["loopback_bytes"] for p in phases) / max(steps, 1))
    print(json.dumps(record), flush=True)
    return 0 if metrics_path.exists() else 1


if __name__ == "__main__":
    sys.exit(main())
