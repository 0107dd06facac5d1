"""Training throughput of jobi-tf (positive triples per second), with references from the same run.

Steps:
1. Load FB15k-237; for each configuration (batch × negatives × negative mode) train
   ComplEx dim 200, joint, p 0.3, through the real pipeline (tf.data sampler → Keras fit)
   for ``--steps`` steps, ``--repeats`` times, after a warm-up; keep the median.
2. Reference A, in this process: a hand-written plain-TF step (per-triple negatives
   gathered as a [batch, negatives, 400] block, XLA on), the prototype the project started from.
   It does the baseline's work (no pair head), so it is compared with our baseline configuration.
3. Reference B (with ``--peer-python``): PyKEEN's sLCWA loop, measured by
   ``bench/peer_pykeen.py`` in its own virtualenv, interleaved with ours.
4. Print one JSON line with every median and the ratios.

Run:  python bench/train_speed.py --data-dir ../shared/datasets/fb15k-237 \
          --peer-python /path/to/benchvenv/bin/python
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

sys.path.insert(0, str(Path(__file__).parent))
import keras  # noqa: E402
import tensorflow as tf  # noqa: E402
from _common import data_dir, emit, peak_rss_gib  # noqa: E402

from jobi_tf.config import SamplerConfig  # noqa: E402
from jobi_tf.data.index import build_index  # noqa: E402
from jobi_tf.data.triples import read_split_folder  # noqa: E402
from jobi_tf.models import JoBiModel  # noqa: E402
from jobi_tf.sampling import make_train_dataset  # noqa: E402


class _EpochClock(keras.callbacks.Callback):
    """Wall time of each epoch inside one ``fit`` (one iterator, no per-call start-up)."""

    def __init__(self) -> None:
        super().__init__()
        self.seconds: list[float] = []

    def on_epoch_begin(self, epoch, logs=None):
        self._start = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        self.seconds.append(time.perf_counter() - self._start)


def ours(index, batch, neg, shared, steps, repeats, joint=True, side="per-positive", seed=0) -> list[float]:
    """Steady-state rate of the real pipeline: one ``fit`` of 1 + repeats epochs of ``steps`` steps."""
    cfg = SamplerConfig(batch_size=batch, neg=neg, p=0.3 if joint else 0.0, shared_negatives=shared, corrupt_side=side)
    ds = make_train_dataset(index, cfg, seed=seed)
    model = JoBiModel(index.num_entities, index.num_relations, model="complex", dim=200, joint=joint)
    model.compile(optimizer=keras.optimizers.Adam(0.001), jit_compile=True)
    clock = _EpochClock()
    model.fit(ds, epochs=repeats + 1, steps_per_epoch=steps, verbose=0, shuffle=False, callbacks=[clock])
    return [steps * batch / s for s in clock.seconds[1:]]  # the first epoch compiles


def plain_tf(index, batch, neg, steps, repeats) -> list[float]:
    """The hand-written prototype: uniform per-triple negatives, ComplEx, Adam, XLA."""
    e, w = index.num_entities, 400
    ent = tf.Variable(tf.random.normal([e, w], stddev=0.01))
    rel = tf.Variable(tf.random.normal([index.num_relations, w], stddev=0.01))
    opt = keras.optimizers.Adam(0.001)
    train = tf.constant(index.train)

    @tf.function(jit_compile=True)
    def step(rows, negs):
        with tf.GradientTape() as tape:
            tri = tf.gather(train, rows)
            h, r, t = tf.gather(ent, tri[:, 0]), tf.gather(rel, tri[:, 1]), tf.gather(ent, tri[:, 2])
            hr, hi = tf.split(h, 2, -1)
            rr, ri = tf.split(r, 2, -1)
            q = tf.concat([hr * rr - hi * ri, hr * ri + hi * rr], -1)
            pos = tf.reduce_sum(q * t, -1, keepdims=True)
            neg_s = tf.einsum("bw,bkw->bk", q, tf.gather(ent, negs))
            logits = tf.concat([pos, neg_s], 1)
            loss = tf.reduce_mean(tf.reduce_logsumexp(logits, 1) - logits[:, 0])
        grads = tape.gradient(loss, [ent, rel])
        opt.apply_gradients(zip(grads, [ent, rel], strict=True))
        return loss

    n = len(index.train)

    def run(k):
        for _ in range(k):
            rows = tf.random.uniform([batch], 0, n, tf.int32)
            negs = tf.random.uniform([batch, neg], 0, e, tf.int32)
            step(rows, negs)

    run(5)
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        run(steps)
        rates.append(steps * batch / (time.perf_counter() - start))
    return rates


def pykeen(python: str, folder: Path, batch: int, neg: int, triples: int) -> float:
    script = Path(__file__).parent / "peer_pykeen.py"
    out = subprocess.run(
        [
            python,
            str(script),
            "--data-dir",
            str(folder),
            "--batch-size",
            str(batch),
            "--neg",
            str(neg),
            "--triples",
            str(triples),
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])["value"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--shared", type=int, default=1000, help="chunk C of the shared-negatives configuration")
    parser.add_argument("--peer-python", help="python of a virtualenv with PyKEEN (reference B)")
    parser.add_argument("--peer-triples", type=int, default=50000, help="training triples per PyKEEN repeat")
    args = parser.parse_args()
    folder = data_dir("fb15k-237", args.data_dir)
    _, _, index = build_index(read_split_folder(folder), "fb15k-237")

    # Default side (one head-or-tail coin per positive) unless the name says per-negative.
    configs = [
        ("per-triple", 500, 50, 0, True),
        ("per-triple", 1000, 100, 0, True),
        ("shared", 1000, 100, args.shared, True),
        ("per-triple per-negative-side", 500, 50, 0, True),
        ("shared per-negative-side", 1000, 100, args.shared, True),
        ("per-triple baseline (no joint, p 0)", 500, 50, 0, False),
    ]
    results = {}
    for name, b, k, c, joint in configs:
        side = "per-negative" if "per-negative" in name else "per-positive"
        rates = ours(index, b, k, c, args.steps, args.repeats, joint=joint, side=side)
        results[f"{name} {b}x{k}"] = {
            "median_pos_per_s": round(statistics.median(rates)),
            "runs": [round(r) for r in rates],
        }
    ref = plain_tf(index, 500, 50, args.steps, args.repeats)
    record = {
        "bench": "train_speed",
        "metric": "positive triples per second (median)",
        "dataset": "fb15k-237",
        "model": "complex dim 200, joint, p 0.3, Adam, XLA",
        "ours": results,
        "reference_plain_tf_500x50": round(statistics.median(ref)),
        "ratio_to_plain_tf_500x50 (baseline, same work)": round(
            results["per-triple baseline (no joint, p 0) 500x50"]["median_pos_per_s"] / statistics.median(ref), 2
        ),
        "median_of": args.repeats,
        "steps_per_repeat": args.steps,
    }
    if args.peer_python:
        peer = [pykeen(args.peer_python, folder, 500, 50, args.peer_triples) for _ in range(3)]
        record["reference_pykeen_500x50"] = round(statistics.median(peer))
        record["pykeen_runs"] = [round(p) for p in peer]
        record["ratio_to_pykeen_500x50"] = round(
            results["per-triple 500x50"]["median_pos_per_s"] / statistics.median(peer), 2
        )
    record.update(
        peak_rss_gib=round(peak_rss_gib(), 2), tf=tf.__version__, keras=keras.__version__, cpus=os.cpu_count()
    )
    emit(record)


if __name__ == "__main__":
    main()
