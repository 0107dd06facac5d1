"""Steps per second with 1 vs 2 mirrored replicas on this machine's CPU (overhead, not speed-up).

Steps:
1. Split the CPU into 2 logical devices (`jobi_tf.distribute.configure_devices`).
2. Train JoBi (ComplEx dim 100, joint, p 0.3, batch 1000 x 100, lazy Adam is not needed at
   this size: dense Adam) on a synthetic typed KG through Keras ``fit``: once under the
   default strategy (one device, XLA off and on) and once under ``MirroredStrategy`` over the 2
   logical CPUs (XLA off, as ``jobi-tf train`` runs it); ``--repeats`` timed epochs of
   ``--steps`` steps after one compile epoch, medians reported.
3. Print one JSON line: steps/s of each and the ratio mirrored / single (same XLA setting).
   Both replicas share the same 2 cores, so the ratio measures the strategy's overhead.
   The record also carries each ``fit``'s CPU user/system seconds and minor page faults
   (``cpu``), and exits 1 if one spent more than 10% of its user CPU time in the kernel.

Run:  python bench/replicas_speed.py
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).parent))
from _common import Usage, emit, kernel_check, machine  # noqa: E402, I001
from _clocks import EpochClock  # noqa: E402

from jobi_tf.distribute import configure_devices  # noqa: E402

configure_devices(2)
import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from jobi_tf.config import SamplerConfig  # noqa: E402
from jobi_tf.data.index import KGIndex  # noqa: E402
from jobi_tf.data.synthetic import SyntheticSpec, make_typed_kg_ids  # noqa: E402
from jobi_tf.distribute import make_strategy  # noqa: E402
from jobi_tf.models import JoBiModel  # noqa: E402
from jobi_tf.optimizers import make_optimizer  # noqa: E402
from jobi_tf.sampling import make_train_dataset  # noqa: E402


def steps_per_second(index, strategy, jit: bool, args) -> tuple[float, Usage]:
    """Median steps per second over the timed epochs, and the CPU usage of the ``fit``."""
    cfg = SamplerConfig(batch_size=args.batch_size, neg=args.neg, p=0.3, shared_negatives=0)  # per triple, as measured
    ds = make_train_dataset(index, cfg, seed=0)
    keras.utils.set_random_seed(0)
    with strategy.scope():
        model = JoBiModel(index.num_entities, index.num_relations, model="complex", dim=args.dim, joint=True)
        model.compile(optimizer=make_optimizer("adam", 0.001), jit_compile=jit)
    clock = EpochClock()
    with Usage() as used:
        model.fit(ds, epochs=args.repeats + 1, steps_per_epoch=args.steps, verbose=0, callbacks=[clock])
    return args.steps / statistics.median(clock.seconds[1:]), used


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entities", type=int, default=15_000)
    parser.add_argument("--dim", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--neg", type=int, default=100)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    spec = SyntheticSpec(num_entities=args.entities, num_relations=200, num_triples=300_000, num_types=20, seed=0)
    ids, _ = make_typed_kg_ids(spec)
    index = KGIndex.from_ids(ids, args.entities, 200)
    single = tf.distribute.get_strategy()
    mirrored = make_strategy("mirrored")
    measured = {
        "single_xla": steps_per_second(index, single, True, args),
        "single_no_xla": steps_per_second(index, single, False, args),
        "mirrored_2_no_xla": steps_per_second(index, mirrored, False, args),
    }
    result = {k: rate for k, (rate, _) in measured.items()}
    usages = {k: used for k, (_, used) in measured.items()}
    emit(
        {
            "bench": "replicas_speed",
            "metric": "training steps per second (median of epochs)",
            "value": {k: round(v, 2) for k, v in result.items()},
            "ratio_mirrored_to_single_no_xla": round(result["mirrored_2_no_xla"] / result["single_no_xla"], 2),
            "cpu": {k: used.record() for k, used in usages.items()},
            "kernel_check": kernel_check(usages),
            "config": vars(args),
            "tf": tf.__version__,
            "cpus": os.cpu_count(),
            "cpus_allowed": len(os.sched_getaffinity(0)),
            "machine": machine(),
            "command": " ".join(["python", *sys.argv]),
        }
    )


if __name__ == "__main__":
    main()
