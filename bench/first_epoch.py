"""Where a run's first epoch ends, against the floor: validation MRR after epoch 1 beside what
counting slot frequencies scores on the same split (bench/popularity_ranking.py's ranking).

Why: the question of issue #61 is whether a 1-vs-all recipe learns from its first epoch on a
sparse graph; a first epoch that ends below the count has learned less than no training at
all. This trains ``jobi-tf train ARGS --epochs 1 --eval-every 1 --out OUT`` (ARGS passed on
unchanged, so a preset and its flags are the user's own) in a subprocess, then reads its
``metrics.json`` and ``config.json``.

Run:  python bench/first_epoch.py --out /tmp/fe -- --data-dir DIR --preset kbc-fast --slot-prior 1
Prints one JSON line: the command, the machine, the run's resolved config, epoch 1's triple
loss, validation MRR and warnings, and the floor's validation MRR.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

from _common import emit, machine  # noqa: E402
from popularity_ranking import popularity_ranks  # noqa: E402

from jobi_tf.config import DataConfig  # noqa: E402
from jobi_tf.datasets.loading import load_index  # noqa: E402
from jobi_tf.evaluation.ranking import rank_metrics, tie_ranks  # noqa: E402


def floor_mrr(data: DataConfig) -> float:
    """Validation MRR of the slot-count ranking, both directions (filtered, realistic ties)."""
    _, _, index = load_index(data)
    ranks = [tie_ranks(*popularity_ranks(index, index.valid, tail)) for tail in (True, False)]
    return float(rank_metrics(np.concatenate(ranks))["mrr"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="the run folder (replaced)")
    parser.add_argument("train_args", nargs=argparse.REMAINDER, help="-- then jobi-tf train's arguments")
    args = parser.parse_args()
    train_args = [a for a in args.train_args if a != "--"]
    shutil.rmtree(args.out, ignore_errors=True)
    command = ["jobi-tf", "-q", "train", *train_args, "--epochs", "1", "--eval-every", "1", "--out", args.out]
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "jobi_tf.cli", *command[1:]], check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    metrics = json.loads((Path(args.out) / "metrics.json").read_text())
    config = json.loads((Path(args.out) / "config.json").read_text())
    epoch = metrics["history"][0]
    data = DataConfig(**config["data"])
    emit(
        {
            "bench": "first_epoch",
            "epoch_1": {
                "triple_loss": epoch.get("triple_loss"),
                "valid_mrr": epoch.get("mrr"),
                "epoch_seconds": epoch.get("epoch_seconds"),
            },
            "floor_valid_mrr": floor_mrr(data),
            "warnings": [w["message"] for w in metrics.get("warnings", [])],
            "config": config,
            "wall_seconds": round(wall, 1),
            "machine": machine(),
            "command": " ".join(["python", *sys.argv]),
            "trains": " ".join(command),
        }
    )


if __name__ == "__main__":
    main()
