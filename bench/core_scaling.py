"""How much a second core adds to the training step, and whether Hogwild threads add more.

PyTorch-BigGraph uses two cores as two Hogwild processes, each with its own thread pool, and
gets about twice one worker's rate. jobi-tf runs one stream of XLA-compiled steps whose
products TensorFlow's intra-op pool spreads over the cores. This measures, at PBG's work per
positive (FB15k-237, ComplEx 200, batch 1000, 100 negatives per positive shared in chunks of 50,
reciprocal relations, ``row-adagrad`` 0.1; JoBi: pair head, p 0.3, ``--biased-chunk 10``):

* ``one_core``: one stream, the process pinned to one core, a one-thread intra-op pool;
* ``both_cores``: one stream, every core, TensorFlow's default pool (how ``jobi-tf train`` runs);
* ``two_threads``: two Python threads running the same compiled step on the same model and
  optimizer (Hogwild: unlocked updates), every core, the default pool.

Each (variant, mode) runs in its own process (thread pools are fixed at start-up) on 40
batches drawn from the real sampler beforehand, so the sampler's cost is left out: this is the
compiled step's rate only. Rounds interleave every (variant, mode); a ratio is taken within a
round, the median of rounds reported. Prints one JSON line.

Run:  JOBI_TF_DATA_DIR=../shared/datasets python bench/core_scaling.py --rounds 3 --seconds 20
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).parent))
from _common import data_dir, emit, provenance, ratio_entry  # noqa: E402

MODES = ("one_core", "both_cores", "two_threads")
VARIANTS = ("baseline", "jobi")
#: PBG's work per positive on our side (as ``bench/jobi_step_cost.py``'s ``pbg`` setting).
SETTING = {"batch_size": 1000, "neg": 100, "shared_negatives": 50, "reciprocal": True, "optimizer": "row-adagrad"}
SETTING |= {"lr": 0.1, "model": "complex", "dim": 200, "jobi": {"joint": True, "p": 0.3, "biased_chunk": 10}}
BATCHES = 40


def child(variant: str, mode: str, seconds: float, folder: str) -> dict:
    """Steps per second of one (variant, mode), in this process."""
    if mode == "one_core":
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    import keras
    import tensorflow as tf

    if mode == "one_core":
        tf.config.threading.set_intra_op_parallelism_threads(1)
    from jobi_tf.config import SamplerConfig
    from jobi_tf.data.index import build_index
    from jobi_tf.data.triples import read_split_folder
    from jobi_tf.models import JoBiModel
    from jobi_tf.optimizers import make_optimizer
    from jobi_tf.sampling import make_train_dataset

    _, _, index = build_index(read_split_folder(Path(folder)), "fb15k-237")
    joint = variant == "jobi"
    extra = SETTING["jobi"] if joint else {"p": 0.0, "biased_chunk": 0}
    cfg = SamplerConfig(
        batch_size=SETTING["batch_size"],
        neg=SETTING["neg"],
        shared_negatives=SETTING["shared_negatives"],
        p=extra["p"],
        biased_chunk=extra["biased_chunk"],
    )
    stream = iter(make_train_dataset(index, cfg, seed=0, pair_labels=joint))
    batches = [next(stream) for _ in range(BATCHES)]
    keras.utils.set_random_seed(0)
    model = JoBiModel(
        index.num_entities, index.num_relations, model="complex", dim=SETTING["dim"], joint=joint, reciprocal=True
    )
    model.compile(optimizer=make_optimizer(SETTING["optimizer"], SETTING["lr"]), jit_compile=True)
    model(batches[0])

    @tf.function(jit_compile=True)
    def step(features):
        with tf.GradientTape() as tape:
            loss = model.compute_loss(x=features, y_pred=model(features, training=True))
        variables = model.trainable_variables
        model.optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables, strict=True))
        return loss

    for b in batches[:3]:  # compile and warm up, outside the timed window
        step(b).numpy()
    threads = 2 if mode == "two_threads" else 1
    counts = [0] * threads
    end = time.perf_counter() + seconds

    def work(k: int) -> None:
        i = k
        while time.perf_counter() < end:
            step(batches[i % BATCHES]).numpy()
            counts[k] += 1
            i += threads

    start = time.perf_counter()
    workers = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    elapsed = time.perf_counter() - start
    loss = float(step(batches[0]))
    return {"steps_per_s": round(sum(counts) / elapsed, 2), "steps": sum(counts), "finite_loss": loss == loss}


def ratios(rates: dict[str, dict[str, list[float]]]) -> dict[str, dict]:
    """Per variant and round: both cores / one core, two threads / both cores, two threads /
    one core; the median of rounds."""
    out = {}
    for variant, by_mode in rates.items():
        for top, bottom in (("both_cores", "one_core"), ("two_threads", "both_cores"), ("two_threads", "one_core")):
            per_round = [a / b for a, b in zip(by_mode[top], by_mode[bottom], strict=True)]
            out[f"{variant}/{top}_over_{bottom}"] = ratio_entry(per_round)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=20.0, help="timed seconds per (variant, mode)")
    parser.add_argument("--child", nargs=2, metavar=("VARIANT", "MODE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    folder = str(data_dir("fb15k-237", args.data_dir))
    if args.child:
        print(json.dumps(child(*args.child, args.seconds, folder)))
        return
    rates: dict[str, dict[str, list[float]]] = {v: {m: [] for m in MODES} for v in VARIANTS}
    for _ in range(args.rounds):
        for variant in VARIANTS:
            for mode in MODES:
                command = [sys.executable, __file__, "--data-dir", folder, "--seconds", str(args.seconds)]
                done = subprocess.run(command + ["--child", variant, mode], capture_output=True, text=True, check=False)
                if done.returncode:
                    sys.exit(f"{variant} {mode} failed: {done.stderr.strip().splitlines()[-1:]}")
                result = json.loads(done.stdout.strip().splitlines()[-1])
                if not result["finite_loss"]:
                    sys.exit(f"{variant} {mode}: the loss is not finite")
                rates[variant][mode].append(result["steps_per_s"])
    emit(
        {
            "bench": "core_scaling",
            "metric": "compiled training steps per second (1000 positives each), per round",
            "rates": rates,
            "ratios": ratios(rates),
            "rounds": args.rounds,
            "seconds_per_measurement": args.seconds,
            "setting": SETTING,
            "sampler": "excluded: 40 batches drawn beforehand from the real sampler, reused in turn",
            **provenance(__file__),
        }
    )


if __name__ == "__main__":
    main()
