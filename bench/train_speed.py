"""Training throughput of jobi-tf (positive triples per second), against PyKEEN in the same run.

Each configuration (batch × negatives × negative mode) trains ComplEx dim 200 on FB15k-237
through the real pipeline (tf.data sampler → `JoBiModel` → Keras ``fit``, Adam, XLA) for
``--epochs`` full epochs, a timestamp after every batch, rated as every system is
(`bench/_steady.py`: 10,000 positives of warm-up, then the median of 75,000-positive windows),
with the CPU use of its ``fit``. With ``--peer-python`` PyKEEN (`bench/peer_pykeen.py`, its own
virtualenv) is measured the same way just before our first configuration of its setting, so
each ratio compares one batch and negatives minutes apart (``--rounds`` repeats the sequence).
Also a hand-written plain-TF step, the prototype the project started from, beside our baseline.
One JSON line; exit 1 if a configuration spent over 10% of its user CPU time in the kernel.

Run:  JOBI_TF_DATA_DIR=../shared/datasets python bench/train_speed.py \
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
from _common import Usage, data_dir, emit, kernel_check, machine, peak_rss_gib, summary, window_rates  # noqa: E402, I001

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from jobi_tf.config import SamplerConfig  # noqa: E402
from jobi_tf.data.index import build_index  # noqa: E402
from jobi_tf.data.triples import read_split_folder  # noqa: E402
from jobi_tf.models import JoBiModel  # noqa: E402
from jobi_tf.optimizers import choose_optimizer, make_optimizer  # noqa: E402
from jobi_tf.sampling.pipelines import make_train_dataset, steps_per_epoch  # noqa: E402


class BatchClock(keras.callbacks.Callback):
    """The clock after every batch, inside ``fit`` (for `_steady.window_rates`)."""

    def __init__(self) -> None:
        super().__init__()
        self.ends: list[float] = []

    def on_train_batch_end(self, batch, logs=None):
        self.ends.append(time.perf_counter())


# name, batch, negatives, shared chunk, joint (and p 0.3), corrupt side
CONFIGS = [
    ("per-triple 500x50", 500, 50, 0, True, "per-positive"),
    ("per-triple baseline (no joint, p 0) 500x50", 500, 50, 0, False, "per-positive"),
    ("per-triple per-negative-side 500x50", 500, 50, 0, True, "per-negative"),
    ("shared 1000x100", 1000, 100, 1000, True, "per-positive"),
    ("per-triple 1000x100", 1000, 100, 0, True, "per-positive"),
    ("shared per-negative-side 1000x100", 1000, 100, 1000, True, "per-negative"),
]


def ours(index, batch: int, neg: int, shared: int, epochs: int, joint: bool, side: str) -> tuple[list[float], Usage]:
    """Window rates of the real pipeline over ``epochs`` full epochs, and the CPU usage of the ``fit``.

    ``joint`` is JoBi (pair head and p 0.3), else the baseline (p 0, no pair labels drawn), as
    ``jobi-tf train`` builds them."""
    p = 0.3 if joint else 0.0
    cfg = SamplerConfig(batch_size=batch, neg=neg, p=p, shared_negatives=shared, corrupt_side=side, biased_chunk=0)
    ds = make_train_dataset(index, cfg, seed=0, pair_labels=joint)
    model = JoBiModel(index.num_entities, index.num_relations, model="complex", dim=200, joint=joint)
    model.compile(optimizer=make_optimizer(choose_optimizer("auto", index.num_entities), 0.001), jit_compile=True)
    clock = BatchClock()
    with Usage() as used:
        start = time.perf_counter()
        steps = steps_per_epoch(index, batch)
        model.fit(ds, epochs=epochs, steps_per_epoch=steps, verbose=0, shuffle=False, callbacks=[clock])
    return window_rates(clock.ends, start, batch), used


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


def pykeen(
    python: str, folder: Path, batch: int, neg: int, epochs: int, env: dict[str, str], regularizer: str = "none"
) -> dict:
    script = Path(__file__).parent / "peer_pykeen.py"
    command = [python, str(script), "--data-dir", str(folder), "--batch-size", str(batch), "--neg", str(neg)]
    command += ["--regularizer", regularizer]
    out = subprocess.run(
        [*command, "--epochs", str(epochs)], capture_output=True, text=True, check=True, env={**os.environ, **env}
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir")
    parser.add_argument("--epochs", type=int, default=1, help="full epochs per measurement, ours and the peer's")
    parser.add_argument("--rounds", type=int, default=1, help="repeats of the interleaved sequence")
    parser.add_argument("--only", nargs="*", help="names of configurations to run (default: all)")
    parser.add_argument("--peer-python", help="python of a virtualenv with PyKEEN")
    parser.add_argument(
        "--peer-env",
        nargs="*",
        default=[],
        help="KEY=VALUE for the peer's process only, e.g. LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2",
    )
    parser.add_argument(
        "--peer-regularizer",
        choices=["none", "pykeen-default"],
        default="none",
        help="none (equal terms: jobi-tf's side has none) or PyKEEN ComplEx's own L2, weight 0.01",
    )
    return parser.parse_args()


def interleaved(args, folder: Path, index, configs: list, peer_env: dict) -> tuple[dict, dict, dict]:
    """``--rounds`` of every configuration, PyKEEN run once per round before our first configuration
    of its setting: our rates and usages per configuration, and the peer's rates, CPU and settings."""
    rates: dict[str, list[float]] = {c[0]: [] for c in configs}
    usages: dict[str, Usage] = {}
    peer: dict[str, dict] = {"rates": {}, "cpu": {}, "resolved": {}}
    for _ in range(args.rounds):
        peer_done: set[str] = set()
        for name, b, k, c, joint, side in configs:
            setting = f"{b}x{k}"
            if args.peer_python and setting not in peer_done:
                peer_done.add(setting)
                got = pykeen(args.peer_python, folder, b, k, args.epochs, peer_env, args.peer_regularizer)
                peer["resolved"][setting] = {**got["resolved"], "pykeen": got["pykeen"], "torch": got["torch"]}
                peer["rates"].setdefault(setting, []).extend(got["windows"])
                peer["cpu"].setdefault(setting, []).append(got["cpu"])
            got, used = ours(index, b, k, c, args.epochs, joint=joint, side=side)
            rates[name].extend(got)
            usages[f"{name} #{len(usages)}"] = used
    return rates, usages, peer


def main() -> None:
    args = parse_args()
    folder = data_dir("fb15k-237", args.data_dir)
    _, _, index = build_index(read_split_folder(folder), "fb15k-237")
    configs = [c for c in CONFIGS if not args.only or c[0] in args.only]
    peer_env = dict(item.split("=", 1) for item in args.peer_env)
    rates, usages, peer = interleaved(args, folder, index, configs, peer_env)

    results = {}
    for name, b, k, *_ in configs:
        results[name] = summary(rates[name])
        results[name]["cpu"] = [u.record() for key, u in usages.items() if key.startswith(name + " #")]
        if f"{b}x{k}" in peer["rates"]:
            ratio = statistics.median(rates[name]) / statistics.median(peer["rates"][f"{b}x{k}"])
            results[name]["ratio_to_pykeen_same_setting"] = round(ratio, 2)
    record = {
        "bench": "train_speed",
        "metric": "positive triples per second, steady state (median of 75,000-positive windows over full epochs)",
        "dataset": "fb15k-237",
        "model": "complex dim 200, joint p 0.3 unless named baseline, --optimizer auto (dense Adam), XLA",
        "ours": results,
        "epochs_per_measurement": args.epochs,
        "rounds": args.rounds,
    }
    if peer["rates"]:
        record["pykeen"] = {s: {**summary(r), "cpu": peer["cpu"][s]} for s, r in peer["rates"].items()}
        record["pykeen_env"] = peer_env
        record["pykeen_resolved"] = peer["resolved"]  # model, regularizers ([] = none), loss, sampler, optimizer
    baseline = "per-triple baseline (no joint, p 0) 500x50"
    if baseline in rates:
        ref = statistics.median(plain_tf(index, 500, 50, 60, 5))
        record["reference_plain_tf_500x50"] = round(ref)
        record["ratio_baseline_to_plain_tf_500x50"] = round(statistics.median(rates[baseline]) / ref, 2)
    record.update(
        kernel_check=kernel_check(usages),
        peak_rss_gib=round(peak_rss_gib(), 2),
        tf=tf.__version__,
        keras=keras.__version__,
        cpus=os.cpu_count(),
        machine=machine(),
        command="python bench/train_speed.py " + " ".join(sys.argv[1:]),
    )
    emit(record)


if __name__ == "__main__":
    main()
