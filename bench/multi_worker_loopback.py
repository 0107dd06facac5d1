"""Two `jobi-tf train --strategy multi-worker` processes on loopback: same weights, one writer.

Both workers (``TF_CONFIG`` on two free ports of 127.0.0.1) train a small synthetic KG into
their own ``--out`` folders (killed after ``--timeout`` seconds or on any failure). Checks:
both exit 0 and report the same ``final_weights_sha256``; the chief's folder holds
``checkpoint.npz`` and ``metrics.json``; the other worker's was never made. One JSON line (the
checks, wall time, log tails, ``cpu_children``); exit 1 if a check failed; ``--log`` keeps
both full logs.

Run:  python bench/multi_worker_loopback.py
      python bench/multi_worker_loopback.py --log /tmp/mw-logs
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import Usage, emit  # noqa: E402


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(args: argparse.Namespace, work: Path) -> dict:
    workers = [f"127.0.0.1:{free_port()}" for _ in range(2)]
    procs, logs = [], []
    common = [
        sys.executable, "-m", "jobi_tf.cli", "-v", "train", "--dataset", "synthetic",
        "--synthetic-entities", "300", "--synthetic-relations", "8", "--synthetic-triples", "4000",
        "--dim", "8", "--batch-size", "200", "--neg", "10", "--shared-negatives", "0", "--joint", "--p", "0.3",
        "--epochs", str(args.epochs), "--eval-every", "1", "--patience", "3", "--monitor", "hits@10",
        "--strategy", "multi-worker",
    ]  # fmt: skip
    start = time.monotonic()
    with Usage(resource.RUSAGE_CHILDREN) as children:  # the workers, once waited for
        try:
            for i in range(2):
                tf_config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": i}}
                env = dict(os.environ, TF_CONFIG=json.dumps(tf_config))
                env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
                log = open(work / f"worker{i}.log", "w+")
                logs.append(log)
                cmd = common + ["--out", str(work / f"run-w{i}")]
                procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, env=env, text=True))
            outs = [p.communicate(timeout=args.timeout)[0] for p in procs]
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
    seconds = time.monotonic() - start
    cpu_children = children.record()
    results = []
    for out in outs:
        lines = [line for line in out.splitlines() if line.startswith("{")]
        results.append(json.loads(lines[-1]) if lines else {})
    tails = []
    for log in logs:
        log.seek(0)
        tails.append(log.read().splitlines()[-5:])
        log.close()
    digests = [r.get("final_weights_sha256") for r in results]
    checks = {
        "both_exit_0": all(p.returncode == 0 for p in procs),
        "same_final_weights": digests[0] is not None and digests[0] == digests[1],
        "chief_wrote_checkpoint": (work / "run-w0" / "checkpoint.npz").exists()
        and (work / "run-w0" / "metrics.json").exists(),
        "other_worker_wrote_nothing": not (work / "run-w1").exists(),
    }
    return {
        "checks": checks,
        "seconds": round(seconds, 1),
        "workers": workers,
        "results": results,
        "log_tails": tails,
        "cpu_children": cpu_children,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument("--log", help="folder to keep the workers' logs and run folders in")
    args = parser.parse_args()
    if args.log:
        work = Path(args.log)
        work.mkdir(parents=True, exist_ok=True)
        record = run(args, work)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            record = run(args, Path(tmp))
    emit({"bench": "multi_worker_loopback", **record})
    sys.exit(0 if all(record["checks"].values()) else 1)


if __name__ == "__main__":
    main()
