"""How much of a JoBi training step is the optimizer: Keras's Adam, our fused dense Adam, lazy Adam, SGD.

The same step (real pipeline: tf.data sampler → `JoBiModel` → Keras ``fit``, XLA) with four
optimizers, interleaved ``--rounds`` times so that drift of a shared machine hits all alike:
* ``keras_adam``: Keras 3's Adam (two densifications of the sparse gradient, three updates);
* ``fused_adam``: `jobi_tf.optimizers.FusedAdam`, what ``--optimizer adam`` (and ``auto`` below
  100,000 entities) trains with;
* ``lazy_adam``: `jobi_tf.optimizers.LazyAdam` (rows the batch used only);
* ``sgd``: a sparse scatter, no state: the step without an optimizer worth the name.
Reported per optimizer: median positives/s over the timed epochs, and CPU milliseconds per
step (user + system over all threads), which is steadier than wall time on two cores. The
record carries each ``fit``'s CPU user/system seconds and minor page faults and exits 1 if
one spent more than 10% of its user CPU time in the kernel.

Run:  JOBI_TF_DATA_DIR=../shared/datasets python bench/optimizer_share.py --batch-size 500 --neg 50
      JOBI_TF_DATA_DIR=../shared/datasets python bench/optimizer_share.py --batch-size 1000 --neg 100 --shared 1000
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).parent))
from _common import Usage, data_dir, emit, kernel_check  # noqa: E402, I001
from _clocks import EpochClock  # noqa: E402

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from jobi_tf.config import SamplerConfig  # noqa: E402
from jobi_tf.data.index import build_index  # noqa: E402
from jobi_tf.data.triples import read_split_folder  # noqa: E402
from jobi_tf.models import JoBiModel  # noqa: E402
from jobi_tf.optimizers import FusedAdam, LazyAdam  # noqa: E402
from jobi_tf.sampling import make_train_dataset  # noqa: E402

OPTIMIZERS = {
    "keras_adam": lambda: keras.optimizers.Adam(0.001),
    "fused_adam": lambda: FusedAdam(0.001),
    "lazy_adam": lambda: LazyAdam(0.001),
    "sgd": lambda: keras.optimizers.SGD(0.01),
}


def rate(index, optimizer, args) -> tuple[list[float], Usage]:
    """Positives per second of each timed epoch, and the CPU usage of the timed ``fit``."""
    cfg = SamplerConfig(batch_size=args.batch_size, neg=args.neg, p=0.3, shared_negatives=args.shared, biased_chunk=0)
    ds = make_train_dataset(index, cfg)
    model = JoBiModel(index.num_entities, index.num_relations, model="complex", dim=200, joint=True)
    model.compile(optimizer=optimizer, jit_compile=True)
    model.fit(ds, epochs=1, steps_per_epoch=10, verbose=0, shuffle=False)  # compile
    clock = EpochClock()
    with Usage() as used:
        model.fit(ds, epochs=args.repeats, steps_per_epoch=args.steps, verbose=0, shuffle=False, callbacks=[clock])
    return [args.steps * args.batch_size / s for s in clock.seconds], used


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir")
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--neg", type=int, default=100)
    parser.add_argument("--shared", type=int, default=1000, help="--shared-negatives chunk (0: per-triple)")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=3, help="timed epochs of --steps per fit")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    _, _, index = build_index(read_split_folder(data_dir("fb15k-237", args.data_dir)), "fb15k-237")
    rates: dict[str, list[float]] = {name: [] for name in OPTIMIZERS}
    usages: dict[str, Usage] = {}
    for round_ in range(args.rounds):
        for name, make in OPTIMIZERS.items():
            got, usages[f"{name} #{round_ + 1}"] = rate(index, make(), args)
            rates[name].extend(got)
    steps = args.steps * args.repeats
    result = {}
    for name in OPTIMIZERS:
        mine = [u for key, u in usages.items() if key.startswith(name + " #")]
        result[name] = {
            "median_pos_per_s": round(statistics.median(rates[name])),
            "cpu_ms_per_step": round(statistics.median(1000 * (u.user + u.system) / steps for u in mine), 1),
        }
    sgd_cpu = result["sgd"]["cpu_ms_per_step"]
    for name in ("keras_adam", "fused_adam", "lazy_adam"):
        result[name]["optimizer_cpu_ms_per_step"] = round(result[name]["cpu_ms_per_step"] - sgd_cpu, 1)
    emit(
        {
            "bench": "optimizer_share",
            "metric": "positives/s (median of timed epochs) and CPU ms per step, JoBi ComplEx 200, FB15k-237",
            "config": {"batch_size": args.batch_size, "neg": args.neg, "shared_negatives": args.shared},
            "value": result,
            "ratio_fused_to_keras_adam": round(
                result["fused_adam"]["median_pos_per_s"] / result["keras_adam"]["median_pos_per_s"], 2
            ),
            "median_of": args.repeats * args.rounds,
            "cpu": {name: used.record() for name, used in usages.items()},
            "kernel_check": kernel_check(usages),
            "tf": tf.__version__,
        }
    )


if __name__ == "__main__":
    main()
