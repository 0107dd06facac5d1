"""The sampler's pair-label questions at a graph's size: each way of answering them, timed.

Why: `jobi_tf.sampling.slot_membership.SlotMembership` answers "was entity e seen in slot s in
train?" from a hash table on large graphs, a binary search of the sorted keys when built inside a
traced function, and, for candidates shared by a group of many rows, by marking the rows each
candidate's own slots answer yes for (`MARK_ROWS_FACTOR` picks). This times each way on the
questions a JoBi batch asks (1000 positives x 100 negatives, 30 biased in runs of 10 sorted by
slot, 70 uniform shared by the batch), checks they agree, and gives the hash table's build time
and the process's memory growth from building it.

Run:  python bench/slot_membership_speed.py --data-dir /work/data/replicated/K137
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import emit, peak_rss_gib, provenance, versions  # noqa: E402, I001

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from jobi_tf.config import DataConfig, SamplerConfig  # noqa: E402
from jobi_tf.contracts import features as F  # noqa: E402
from jobi_tf.datasets.loading import load_index  # noqa: E402
from jobi_tf.sampling.negatives import NegativeSampler  # noqa: E402
from jobi_tf.sampling.slot_membership import SlotMembership  # noqa: E402


def _rss_gib() -> float:
    with open("/proc/self/status", encoding="utf-8") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 2**20


def _median_ms(fn, calls: int) -> float:
    """Median wall ms of ``fn(step)`` over ``calls`` steps after five of warm-up (new inputs each)."""
    times = []
    for i in range(calls + 5):
        start = time.perf_counter()
        tf.nest.map_structure(lambda t: t.numpy(), fn(tf.constant(i, tf.int64)))
        times.append(time.perf_counter() - start)
    return round(1e3 * statistics.median(times[5:]), 3)


HOWS = ("hash", "search", "pairs")


def _way(slots: SlotMembership, batch, how: str, every: int, column: int, per_group: int):
    """A compiled ``step -> labels``: one way of answering a batch's questions about the candidates
    in ``batch(step, every)[column]`` (``hash`` / ``search``: every question asked; ``pairs``:
    the candidates' slots mark their rows)."""

    def labels(step):
        rows, side, *candidates = batch(step, every)
        shared = candidates[column - 2]
        if how == "pairs":
            return slots._mark_rows_of_pairs(rows, shared, side, per_group)
        repeated = tf.repeat(shared, per_group, axis=0)
        if how == "hash":
            return slots.contains(rows, repeated, side)
        table, slots._hash = slots._hash, None  # the sorted keys' binary search
        try:
            return slots.contains(rows, repeated, side)
        finally:
            slots._hash = table

    return tf.function(labels)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--calls", type=int, default=50)
    args = parser.parse_args()
    _, _, index = load_index(DataConfig(data_dir=args.data_dir))
    before = _rss_gib()
    start = time.perf_counter()
    slots = SlotMembership(index, dense_bytes=0)
    slots.contains(tf.constant([[0]]), tf.constant([[0]]), tf.constant([[True]]))
    build = time.perf_counter() - start
    grown = _rss_gib() - before
    cfg = SamplerConfig(
        batch_size=1000, neg=100, shared_negatives=1000, corrupt_side="per-positive", p=0.3, biased_chunk=10
    )
    sampler = NegativeSampler(index, cfg, 0, pair_labels=False)
    train = tf.constant(index.train.astype(np.int32))
    n = len(index.train) - 1000

    def batch(step, every):
        """A batch's pair-head rows (every ``every``-th), its biased runs and its shared uniform ones."""
        at = (step * 7919 * 1000) % n
        out = sampler(tf.ensure_shape(train[at : at + 1000], [1000, 3]), step)
        rows = out[F.TRIPLES][::every, 1:2]
        side = out[F.POSITIVE_CORRUPT_TAIL][::every, None]
        return rows, side, out[F.CHUNK_CANDIDATES], out[F.SHARED_CANDIDATES]

    ways = {}
    for every in (10, 1):
        for name, column, rows_per_run in (("biased runs of 10", 2, 10), ("shared by the batch", 3, 1000)):
            fns = {how: _way(slots, batch, how, every, column, rows_per_run // every) for how in HOWS}
            first = [fn(tf.constant(3, tf.int64)).numpy() for fn in fns.values()]
            assert all(np.array_equal(first[0], other) for other in first[1:]), name
            key = f"pair head on every {every}: {name}"
            ways[key] = {
                "questions": int(first[0].size),
                "batch_only_ms": _median_ms(tf.function(lambda step, every=every: batch(step, every)), args.calls),
                **{f"{how}_ms": _median_ms(fn, args.calls) for how, fn in fns.items()},
            }
            print(key, ways[key], file=sys.stderr)
    emit(
        {
            "bench": "slot_membership_speed",
            "metric": "median ms of a JoBi batch's pair-label questions by each way (the batch's own draw included: "
            "subtract batch_only_ms)",
            "graph": {"data_dir": args.data_dir, "entities": index.num_entities, "slot_keys": len(index.slot_keys)},
            "hash_table": {"build_seconds": round(build, 2), "rss_growth_gib": round(grown, 2)},
            "slots_per_entity": round(slots._slots_per_entity, 2),
            "ways": ways,
            "peak_rss_gib": round(peak_rss_gib(), 2),
            **provenance(__file__),
            "versions": versions(),
        }
    )


if __name__ == "__main__":
    main()
