"""The docs' plots, drawn from raw JSON records (no training); each prints one JSON line of what it drew.

* ``curves``: a grid's test metric against one swept setting, one line per variant (paper
  Figures 1–2), from the ``summary.json`` of ``jobi-tf grid``.
* ``accuracy-per-hour``: filtered test metric against training minutes, one line per system,
  from `bench/accuracy_per_hour.py`'s folders (or their JSON), all of one dataset. A point is
  drawn at the minutes it reached (the first validation at or past its budget, the budget's
  dotted line); an open marker is a point taken later than that (``exact: false``); a run
  stopped converged is drawn once, with a dashed flat line to the largest budget. ``--floor``:
  a `bench/popularity_ranking.py` record, drawn as a horizontal line.
* ``crossover``: where each regime wins as the graph grows: per budget, the metric each system
  holds against the graph's entity count (`bench/replicate_kg.py`'s graphs), the seeds' mean
  with a bar from lowest to highest, beside the slot-frequency floor (``--floors``, matched by
  the data folder both records name). A budget not reached, or a point not ``exact``, is left
  out and listed. ``--series LABEL FILE...`` plots records under a label of their own; there a
  `bench/probe_summary.py` record gives a point at every budget its training seconds fit in.

Needs matplotlib (``pip install ".[plots]"``); it is not a dependency of the library.

Run:  python bench/plot.py curves runs/curves-batch --x batch_size --out docs/results/curve-batch.png
      python bench/plot.py accuracy-per-hour runs/aph-fb15k-237-* --out aph.png [--labels A B ...]
      python bench/plot.py crossover docs/results/replicated/aph-*.json \\
          --floors docs/results/replicated/floor-K*.json --budgets 45 120 --out crossover.png
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
from collections import defaultdict
from pathlib import Path

METRICS = ("mrr", "hits@1", "hits@3", "hits@10")
PROGRESS = "accuracy_per_hour.json"
VARIANTS = {"baseline": "Baseline", "biasedneg": "BiasedNeg", "joint": "Joint", "jobi": "JoBi"}
PARTS = ("whole", "hub answers", "copied answers")
SYSTEM_ORDER = ("one-vs-all", "jobi", "baseline", "pbg")
SYSTEMS = {"one-vs-all": "1-vs-all (kbc-fast)", "jobi": "sampled JoBi (defaults)",
           "baseline": "sampled baseline (defaults)", "pbg": "PyTorch-BigGraph"}  # fmt: skip


def read(path: Path, what: str = "a JSON record") -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise SystemExit(f"{path}: not {what} ({error})") from None


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def log_ticks(ax, values) -> None:
    """A log x axis labelled at ``values`` only."""
    ax.set_xscale("log")
    if values:
        ax.set_xticks(values, [f"{v:g}" for v in values])
        ax.minorticks_off()


def save(fig, out: Path, dpi: int) -> None:
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=dpi)


# -- curves -------------------------------------------------------------------------------------
def curves(args) -> dict:
    summary = read(args.grid / "summary.json", "a grid's summary.json")
    lines: dict[str, list[tuple[float, float]]] = {}
    for row in summary["cells"]:
        if row["status"] == "finished":
            variant = row["group"].get("variant", "run")
            lines.setdefault(variant, []).append((row["settings"][args.x], row["test"][args.metric]))
    if not lines:
        raise SystemExit(f"{args.grid}/summary.json: no finished cell to plot")
    fig, ax = pyplot().subplots(figsize=(5, 3.6))
    for variant in [v for v in VARIANTS if v in lines] + [v for v in lines if v not in VARIANTS]:
        points = sorted(lines[variant])
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=VARIANTS.get(variant, variant))
    log_ticks(ax, sorted({p[0] for pts in lines.values() for p in pts}))
    ax.set_xlabel(args.x.replace("_", " "))
    ax.set_ylabel(f"test {args.metric}")
    ax.set_title(args.title or args.grid.name)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    save(fig, args.out, 120)
    return {"bench": "plot_curves", "out": str(args.out), "metric": args.metric, "points": lines}


# -- accuracy-per-hour --------------------------------------------------------------------------
def aph_lines(records: list[dict], labels: list[str], metric: str) -> dict[str, list[dict]]:
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


def aph_draw(ax, lines: dict[str, list[dict]], metric: str, budgets: list[float]) -> None:
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


def accuracy_per_hour(args) -> dict:
    floor = None
    if args.floor is not None:
        try:
            floor = read(args.floor)["results"]["test"]["both"][args.metric]
        except KeyError as error:
            raise SystemExit(f"--floor {args.floor}: not a popularity_ranking.py record ({error})") from None
    records = [read(f / PROGRESS if f.is_dir() else f, "an accuracy_per_hour.json") for f in args.folders]
    labels = args.labels or [f"{r['label']} {(r.get('identity') or {}).get('flags') or ''}".strip() for r in records]
    if len(labels) != len(records):
        raise SystemExit(f"--labels: {len(labels)} labels for {len(records)} folders")
    datasets = sorted({r["dataset"] for r in records})
    if len(datasets) > 1:
        raise SystemExit(f"the folders measure different datasets: {datasets}")
    lines = aph_lines(records, labels, args.metric)
    budgets = {b for r in records for b in r["budgets_min"]}
    budgets = sorted(budgets | {p["budget_min"] for r in records for p in r["points"]})
    fig, ax = pyplot().subplots(figsize=(7, 5.5))
    for budget in budgets:
        ax.axvline(budget, color="grey", lw=0.6, ls=":", zorder=0)
    aph_draw(ax, lines, args.metric, budgets)
    if floor is not None:
        ax.axhline(floor, color="black", lw=1, ls="-.", label="training-frequency count per slot (no training)")
    log_ticks(ax, budgets)
    ax.set_xlabel("training time (minutes; validation and evaluation excluded; dotted: budgets)")
    ax.set_ylabel(f"filtered test {args.metric.upper() if args.metric == 'mrr' else args.metric.capitalize()}")
    ax.set_title(args.title or f"{datasets[0]}: filtered test {args.metric} against training time")
    ax.grid(alpha=0.3)
    # Below the axes: inside, it hides whichever line runs under it.
    ax.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=1, frameon=False)
    save(fig, args.out, 120)
    machines = sorted({json.dumps(r.get("machine"), sort_keys=True) for r in records})
    return {"bench": "plot_accuracy_per_hour", "out": str(args.out), "dataset": datasets[0], "metric": args.metric,
            "lines": lines, "floor": floor, "folders": [str(f) for f in args.folders],
            "machines": [json.loads(m) for m in machines]}  # fmt: skip


# -- crossover ----------------------------------------------------------------------------------
def metric_of(results: dict, part: str, metric: str) -> float:
    """``results`` is a test result (accuracy_per_hour point) or a floor's ``results.test``."""
    if part == "whole":
        return results["both"][metric] if "both" in results else results[metric]
    return results["parts"][part][metric] if "parts" in results else results[part][metric]


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


def crossover_draw(values: dict, floors: dict, args) -> None:
    budgets = args.budgets
    fig, axes = pyplot().subplots(1, len(budgets), figsize=(5.2 * len(budgets), 4.2), sharey=True, squeeze=False)
    floor_points = sorted(floors.values())
    for ax, budget in zip(axes[0], budgets, strict=True):
        ax.plot(*zip(*floor_points, strict=True), "k--", label="slot-frequency floor (no training)")
        for system in sorted(values[budget], key=lambda s: SYSTEM_ORDER.index(s) if s in SYSTEM_ORDER else 99):
            xs = sorted(values[budget][system])
            means = [statistics.mean(values[budget][system][x]) for x in xs]
            low = [m - min(values[budget][system][x]) for x, m in zip(xs, means, strict=True)]
            high = [max(values[budget][system][x]) - m for x, m in zip(xs, means, strict=True)]
            ax.errorbar(xs, means, yerr=[low, high], marker="o", capsize=3, label=SYSTEMS.get(system, system))
        ax.set_xscale("log")
        ax.set_xlabel("entities in the graph")
        ax.set_title(f"after {budget:g} min of training")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(f"filtered test {args.metric} ({args.part})")
    axes[0][-1].legend(fontsize=8)
    if args.title:
        fig.suptitle(args.title)
    save(fig, args.out, 110)


def crossover(args) -> dict:
    floors = {}  # data folder -> (entities, floor value)
    for path in args.floors:
        record = read(path)
        floors[record["data"]] = (record["entities"], metric_of(record["results"]["test"], args.part, args.metric))
    records = [(path, record, record["system"]) for path, record in ((p, read(p)) for p in args.records)]
    for name, *paths in args.series:
        if not paths:
            raise SystemExit(f"--series {name!r}: give one or more records after the label")
        records += [(Path(p), read(Path(p)), name) for p in paths]
    values, missing = points_at(records, floors, args.budgets, args.part, args.metric)
    crossover_draw(values, floors, args)
    plotted = {
        f"{b:g}": {s: {str(n): v for n, v in sorted(per.items())} for s, per in values[b].items()} for b in args.budgets
    }
    floor_out = {str(n): v for n, v in sorted(floors.values())}
    return {"bench": "plot_crossover", "metric": args.metric, "part": args.part, "out": str(args.out),
            "points": plotted, "floor": floor_out, "missing": missing,
            "command": shlex.join(["python", "bench/plot.py", *sys.argv[1:]])}  # fmt: skip


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    kinds = parser.add_subparsers(dest="kind", required=True)
    c = kinds.add_parser("curves", help="a grid's test metric against a swept setting")
    c.add_argument("grid", type=Path, help="grid folder holding summary.json")
    c.add_argument("--x", required=True, help="the swept setting, e.g. batch_size or neg")
    c.add_argument("--metric", default="hits@10", choices=METRICS)
    a = kinds.add_parser("accuracy-per-hour", help="test metric against training minutes, one line per system")
    a.add_argument("folders", type=Path, nargs="+", help="OUT folders of accuracy_per_hour.py (or their JSON)")
    a.add_argument("--labels", nargs="+", help="one per folder (default: the system and its --flags)")
    a.add_argument("--metric", default="mrr", choices=METRICS)
    a.add_argument("--floor", type=Path, help="a popularity_ranking.py JSON: drawn as a horizontal line")
    x = kinds.add_parser("crossover", help="the metric at fixed budgets against the graph's size")
    x.add_argument("records", type=Path, nargs="*", help="accuracy_per_hour.py JSON records")
    x.add_argument("--series", nargs="+", action="append", default=[], metavar=("LABEL", "RECORD"),
                   help="records plotted as LABEL (accuracy_per_hour or probe_summary); repeatable")  # fmt: skip
    x.add_argument("--floors", type=Path, nargs="+", required=True, help="popularity_ranking.py records")
    x.add_argument("--budgets", type=float, nargs="+", default=[45.0, 120.0], help="minutes, one panel each")
    x.add_argument("--metric", default="mrr", choices=METRICS)
    x.add_argument("--part", default="whole", choices=PARTS)
    for p in (c, a, x):
        p.add_argument("--out", type=Path, required=True, help="PNG file to write")
        p.add_argument("--title")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    run = {"curves": curves, "accuracy-per-hour": accuracy_per_hour, "crossover": crossover}[args.kind]
    print(json.dumps(run(args)))


if __name__ == "__main__":
    main()
