"""Two multi-worker processes on loopback (bench/multi_worker_loopback.py): same final
weights on both, and only the chief wrote the run folder."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "multi_worker_loopback.py"


def test_two_workers_on_loopback_end_equal_and_only_the_chief_writes(tmp_path):
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--epochs", "1", "--timeout", "240", "--log", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    record = json.loads(done.stdout.strip().splitlines()[-1])
    assert record["checks"] == {
        "both_exit_0": True,
        "same_final_weights": True,
        "chief_wrote_checkpoint": True,
        "other_worker_wrote_nothing": True,
    }, record["log_tails"]
    assert done.returncode == 0
    assert len(record["results"][0]["final_weights_sha256"]) == 64
