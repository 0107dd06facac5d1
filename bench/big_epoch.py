"""Training throughput and peak memory on the FB1.9M-size synthetic graph (one epoch by default).

Steps:
1. Load the graph folder written by ``bench/make_big_kg.py`` the way ``jobi-tf train
   --data-dir`` does (vectorised TSV reading, vocabularies, index); time it.
2. Build JoBi (ComplEx dim 100, joint, p 0.3, batch 1000 x 100 negatives) with the
   optimizer ``--optimizer auto`` picks for this size (lazy Adam), XLA on.
3. Train one epoch (or ``--steps``) through the real pipeline in one ``fit``. Throughput
   is positive triples per second over the steps after the first ``--warmup`` ones
   (compilation), read from per-step timestamps.
4. Save a checkpoint (weights + optimizer moments) to a temporary folder; time it.
5. Print one JSON line: load seconds, throughput (target >= 10,000 positives/s), epoch
   seconds, checkpoint seconds, and the peak RSS of the whole process (target <= 12 GiB).
   The record also carries the ``fit``'s CPU user/system seconds and minor page faults
   (``cpu``), and exits 1 if it spent more than 10% of its user CPU time in the kernel.

Run:  python bench/big_epoch.py --data-dir /work/bigkg
      python bench/big_epoch.py --data-dir /work/bigkg --shared-negatives 1000
      python bench/big_epoch.py --quick            # a tiny generated graph: proves the script runs
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).parent))
from _common import Usage, emit, kernel_check, machine, peak_rss_gib  # noqa: E402, I001
from _clocks import BatchClock  # noqa: E402

import keras  # noqa: E402
import jobi_tf  # noqa: E402
import tensorflow as tf  # noqa: E402

from jobi_tf.checkpoints import save_checkpoint  # noqa: E402
from jobi_tf.config import DataConfig, ModelConfig, RunConfig, SamplerConfig, TrainConfig  # noqa: E402
from jobi_tf.config.fields import CORRUPT_SIDES, OPTIMIZERS  # noqa: E402
from jobi_tf.data.synthetic import SyntheticSpec, write_typed_kg  # noqa: E402
from jobi_tf.sampling import make_train_dataset, steps_per_epoch  # noqa: E402
from jobi_tf.training import StopGuard, build_model, load_data, make_optimizer  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", help="folder from bench/make_big_kg.py")
    parser.add_argument("--dim", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--neg", type=int, default=100)
    parser.add_argument("--p", type=float, default=0.3)
    parser.add_argument("--shared-negatives", type=int, default=0)
    parser.add_argument("--biased-chunk", type=int, default=0, help="share biased negatives in runs of this many")
    parser.add_argument("--corrupt-side", default=SamplerConfig().corrupt_side, choices=CORRUPT_SIDES)
    parser.add_argument("--baseline", action="store_true", help="no pair head and p 0 (the sampled baseline)")
    parser.add_argument("--optimizer", default="auto", choices=OPTIMIZERS)
    parser.add_argument("--steps", type=int, default=0, help="steps to train (0 = one full epoch)")
    parser.add_argument("--warmup", type=int, default=20, help="first steps left out of the throughput")
    parser.add_argument("--quick", action="store_true", help="a 20k-entity graph and 60 steps")
    parser.add_argument(
        "--run-callbacks",
        action="store_true",
        help="add the per-batch callbacks of `jobi-tf train` (stop guard, TensorBoard, one log line per epoch)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if args.quick:
            args.data_dir = str(Path(tmp) / "kg")
            spec = SyntheticSpec(num_entities=20_000, num_relations=50, num_triples=200_000, num_types=10)
            write_typed_kg(spec, args.data_dir)
            args.batch_size, args.neg, args.dim, args.steps, args.warmup = 200, 20, 16, 60, 10
        if not args.data_dir:
            parser.error("give --data-dir (a folder from bench/make_big_kg.py) or --quick")
        emit(run(args, Path(tmp)))


def tenth_medians(step_seconds: list[float]) -> list[float]:
    """Median step (ms) in each tenth of the measured steps: shows a step that slows as the epoch goes on."""
    size = max(1, len(step_seconds) // 10)
    chunks = [step_seconds[i : i + size] for i in range(0, len(step_seconds) - size + 1, size)]
    return [round(1000 * statistics.median(chunk), 1) for chunk in chunks[:10]]


def run(args: argparse.Namespace, tmp: Path) -> dict:
    cfg = RunConfig(
        data=DataConfig(dataset=None, data_dir=args.data_dir),
        sampler=SamplerConfig(
            batch_size=args.batch_size,
            neg=args.neg,
            p=0.0 if args.baseline else args.p,
            shared_negatives=args.shared_negatives,
            biased_chunk=args.biased_chunk,
            corrupt_side=args.corrupt_side,
        ),
        model=ModelConfig(model="complex", dim=args.dim, joint=not args.baseline),
        train=TrainConfig(optimizer=args.optimizer, jit_compile=True),
    )
    start = time.perf_counter()
    _, _, index = load_data(cfg)
    load_seconds = time.perf_counter() - start
    rss_after_load = peak_rss_gib()
    steps = args.steps or steps_per_epoch(index, args.batch_size)

    keras.utils.set_random_seed(0)
    model = build_model(index, cfg)
    optimizer = make_optimizer(cfg, index.num_entities)
    model.compile(optimizer=optimizer, jit_compile=True)
    dataset = make_train_dataset(index, cfg.sampler, seed=0)
    clock = BatchClock()
    callbacks, verbose = [clock], 0
    if args.run_callbacks:
        callbacks = [StopGuard(steps), keras.callbacks.TensorBoard(log_dir=str(tmp / "tb"), update_freq="epoch"), clock]
        verbose = 2
    with Usage() as used:
        start = time.perf_counter()
        model.fit(dataset, epochs=1, steps_per_epoch=steps, verbose=verbose, shuffle=False, callbacks=callbacks)
        epoch_seconds = time.perf_counter() - start
    steady = clock.ends[args.warmup :]
    step_seconds = [b - a for a, b in zip(steady[:-1], steady[1:], strict=True)]
    rate = (len(steady) - 1) * args.batch_size / (steady[-1] - steady[0])

    start = time.perf_counter()
    save_checkpoint(tmp / "checkpoint.npz", model, optimizer, {"epoch": 1})
    checkpoint_seconds = time.perf_counter() - start
    return {
        "bench": "big_epoch",
        "metric": "positive triples per second (steps after warm-up), and peak RSS",
        "value": round(rate),
        "target": 10_000,
        "peak_rss_gib": round(peak_rss_gib(), 2),
        "target_peak_rss_gib": 12,
        "rss_after_load_gib": round(rss_after_load, 2),
        "load_seconds": round(load_seconds, 1),
        "epoch_seconds": round(epoch_seconds, 1),
        "steps": steps,
        "median_step_ms": round(1000 * statistics.median(step_seconds), 1),
        "median_step_ms_by_tenth": tenth_medians(step_seconds),
        "checkpoint_seconds": round(checkpoint_seconds, 1),
        "checkpoint_gib": round((tmp / "checkpoint.npz").stat().st_size / 2**30, 2),
        "cpu": used.record(),
        "kernel_check": kernel_check({"fit": used}),
        "graph": {
            "entities": index.num_entities,
            "relations": index.num_relations,
            "train": len(index.train),
            "data_dir": args.data_dir,
        },
        "config": {
            "model": f"complex dim {args.dim}, baseline (no pair head), p 0"
            if args.baseline
            else f"complex dim {args.dim}, joint, p {args.p}",
            "batch_size": args.batch_size,
            "neg": args.neg,
            "shared_negatives": args.shared_negatives,
            "biased_chunk": args.biased_chunk,
            "corrupt_side": args.corrupt_side,
            "library": str(Path(jobi_tf.__file__).resolve().parent),
            "optimizer": type(optimizer).__name__,
            "jit_compile": True,
            "quick": args.quick,
            "run_callbacks": args.run_callbacks,
        },
        "tf": tf.__version__,
        "keras": keras.__version__,
        "cpus": os.cpu_count(),
        "machine": machine(),
        "load_average_after": round(os.getloadavg()[0], 2),
        "command": " ".join(["python", *sys.argv]),
    }


if __name__ == "__main__":
    main()
