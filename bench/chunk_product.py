"""What the biased chunks' scores cost on this CPU, in every formulation we know, in one run.

With ``--biased-chunk 10`` at 1000 x 100 (p 0.3) a step scores 100 chunks: each chunk's 11 query
rows (10 positives and, with ``--pair-every 10``, one pair-head row) against its own 30 biased
candidates, ComplEx 200 (rows of 400 floats). That is 13.2 million multiply-adds, a small share
of the step's arithmetic but the largest single operation JoBi adds to it
(`bench/op_profile.py`). This script asks whether any way of writing those scores runs them
faster under XLA than the batched product `jobi_tf.scored_batch.ScoredBatch` uses.

Steps:
1. Random queries ``[G, M, W]``, candidates ``[G, K, W]`` and an upstream gradient ``[G, M, K]``
   (defaults: the shapes above).
2. For each formulation, compile with XLA (as training does) the scores alone (``forward``) and
   the scores with both gradients (``forward+backward``); check the scores against
   jobi_tf's own; time ``--repeats`` calls, ``--rounds`` times, interleaved; median ms.
3. References in the same run: the same multiply-adds as one ``[G*M, W] x [W, K]`` product
   (what they would cost at the rate of a large product), the batched product in TensorFlow
   without XLA (oneDNN) and in NumPy (OpenBLAS), forward only for NumPy.
4. One JSON line: per formulation, the median ms and the ratio to jobi_tf's batched product.

Run:  python bench/chunk_product.py [--chunks 100 --rows 11 --candidates 30 --width 400]
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
from _common import emit, provenance  # noqa: E402, I001  (first: the library's allocator default)

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from jobi_tf.models.scorers import get_scorer  # noqa: E402


def formulations(g: int, m: int, k: int, w: int) -> dict:
    """``name: (scores(q, c) -> [G, M, K], what it is)``; each computes the same sums."""
    jobi_tf_scores = get_scorer("complex").score_candidates

    def batched(q, c):  # what ScoredBatch does: queries [G, M, S=1, W] against rows [G, K, W]
        return jobi_tf_scores(q[:, :, None, :], c)[:, :, 0, :]

    def candidates_first(q, c):
        return tf.transpose(tf.matmul(c, q, transpose_b=True), [0, 2, 1])

    def padded(q, c):
        q16 = tf.pad(q, [[0, 0], [0, -m % 16], [0, 0]])
        c32 = tf.pad(c, [[0, 0], [0, -k % 32], [0, 0]])
        return tf.matmul(q16, c32, transpose_b=True)[:, :m, :k]

    def block_diagonal(n):
        def scores(q, c):  # n chunks per product, the off-diagonal blocks thrown away
            full = tf.matmul(tf.reshape(q, [g // n, n * m, w]), tf.reshape(c, [g // n, n * k, w]), transpose_b=True)
            full = tf.reshape(full, [g // n, n, m, n, k])
            diagonal = tf.linalg.diag_part(tf.transpose(full, [0, 2, 4, 1, 3]))  # [G/n, M, K, n]
            return tf.reshape(tf.transpose(diagonal, [0, 3, 1, 2]), [g, m, k])

        return scores

    def elementwise(q, c):
        return tf.reduce_sum(q[:, :, None, :] * c[:, None, :, :], axis=-1)

    def split_contraction(q, c):
        parts = tf.einsum("gmjw,gkjw->gjmk", tf.reshape(q, [g, m, 4, w // 4]), tf.reshape(c, [g, k, 4, w // 4]))
        return tf.reduce_sum(parts, axis=1)

    def two_products(q, c):
        halves = zip(tf.split(q, 2), tf.split(c, 2), strict=True)
        return tf.concat([tf.matmul(a, b, transpose_b=True) for a, b in halves], axis=0)

    def grouped_convolution(q, c):  # chunk g's candidates: output channels g*K..g*K+K-1 of group g
        x = tf.reshape(tf.transpose(q, [1, 0, 2]), [m, 1, 1, g * w])
        kernel = tf.reshape(tf.transpose(c, [2, 0, 1]), [1, 1, w, g * k])
        return tf.transpose(tf.reshape(tf.nn.conv2d(x, kernel, 1, "VALID"), [m, g, k]), [1, 0, 2])

    return {
        "batched product (jobi_tf)": (batched, "one batched dot: G products of [M, W] x [W, K]"),
        "candidates first": (candidates_first, "[K, W] x [W, M] per chunk, then transposed"),
        "padded to 16 x 32": (padded, "rows and candidates padded with zeros to sizes of 16 and 32"),
        "2 chunks per product": (block_diagonal(2), "G/2 products of [2M, W] x [W, 2K], diagonal blocks kept"),
        "4 chunks per product": (block_diagonal(4), "G/4 products of [4M, W] x [W, 4K], diagonal blocks kept"),
        "elementwise product and sum": (elementwise, "[G, M, K, W] products summed over W"),
        "contraction split in 4": (split_contraction, "4G products of [M, W/4] x [W/4, K], summed"),
        "two batched products": (two_products, "G/2 chunks each, for XLA to run side by side"),
        "grouped convolution": (grouped_convolution, "a 1 x 1 convolution with G feature groups"),
    }


def median_ms(call, repeats: int) -> float:
    """Median over ``repeats`` blocks of 10 calls, ms per call (after one warm-up call)."""
    np.asarray(tf.nest.flatten(call())[0])
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(10):
            out = call()
        np.asarray(tf.nest.flatten(out)[0])  # a compiled call's outputs are ready together
        times.append((time.perf_counter() - start) / 10)
    return 1e3 * statistics.median(times)


def compiled(scores, jit: bool):
    """``(forward, forward+backward)`` tf.functions of ``scores``, XLA-compiled if ``jit``."""

    @tf.function(jit_compile=jit)
    def forward(q, c):
        return scores(q, c)

    @tf.function(jit_compile=jit)
    def both(q, c, upstream):
        with tf.GradientTape() as tape:
            tape.watch([q, c])
            out = scores(q, c)
            loss = tf.reduce_sum(out * upstream)
        return (out, *tape.gradient(loss, [q, c]))  # all of them, or XLA drops what is not returned

    return forward, both


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=100, help="G: chunks per batch")
    parser.add_argument("--rows", type=int, default=11, help="M: query rows per chunk")
    parser.add_argument("--candidates", type=int, default=30, help="K: biased candidates per chunk")
    parser.add_argument("--width", type=int, default=400, help="W: floats per row (ComplEx 200)")
    parser.add_argument("--repeats", type=int, default=7, help="timed blocks of 10 calls per round")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved repeats of the whole list")
    args = parser.parse_args()
    g, m, k, w = args.chunks, args.rows, args.candidates, args.width
    if g % 4 or w % 4:
        sys.exit("--chunks and --width must be multiples of 4 (the grouped formulations split them)")
    rng = np.random.default_rng(0)
    q, c, upstream = (rng.standard_normal(s).astype(np.float32) for s in ((g, m, w), (g, k, w), (g, m, k)))
    q_t, c_t, u_t = tf.constant(q), tf.constant(c), tf.constant(upstream)
    expected = np.einsum("gmw,gkw->gmk", q.astype(np.float64), c.astype(np.float64))

    calls, described = {}, {}

    def add(name: str, what: str, scores, jit: bool, inputs: tuple) -> None:
        forward, both = compiled(scores, jit)
        calls[name] = {"forward": lambda: forward(*inputs[:2]), "forward+backward": lambda: both(*inputs)}
        described[name] = {"what": what}

    for name, (scores, what) in formulations(g, m, k, w).items():
        add(name, what, scores, True, (q_t, c_t, u_t))
        error = float(np.abs(calls[name]["forward"]().numpy() - expected).max())
        if error > 1e-3:
            sys.exit(f"{name}: scores differ from the float64 reference by {error:.2g}")
        described[name]["max_abs_error_vs_float64"] = round(error, 7)
    flat = (tf.reshape(q_t, [g * m, w]), c_t[0], tf.reshape(u_t, [g * m, k]))
    one_product = lambda a, b: tf.matmul(a, b, transpose_b=True)  # noqa: E731
    add("same multiply-adds as one product", f"[{g * m}, {w}] x [{w}, {k}], XLA", one_product, True, flat)
    batched = formulations(g, m, k, w)["batched product (jobi_tf)"][0]
    add("batched product without XLA", "the same einsum, TensorFlow's own kernels", batched, False, (q_t, c_t, u_t))
    calls["NumPy batched matmul"] = {"forward": lambda: q @ c.transpose(0, 2, 1)}
    described["NumPy batched matmul"] = {"what": "q @ c^T, forward only"}

    times: dict[str, dict[str, list[float]]] = {n: {p: [] for p in parts} for n, parts in calls.items()}
    for _ in range(args.rounds):
        for name, parts in calls.items():
            for part, call in parts.items():
                times[name][part].append(median_ms(call, args.repeats))
    reference = {p: statistics.median(times["batched product (jobi_tf)"][p]) for p in ("forward", "forward+backward")}
    value = {}
    for name, parts in times.items():
        entry = dict(described[name])
        for part, rounds in parts.items():
            ms = statistics.median(rounds)
            entry[f"{part}_ms"] = round(ms, 3)
            entry[f"{part}_ms_per_round"] = [round(x, 3) for x in rounds]
            entry[f"{part}_vs_jobi_tf"] = round(ms / reference[part], 3)
        value[name] = entry
    emit(
        {
            "bench": "chunk_product",
            "metric": "ms per call (median of rounds, each the median of blocks of 10 calls); ratio to jobi_tf's",
            "value": value,
            "multiply_adds": g * m * k * w,
            "config": {"chunks": g, "rows": m, "candidates": k, "width": w, "repeats": args.repeats},
            "rounds": args.rounds,
            "threads": {"intra_op": tf.config.threading.get_intra_op_parallelism_threads() or "default"},
            **provenance(__file__),
        }
    )


if __name__ == "__main__":
    main()
