"""Median training step time against the size of the entity table (does a step cost the batch or the table?).

Steps:
1. For each table size (default 15k, 200k and 2M entities), generate a synthetic typed KG
   of that many entities (the same number of training triples for every size) and build
   its index with exactly that many entity rows.
2. For each optimizer, train JoBi at the paper's configuration (ComplEx, batch 1000,
   100 per-triple negatives, joint, p 0.3, XLA) through the real pipeline (tf.data sampler
   → `JoBiModel` → Keras ``fit``): one ``fit`` of 1 + ``--repeats`` epochs of ``--steps``
   steps; the first epoch (compilation) is dropped, the median of the others kept.
3. Print one JSON line: median step time per size and optimizer, and the ratio of the
   largest table's step time to the smallest's (target: <= 1.5). By default two series:
   ``lazy-adam`` at every size, and ``auto`` (dense Adam below
   `jobi_tf.optimizers.LAZY_MIN_ROWS` entities, so at 15k, lazy Adam above). The record also
   carries each ``fit``'s CPU user/system seconds and minor page faults (``cpu``), and exits 1
   if one spent more than 10% of its user CPU time in the kernel.

With ``--optimizers adam lazy-adam --sizes 15000 50000 100000 200000`` the same script
gives the crossover behind ``--optimizer auto`` (`jobi_tf.optimizers.LAZY_MIN_ROWS`).

Run:  python bench/step_time_vs_size.py                      # 15k, 200k, 2M; lazy Adam
      python bench/step_time_vs_size.py --quick              # seconds: a smoke test
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).parent))
from _common import Usage, emit, kernel_check, peak_rss_gib  # noqa: E402, I001
from _clocks import EpochClock  # noqa: E402

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from jobi_tf.config import SamplerConfig  # noqa: E402
from jobi_tf.config.fields import OPTIMIZERS  # noqa: E402
from jobi_tf.data.index import KGIndex  # noqa: E402
from jobi_tf.data.synthetic import SyntheticSpec, make_typed_kg_ids  # noqa: E402
from jobi_tf.models import JoBiModel  # noqa: E402
from jobi_tf.optimizers import choose_optimizer, make_optimizer  # noqa: E402
from jobi_tf.sampling import make_train_dataset  # noqa: E402


def graph(num_entities: int, args: argparse.Namespace) -> KGIndex:
    spec = SyntheticSpec(
        num_entities=num_entities,
        num_relations=args.relations,
        num_triples=args.triples,
        num_types=20,
        seed=0,
    )
    ids, _ = make_typed_kg_ids(spec)
    return KGIndex.from_ids(ids, num_entities, args.relations)  # every row exists, used or not


def step_seconds(index: KGIndex, optimizer: str, args: argparse.Namespace) -> tuple[list[float], Usage]:
    """Seconds per step of each timed epoch, and the CPU usage of the ``fit``."""
    cfg = SamplerConfig(
        batch_size=args.batch_size, neg=args.neg, p=args.p, shared_negatives=args.shared_negatives, biased_chunk=0
    )
    ds = make_train_dataset(index, cfg, seed=0)
    keras.utils.set_random_seed(0)
    model = JoBiModel(index.num_entities, index.num_relations, model="complex", dim=args.dim, joint=True)
    model.compile(optimizer=make_optimizer(optimizer, 0.001), jit_compile=args.jit)
    clock = EpochClock()
    with Usage() as used:
        model.fit(ds, epochs=args.repeats + 1, steps_per_epoch=args.steps, verbose=0, shuffle=False, callbacks=[clock])
    return [s / args.steps for s in clock.seconds[1:]], used  # the first epoch compiles


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[15_000, 200_000, 2_000_000])
    parser.add_argument("--optimizers", nargs="+", default=["lazy-adam", "auto"], choices=OPTIMIZERS)
    parser.add_argument("--triples", type=int, default=1_000_000, help="training triples of every graph")
    parser.add_argument("--relations", type=int, default=1000)
    parser.add_argument("--dim", type=int, default=100, help="ComplEx components per part (FB1.9M: 100)")
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--neg", type=int, default=100)
    parser.add_argument("--p", type=float, default=0.3)
    parser.add_argument("--shared-negatives", type=int, default=0, help="share uniform negatives per C positives")
    parser.add_argument("--steps", type=int, default=30, help="steps per timed epoch")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-jit", dest="jit", action="store_false")
    parser.add_argument("--quick", action="store_true", help="tiny sizes and steps: proves the script runs")
    args = parser.parse_args()
    if args.quick:
        args.sizes, args.triples, args.relations = [2_000, 20_000], 20_000, 20
        args.batch_size, args.neg, args.dim, args.steps, args.repeats = 100, 10, 8, 3, 2

    results: dict[str, dict[str, float]] = {name: {} for name in args.optimizers}
    runs: dict[str, dict[str, list[float]]] = {name: {} for name in args.optimizers}
    chosen: dict[str, dict[str, str]] = {name: {} for name in args.optimizers}
    cpu: dict[str, dict[str, dict]] = {name: {} for name in args.optimizers}
    usages: dict[str, Usage] = {}  # by "<concrete optimizer> <size>": one per fit
    for size in args.sizes:
        index = graph(size, args)
        measured: dict[str, tuple[list[float], Usage]] = {}  # by concrete optimizer: "auto" reuses a measurement
        for name in args.optimizers:
            concrete = choose_optimizer(name, size)
            if concrete not in measured:
                measured[concrete] = step_seconds(index, concrete, args)
                keras.backend.clear_session()
                gc.collect()
            seconds, used = measured[concrete]
            usages[f"{concrete} {size}"] = used
            cpu[name][str(size)] = used.record()
            results[name][str(size)] = round(1000 * statistics.median(seconds), 1)
            runs[name][str(size)] = [round(1000 * s, 1) for s in seconds]
            chosen[name][str(size)] = concrete
            print(f"{name} ({concrete}) {size:>9} entities: {results[name][str(size)]} ms/step", file=sys.stderr)
        del index
    small, large = str(min(args.sizes)), str(max(args.sizes))
    emit(
        {
            "bench": "step_time_vs_size",
            "metric": "median training step time (ms) by number of entities",
            "value": {name: results[name] for name in args.optimizers},
            "ratio_largest_to_smallest": {
                name: round(results[name][large] / results[name][small], 2) for name in args.optimizers
            },
            "target_ratio": 1.5,
            "runs_ms": runs,
            "optimizer_used": chosen,
            "cpu": cpu,
            "kernel_check": kernel_check(usages),
            "median_of": args.repeats,
            "config": {
                "model": f"complex dim {args.dim}, joint, p {args.p}",
                "shared_negatives": args.shared_negatives,
                "batch_size": args.batch_size,
                "neg": args.neg,
                "steps_per_epoch": args.steps,
                "train_triples": args.triples,
                "relations": args.relations,
                "jit_compile": args.jit,
                "quick": args.quick,
            },
            "peak_rss_gib": round(peak_rss_gib(), 2),
            "tf": tf.__version__,
            "keras": keras.__version__,
            "cpus": os.cpu_count(),
        }
    )


if __name__ == "__main__":
    main()
