"""Plot accuracy per hour: filtered test MRR against training minutes, one line per training
system, from the folders `bench/accuracy_per_hour.py` wrote.

Steps:
1. Read each folder's ``accuracy_per_hour.json`` (or the file itself); all must measure the
   same dataset. Unfinished folders are drawn with the points they have so far.
2. Draw each system's points at the training minutes they actually reached (a point is the
   first validation at or past its budget, so it lies at or just right of the budget's dotted
   vertical), log x axis; an open marker is a point taken later than its first validation past
   the budget (``exact: false`` in the JSON). A run stopped converged (``--stop-after``) is
   drawn once at the seconds it stopped, with a dashed flat line to the largest budget: the
   model it holds there is every later budget's.
3. With ``--floor FILE`` (a ``bench/popularity_ranking.py`` record of the same graph), draw
   its test metric as a horizontal line: what a count of training frequencies scores with
   no training at all.
4. Print one JSON line with the plotted points.

Needs matplotlib (``pip install ".[plots]"``); it is not a dependency of the library.

Run:  python bench/plot_accuracy_per_hour.py runs/aph-fb15k-237-* \\
          --out docs/results/accuracy-per-hour-fb15k-237.png [--labels A B ...] [--metric mrr]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

PROGRESS = "accuracy_per_hour.json"
METRICS = ("mrr", "hits@1", "hits@3", "hits@10")


def load(path: Path) -> dict:
    file = path / PROGRESS if path.is_dir() else path
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise SystemExit(f"{file}: not an accuracy_per_hour.json ({error})") from None


def default_label(record: dict) -> str:
    flags = (record.get("identity") or {}).get("flags") or ""
    return f"{record['label']} {flags}".strip()


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", type=Path, nargs="+", help="OUT folders of accuracy_per_hour.py (or their JSON)")
    parser.add_argument("--out", type=Path, required=True, help="PNG file to write")
    parser.add_argument("--labels", nargs="+", help="one per folder (default: the system and its --flags)")
    parser.add_argument("--metric", default="mrr", choices=METRICS)
    parser.add_argument("--title", help="default: DATASET: filtered test METRIC against training time")
    parser.add_argument("--floor", type=Path, help="a popularity_ranking.py JSON: drawn as a horizontal line")
    return parser.parse_args()


def read_floor(path: Path | None, metric: str) -> float | None:
    if path is None:
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))["results"]["test"]["both"][metric]
    except (OSError, ValueError, KeyError) as error:
        raise SystemExit(f"--floor {path}: not a popularity_ranking.py record ({error})") from None


def lines_of(records: list[dict], labels: list[str], metric: str) -> dict[str, list[dict]]:
    """Each folder's points as drawn (and printed), by label, in budget order."""
    lines: dict[str, list[dict]] = {}
    for label, record in zip(labels, records, strict=True):
        if label in lines:
            raise SystemExit(f"two folders are labelled {label!r}; give --labels")
        lines[label] = [
            {
                "budget_min": p["budget_min"],
                "train_minutes": round(p["train_seconds"] / 60, 4),
                "epochs": p["epochs"],
                "best_epoch": p["best_epoch"],
                metric: p["test"][metric],
                "exact": p["exact"],
                "converged": p.get("stop", "").startswith("converged"),
            }
            for p in sorted(record["points"], key=lambda p: p["budget_s"])
        ]
    return lines


def draw(ax, lines: dict[str, list[dict]], metric: str, budgets: list[float]) -> None:
    """One line per system; a converged run's last point carried on dashed; late points open."""
    for label, points in lines.items():
        if not points:
            continue
        drawn = [p for p in points if not p["converged"]] + [p for p in points if p["converged"]][:1]
        xs, ys = [p["train_minutes"] for p in drawn], [p[metric] for p in drawn]
        (line,) = ax.plot(xs, ys, marker="o", ms=5, label=label)
        if drawn[-1]["converged"]:  # stopped: the same model for every later budget
            ax.plot([xs[-1], max(budgets)], [ys[-1], ys[-1]], ls="--", lw=1, color=line.get_color())
        late = [p for p in points if not p["exact"]]
        if late:
            xs, ys = [p["train_minutes"] for p in late], [p[metric] for p in late]
            ax.plot(xs, ys, ls="none", marker="o", ms=8, mfc="white", mec=line.get_color())


def plot(args, lines: dict, budgets: list[float], floor: float | None, dataset: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 5.5))
    for budget in budgets:
        ax.axvline(budget, color="grey", lw=0.6, ls=":", zorder=0)
    draw(ax, lines, args.metric, budgets)
    if floor is not None:
        ax.axhline(floor, color="black", lw=1, ls="-.", label="training-frequency count per slot (no training)")
    ax.set_xscale("log")
    if budgets:
        ax.set_xticks(budgets, [f"{b:g}" for b in budgets])
        ax.minorticks_off()
    ax.set_xlabel("training time (minutes; validation and evaluation excluded; dotted: budgets)")
    ax.set_ylabel(f"filtered test {args.metric.upper() if args.metric == 'mrr' else args.metric.capitalize()}")
    ax.set_title(args.title or f"{dataset}: filtered test {args.metric} against training time")
    ax.grid(alpha=0.3)
    # Below the axes: inside, it hides whichever line runs under it.
    ax.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=1, frameon=False)
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=120)


def main() -> None:
    args = parse_args()
    floor = read_floor(args.floor, args.metric)
    records = [load(f) for f in args.folders]
    labels = args.labels or [default_label(r) for r in records]
    if len(labels) != len(records):
        raise SystemExit(f"--labels: {len(labels)} labels for {len(records)} folders")
    datasets = sorted({r["dataset"] for r in records})
    if len(datasets) > 1:
        raise SystemExit(f"the folders measure different datasets: {datasets}")
    lines = lines_of(records, labels, args.metric)
    budgets = {b for r in records for b in r["budgets_min"]}
    budgets = sorted(budgets | {p["budget_min"] for r in records for p in r["points"]})
    plot(args, lines, budgets, floor, datasets[0])
    machines = sorted({json.dumps(r.get("machine"), sort_keys=True) for r in records})
    record = {
        "bench": "plot_accuracy_per_hour",
        "out": str(args.out),
        "dataset": datasets[0],
        "metric": args.metric,
        "lines": lines,
        "floor": floor,
        "folders": [str(f) for f in args.folders],
        "machines": [json.loads(m) for m in machines],
    }
    print(json.dumps(record))


if __name__ == "__main__":
    main()
