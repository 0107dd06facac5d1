"""Plot a grid's test metric against one swept setting, one line per variant (paper Figures 1–2).

Run:  python bench/plot_curves.py runs/curves-batch --x batch_size --out docs/results/curve-batch.png
      (after `jobi-tf grid bench/grids/curves-batch-fb15k-237.json --out runs/curves-batch`)

Reads the grid's ``summary.json`` (written by ``jobi-tf grid``), plots every finished cell
and prints one JSON line with the plotted points. Needs matplotlib (``pip install
".[plots]"``); it is not a dependency of the library.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

LABELS = {"baseline": "Baseline", "biasedneg": "BiasedNeg", "joint": "Joint", "jobi": "JoBi"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("grid", type=Path, help="grid folder holding summary.json")
    parser.add_argument("--x", required=True, help="the swept setting, e.g. batch_size or neg")
    parser.add_argument("--metric", default="hits@10", choices=["mrr", "hits@1", "hits@3", "hits@10"])
    parser.add_argument("--out", type=Path, required=True, help="PNG file to write")
    parser.add_argument("--title", default=None)
    args = parser.parse_args()

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summary = json.loads((args.grid / "summary.json").read_text())
    lines: dict[str, list[tuple[float, float]]] = {}
    for row in summary["cells"]:
        if row["status"] != "finished":
            continue
        variant = row["group"].get("variant", "run")
        lines.setdefault(variant, []).append((row["settings"][args.x], row["test"][args.metric]))
    if not lines:
        raise SystemExit(f"{args.grid}/summary.json: no finished cell to plot")
    fig, ax = plt.subplots(figsize=(5, 3.6), dpi=120)
    for variant in [v for v in LABELS if v in lines] + [v for v in lines if v not in LABELS]:
        points = sorted(lines[variant])
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=LABELS.get(variant, variant))
    ax.set_xscale("log")
    xs = sorted({p[0] for pts in lines.values() for p in pts})
    ax.set_xticks(xs, [f"{x:g}" for x in xs])
    ax.minorticks_off()
    ax.set_xlabel(args.x.replace("_", " "))
    ax.set_ylabel(f"test {args.metric}")
    ax.set_title(args.title or args.grid.name)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out)
    print(json.dumps({"bench": "plot_curves", "out": str(args.out), "metric": args.metric, "points": lines}))


if __name__ == "__main__":
    main()
