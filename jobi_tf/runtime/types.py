"""Shared constants and type aliases."""

from __future__ import annotations

__all__ = [
    "HEAD",
    "RELATION",
    "TAIL",
    "TRIPLE_HEAD",
    "PAIR_HEAD",
    "SPLITS",
    "RANK_METRICS",
    "BENCHMARK_NAMES",
    "DATASET_NAMES",
    "benchmark_key",
]

#: Column of each part of a triple in an ``(N, 3)`` array.
HEAD, RELATION, TAIL = 0, 1, 2

#: The heads of a JoBi model, in the order their queries are stacked.
TRIPLE_HEAD, PAIR_HEAD = 0, 1

#: The three splits of a benchmark, in the order they are read.
SPLITS = ("train", "valid", "test")

#: The filtered ranking metrics every evaluation reports (metrics.json, logs, grids).
RANK_METRICS = ("mrr", "hits@1", "hits@3", "hits@10")

#: The benchmarks `jobi_tf.datasets.load_named` knows (same order as `jobi_tf.datasets.builders.BUILDERS`).
#: Here, on the ground floor, so that the config checks a ``--dataset`` before TensorFlow loads.
BENCHMARK_NAMES: tuple[str, ...] = ("fb15k-237", "fb15k", "wn18rr", "yago3-10", "kinship", "umls", "nations")

#: Every name ``--dataset`` takes: the benchmarks and the built-in generator (`jobi_tf.data.synthetic`).
DATASET_NAMES: tuple[str, ...] = (*BENCHMARK_NAMES, "synthetic")


def benchmark_key(name: str) -> str:
    """``"FB15k_237"`` and the like as spelled in `BENCHMARK_NAMES` (case and ``_``/``-`` aside)."""
    return str(name).strip().lower().replace("_", "-")
