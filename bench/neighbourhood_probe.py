"""Screening probe: the counts and a neighbourhood score at ranking, s + W log(1+c) + V log(1 + 10 RA).

Why: the copies of a replicated graph are told apart by their own facts (issue 79), and a
candidate two steps from the query's entity through few-neighbour entities is likely its own
copy's. RA is resource allocation (Zhou, Lu and Zhang, 2009; Liben-Nowell and Kleinberg, 2007,
for neighbourhood scores in link prediction) over the undirected training graph, relations
ignored: the sum over the given entity's neighbours z (at most 1,000, sampled; none of degree
over 2,000, which add under 1/2,000 a path) of 1/deg(z) for each z next to the candidate.
NumPy on fixed samples of validation (to choose) and test, both sides, filtered; ComplEx only.

Run:  python bench/neighbourhood_probe.py RUN GRAPH_FOLDER VALID_TRIPLES TEST_TRIPLES
"""

import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _common import emit, peak_rss_gib, provenance, versions  # noqa: E402

run, data, nv, nt = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
labels = (run / "entities.txt").read_text().splitlines()
eid = {x: i for i, x in enumerate(labels)}
rels = (run / "relations.txt").read_text().splitlines()
rid = {x: i for i, x in enumerate(rels)}
e, r = len(labels), len(rels)
hub = np.array(["#" not in x for x in labels])
t0 = time.time()
H, R, T = [], [], []
with open(data / "train.txt") as f:
    while True:
        lines = f.readlines(1 << 26)
        if not lines:
            break
        parts = [line.rstrip("\n").split("\t") for line in lines]
        H.append(np.fromiter((eid[p[0]] for p in parts), np.int32, len(parts)))
        R.append(np.fromiter((rid[p[1]] for p in parts), np.int16, len(parts)))
        T.append(np.fromiter((eid[p[2]] for p in parts), np.int32, len(parts)))
H, R, T = np.concatenate(H), np.concatenate(R), np.concatenate(T)
print("read", len(H), round(time.time() - t0), flush=True, file=sys.stderr)
src = np.concatenate([H, T])
dst = np.concatenate([T, H])
order = np.argsort(src, kind="stable")
nbr = dst[order]
del dst
deg = np.bincount(src, minlength=e)
ptr = np.concatenate([[0], np.cumsum(deg)])
del src, order
inv = 1.0 / np.maximum(deg, 1)
print("csr", round(time.time() - t0), flush=True, file=sys.stderr)


def read(name):
    rows = [line.split("\t") for line in (data / name).read_text().splitlines()]
    return np.array([[eid[a], rid[b], eid[c]] for a, b, c in rows], np.int64)


splits = {"valid": read("valid.txt"), "test": read("test.txt")}
# facts for filtering: train + splits, keyed
key_t = H.astype(np.int64) * r + R
key_h = T.astype(np.int64) * r + R
ot = np.argsort(key_t, kind="stable")
oh = np.argsort(key_h, kind="stable")
key_t = key_t[ot]
key_h = key_h[oh]
wts = np.load(run / "best.weights.npz")
table = wts["model/jobi/entity_embeddings"]
rel = wts["model/jobi/triple_relations"]
ck = np.load(run / "slot_counts.npz")
keys, values = ck["keys"], ck["values"]
d = table.shape[1] // 2
rng = np.random.default_rng(0)


def ra(x, cap=1000):
    z = nbr[ptr[x] : ptr[x + 1]]
    if len(z) > cap:
        z = rng.choice(z, cap, replace=False)
    z = np.unique(z)
    z = z[deg[z] <= DMAX]  # a neighbour of degree > DMAX adds under 1/DMAX per path: skipped
    lens = deg[z]
    idx = np.concatenate([nbr[ptr[a] : ptr[a + 1]] for a in z]) if len(z) else np.zeros(0, np.int32)
    w = np.repeat(inv[z], lens)
    return np.bincount(idx, weights=w, minlength=e).astype(np.float32)


DMAX = 2000
WS = [0.0, 0.25, 0.375, 0.5]
VS = [0.0, 0.25, 0.5, 1.0, 2.0, 4.0]
K = 10.0
out = {}
for split, n in (("valid", nv), ("test", nt)):
    tri = splits[split][np.random.default_rng(1).choice(len(splits[split]), n, replace=False)]
    ranks, ans_hub = [], []
    for side, given, answer, off in ((0, 0, 2, 0), (1, 2, 0, r)):
        a_, b_ = table[tri[:, given], :d], table[tri[:, given], d:]
        x, y = rel[tri[:, 1], :d], rel[tri[:, 1], d:]
        q = (
            np.concatenate([a_ * x - b_ * y, a_ * y + b_ * x], 1)
            if side == 0
            else np.concatenate([x * a_ + y * b_, x * b_ - y * a_], 1)
        )
        sc = table @ q.T
        for j, t in enumerate(tri):
            s = sc[:, j].copy()
            ans = t[answer]
            k = t[given] * r + t[1]
            if side == 0:
                lo, hi = np.searchsorted(key_t, [k, k + 1])
                f = T[ot[lo:hi]]
            else:
                lo, hi = np.searchsorted(key_h, [k, k + 1])
                f = H[oh[lo:hi]]
            other = splits["valid"], splits["test"]
            f2 = np.concatenate([o[(o[:, given] == t[given]) & (o[:, 1] == t[1]), answer] for o in other])
            f = np.setdiff1d(np.concatenate([f, f2]), [ans])
            s[f] = -np.inf
            slot = off + t[1]
            i0, i1 = np.searchsorted(keys, [slot * e, (slot + 1) * e])
            lc = np.zeros(e, np.float32)
            lc[keys[i0:i1] - slot * e] = values[i0:i1]
            g = np.log1p(K * ra(t[given]))
            row = []
            for w in WS:
                base = s + w * lc
                for v in VS:
                    z = base + v * g
                    row.append(1 + np.count_nonzero(z > z[ans]) + 0.5 * (np.count_nonzero(z == z[ans]) - 1))
            ranks.append(row)
            ans_hub.append(hub[ans])
        print(split, side, round(time.time() - t0), flush=True, file=sys.stderr)
    rr = 1.0 / np.array(ranks)
    hb = np.array(ans_hub)
    out[split] = {
        f"W={w} V={v}": [round(rr[:, i].mean(), 4), round(rr[hb, i].mean(), 4), round(rr[~hb, i].mean(), 4)]
        for i, (w, v) in enumerate((w, v) for w in WS for v in VS)
    }
record = {
    "bench": "neighbourhood_probe",
    "metric": "filtered realistic MRR [whole, hub answers, copied answers], both sides, fixed samples",
    "run": str(run),
    "triples": {"valid": nv, "test": nt},
    "sample_seed": 1,
    "settings": {"W": WS, "V": VS, "k": K, "max_neighbours": 1000, "max_degree": DMAX},
    "results": out,
    "config": json.loads((run / "config.json").read_text()),
}
record.update(peak_rss_gib=round(peak_rss_gib(), 2), **provenance(__file__), versions=versions())
emit(record)
