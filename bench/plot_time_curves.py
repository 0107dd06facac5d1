"""Plot validation MRR against training time for several runs (sampled vs 1-vs-all, say).

Run:  python bench/plot_time_curves.py RUN [RUN ...] --out docs/results/mrr-vs-time.png [--labels A B ...]
          [--epoch-seconds S [S ...]] [--keep EARLIER.json]

Reads each run's TensorBoard events (``RUN/tensorboard``): ``speed/epoch_seconds`` (summed
over every session that trained the run: an epoch cut by a stop and finished after a resume
has two points, both counted) and ``valid/mrr``. The time of a validation is the training
time of the epochs up to it, validation itself excluded, so runs that validate at different
rates compare on training time alone. Runs trained while other jobs shared the machine have
inflated epoch times: ``--epoch-seconds`` gives each run's per-epoch cost measured on a quiet
machine instead (epochs are deterministic, so epoch × cost is the time the same run would
take there). ``--keep`` draws the curves of an earlier plot (the JSON line it printed) beside
the new runs, so that a plot outlives the event files of runs trained on another machine.
Prints one JSON line with the plotted points. Needs matplotlib
(``pip install ".[plots]"``); it is not a dependency of the library.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path


def scalars(run: Path) -> dict[str, list[tuple[int, float]]]:
    """``{tag: [(step, value), ...]}`` of every scalar in the run's event files, in file order."""
    import tensorflow as tf

    out: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for events in sorted((run / "tensorboard").glob("events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(str(events)):
            for value in event.summary.value:
                if not value.HasField("tensor"):
                    out[value.tag].append((int(event.step), value.simple_value))
                elif value.metadata.plugin_data.plugin_name == "scalars":
                    out[value.tag].append((int(event.step), float(tf.make_ndarray(value.tensor))))
    return out


def time_curve(run: Path, epoch_seconds: float | None = None) -> list[dict[str, float]]:
    """``[{"epoch", "train_seconds", "mrr"}, ...]``: each validation at its training time (the
    run's own, or ``epoch * epoch_seconds``)."""
    tags = scalars(run)
    seconds: dict[int, float] = defaultdict(float)
    for epoch, value in tags.get("speed/epoch_seconds", []):
        seconds[epoch] += value
    points = []
    for epoch, mrr in tags.get("valid/mrr", []):
        spent = epoch * epoch_seconds if epoch_seconds else sum(s for e, s in seconds.items() if e <= epoch)
        points.append({"epoch": epoch, "train_seconds": round(spent, 1), "mrr": round(mrr, 4)})
    if not points:
        raise SystemExit(f"{run}: no valid/mrr in {run / 'tensorboard'}")
    return points


def kept_curves(path: Path) -> dict[str, list[dict[str, float]]]:
    """The curves of an earlier plot, from the JSON line this script printed for it."""
    try:
        return json.loads(path.read_text())["curves"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise SystemExit(f"--keep {path}: not a JSON line of plot_time_curves ({error})") from None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path, nargs="*")
    parser.add_argument("--labels", nargs="+", help="one per run (default: the folder names)")
    parser.add_argument("--out", type=Path, required=True, help="PNG file to write")
    parser.add_argument(
        "--epoch-seconds", type=float, nargs="+", help="one per run: quiet-machine seconds per epoch (0: the run's own)"
    )
    parser.add_argument("--title", default="FB15k-237: validation MRR against training time")
    parser.add_argument("--keep", type=Path, help="an earlier plot's JSON line: its curves are drawn too")
    args = parser.parse_args()
    if not args.runs and not args.keep:
        parser.error("give runs, --keep, or both")
    labels = args.labels or [run.name for run in args.runs]
    costs = [c or None for c in args.epoch_seconds] if args.epoch_seconds else [None] * len(args.runs)
    for name, given in (("--labels", labels), ("--epoch-seconds", costs)):
        if len(given) != len(args.runs):
            raise SystemExit(f"{name}: {len(given)} values for {len(args.runs)} runs")
    curves = kept_curves(args.keep) if args.keep else {}
    curves |= {label: time_curve(run, cost) for label, run, cost in zip(labels, args.runs, costs, strict=True)}

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, points in curves.items():
        ax.plot([p["train_seconds"] / 60 for p in points], [p["mrr"] for p in points], marker="o", ms=3, label=label)
    ax.set_xlabel("training time (minutes, validation excluded)")
    ax.set_ylabel("validation MRR (filtered)")
    ax.set_title(args.title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=120)
    print(json.dumps({"bench": "plot_time_curves", "out": str(args.out), "curves": curves}))


if __name__ == "__main__":
    main()
