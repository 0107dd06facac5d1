"""The counts and a neighbourhood score at ranking, on whole splits: s + W log(1+c) + V log(1 + 10 RA).

Why: the copies of a replicated graph are told apart by their own facts (issue 79), and a
candidate two steps from the query's entity through few-neighbour entities is likely its own
copy's. A screening on samples (retired: ``git show c8fd0dc:bench/neighbourhood_probe.py``) lifted
the whole above 0.21 on 600 test triples; this measures it on every validation and test triple.

RA is resource allocation (Zhou, Lü and Zhang, 2009; Liben-Nowell and Kleinberg, 2007, for
neighbourhood scores in link prediction) over the undirected training graph, relations ignored:
for each candidate, the sum of 1/deg(z) over the given entity's neighbours z next to it (at most
1,000 neighbours, sampled with a fixed seed; none of degree over 2,000, which add under 1/2,000 a
path; an edge counted as often as it occurs, whatever its relation). (W, V) is chosen on the
whole validation split (best whole MRR; ties: the smaller pair), then the whole test split is
ranked at every pair. NumPy, both sides, filtered, realistic ranks; ComplEx and DistMult tables.
``--ranks-out`` keeps every query's ranks for later reading.

Run:  python bench/neighbourhood_weight.py --run RUN --graph GRAPH_FOLDER --command "jobi-tf train ..."
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _common import emit, peak_rss_gib, provenance, versions  # noqa: E402
from popularity_ranking import hub_entities  # noqa: E402

RA_SCALE, MAX_NEIGHBOURS, MAX_DEGREE, CHUNK = 10.0, 1000, 2000, 64


def read_triples(path: Path, eid: dict, rid: dict) -> np.ndarray:
    """(n, 3) int64 ids, read in blocks so that 19M lines stay a few GB."""
    blocks = []
    with open(path, encoding="utf-8") as f:
        while lines := f.readlines(1 << 26):
            parts = [line.rstrip("\n").split("\t") for line in lines]
            blocks.append(np.array([[eid[a], rid[b], eid[c]] for a, b, c in parts], np.int64))
    return np.concatenate(blocks)


class Graph:
    """The undirected training graph as CSR, and the known answers of each (given, relation, side)."""

    def __init__(self, train: np.ndarray, known: np.ndarray, num_entities: int, num_relations: int):
        src = np.concatenate([train[:, 0], train[:, 2]])
        order = np.argsort(src, kind="stable")
        self.neighbours = np.concatenate([train[:, 2], train[:, 0]])[order].astype(np.int32)
        self.degree = np.bincount(src, minlength=num_entities)
        self.start = np.concatenate([[0], np.cumsum(self.degree)])
        self.inverse = 1.0 / np.maximum(self.degree, 1)
        self.e, self.r = num_entities, num_relations
        self.known = []  # side 0: tails of (head, rel); side 1: heads of (tail, rel)
        for given, answer in ((0, 2), (2, 0)):
            key = known[:, given] * num_relations + known[:, 1]
            order = np.argsort(key, kind="stable")
            self.known.append((key[order], known[order, answer]))
        self.rng = np.random.default_rng(0)

    def answers(self, side: int, given: int, rel: int) -> np.ndarray:
        keys, values = self.known[side]
        lo, hi = np.searchsorted(keys, [given * self.r + rel, given * self.r + rel + 1])
        return values[lo:hi]

    def resource_allocation(self, x: int) -> np.ndarray:
        z = self.neighbours[self.start[x] : self.start[x + 1]]
        if len(z) > MAX_NEIGHBOURS:
            z = self.rng.choice(z, MAX_NEIGHBOURS, replace=False)
        z = np.unique(z)
        z = z[self.degree[z] <= MAX_DEGREE]
        if not len(z):
            return np.zeros(self.e, np.float32)
        reached = np.concatenate([self.neighbours[self.start[a] : self.start[a + 1]] for a in z])
        return np.bincount(reached, weights=np.repeat(self.inverse[z], self.degree[z]), minlength=self.e)


def queries(table: np.ndarray, rel: np.ndarray, given: np.ndarray, rels: np.ndarray, side: int, model: str):
    """Each query's vector q, so that the candidates' scores are table @ q."""
    if model == "distmult":
        return table[given] * rel[rels]
    d = table.shape[1] // 2
    a, b, x, y = table[given, :d], table[given, d:], rel[rels, :d], rel[rels, d:]
    if side == 0:  # Re(<h, r, conj t>) as a product with t = (c, e)
        return np.concatenate([a * x - b * y, a * y + b * x], 1)
    return np.concatenate([x * a + y * b, x * b - y * a], 1)


def pair_ranks(s: np.ndarray, lc: np.ndarray, near: np.ndarray, answer: int, pairs: list) -> list:
    """The answer's realistic rank at each (W, V). Only candidates that could reach the answer's
    lowest score at the largest weights are compared (the terms are never negative), which gives
    the ranks of comparing all of them and is several times faster."""
    top_w, top_v = max(w for w, _ in pairs), max(v for _, v in pairs)
    own = [float((s[[answer]] + w * lc[[answer]] + v * near[[answer]])[0]) for w, v in pairs]
    keep = np.flatnonzero(s + top_w * lc + top_v * near >= min(own) - 1e-3)
    s, lc, near = s[keep], lc[keep], near[keep]
    ranks = []
    for (w, v), mine in zip(pairs, own, strict=True):
        z = s + w * lc + v * near
        ranks.append(1 + np.count_nonzero(z > mine) + 0.5 * (np.count_nonzero(z == mine) - 1))
    return ranks


def rank_split(split, graph, table, rel, counts, pairs, model) -> tuple[np.ndarray, np.ndarray, list]:
    """Realistic filtered ranks (queries x pairs) of both sides, each answer's id, RA's seconds."""
    ranks, answers, ra_seconds = [], [], []
    keys, values = counts
    for side, g, a in ((0, 0, 2), (1, 2, 0)):
        for lo in range(0, len(split), CHUNK):
            part = split[lo : lo + CHUNK]
            scores = table @ queries(table, rel, part[:, g], part[:, 1], side, model).T
            for j, (given, relation, answer) in enumerate(zip(part[:, g], part[:, 1], part[:, a], strict=True)):
                s = scores[:, j].copy()
                s[np.setdiff1d(graph.answers(side, given, relation), [answer])] = -np.inf
                slot = side * graph.r + relation
                i0, i1 = np.searchsorted(keys, [slot * graph.e, (slot + 1) * graph.e])
                lc = np.zeros(graph.e, np.float32)
                lc[keys[i0:i1] - slot * graph.e] = values[i0:i1]
                start = time.perf_counter()
                near = np.log1p(RA_SCALE * graph.resource_allocation(given)).astype(np.float32)
                ra_seconds.append(time.perf_counter() - start)
                ranks.append(pair_ranks(s, lc, near, answer, pairs))
                answers.append(answer)
        print(f"side {side} done", file=sys.stderr, flush=True)
    return np.array(ranks), np.array(answers), ra_seconds


def parts(ranks: np.ndarray, hub: np.ndarray | None) -> list:
    """MRR per pair: [whole, hub answers, copied answers] (whole alone without hubs)."""
    rr = 1.0 / ranks
    if hub is None:
        return [[round(float(c.mean()), 4)] for c in rr.T]
    return [[round(float(c.mean()), 4), round(float(c[hub].mean()), 4), round(float(c[~hub].mean()), 4)] for c in rr.T]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", required=True, type=Path, help="a finished run folder (best.weights.npz)")
    parser.add_argument("--graph", required=True, type=Path, help="its data folder (train/valid/test.txt)")
    parser.add_argument("--command", required=True, help="the jobi-tf train command that made the run")
    parser.add_argument("--counts-weights", default="0,0.25,0.375,0.5,0.75")
    parser.add_argument("--neighbour-weights", default="0,0.25,0.5,1,2")
    parser.add_argument("--ranks-out", type=Path, help="an .npz for every query's ranks")
    args = parser.parse_args()
    started = time.perf_counter()
    config = json.loads((args.run / "config.json").read_text(encoding="utf-8"))
    model = config["model"]["model"]
    if model not in ("complex", "distmult"):
        sys.exit(f"error: --run {args.run}: model {model!r}; this measures ComplEx and DistMult tables")
    labels = (args.run / "entities.txt").read_text(encoding="utf-8").splitlines()
    eid = {x: i for i, x in enumerate(labels)}
    rid = {x: i for i, x in enumerate((args.run / "relations.txt").read_text(encoding="utf-8").splitlines())}
    split = {n: read_triples(args.graph / f"{n}.txt", eid, rid) for n in ("train", "valid", "test")}
    graph = Graph(split["train"], np.concatenate(list(split.values())), len(eid), len(rid))
    del split["train"]
    weights = np.load(args.run / "best.weights.npz")
    table, rel = weights["model/jobi/entity_embeddings"], weights["model/jobi/triple_relations"]
    prior = np.load(args.run / "slot_counts.npz")
    counts = (prior["keys"], prior["values"])  # values: log(1 + count), keys: slot * E + entity
    hub = hub_entities(np.array(labels), args.graph, asked=False)
    pairs = [(float(w), float(v)) for w in args.counts_weights.split(",") for v in args.neighbour_weights.split(",")]
    out, kept = {}, {}
    for name in ("valid", "test"):
        ranks, answers, ra_seconds = rank_split(split[name], graph, table, rel, counts, pairs, model)
        kept[name] = ranks
        out[name] = dict(
            zip(
                (f"W={w:g} V={v:g}" for w, v in pairs),
                parts(ranks, hub[answers] if hub is not None else None),
                strict=True,
            )
        )
        out[name + "_ra_ms"] = {q: round(float(np.percentile(ra_seconds, q)) * 1e3, 2) for q in (50, 99)}
    valid_mrr = [out["valid"][f"W={w:g} V={v:g}"][0] for w, v in pairs]
    best = max(range(len(pairs)), key=lambda i: (valid_mrr[i], -pairs[i][0], -pairs[i][1]))
    counts_only = max((i for i, p in enumerate(pairs) if p[1] == 0), key=lambda i: (valid_mrr[i], -pairs[i][0]))
    if args.ranks_out:
        np.savez_compressed(args.ranks_out, pairs=np.array(pairs), **kept)
    record = {
        "bench": "neighbourhood_weight",
        "metric": "filtered realistic MRR [whole, hub answers, copied answers], both sides, whole splits",
        "run": str(args.run),
        "graph": str(args.graph),
        "training_command": args.command,
        "settings": {"ra_scale": RA_SCALE, "max_neighbours": MAX_NEIGHBOURS, "max_degree": MAX_DEGREE},
        "chosen": {
            "pair": pairs[best],
            "valid": out["valid"][f"W={pairs[best][0]:g} V={pairs[best][1]:g}"],
            "test": out["test"][f"W={pairs[best][0]:g} V={pairs[best][1]:g}"],
        },
        "counts_only_chosen": {"pair": pairs[counts_only], "test": out["test"][f"W={pairs[counts_only][0]:g} V=0"]},
        "results": out,
        "seconds": round(time.perf_counter() - started),
        "config": config,
    }
    record.update(peak_rss_gib=round(peak_rss_gib(), 2), **provenance(__file__), versions=versions())
    emit(record)


if __name__ == "__main__":
    main()
