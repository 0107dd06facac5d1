"""One whole epoch of the baseline and of JoBi through ``jobi-tf train``, in one sitting, and their ratio.

Why through the command: an epoch is what a user waits for, pipeline, step and all; the
compiled step alone leaves the input pipeline's share out. Each round
trains the baseline, then JoBi, for one epoch (``--epochs 1``) into fresh folders, and reads
``epoch_seconds`` from each run's history (validation and test time are not in it). The
flags after ``--`` go to both runs; ``--jobi`` and ``--baseline`` hold what differs (``--labels``
renames the two sides when both are JoBi, e.g. two pool sizes; the keys stay in that order).

With ``--pbg-python`` each round also trains PyTorch-BigGraph for one epoch on the same graph
(``bench/peer_pbg.py --mode epochs`` in PBG's own virtualenv, ``--pbg-flags``: by default the work per
positive of the step-cost comparisons, 50 uniform negatives per side, dim 200 floats a row, one
Hogwild worker), so the three epochs share a sitting; PBG's seconds are its own ``Processed N
edges in X s``. ``--pbg-import-from`` names a folder whose ``pbg_data`` holds PBG's import of the
same graph (hard-linked, so the 19M-edge import is not redone; the import is never timed).

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
from _common import emit, provenance, ratio_entry, versions  # noqa: E402, I001

JOBI = "--joint --p 0.3 --biased-chunk 10 --pair-every 10"
BASELINE = "--no-joint --p 0"
PBG = (
    "--dim 200 --batch-size 1000 --uniform-negs 50 --batch-negs 0 --lr 0.1 --workers 1 --loss softmax "
    "--operator complex_diagonal --comparator dot --hogwild-delay 0.0 --seed 0"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="scratch folder for the runs (emptied first)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--jobi", default=JOBI, help=f"JoBi's own flags (default: {JOBI})")
    parser.add_argument("--baseline", default=BASELINE, help=f"the baseline's own flags (default: {BASELINE})")
    parser.add_argument(
        "--labels", nargs=2, default=("baseline", "jobi"), metavar=("FIRST", "SECOND"), help="the two sides' names"
    )
    parser.add_argument("--pbg-python", help="PBG's virtualenv python: add a PyTorch-BigGraph epoch to each round")
    parser.add_argument("--pbg-flags", default=PBG, help=f"bench/peer_pbg.py's flags (default: {PBG})")
    parser.add_argument("--pbg-import-from", help="a folder whose pbg_data holds PBG's import of the same graph")
    parser.add_argument("common", nargs=argparse.REMAINDER, help="-- then the flags both runs take")
    args = parser.parse_args()
    common = [a for a in args.common if a != "--"]
    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    first, second = args.labels
    seconds: dict[str, list[float]] = {first: [], second: []}
    commands, pbg_resolved = {}, None
    for round_ in range(args.rounds):
        for name, own in ((first, args.baseline), (second, args.jobi)):
            epoch, commands[name] = jobi_tf_epoch([*common, *shlex.split(own)], out / f"{name}-{round_}")
            seconds[name].append(epoch)
        if args.pbg_python:
            pbg_seconds, commands["pytorch-biggraph"], pbg_resolved = pbg_epoch(args, common, out / f"pbg-{round_}")
            seconds.setdefault("pytorch-biggraph", []).append(pbg_seconds)
    ratios = [j / b for b, j in zip(seconds[first], seconds[second], strict=True)]
    pbg = seconds.get("pytorch-biggraph")
    pbg_ratios = [p / b for b, p in zip(seconds[first], pbg, strict=True)] if pbg else []
    emit(
        {
            "bench": "epoch_seconds",
            "metric": "seconds of one whole epoch through jobi-tf train (validation and test excluded)",
            "epoch_seconds": {name: round(statistics.median(values), 2) for name, values in seconds.items()},
            "rounds": seconds,
            "ratio": f"{second} / {first}",
            "jobi_over_baseline": ratio_entry(ratios),
            **({"pbg_over_baseline": {"per_round": [round(r, 3) for r in pbg_ratios]}} if pbg_ratios else {}),
            "runs": commands,
            **({"pbg_resolved": pbg_resolved} if pbg_resolved else {}),
            **provenance(__file__),
            "versions": versions(),
        }
    )


def jobi_tf_epoch(flags: list[str], run_dir: Path) -> tuple[float, str]:
    """Seconds of one ``jobi-tf train`` epoch (its history's ``epoch_seconds``) and the command."""
    command = ["jobi-tf", "train", *flags, "--epochs", "1", "--out", str(run_dir)]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    history = json.loads((run_dir / "metrics.json").read_text())["history"]
    shutil.rmtree(run_dir)  # (its checkpoint is the size of the tables: 4.5 GB at 1.85M entities)
    seconds = round(next(h["epoch_seconds"] for h in history if "epoch_seconds" in h), 1)
    return seconds, " ".join(command[:-1] + ["OUT"])


def pbg_epoch(args, common: list[str], out: Path) -> tuple[float, str, dict]:
    """One PyTorch-BigGraph epoch on the runs' ``--data-dir``: PBG's own seconds, the command,
    and PBG's full resolved configuration with our overrides of its defaults and its versions."""
    if "--data-dir" not in common:
        sys.exit("--pbg-python needs the runs' graph as --data-dir FOLDER after --")
    data_dir = common[common.index("--data-dir") + 1]
    out.mkdir(parents=True)
    if args.pbg_import_from:  # PBG's import of the same graph, hard-linked (never timed)
        subprocess.run(["cp", "-al", str(Path(args.pbg_import_from) / "pbg_data"), str(out / "pbg_data")], check=True)
    script = Path(__file__).with_name("peer_pbg.py")
    own = ["--mode", "epochs", "--data-dir", data_dir, *shlex.split(args.pbg_flags)]
    own += ["--epochs", "1", "--export-every", "1000000"]
    command = [args.pbg_python, str(script), *own, "--out", str(out)]
    done = subprocess.run(command, check=True, capture_output=True, text=True)
    record = json.loads(done.stdout.strip().splitlines()[-1])
    shutil.rmtree(out)
    resolved = {k: record[k] for k in ("pbg_config", "overrides_of_pbg_defaults", "versions", "warm_workers")}
    command = " ".join(["python", "bench/peer_pbg.py", *own, "--out", "OUT"])
    return round(record["epoch_seconds"][0], 1), command, resolved


if __name__ == "__main__":
    main()
