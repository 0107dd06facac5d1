"""A roofline for the training step: what this machine could do per positive, and what we reach.

Steps:
1. Measure the machine, in TensorFlow, on all cores: float32 matmul FLOP/s (4096² × 4096)
   and memory bandwidth (``x = x * a + b`` in place over 256 MB: one read and one write per float),
   median of ``--repeats``.
2. Count, per positive triple, the floating-point operations and the bytes a training step
   must move (the model below), for each configuration.
3. Bounds: positives/s if only FLOPs counted, and if only bytes counted; the lower is the
   roofline. With ``--measured NAME=RATE`` (positives/s from `bench/train_speed.py`), the
   share of the roofline reached.

The per-positive model (ComplEx dim d: rows of W = 2d floats, S heads: 2 with JoBi; K_t
candidate rows per positive gathered per triple, K_s shared by a chunk of C positives):
* FLOPs: scoring ``S·K·W`` multiply-adds forward, twice that backward (gradients for the
  queries and for the candidate rows): ``6·S·(K_t + K_s)·W``.
* Bytes: gather ``K_t`` rows (read + write the block), the gradient block written and read
  by the scatter into the table (read + write rows): ``4·W·(2·K_t + 4·K_t)`` plus the shared
  rows' share; and the optimizer: dense Adam densifies the gradient (a table written and read)
  and reads gradient, weights and both moments and writes three tables, every step:
  ``9 · E · W · 4`` bytes per step, divided by the batch; lazy Adam moves only the rows used
  (read and write weights and two moments, read the gradient: ``7 · U · W · 4`` for U
  distinct rows per step).
The machine's bandwidth is that of an in-place ``x = x * a + b`` over 256 MB per core. The
model counts the compulsory traffic only (every float read or written once per pass),
so it is an upper bound on speed; caches help only the small tables.

Run:  python bench/roofline.py --measured "per-triple 500x50=5600" "shared 1000x100=9200"
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).parent))
from _common import Usage, emit, kernel_check  # noqa: E402, I001

import tensorflow as tf  # noqa: E402

#: name: (batch, K per triple, K shared per chunk, chunk C, heads S, entities E, width W, optimizer, distinct rows U)
CONFIGS = {
    "per-triple 500x50": (500, 50, 0, 0, 2, 14541, 400, "adam", None),
    "per-triple baseline 500x50": (500, 50, 0, 0, 1, 14541, 400, "adam", None),
    "shared 1000x100": (1000, 30, 70, 1000, 2, 14541, 400, "adam", None),
    # FB1.9M size, ComplEx dim 100, lazy Adam; U measured by bench/step_profile.py (~32k rows).
    "FB1.9M shared 1000x100": (1000, 30, 70, 1000, 2, 1_883_512, 200, "lazy-adam", 32_000),
}


def _median_seconds(fn, repeats: int) -> float:
    fn()  # compile
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn().numpy()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def machine(repeats: int) -> tuple[dict, Usage]:
    """Matmul FLOP/s (all cores) and streaming bandwidth on one core and on every core.

    XLA runs an elementwise loop on one thread, so the bandwidth on every core is measured
    with one such loop per core, on separate variables, started together from Python threads.
    """
    n = 4096
    a = tf.random.normal([n, n])
    b = tf.random.normal([n, n])
    matmul = tf.function(lambda: tf.reduce_sum(tf.matmul(a, b)), jit_compile=True)
    floats = 64 * 2**20  # 256 MB per variable
    cores = os.cpu_count() or 1
    xs = [tf.Variable(tf.random.normal([floats])) for _ in range(cores)]

    def in_place(x):
        @tf.function(jit_compile=True)
        def stream():  # one read and one write of every float, in place
            x.assign(x * 1.0001 + 0.5)
            return x[0]

        return stream

    streams = [in_place(x) for x in xs]

    def all_cores():
        with ThreadPoolExecutor(cores) as pool:
            return list(pool.map(lambda f: f(), streams))[0]

    with Usage() as used:
        flops = 2 * n**3 / _median_seconds(matmul, repeats)
        one = 2 * 4 * floats / _median_seconds(streams[0], repeats)
        every = cores * 2 * 4 * floats / _median_seconds(all_cores, repeats)
    peak = {
        "matmul_gflops": round(flops / 1e9, 1),
        "bandwidth_one_core_gb_s": round(one / 1e9, 2),
        "bandwidth_gb_s": round(every / 1e9, 2),
    }
    return peak, used


def per_positive(batch, k_t, k_s, chunk, heads, entities, width, optimizer, distinct) -> dict:
    flops = 6 * heads * (k_t + k_s) * width
    row = 4 * width
    gathered = row * (2 * k_t + 4 * k_t)  # gather block r/w; gradient block w/r; scatter r/w into the table
    if k_s:
        gathered += row * 6 * k_s / chunk  # the shared rows, once per chunk
    if optimizer == "adam":
        step_bytes = 9 * entities * row
    else:
        step_bytes = 7 * distinct * row
    total = gathered + step_bytes / batch
    return {
        "flops": flops,
        "bytes": round(total),
        "bytes_rows": round(gathered),
        "bytes_optimizer": round(step_bytes / batch),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--measured", nargs="*", default=[], help="NAME=positives/s from bench/train_speed.py")
    args = parser.parse_args()
    peak, used = machine(args.repeats)
    measured = dict(item.rsplit("=", 1) for item in args.measured)
    rows = {}
    for name, spec in CONFIGS.items():
        cost = per_positive(*spec)
        compute_bound = peak["matmul_gflops"] * 1e9 / cost["flops"]
        memory_bound = peak["bandwidth_gb_s"] * 1e9 / cost["bytes"]
        rows[name] = {
            **cost,
            "bound_compute_pos_s": round(compute_bound),
            "bound_memory_pos_s": round(memory_bound),
            "roofline_pos_s": round(min(compute_bound, memory_bound)),
        }
        for key, rate in measured.items():
            if key == name:
                rows[name]["measured_pos_s"] = float(rate)
                rows[name]["share_of_roofline"] = round(float(rate) / min(compute_bound, memory_bound), 3)
    emit(
        {
            "bench": "roofline",
            "machine": peak,
            "per_positive": rows,
            "cpu": used.record(),
            "kernel_check": kernel_check({"machine": used}),
            "tf": tf.__version__,
            "cpus": os.cpu_count(),
        }
    )


if __name__ == "__main__":
    main()
