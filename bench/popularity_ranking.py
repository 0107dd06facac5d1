"""The filtered ranking a model that knows only slot popularity would give: the floor to read
an embedding model's early epochs against.

Why: a model early in training ranks mostly by how often an entity fills a relation's slot;
a later gain over that ranking is what the embeddings learned. Every candidate of ``(h, r, ?)``
scores the count of training triples ``(*, r, candidate)`` (``(?, r, t)``: ``(candidate, r,
*)``), ranked as jobi-tf's evaluator ranks: filtered by train, valid and test, realistic ties,
both directions; entities never seen in the slot tie at zero.

On a graph of `replicate_kg.py` (its folder has a ``replicate.json``, or with ``--hubs``) the
queries are also split by their answer: a hub (a label without ``#``) or a copied entity.

Run:  python bench/popularity_ranking.py --data-dir bigkg [--split test valid] [--hubs]
Prints one JSON line: per split, MRR and Hits@1/3/10 (both directions, and per direction; on a
replicated graph also ``hub answers`` and ``copied answers``, both directions).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _common import data_dir, emit, machine, peak_rss_gib  # noqa: E402

from jobi_tf.config import DataConfig  # noqa: E402
from jobi_tf.data.index import KGIndex  # noqa: E402
from jobi_tf.datasets.loading import load_index  # noqa: E402
from jobi_tf.evaluation.ranking import rank_metrics, tie_ranks  # noqa: E402


def slot_counts(train: np.ndarray, answer_col: int, entities: int) -> tuple[np.ndarray, np.ndarray]:
    """Sorted ``relation * E + entity`` keys of one slot and how many training triples fill each."""
    keys = train[:, 1].astype(np.int64) * entities + train[:, answer_col]
    return np.unique(keys, return_counts=True)


def count_of(keys: np.ndarray, counts: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """The count of each wanted key in sorted ``keys`` (0 where absent)."""
    at = np.minimum(np.searchsorted(keys, wanted), len(keys) - 1)
    return np.where(keys[at] == wanted, counts[at], 0)


def popularity_ranks(index: KGIndex, queries: np.ndarray, tail: bool) -> tuple[np.ndarray, np.ndarray]:
    """Optimistic and pessimistic filtered ranks of each query's answer (``tail``: ``(h, r, ?)``)."""
    e, r_count = index.num_entities, index.num_relations
    answer, given = (2, 0) if tail else (0, 2)
    keys, counts = slot_counts(index.train, answer, e)
    rel, target = queries[:, 1].astype(np.int64), queries[:, answer].astype(np.int64)
    mine = count_of(keys, counts, rel * e + target)
    # every slot's counts sorted, as ``relation * width + count``: "above" and "tied" by search
    width = int(counts.max(initial=0)) + 1
    by_count = np.sort(keys // e * width + counts)
    lo, hi = np.searchsorted(by_count, rel * width + mine), np.searchsorted(by_count, rel * width + mine, "right")
    above = np.searchsorted(by_count, (rel + 1) * width) - hi
    slot_size = np.searchsorted(keys, (rel + 1) * e) - np.searchsorted(keys, rel * e)
    tied = np.where(mine > 0, hi - lo, e - slot_size) - 1
    # the other true answers are filtered: out of "above" and "tied"
    known = index.known_tails if tail else index.known_heads
    rows, others = known.lookup(queries[:, given].astype(np.int64) * r_count + queries[:, 1])
    rows, others = rows[others != target[rows]], others[others != target[rows]].astype(np.int64)
    removed = count_of(keys, counts, rel[rows] * e + others)
    above -= np.bincount(rows[removed > mine[rows]], minlength=len(queries))
    tied -= np.bincount(rows[removed == mine[rows]], minlength=len(queries))
    return 1.0 + above, 1.0 + above + tied


def hub_entities(labels: np.ndarray, data: Path, asked: bool) -> np.ndarray | None:
    """bool per entity id: a hub of a replicated graph (`replicate_kg.py`: a label without
    ``#``), when ``data`` has a ``replicate.json`` or ``asked``; else None."""
    if not (asked or (data / "replicate.json").is_file()):
        return None
    return np.strings.find(labels, "#") < 0


def split_metrics(queries: np.ndarray, by_side: dict[str, np.ndarray], hub: np.ndarray | None) -> dict:
    """Both directions, each direction, and (with ``hub``) queries answered by a hub or by a copy."""
    both = np.concatenate([by_side["tail"], by_side["head"]])
    out = {"both": rank_metrics(both), **{f"{side} queries": rank_metrics(r) for side, r in by_side.items()}}
    if hub is not None:
        answer_is_hub = hub[np.concatenate([queries[:, 2], queries[:, 0]])]
        out["hub answers"] = rank_metrics(both[answer_is_hub])
        out["copied answers"] = rank_metrics(both[~answer_is_hub])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--data-dir", help="a folder with train.txt, valid.txt, test.txt")
    source.add_argument("--dataset", help="a named dataset instead of a folder")
    parser.add_argument("--split", nargs="+", default=["test", "valid"], choices=["test", "valid"])
    parser.add_argument("--hubs", action="store_true", help="split by hub answers without a replicate.json")
    args = parser.parse_args()
    start = time.perf_counter()
    folder = str(data_dir(args.dataset, args.data_dir)) if args.dataset else args.data_dir
    entities, _, index = load_index(DataConfig(dataset=args.dataset, data_dir=folder))
    hub = hub_entities(entities.labels, Path(folder), args.hubs)
    loaded = time.perf_counter() - start
    results = {}
    for split in args.split:
        queries = getattr(index, split)
        by_side = {}
        for side, tail in (("tail", True), ("head", False)):
            by_side[side] = tie_ranks(*popularity_ranks(index, queries, tail))
        results[split] = split_metrics(queries, by_side, hub)
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
            "peak_rss_gib": round(peak_rss_gib(), 2),
            "machine": machine(),
            "command": " ".join(["python", *sys.argv]),
        }
    )


if __name__ == "__main__":
    main()
