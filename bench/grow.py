"""A graph that grows: warm start (``--init-from``) against retraining from scratch.

Holds out a random share of a dataset's entities with every triple that mentions them (all
splits), trains on the rest (``base``), then adds them back two ways on the whole graph:

* ``grown``: ``jobi-tf train --init-from base`` (new triples + a ``--replay`` share of old ones);
* ``scratch``: ``jobi-tf train`` from fresh tables, the same flags and stopping rule.

Each is scored on the test triples that mention a held-out entity (``new``), on the others
(``old``: the base run's own test set), and on all of them. ``forgetting`` is the base run's
``old`` MRR minus the grown run's (the grown run ranks among 10% more candidates).

Every run is a ``jobi-tf train`` subprocess with its own folder under ``--out``: rerunning
the same command resumes unfinished runs and reuses finished ones. One JSON line on stdout.

    JOBI_TF_DATA_DIR=../shared/datasets python bench/grow.py --out /tmp/grow -- \\
        --preset paper --joint --p 0.3 --dim 100 --monitor mrr --eval-every 2 --patience 2
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from _common import data_dir

import jobi_tf

SPLITS = ("train", "valid", "test")


def _read(folder: Path) -> dict[str, np.ndarray]:
    return {
        s: np.array([line.split("\t") for line in (folder / f"{s}.txt").read_text(encoding="utf-8").splitlines()])
        for s in SPLITS
    }


def _hold_out(full: dict[str, np.ndarray], share: float, seed: int) -> tuple[dict[str, np.ndarray], np.ndarray]:
    entities = np.unique(np.concatenate([full[s][:, [0, 2]].ravel() for s in SPLITS]))
    held = np.sort(np.random.default_rng(seed).choice(entities, size=round(share * len(entities)), replace=False))
    base = {s: t[~(np.isin(t[:, 0], held) | np.isin(t[:, 2], held))] for s, t in full.items()}
    return base, held


def _write(folder: Path, splits: dict[str, np.ndarray]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for s, triples in splits.items():
        (folder / f"{s}.txt").write_text("".join("\t".join(t) + "\n" for t in triples), encoding="utf-8")


def _train(out: Path, data: Path, flags: list[str]) -> dict:
    """A ``jobi-tf train`` run (resumed or reused if its folder exists); its metrics and wall time."""
    started = time.monotonic()
    cmd = [sys.executable, "-m", "jobi_tf.cli", "train", "--data-dir", str(data), "--out", str(out), *flags]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    metrics = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    return {"metrics": metrics, "wall_seconds_this_call": round(time.monotonic() - started, 1)}


def _scores(run_dir: Path, data: Path, groups: dict[str, np.ndarray]) -> dict:
    run = jobi_tf.load_run(run_dir, data=jobi_tf.load_dataset(data))
    out = {}
    for name, triples in groups.items():
        m = run.evaluate(triples.tolist())
        out[name] = {k: round(m[k], 4) for k in ("mrr", "hits@1", "hits@3", "hits@10")} | {"triples": len(triples)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", default="fb15k-237")
    parser.add_argument("--data-dir", default=None, help="the dataset folder (default: $JOBI_TF_DATA_DIR/<dataset>)")
    parser.add_argument("--holdout", type=float, default=0.1, help="share of entities held out")
    parser.add_argument("--holdout-seed", type=int, default=0)
    parser.add_argument("--replay", type=float, default=None, help="--replay of the grown run (default: jobi-tf's)")
    parser.add_argument(
        "--grow-flags",
        default="",
        help="extra jobi-tf train flags of the grown run only, e.g. '--lr 0.0003' (its folder is named after them)",
    )
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("flags", nargs="*", help="jobi-tf train flags shared by the three runs (after --)")
    args = parser.parse_args()

    full_dir = data_dir(args.dataset, args.data_dir)
    full = _read(full_dir)
    base, held = _hold_out(full, args.holdout, args.holdout_seed)
    base_dir = args.out / "data-base"
    if not (base_dir / "test.txt").exists():
        _write(base_dir, base)
    test = full["test"]
    is_new = np.isin(test[:, 0], held) | np.isin(test[:, 2], held)
    groups = {"new": test[is_new], "old": test[~is_new], "all": test}

    runs = {"base": _train(args.out / "base", base_dir, args.flags)}
    extra = args.grow_flags.split() + (["--replay", str(args.replay)] if args.replay is not None else [])
    grown_dir = args.out / "-".join(["grown", *(f.lstrip("-") for f in extra)])
    runs["grown"] = _train(grown_dir, full_dir, [*args.flags, *extra, "--init-from", str(args.out / "base")])
    runs["scratch"] = _train(args.out / "scratch", full_dir, args.flags)

    record = {
        "bench": "grow",
        "dataset": args.dataset,
        "holdout": {"share": args.holdout, "seed": args.holdout_seed, "entities": len(held)},
        "flags": args.flags,
        "grown_flags": extra,
    }
    folders = {"base": args.out / "base", "grown": grown_dir, "scratch": args.out / "scratch"}
    for name, run in runs.items():
        m = run["metrics"]
        data = base_dir if name == "base" else full_dir
        scored = _scores(folders[name], data, {"old": groups["old"]} if name == "base" else groups)
        record[name] = {
            "train_seconds": m["train_seconds"],
            "epochs": m["epochs"],
            "best_epoch": m["best_epoch"],
            **({"warm_start": m["warm_start"]} if "warm_start" in m else {}),
            "test": scored,
        }
    record["forgetting_mrr"] = round(record["base"]["test"]["old"]["mrr"] - record["grown"]["test"]["old"]["mrr"], 4)
    record["grown_minus_scratch_mrr"] = {
        g: round(record["grown"]["test"][g]["mrr"] - record["scratch"]["test"][g]["mrr"], 4) for g in groups
    }
    record["time_ratio_grown_over_scratch"] = round(
        record["grown"]["train_seconds"] / record["scratch"]["train_seconds"], 3
    )
    print(json.dumps(record), flush=True)


if __name__ == "__main__":
    main()
