"""Ways to join a sampled run's tables with the slot counts at ranking, on a sample of a split.

Why: with the counts added at ranking (``s + W log(1 + c)``, a product of the two models'
softmaxes) a replicated graph's hub answers rise and its copied answers fall (issue 79). A
query-adaptive join may keep both: the mixture ``lam softmax(s) + (1 - lam) softmax(s + W log(1 + c))``
keeps the tables' answer where their softmax is sure of it. Also: the mixture of the tables with
the counts alone (add-one smoothed), and the counts capped at ``tau`` (``s + W min(log(1 + c), tau)``).

Every entity is scored with NumPy (rows @ queries), both sides of each triple, filtered by every
split's facts, realistic ranks; reports whole / hub / copied MRR per form. Slow (a 1.85M-entity
table: about 14 s per 64 queries on one core); a probe, not a library path.

Run:  python bench/ranking_forms.py --run RUN --split valid --triples 1000
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import tensorflow as tf

sys.path.insert(0, str(Path(__file__).parent))
from _common import emit, peak_rss_gib, provenance, versions  # noqa: E402, I001
from accuracy_per_hour import replicated_hubs  # noqa: E402

from jobi_tf.api.run import restore_model  # noqa: E402
from jobi_tf.config import RunConfig  # noqa: E402
from jobi_tf.config.runs import RunFolder  # noqa: E402
from jobi_tf.datasets.loading import load_index  # noqa: E402
from jobi_tf.evaluation.ranking import validation_sample  # noqa: E402
from jobi_tf.models.slot_prior import SparseSlotPrior  # noqa: E402

WEIGHTS, MIXES, CAPS = (0.0, 0.25, 0.5, 0.75, 1.0), (0.1, 0.2, 0.3, 0.5, 0.7), (2.0, 3.0, 4.0)


def forms(s: np.ndarray, lc: np.ndarray) -> dict[str, np.ndarray]:
    """Every form's scores of one query: ``s`` the tables', ``lc`` the slot's ``log(1 + c)``."""

    def softmax(z):
        e = np.exp(z - z.max())
        return e / e.sum()

    out = {f"poe W={w:g}": s + w * lc for w in WEIGHTS}
    tables, counts = softmax(s), np.expm1(lc) + 1.0
    counts /= counts.sum()
    for w in (0.5, 1.0):
        joined = softmax(s + w * lc)
        out |= {f"mix(tables,poe W={w:g}) lam={m:g}": np.log(m * tables + (1 - m) * joined + 1e-300) for m in MIXES}
    out |= {f"mix(tables,count) lam={m:g}": np.log(m * tables + (1 - m) * counts + 1e-300) for m in MIXES}
    return out | {f"poe W=0.5 cap={t:g}": s + 0.5 * np.minimum(lc, t) for t in CAPS}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", required=True, type=Path, help="a finished sampled run folder with slot_counts.npz")
    parser.add_argument("--split", default="valid", choices=["valid", "test"])
    parser.add_argument("--triples", type=int, default=1000, help="a fixed sample of the split (both sides each)")
    parser.add_argument("--sample-seed", type=int, default=12345, help="not the runs' validation sample's")
    args = parser.parse_args()

    cfg = RunConfig.from_dict(json.loads((args.run / "config.json").read_text(encoding="utf-8")))
    entities, _, index = load_index(cfg.data, seed=cfg.seed)
    hub = replicated_hubs(cfg.data.data_dir, entities)
    model = restore_model(RunFolder(args.run), cfg)
    table = np.asarray(model.entity_embeddings.numpy(), np.float32)
    prior = SparseSlotPrior(1.0, index.num_entities, index.num_relations)
    prior.load(args.run / "slot_counts.npz")
    keys, values = prior.arrays()
    e, r = index.num_entities, index.num_relations
    facts = np.concatenate([index.train, index.valid, index.test]).astype(np.int64)
    triples = validation_sample(getattr(index, args.split), args.triples, seed=args.sample_seed)
    ranks: dict[str, list[float]] = {}
    answers = []
    for side, given, answer, slot_offset in (("tail", 0, 2, 0), ("head", 2, 0, r)):
        known_rows = model.entity_rows(triples[:, given])
        relation_rows = tf.gather(model.triple_relations, triples[:, 1])
        if side == "tail":
            queries = model.scorer.tail_query(known_rows, relation_rows).numpy()
        else:
            queries = model.scorer.head_query(relation_rows, known_rows).numpy()
        known = facts[:, given] * r + facts[:, 1]  # every fact's query key on this side
        order = np.argsort(known, kind="stable")
        known = known[order]
        for start in range(0, len(triples), 64):
            scores = table @ queries[start : start + 64].T
            for j, t in enumerate(triples[start : start + 64]):
                lo, hi = np.searchsorted(known, [t[given] * r + t[1], t[given] * r + t[1] + 1])
                mask = np.zeros(e, bool)
                mask[facts[order[lo:hi], answer]] = True
                mask[t[answer]] = False
                slot = slot_offset + t[1]
                a, b = np.searchsorted(keys, [slot * e, (slot + 1) * e])
                lc = np.zeros(e)
                lc[keys[a:b] - slot * e] = values[a:b]
                for name, z in forms(scores[:, j].astype(np.float64), lc).items():
                    target, z = z[t[answer]], np.where(mask, -np.inf, z)
                    ranks.setdefault(name, []).append(1 + np.sum(z > target) + 0.5 * (np.sum(z == target) - 1))
                answers.append(t[answer])
    is_hub = hub[np.asarray(answers)] if hub is not None else np.zeros(len(answers), bool)
    results = {}
    for name, values_ in ranks.items():
        rr = 1.0 / np.asarray(values_)
        results[name] = {"mrr": float(rr.mean()), "hub": float(rr[is_hub].mean()), "copied": float(rr[~is_hub].mean())}
    record = {
        "bench": "ranking_forms",
        "metric": "filtered realistic MRR (both sides) of the run's best weights joined with the slot counts, by form",
        "run": str(args.run),
        "split": args.split,
        "triples": len(triples),
        "sample_seed": args.sample_seed,
        "results": dict(sorted(results.items(), key=lambda kv: -kv[1]["mrr"])),
        "config": json.loads((args.run / "config.json").read_text(encoding="utf-8")),
    }
    record.update(peak_rss_gib=round(peak_rss_gib(), 2), **provenance(__file__), versions=versions())
    emit(record)


if __name__ == "__main__":
    main()
