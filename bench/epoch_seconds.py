"""One whole epoch of the baseline and of JoBi through ``jobi-tf train``, in one sitting, and their ratio.

Why through the command: an epoch is what a user waits for, pipeline, step and all; the
compiled step alone (bench/step_parts.py) leaves the input pipeline's share out. Each round
trains the baseline, then JoBi, for one epoch (``--epochs 1``) into fresh folders, and reads
``epoch_seconds`` from each run's history (validation and test time are not in it). The
flags after ``--`` go to both runs; ``--jobi`` and ``--baseline`` hold what differs (``--labels``
renames the two sides when both are JoBi, e.g. two pool sizes; the keys stay in that order).

    python bench/epoch_seconds.py --out /tmp/epochs -- --data-dir /work/data/replicated/K137 --dim 100 \\
        --optimizer adagrad --lr 0.1 --valid-sample 1000
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import emit, provenance, versions  # noqa: E402, I001

JOBI = "--joint --p 0.3 --biased-chunk 10 --pair-every 10"
BASELINE = "--no-joint --p 0"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="scratch folder for the runs (emptied first)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--jobi", default=JOBI, help=f"JoBi's own flags (default: {JOBI})")
    parser.add_argument("--baseline", default=BASELINE, help=f"the baseline's own flags (default: {BASELINE})")
    parser.add_argument(
        "--labels", nargs=2, default=("baseline", "jobi"), metavar=("FIRST", "SECOND"), help="the two sides' names"
    )
    parser.add_argument("common", nargs=argparse.REMAINDER, help="-- then the flags both runs take")
    args = parser.parse_args()
    common = [a for a in args.common if a != "--"]
    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    first, second = args.labels
    seconds: dict[str, list[float]] = {first: [], second: []}
    commands = {}
    for round_ in range(args.rounds):
        for name, own in ((first, args.baseline), (second, args.jobi)):
            run_dir = out / f"{name}-{round_}"
            command = ["jobi-tf", "train", *common, *shlex.split(own), "--epochs", "1", "--out", str(run_dir)]
            commands[name] = " ".join(command[:-1] + ["OUT"])
            subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
            history = json.loads((run_dir / "metrics.json").read_text())["history"]
            seconds[name].append(round(next(h["epoch_seconds"] for h in history if "epoch_seconds" in h), 1))
            shutil.rmtree(run_dir)  # (its checkpoint is the size of the tables: 4.5 GB at 1.85M entities)
    ratios = [j / b for b, j in zip(seconds[first], seconds[second], strict=True)]
    emit(
        {
            "bench": "epoch_seconds",
            "metric": "seconds of one whole epoch through jobi-tf train (validation and test excluded)",
            "epoch_seconds": {name: statistics.median(values) for name, values in seconds.items()},
            "rounds": seconds,
            "ratio": f"{second} / {first}",
            "jobi_over_baseline": {
                "per_round": [round(r, 3) for r in ratios],
                "median": round(statistics.median(ratios), 3),
            },
            "runs": commands,
            **provenance(__file__),
            "versions": versions(),
        }
    )


if __name__ == "__main__":
    main()
