"""The filtered ranking a model that knows only slot popularity would give: the floor to read
an embedding model's early epochs against.

A model early in training ranks mostly by how often an entity fills a relation's slot (its
bias towards frequent answers). On a graph whose facts carry little else a model can learn
early, its first validation may be that ranking and nothing more; a later gain over it is
what the embeddings learned. This scores every candidate of a query ``(h, r, ?)`` by the
number of training triples ``(*, r, candidate)`` (``(?, r, t)``: ``(candidate, r, *)``), and
ranks the true answer as jobi-tf's evaluator does: filtered (every other true answer in
train, valid and test removed), ties realistic (the mean of the optimistic and pessimistic
ranks), both directions; entities never seen in the slot tie at zero.

Run:  python bench/popularity_ranking.py --data-dir bigkg [--split test valid]
Prints one JSON line: per split, MRR and Hits@1/3/10 (both directions, and per direction).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _common import data_dir, emit, machine  # noqa: E402

from jobi_tf.config import DataConfig  # noqa: E402
from jobi_tf.data.index import KGIndex  # noqa: E402
from jobi_tf.evaluation import rank_metrics, tie_ranks  # noqa: E402
from jobi_tf.loading import load_index  # noqa: E402


def slot_counts(train: np.ndarray, answer_col: int, entities: int) -> tuple[np.ndarray, np.ndarray]:
    """Sorted ``relation * E + entity`` keys of one slot and how many training triples fill each."""
    keys = train[:, 1].astype(np.int64) * entities + train[:, answer_col]
    return np.unique(keys, return_counts=True)


def popularity_ranks(index: KGIndex, queries: np.ndarray, tail: bool) -> tuple[np.ndarray, np.ndarray]:
    """Optimistic and pessimistic filtered ranks of each query's answer (``tail``: ``(h, r, ?)``)."""
    e, r_count = index.num_entities, index.num_relations
    answer, given = (2, 0) if tail else (0, 2)
    keys, counts = slot_counts(index.train, answer, e)
    known = index.known_tails if tail else index.known_heads
    rows, others = known.lookup(queries[:, given].astype(np.int64) * r_count + queries[:, 1])
    optimistic = np.empty(len(queries))
    pessimistic = np.empty(len(queries))
    for q, (rel, target) in enumerate(zip(queries[:, 1].astype(np.int64), queries[:, answer], strict=True)):
        lo, hi = np.searchsorted(keys, [rel * e, (rel + 1) * e])
        slot_entities, slot_counts_ = keys[lo:hi] - rel * e, counts[lo:hi]
        where = np.searchsorted(slot_entities, target)
        mine = slot_counts_[where] if where < len(slot_entities) and slot_entities[where] == target else 0
        removed = others[rows == q] if len(rows) else others[:0]
        removed = removed[removed != target]
        # the removed answers' counts, to take them out of "above" and "tied"
        at = np.searchsorted(slot_entities, removed)
        seen = (at < len(slot_entities)) & (slot_entities[np.minimum(at, len(slot_entities) - 1)] == removed)
        removed_counts = np.where(seen, slot_counts_[np.minimum(at, len(slot_entities) - 1)], 0)
        above = int(np.sum(slot_counts_ > mine)) - int(np.sum(removed_counts > mine))
        tied = int(np.sum(slot_counts_ == mine)) - 1 if mine > 0 else (e - len(slot_entities)) - 1
        tied -= int(np.sum(removed_counts == mine))
        optimistic[q] = 1 + above
        pessimistic[q] = 1 + above + tied
    return optimistic, pessimistic


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--dataset", default=None, help="a named dataset instead of a folder")
    parser.add_argument("--split", nargs="+", default=["test", "valid"], choices=["test", "valid"])
    args = parser.parse_args()
    start = time.perf_counter()
    folder = str(data_dir(args.dataset, args.data_dir)) if args.dataset else args.data_dir
    _, _, index = load_index(DataConfig(dataset=args.dataset, data_dir=folder))
    loaded = time.perf_counter() - start
    results = {}
    for split in args.split:
        queries = getattr(index, split)
        by_side = {}
        for side, tail in (("tail", True), ("head", False)):
            by_side[side] = tie_ranks(*popularity_ranks(index, queries, tail))
        both = np.concatenate([by_side["tail"], by_side["head"]])
        results[split] = {
            "both": rank_metrics(both),
            **{f"{side} queries": rank_metrics(ranks) for side, ranks in by_side.items()},
        }
    emit(
        {
            "bench": "popularity_ranking",
            "metric": "filtered realistic ranks of a slot-popularity scorer (training frequency of the candidate "
            "in the query's relation slot), both directions",
            "data": os.path.abspath(folder),
            "entities": index.num_entities,
            "relations": index.num_relations,
            "training_triples": len(index.train),
            "results": results,
            "load_seconds": round(loaded, 1),
            "seconds": round(time.perf_counter() - start, 1),
            "machine": machine(),
            "command": " ".join(["python", *sys.argv]),
        }
    )


if __name__ == "__main__":
    main()
