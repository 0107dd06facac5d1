"""How much of a JoBi training step is the optimizer: the same step with Adam and with SGD.

Keras 3's Adam densifies the entity table's sparse gradient and updates every row and both
moment tables each step; SGD applies the sparse gradient as a scatter. The difference in
throughput bounds what a sparse (lazy) Adam can gain; the lazy Adam is measured too.
The record also carries each ``fit``'s CPU user/system seconds and minor page faults (``cpu``),
and exits 1 if one spent more than 10% of its user CPU time in the kernel.

Run:  JOBI_TF_DATA_DIR=../shared/datasets python bench/optimizer_share.py
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
from jobi_tf.optimizers import make_optimizer  # noqa: E402
from jobi_tf.sampling import make_train_dataset  # noqa: E402


def rate(index, optimizer, batch, neg, shared, steps, repeats) -> tuple[float, Usage]:
    """Median positives per second over the timed epochs, and the CPU usage of the ``fit``."""
    ds = make_train_dataset(index, SamplerConfig(batch_size=batch, neg=neg, p=0.3, shared_negatives=shared))
    model = JoBiModel(index.num_entities, index.num_relations, model="complex", dim=200, joint=True)
    model.compile(optimizer=optimizer, jit_compile=True)
    clock = EpochClock()
    with Usage() as used:
        model.fit(ds, epochs=repeats + 1, steps_per_epoch=steps, verbose=0, shuffle=False, callbacks=[clock])
    return statistics.median(steps * batch / s for s in clock.seconds[1:]), used


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    _, _, index = build_index(read_split_folder(data_dir("fb15k-237", args.data_dir)), "fb15k-237")
    usages: dict[str, Usage] = {}
    adam, usages["adam"] = rate(index, keras.optimizers.Adam(0.001), 1000, 100, 1000, args.steps, args.repeats)
    sgd, usages["sgd"] = rate(index, keras.optimizers.SGD(0.01), 1000, 100, 1000, args.steps, args.repeats)
    lazy, usages["lazy_adam"] = rate(
        index, make_optimizer("lazy-adam", 0.001), 1000, 100, 1000, args.steps, args.repeats
    )
    emit(
        {
            "bench": "optimizer_share",
            "metric": "positive triples per second (median), JoBi 1000 x 100, --shared-negatives 1000",
            "adam": round(adam),
            "sgd": round(sgd),
            "lazy_adam": round(lazy),
            "optimizer_share_of_adam_step": round(1 - adam / sgd, 3),
            "median_of": args.repeats,
            "cpu": {name: used.record() for name, used in usages.items()},
            "kernel_check": kernel_check(usages),
            "tf": tf.__version__,
        }
    )


if __name__ == "__main__":
    main()
