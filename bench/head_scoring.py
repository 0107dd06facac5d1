"""What scoring shared candidates costs with one head and with two (JoBi's triple + pair heads).

Why: at 1000 x 100 with shared negatives the pair head is most of JoBi's extra step time
(`bench/step_profile.py`). This times the part that must grow with the number of heads: the
product of every positive's S queries with the chunk's shared candidate rows, forward and both
gradients (queries and rows), one XLA-compiled function per S, interleaved rounds.

Steps:
1. Random ``queries [1, B, S, W]``, ``rows [1, K, W]`` and an upstream gradient, for S = 1 and 2
   (the einsum `jobi_tf.scored_batch.ScoredBatch` uses for shared candidates).
2. ``--rounds`` rounds; in each, ``--calls`` calls of each function in turn, milliseconds per call.
3. Print one JSON line: per-S median milliseconds, the FLOP rate (``3 x 2·B·S·K·W``: the
   product and its two gradients) and the S=2 / S=1 time ratio (median of rounds).

Run:  python bench/head_scoring.py                       # B 1000, K 100, W 400 (ComplEx 200)
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
from _common import emit, machine  # noqa: E402, I001

import tensorflow as tf  # noqa: E402


def scoring_step(batch: int, heads: int, candidates: int, width: int):
    """An XLA-compiled forward + backward of S heads' queries against shared candidate rows."""
    rng = tf.random.Generator.from_seed(heads)
    args = (
        rng.normal([1, batch, heads, width]),
        rng.normal([1, candidates, width]),
        rng.normal([1, batch, heads, candidates]),
    )

    @tf.function(jit_compile=True)
    def step(queries, rows, upstream):
        with tf.GradientTape() as tape:
            tape.watch([queries, rows])
            loss = tf.reduce_sum(tf.einsum("astw,akw->astk", queries, rows) * upstream)
        return tape.gradient(loss, [queries, rows])

    step(*args)  # compile outside the clock
    return step, args


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--candidates", type=int, default=100, help="shared candidates per chunk")
    parser.add_argument("--width", type=int, default=400, help="row width (ComplEx dim 200: 400)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=50)
    args = parser.parse_args()
    steps = {s: scoring_step(args.batch_size, s, args.candidates, args.width) for s in (1, 2)}
    rounds: dict[int, list[float]] = {s: [] for s in steps}
    for _ in range(args.rounds):
        for s, (step, inputs) in steps.items():
            start = time.perf_counter()
            for _ in range(args.calls):
                out = step(*inputs)
            out[0].numpy()
            rounds[s].append(1000 * (time.perf_counter() - start) / args.calls)
    flops = {s: 3 * 2 * args.batch_size * s * args.candidates * args.width for s in steps}
    ratios = [two / one for one, two in zip(rounds[1], rounds[2], strict=True)]
    emit(
        {
            "bench": "head_scoring",
            "metric": "ms per forward + backward of S heads' queries against shared candidate rows (XLA)",
            "value": {f"heads_{s}": round(statistics.median(ms), 3) for s, ms in rounds.items()},
            "rounds_ms": {f"heads_{s}": [round(x, 3) for x in ms] for s, ms in rounds.items()},
            "gflop_per_s": {f"heads_{s}": round(flops[s] / statistics.median(ms) / 1e6, 1) for s, ms in rounds.items()},
            "ratio_two_heads_to_one": {
                "per_round": [round(r, 3) for r in ratios],
                "median": round(statistics.median(ratios), 3),
            },
            "config": vars(args),
            "tf": tf.__version__,
            "machine": machine(),
            "command": " ".join(["python", *sys.argv]),
        }
    )


if __name__ == "__main__":
    main()
