"""Time of one dense Adagrad update of an entity table: Keras's op-by-op update against the
fused kernel `jobi_tf.optimizers.LazyAdagrad` uses, in the same run.

Run:  python bench/adagrad_update.py [--rows 14541 40943] [--width 2000] [--repeats 30]
Prints one JSON line: per table shape, the median milliseconds of each and their ratio.

Why: a 1-vs-all step (kbc's recipe) gives the whole entity table a dense gradient every step,
so the optimizer reads and writes every row; at batch 500 on FB15k-237 and rank 1000 that
update is a fixed cost of each step beside the products, larger still on WN18RR's 40,943
entities at kbc's batch of 50 triples.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).parent))
from _common import emit, machine  # noqa: E402, I001  (first: the library's allocator default)

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from jobi_tf.optimizers import LazyAdagrad  # noqa: E402


def median_ms(step, repeats: int) -> float:
    step()  # trace and warm up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def update_step(optimizer, table, gradient):
    """A compiled update of ``table`` by ``gradient`` (closed over, not passed: tf.function
    would turn an argument variable into a tensor)."""
    return tf.function(lambda: optimizer.apply_gradients([(gradient, table)]))


def measure(rows: int, width: int, repeats: int) -> dict:
    gradient = tf.random.normal([rows, width], stddev=1e-3, seed=0)
    steps = {}
    for name, optimizer in {
        "keras": keras.optimizers.Adagrad(learning_rate=0.1, initial_accumulator_value=0.0, epsilon=1e-10),
        "fused": LazyAdagrad(learning_rate=0.1),
    }.items():
        table = keras.Variable(tf.random.normal([rows, width], seed=1), name=f"table_{name}")
        optimizer.build([table])
        steps[name] = update_step(optimizer, table, gradient)
    # Interleaved rounds, so that a noisy neighbour slows both alike.
    rounds = {name: [] for name in steps}
    for _ in range(3):
        for name, step in steps.items():
            rounds[name].append(median_ms(step, repeats))
    keras_ms, fused_ms = (statistics.median(rounds[n]) for n in ("keras", "fused"))
    return {
        "rows": rows,
        "width": width,
        "keras_ms": round(keras_ms, 2),
        "fused_ms": round(fused_ms, 2),
        "keras_rounds_ms": [round(x, 3) for x in rounds["keras"]],
        "fused_rounds_ms": [round(x, 3) for x in rounds["fused"]],
        "speedup": round(keras_ms / fused_ms, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[14541, 40943], help="FB15k-237's, WN18RR's")
    parser.add_argument("--width", type=int, default=2000, help="reals per row (ComplEx rank 1000)")
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    tables = [measure(r, args.width, args.repeats) for r in args.rows]
    emit(
        {
            "bench": "adagrad_update",
            "metric": "ms of one dense Adagrad update; speedup = median of Keras's rounds / median of the fused rounds",
            "tables": tables,
            "repeats": args.repeats,
            "machine": machine(),
            "versions": {"tensorflow": tf.__version__, "keras": keras.__version__},
            "command": " ".join(["python", *sys.argv]),
        }
    )


if __name__ == "__main__":
    main()
