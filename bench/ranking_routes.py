"""Routes from a run's tables and its slot counts to a ranking: one count weight, or one per slot or per confidence.

Why: the recipe ranks ``s + W log(1 + c)`` with one ``W`` chosen on validation; on a replicated
graph the counts lift hub answers and cost the copied ones (issue 79). A weight chosen per slot
(relation and side) or per bin of the tables' own confidence (their top softmax probability)
could give each query the counts it needs. This ranks every validation and test query (both
sides, filtered by every split's facts, realistic ranks) at a grid of ``W`` with NumPy, chooses
each route's weights on validation and reports test (whole / hub / copied), the per-query best
(a ceiling no route reaches), and, for copied answers, who outranks them: hubs, sibling copies
of the answer, or entities of the answer's own copy. NumPy only and the training triples
streamed (a 1.85M-entity run beside a training: 6 GB); ComplEx runs only (the recipe's).

Run:  python bench/ranking_routes.py --run RUN   (K = 137, one core: about 25 minutes)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _common import emit, peak_rss_gib, provenance, versions  # noqa: E402, I001

GRID = np.array([0, 0.125, 0.25, 0.375, 0.5, 0.625, 0.75, 1.0, 1.5], np.float32)
WHO = (0.0, 0.5)  # the weights at which copied answers' outrankers are counted


def load(run: Path, data: Path):
    """Vocabularies, splits, the facts of the splits' entities (streamed), the tables and counts."""
    labels = (run / "entities.txt").read_text(encoding="utf-8").splitlines()
    eid, rid = (
        {x: i for i, x in enumerate(labels)},
        {x: i for i, x in enumerate((run / "relations.txt").read_text(encoding="utf-8").splitlines())},
    )
    ids = lambda rows: np.array([[eid[h], rid[r], eid[t]] for h, r, t in rows], np.int64).reshape(-1, 3)  # noqa: E731
    split = {
        s: ids(line.split("\t") for line in (data / f"{s}.txt").read_text().splitlines()) for s in ("valid", "test")
    }
    asked = {labels[i] for s in split.values() for i in s[:, [0, 2]].ravel()}
    with open(data / "train.txt", encoding="utf-8") as f:
        kept = ids(t for t in (line.rstrip("\n").split("\t") for line in f) if t[0] in asked or t[2] in asked)
    weights, counts = np.load(run / "best.weights.npz"), np.load(run / "slot_counts.npz")
    copy = np.array([x.partition("#") for x in labels])  # a replicated graph's labels: BASE#COPY
    return labels, split, np.concatenate([kept, *split.values()]), weights, counts, copy


def rank_split(triples, facts, table, rel, keys, values, copy) -> dict[str, np.ndarray]:
    """Per query (tails, then heads): ranks at each ``W`` of `GRID`, its slot, the tables' top
    probability, and for a copied answer the hubs / siblings / own-copy entities above it at `WHO`."""
    e, r, d = len(table), len(rel), table.shape[1] // 2
    hub, base, copy_id = copy[:, 1] == "", copy[:, 0], copy[:, 2]
    out = {k: [] for k in ("ranks", "slot", "answer", "top_p", "above")}
    for side, given, answer in ((0, 0, 2), (1, 2, 0)):
        a, b = table[triples[:, given], :d], table[triples[:, given], d:]
        x, y = rel[triples[:, 1], :d], rel[triples[:, 1], d:]
        q = (
            np.concatenate([a * x - b * y, a * y + b * x], 1)
            if side == 0
            else np.concatenate([x * a + y * b, x * b - y * a], 1)
        )
        known = facts[:, given] * r + facts[:, 1]
        order = np.argsort(known, kind="stable")
        known = known[order]
        for start in range(0, len(triples), 64):
            scores = table @ q[start : start + 64].T
            for j, t in enumerate(triples[start : start + 64]):
                s, ans, slot = scores[:, j].copy(), t[answer], side * r + t[1]
                lo, hi = np.searchsorted(known, [t[given] * r + t[1], t[given] * r + t[1] + 1])
                s[np.setdiff1d(facts[order[lo:hi], answer], [ans])] = -np.inf
                i, k = np.searchsorted(keys, [slot * e, (slot + 1) * e])
                lc = np.zeros(e, np.float32)
                lc[keys[i:k] - slot * e] = values[i:k]
                ranks, above = [], []
                for w in GRID:
                    z = s + w * lc
                    ranks.append(1 + np.count_nonzero(z > z[ans]) + 0.5 * (np.count_nonzero(z == z[ans]) - 1))
                    if w in WHO and not hub[ans]:
                        up = np.flatnonzero(z > z[ans])
                        own = (base[up] != base[ans]) & (copy_id[up] == copy_id[ans])
                        above.append(
                            [np.count_nonzero(hub[up]), np.count_nonzero(base[up] == base[ans]), np.count_nonzero(own)]
                        )
                top_p = 1.0 / np.exp(s - s.max()).sum()
                for key, v in zip(out, (ranks, slot, ans, top_p, above or [[-1] * 3] * len(WHO)), strict=True):
                    out[key].append(v)
    return {k: np.asarray(v) for k, v in out.items()}


def choose(valid_key, test_key, valid_rr, fallback, shrink) -> np.ndarray:
    """Per test query, the grid column of its key's best validation MRR, shrunk toward the whole
    validation's by ``shrink`` pseudo-queries (``fallback`` for a key validation never asked)."""
    cols = np.full(len(test_key), fallback)
    for key in np.unique(test_key):
        mine = valid_rr[valid_key == key]
        if len(mine):
            cols[test_key == key] = int(np.argmax(mine.sum(0) + shrink * valid_rr.mean(0)))
    return cols


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", required=True, type=Path, help="a finished sampled ComplEx run with slot_counts.npz")
    parser.add_argument("--data", type=Path, help="its graph's folder (default: the run's --data-dir)")
    parser.add_argument("--bins", type=int, default=3, help="confidence bins (validation quantiles)")
    parser.add_argument(
        "--shrink", type=float, default=5.0, help="per-slot choice: pseudo-queries at the global choice"
    )
    args = parser.parse_args()
    cfg = json.loads((args.run / "config.json").read_text(encoding="utf-8"))
    if cfg["model"]["model"] != "complex" or cfg["model"]["reciprocal"]:
        raise SystemExit(f"{args.run}: ranking_routes ranks ComplEx runs without reciprocal relations only")
    labels, split, facts, weights, counts, copy = load(args.run, args.data or Path(cfg["data"]["data_dir"]))
    table, rel = weights["model/jobi/entity_embeddings"], weights["model/jobi/triple_relations"]
    v, t = (rank_split(split[s], facts, table, rel, counts["keys"], counts["values"], copy) for s in ("valid", "test"))
    v_rr, t_rr, hub = 1.0 / v["ranks"], 1.0 / t["ranks"], copy[:, 1] == ""
    best = int(np.argmax(v_rr.mean(0)))

    def parts(cols) -> dict:
        rr, is_hub = t_rr[np.arange(len(cols)), cols], hub[t["answer"]]
        return {
            "whole": round(rr.mean(), 4),
            "hub": round(rr[is_hub].mean(), 4),
            "copied": round(rr[~is_hub].mean(), 4),
        }

    edges = np.quantile(v["top_p"], np.linspace(0, 1, args.bins + 1)[1:-1])
    routes = {f"one weight, W = {GRID[c]:g}": np.full(len(t_rr), c) for c in range(len(GRID))}
    routes |= {
        "one weight, chosen on validation": np.full(len(t_rr), best),
        "a weight per slot, chosen on validation": choose(v["slot"], t["slot"], v_rr, best, args.shrink),
        f"a weight per confidence bin ({args.bins}), chosen on validation": choose(
            np.digitize(v["top_p"], edges), np.digitize(t["top_p"], edges), v_rr, best, 0.0
        ),
        "each query's best weight (a ceiling)": np.argmax(t_rr, 1),
    }
    copied = t["above"][~hub[t["answer"]]]  # [Q, len(WHO), 3]
    who = {
        f"W = {w:g}": {
            name: {"mean": round(float(copied[:, i, n].mean()), 2), "median": float(np.median(copied[:, i, n])),
                   "share_of_queries": round(float((copied[:, i, n] > 0).mean()), 3)}
            for n, name in enumerate(("hubs", "siblings", "own copy"))
        }
        for i, w in enumerate(WHO)
    }  # fmt: skip
    record = {
        "bench": "ranking_routes",
        "metric": "filtered realistic MRR, both sides, whole validation and test splits, test reported",
        "run": str(args.run),
        "chosen_weight": float(GRID[best]),
        "test": {name: parts(cols) for name, cols in routes.items()},
        "copied_answers_outranked_by": who,
        "queries": {"valid": len(v_rr), "test": len(t_rr)},
        "settings": {"grid": GRID.tolist(), "bins": args.bins, "shrink": args.shrink},
        "config": cfg,
    }
    record.update(peak_rss_gib=round(peak_rss_gib(), 2), **provenance(__file__), versions=versions())
    emit(record)


if __name__ == "__main__":
    main()
