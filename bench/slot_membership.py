"""Sampler time per batch with and without JoBi's pair labels, by membership search.

JoBi's pair head needs, for every candidate of a batch, whether it was seen in the
positive's slot in training (`jobi_tf.negatives.SlotMembership`). On a graph too large for
the dense byte table the answer is a search over the sorted slot keys. This script times
the whole in-graph sampler (`NegativeSampler.__call__`, as the tf.data map runs it: a
`tf.function`, no XLA) on the same batches three ways, rotating which goes first:

* ``no_labels``: the sampler of a model without a pair head (the baseline's);
* ``shared_search``: the library's, where the shared candidates' labels come from
  `SlotMembership.contains_shared` (a search in the candidates' own slots);
* ``per_row_search``: every label from a search over all sorted keys, one per row and
  candidate (what the library did before `contains_shared`);

checks that both give the same labels on every batch, and prints one JSON line: median
milliseconds per batch and the labels' own cost (time minus ``no_labels``).

    python bench/slot_membership.py --data-dir BIGKG --batches 40
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tensorflow as tf  # noqa: E402
from _common import data_dir, emit, machine, peak_rss_gib  # noqa: E402

from jobi_tf.config import DataConfig, SamplerConfig  # noqa: E402
from jobi_tf.loading import load_index  # noqa: E402
from jobi_tf.negatives import NegativeSampler  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--dataset", default=None, help="a named dataset instead of a folder")
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--neg", type=int, default=100)
    parser.add_argument("--p", type=float, default=0.3)
    parser.add_argument("--shared-negatives", type=int, default=1000)
    parser.add_argument("--biased-chunk", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if not (args.data_dir or args.dataset):
        parser.error("give --data-dir or --dataset")
    folder = str(data_dir(args.dataset, args.data_dir)) if args.dataset else args.data_dir
    load_before = os.getloadavg()[0]  # other work sharing the machine shows here
    start = time.perf_counter()
    _, _, index = load_index(DataConfig(dataset=args.dataset, data_dir=folder))
    loaded = time.perf_counter() - start
    cfg = SamplerConfig(
        batch_size=args.batch_size,
        neg=args.neg,
        p=args.p,
        shared_negatives=args.shared_negatives,
        biased_chunk=args.biased_chunk,
        corrupt_side="per-positive",
    )
    built = time.perf_counter()
    samplers = {
        "no_labels": NegativeSampler(index, cfg, seed=args.seed, pair_labels=False),
        "shared_search": NegativeSampler(index, cfg, seed=args.seed),
        "per_row_search": NegativeSampler(index, cfg, seed=args.seed),
    }
    slots = samplers["per_row_search"]._slots
    if slots._table is not None:
        sys.exit("this graph uses the dense slot table: no search to time (give a larger graph)")

    def per_row(relations, shared, tail, rows_per_group):  # the search before contains_shared
        return slots.contains(relations, tf.repeat(shared, rows_per_group, axis=0), tail)

    slots.contains_shared = per_row
    build_seconds = time.perf_counter() - built
    calls = {name: tf.function(sampler.__call__) for name, sampler in samplers.items()}

    rng = np.random.default_rng(args.seed)
    train = index.train
    times: dict[str, list[float]] = {name: [] for name in calls}
    mismatches = 0
    for b in range(args.batches + 2):  # the first two batches trace and warm up
        triples = tf.constant(train[rng.integers(0, len(train), args.batch_size)].astype(np.int32))
        step = tf.constant(b, tf.int64)
        labels = {}
        order = list(calls)[b % 3 :] + list(calls)[: b % 3]  # rotate who goes first
        for name in order:
            t = time.perf_counter()
            out = calls[name](triples, step)
            out = {k: v.numpy() for k, v in out.items()}
            if b >= 2:
                times[name].append(time.perf_counter() - t)
            labels[name] = out.get("pair_labels")
        mismatches += int(np.sum(labels["shared_search"] != labels["per_row_search"]))
    load_after = os.getloadavg()[0]
    median = {name: round(1000 * float(np.median(ts)), 2) for name, ts in times.items()}
    emit(
        {
            "bench": "slot_membership",
            "metric": "median milliseconds per batch of the in-graph sampler (tf.function, no XLA), "
            "interleaved on the same batches; labels_ms = the search's time minus no_labels",
            "data": os.path.abspath(folder),
            "entities": index.num_entities,
            "relations": index.num_relations,
            "slot_keys": int(len(index.slot_keys)),
            "sampler": {
                "batch_size": cfg.batch_size,
                "neg": cfg.neg,
                "p": cfg.p,
                "shared_negatives": cfg.shared_negatives,
                "biased_chunk": cfg.biased_chunk,
                "corrupt_side": cfg.corrupt_side,
                "labels_per_batch": cfg.batch_size * cfg.neg,
            },
            "batches": args.batches,
            "value": median,
            "labels_ms": {
                "shared_search": round(median["shared_search"] - median["no_labels"], 2),
                "per_row_search": round(median["per_row_search"] - median["no_labels"], 2),
            },
            "ratio_per_row_to_shared_search": round(median["per_row_search"] / median["shared_search"], 2),
            "label_mismatches": mismatches,
            "threads": {
                "intra_op": tf.config.threading.get_intra_op_parallelism_threads(),
                "affinity_cores": len(os.sched_getaffinity(0)),
            },
            "load_average": {"before": round(load_before, 2), "after": round(load_after, 2), "cores": os.cpu_count()},
            "load_seconds": round(loaded, 1),
            "build_seconds": round(build_seconds, 1),
            "peak_rss_gib": round(peak_rss_gib(), 2),
            "machine": machine(),
            "versions": {"tensorflow": tf.__version__, "numpy": np.__version__},
            "command": " ".join(["python", *sys.argv]),
        }
    )


if __name__ == "__main__":
    main()
