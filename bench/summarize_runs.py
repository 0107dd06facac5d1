"""Markdown table of finished run folders (their metrics.json and config.json).

Run:  python bench/summarize_runs.py runs/fb237-complex-base runs/fb237-complex-jobi
Prints the table on stdout, then one JSON line with the same numbers.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main() -> None:
    rows = []
    for folder in map(Path, sys.argv[1:]):
        metrics = json.loads((folder / "metrics.json").read_text())
        cfg = json.loads((folder / "config.json").read_text())
        test = metrics["test"]
        rows.append(
            {
                "run": folder.name,
                "joint": cfg["model"]["joint"],
                "p": cfg["sampler"]["p"],
                "batch x neg": f"{cfg['sampler']['batch_size']} x {cfg['sampler']['neg']}",
                "shared": cfg["sampler"]["shared_negatives"],
                # Runs made before --corrupt-side existed flipped the coin per negative.
                "side": cfg["sampler"].get("corrupt_side", "per-negative"),
                "eval_every": cfg["train"]["eval_every"],
                "test_mrr": round(test["mrr"], 4),
                "test_h1": round(test["hits@1"], 4),
                "test_h3": round(test["hits@3"], 4),
                "test_h10": round(test["hits@10"], 4),
                "valid_h10": round(metrics["valid"]["hits@10"], 4),
                "best_epoch": metrics["best_epoch"],
                "epochs": metrics["epochs"],
                "train_min": round(metrics["train_seconds"] / 60, 1),
            }
        )
    keys = list(rows[0])
    print("| " + " | ".join(keys) + " |")
    print("|" + "---|" * len(keys))
    for row in rows:
        print("| " + " | ".join(str(row[k]) for k in keys) + " |")
    print(json.dumps({"bench": "summarize_runs", "rows": rows}))


if __name__ == "__main__":
    main()
