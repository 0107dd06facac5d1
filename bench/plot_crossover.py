"""Plot where each training regime wins as a graph grows: the test metric each system holds
at fixed training budgets, against the graph's entity count, beside the slot-frequency floor.

Why a plot of its own: `bench/plot_accuracy_per_hour.py` draws one graph's curves over time;
the question "from which size on does 1-vs-all lose to sampled JoBi" needs the same budget
read across graphs of several sizes (`bench/replicate_kg.py`'s K = 1, 4, 8, 137).

Steps:
1. Read the `bench/accuracy_per_hour.py` records and the `bench/popularity_ranking.py` floors;
   a record's graph is matched to its floor by the data folder both name, and the floor gives
   the entity count (the entities that occur in the graph).
2. For each budget, one panel: one line per system through its runs' points at that budget
   (several seeds: the mean, with a bar from the lowest to the highest), and the floor's line.
   A budget a run has not reached yet is left out, and so is a point the harness could not
   take at its budget (``exact: false``: it holds a later epoch's model); both are said in
   the JSON line. A point evaluated separately can be given as a record of the same shape.
   ``--series LABEL FILE...`` plots records under a label of their own (a recipe beside the
   default one); there a `bench/probe_summary.py` record of a run its own rule stopped gives a
   point at every budget its training seconds fit in (the finished run's best model).
3. Print one JSON line with every plotted value (and what was missing).

Run:  python bench/plot_crossover.py docs/results/replicated/aph-*.json \\
          --floors docs/results/replicated/floor-K*.json --budgets 45 120 \\
          --out docs/results/replicated/crossover.png [--part "copied answers"] \\
          [--series "LABEL" RECORD...]
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
from collections import defaultdict
from pathlib import Path

PARTS = ("whole", "hub answers", "copied answers")
SYSTEM_ORDER = ("one-vs-all", "jobi", "baseline", "pbg")
LABELS = {"one-vs-all": "1-vs-all (kbc-fast)", "jobi": "sampled JoBi (defaults)",
          "baseline": "sampled baseline (defaults)", "pbg": "PyTorch-BigGraph"}  # fmt: skip


def read(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise SystemExit(f"{path}: not a JSON record ({error})") from None


def label(system: str) -> str:
    return LABELS.get(system, system)


def metric_of(results: dict, part: str, metric: str) -> float:
    """``results`` is a test result (accuracy_per_hour point) or a floor's ``results.test``."""
    if part == "whole":
        return results["both"][metric] if "both" in results else results[metric]
    return results["parts"][part][metric] if "parts" in results else results[part][metric]


def floors_by_data(paths: list[Path], part: str, metric: str) -> dict[str, tuple[int, float]]:
    """Data folder -> (entities, floor value)."""
    out = {}
    for path in paths:
        record = read(path)
        out[record["data"]] = (record["entities"], metric_of(record["results"]["test"], part, metric))
    return out


def data_folder(record: dict) -> str:
    """The graph's folder: an accuracy_per_hour record's identity (older ones: its settings), a
    probe_summary record's config."""
    if "identity" in record:
        return record["identity"]["data_dir"]
    return (record.get("settings") or record["config"])["data"]["data_dir"]


def budget_points(record: dict, budgets) -> dict:
    """{budget: point}: an accuracy_per_hour record's points; a probe_summary record's test at
    every budget its whole training fits in (the run stopped by its own rule)."""
    if "points" in record:
        return {p["budget_min"]: p for p in record["points"]}
    fits = [b for b in budgets if record["train_seconds"] <= 60 * b]
    return {b: {"test": record["test"], "exact": True, "epochs": record["best_epoch"]} for b in fits}


def points_at(records: list[tuple[Path, dict, str]], floors: dict, budgets, part: str, metric: str):
    """{budget: {system: {entities: [values over seeds]}}}, and what had no point.
    ``records``: (path, record, the system or series it is plotted as)."""
    values: dict = {b: defaultdict(lambda: defaultdict(list)) for b in budgets}
    missing = []
    for path, record, system in records:
        data = data_folder(record)
        if data not in floors:
            raise SystemExit(f"{path}: no --floors record for its data folder {data}")
        entities = floors[data][0]
        by_budget = budget_points(record, budgets)
        for budget in budgets:
            point = by_budget.get(budget)
            if point is not None and point.get("exact", True):
                values[budget][system][entities].append(metric_of(point["test"], part, metric))
            elif point is not None:  # the model of a later epoch (the budget's own was not tested)
                missing.append(f"{path.name}: {budget:g} min (not exact: the point holds epoch {point['epochs']})")
            else:
                missing.append(f"{path.name}: {budget:g} min")
    return values, missing


def draw(values: dict, floors: dict, budgets, part: str, metric: str, out: Path, title: str | None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(budgets), figsize=(5.2 * len(budgets), 4.2), sharey=True, squeeze=False)
    floor_points = sorted(floors.values())
    for ax, budget in zip(axes[0], budgets, strict=True):
        ax.plot(*zip(*floor_points, strict=True), "k--", label="slot-frequency floor (no training)")
        for system in sorted(values[budget], key=lambda s: SYSTEM_ORDER.index(s) if s in SYSTEM_ORDER else 99):
            xs = sorted(values[budget][system])
            means = [statistics.mean(values[budget][system][x]) for x in xs]
            low = [m - min(values[budget][system][x]) for x, m in zip(xs, means, strict=True)]
            high = [max(values[budget][system][x]) - m for x, m in zip(xs, means, strict=True)]
            ax.errorbar(xs, means, yerr=[low, high], marker="o", capsize=3, label=label(system))
        ax.set_xscale("log")
        ax.set_xlabel("entities in the graph")
        ax.set_title(f"after {budget:g} min of training")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(f"filtered test {metric} ({part})")
    axes[0][-1].legend(fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("records", type=Path, nargs="*", help="accuracy_per_hour.py JSON records")
    parser.add_argument(
        "--series",
        nargs="+",
        action="append",
        default=[],
        metavar=("LABEL", "RECORD"),
        help="records plotted as LABEL (accuracy_per_hour or probe_summary); repeatable",
    )
    parser.add_argument("--floors", type=Path, nargs="+", required=True, help="popularity_ranking.py records")
    parser.add_argument("--budgets", type=float, nargs="+", default=[45.0, 120.0], help="minutes, one panel each")
    parser.add_argument("--metric", default="mrr", choices=("mrr", "hits@1", "hits@3", "hits@10"))
    parser.add_argument("--part", default="whole", choices=PARTS)
    parser.add_argument("--title")
    parser.add_argument("--out", type=Path, required=True, help="PNG file to write")
    args = parser.parse_args()
    floors = floors_by_data(args.floors, args.part, args.metric)
    records = [(path, record, record["system"]) for path, record in ((p, read(p)) for p in args.records)]
    for name, *paths in args.series:
        if not paths:
            parser.error(f"--series {name!r}: give one or more records after the label")
        records += [(Path(p), read(Path(p)), name) for p in paths]
    values, missing = points_at(records, floors, args.budgets, args.part, args.metric)
    draw(values, floors, args.budgets, args.part, args.metric, args.out, args.title)
    plotted = {
        f"{b:g}": {s: {str(n): v for n, v in sorted(per.items())} for s, per in values[b].items()} for b in args.budgets
    }
    floor_out = {str(n): v for n, v in sorted(floors.values())}
    print(json.dumps({"bench": "plot_crossover", "metric": args.metric, "part": args.part, "out": str(args.out),
                      "points": plotted, "floor": floor_out, "missing": missing,
                      "command": shlex.join(["python", "bench/plot_crossover.py", *sys.argv[1:]])}))  # fmt: skip


if __name__ == "__main__":
    main()
