"""Time per epoch of 1-vs-all (and k-vs-all) training (kbc's recipe shape), against the matmul limit.

Steps:
1. Load ``--dataset`` (FB15k-237 by default) as ``jobi-tf train --dataset NAME`` does.
2. Measure, in this process, the machine's float32 matmul rate on the shape 1-vs-all uses:
   ``[batch, width] x [width, entities]`` (XLA, all cores), median of 5.
3. For each ``--dims`` rank and each head setting (baseline, then JoBi's two heads), train
   ComplEx through the real pipeline (tf.data → `JoBiModel` → Keras ``fit``, XLA):
   ``--loss full-softmax``, reciprocal relations, N3 0.05, Adagrad lr 0.1, batch 1000
   (Lacroix et al.'s settings; ``--relation-prediction W`` adds Chen et al.'s auxiliary
   loss), ``--steps`` steps after ``--warmup`` (compilation). Median
   step → seconds per epoch (``ceil(train / batch)`` steps).
4. FLOPs per step: each positive scores every entity as tail and (inverse) head for every
   head in use: ``2 directions x heads x batch x entities x width x 2``; the backward pass
   takes twice that. The ratio to step 2's rate is the share of the matmul limit reached.
   With ``--losses k-vs-all`` a batch holds distinct queries, one direction each (so half
   the FLOPs per step), and an epoch is ``queries / batch`` steps.
5. One JSON line (CPU user/system seconds of each ``fit``; exit 1 if the kernel share > 10%).

Run:  JOBI_TF_DATA_DIR=../shared/datasets python bench/one_vs_all_speed.py --dims 200 500 1000
      [--dataset wn18rr] [--batch-size 50] [--relation-prediction 0.05]
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
from _common import Usage, data_dir, emit, kernel_check, peak_rss_gib  # noqa: E402, I001
from _clocks import BatchClock  # noqa: E402

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from jobi_tf.config import DataConfig, SamplerConfig  # noqa: E402
from jobi_tf.datasets.loading import load_index  # noqa: E402
from jobi_tf.models import JoBiModel  # noqa: E402
from jobi_tf.optimizers import make_optimizer  # noqa: E402
from jobi_tf.sampling.pipelines import (  # noqa: E402
    TrainingQueries,
    make_query_dataset,
    make_train_dataset,
    query_steps_per_epoch,
    steps_per_epoch,
)


def matmul_gflops(batch: int, width: int, entities: int, repeats: int = 5) -> float:
    """float32 rate of ``[batch, width] x [width, entities]`` (XLA), the 1-vs-all scoring shape."""
    a = tf.random.normal([batch, width])
    b = tf.random.normal([entities, width])
    fn = tf.function(lambda: tf.reduce_sum(tf.matmul(a, b, transpose_b=True)), jit_compile=True)
    fn().numpy()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn().numpy()
        times.append(time.perf_counter() - start)
    return 2 * batch * width * entities / statistics.median(times) / 1e9


def one(
    index,
    dim: int,
    joint: bool,
    args: argparse.Namespace,
    loss: str = "full-softmax",
    jit: bool = True,
    dtype: str = "float32",
) -> dict:
    keras.utils.set_random_seed(0)
    model = JoBiModel(
        index.num_entities,
        index.num_relations,
        model="complex",
        dim=dim,
        joint=joint,
        loss=loss,
        reciprocal=True,
        regularization=0.05,
        regularizer="n3",
        matmul_dtype=dtype,
        relation_prediction=args.relation_prediction,
    )
    model.compile(optimizer=make_optimizer("adagrad", 0.1), jit_compile=jit)
    sampler = SamplerConfig(batch_size=args.batch_size)
    if loss == "k-vs-all":
        dataset = make_query_dataset(index, sampler, joint=joint)
        epoch_steps = query_steps_per_epoch(TrainingQueries.from_index(index), args.batch_size)
    else:
        dataset = make_train_dataset(index, sampler, full_softmax=True, slot_rows=joint)
        epoch_steps = steps_per_epoch(index, args.batch_size)
    clock = BatchClock()
    with Usage() as used:
        total = args.warmup + args.steps
        model.fit(dataset, epochs=1, steps_per_epoch=total, verbose=0, shuffle=False, callbacks=[clock])
    ends = clock.ends[args.warmup - 1 :]
    steps = [b - a for a, b in zip(ends[:-1], ends[1:], strict=True)]
    step = statistics.median(steps)
    heads = 2 if joint else 1
    directions = 1 if loss == "k-vs-all" else 2
    flops = 3 * directions * heads * args.batch_size * index.num_entities * (2 * dim) * 2
    return {
        "loss": loss,
        "jit": jit,
        "matmul_dtype": dtype,
        "rank": dim,
        "joint": joint,
        "median_step_ms": round(1000 * step, 1),
        "steps_per_epoch": epoch_steps,
        "seconds_per_epoch": round(step * epoch_steps, 1),
        "measured_seconds": ends[-1] - ends[0],  # the --steps timed steps, end to end
        "examples_per_s": round(args.batch_size / step),
        "gflops": round(flops / step / 1e9, 1),
        "cpu": used.record(),
        "_usage": used,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="fb15k-237", choices=["fb15k-237", "wn18rr"])
    parser.add_argument("--data-dir", help="its local copy (default: $JOBI_TF_DATA_DIR/<dataset>)")
    parser.add_argument("--relation-prediction", type=float, default=0.0, metavar="W")
    parser.add_argument("--dims", type=int, nargs="+", default=[200, 500, 1000])
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--losses", nargs="+", default=["full-softmax"], choices=["full-softmax", "k-vs-all"])
    parser.add_argument("--heads", nargs="+", default=["baseline", "jobi"], choices=["baseline", "jobi"])
    parser.add_argument(
        "--jit", nargs="+", default=["on"], choices=["on", "off"], help="XLA on, off, or both (same run)"
    )
    parser.add_argument("--matmul-dtypes", nargs="+", default=["float32"], choices=["float32", "bfloat16"])
    args = parser.parse_args()
    folder = str(data_dir(args.dataset, args.data_dir))
    _, _, index = load_index(DataConfig(dataset=args.dataset, data_dir=folder))
    results = []
    for dim in args.dims:
        peak = matmul_gflops(args.batch_size, 2 * dim, index.num_entities)
        for loss in args.losses:
            settings = [(h == "jobi", j == "on", d) for h in args.heads for j in args.jit for d in args.matmul_dtypes]
            for joint, jit, dtype in settings:
                result = one(index, dim, joint, args, loss, jit, dtype)
                result["matmul_gflops_same_shape"] = round(peak, 1)
                result["share_of_matmul_limit"] = round(result["gflops"] / peak, 2)
                results.append(result)
    usages = {
        f"{r['loss']} rank {r['rank']} {'jobi' if r['joint'] else 'baseline'}{'' if r['jit'] else ' no-jit'}"
        f" {r['matmul_dtype']}": r.pop("_usage")
        for r in results
    }
    emit(
        {
            "bench": "one_vs_all_speed",
            "metric": f"seconds per {args.dataset} epoch of 1-vs-all / k-vs-all training (median step x steps)",
            "results": results,
            "config": {
                "model": "complex, reciprocal, n3 0.05, adagrad lr 0.1",
                "dataset": args.dataset,
                "relation_prediction": args.relation_prediction,
                "batch_size": args.batch_size,
                "steps": args.steps,
                "warmup": args.warmup,
                "training_triples": len(index.train),
                "distinct_queries": len(TrainingQueries.from_index(index)),
            },
            "peak_rss_gib": round(peak_rss_gib(), 2),
            "kernel_check": kernel_check(usages),
            "tf": tf.__version__,
            "cpus": os.cpu_count(),
        }
    )


if __name__ == "__main__":
    main()
