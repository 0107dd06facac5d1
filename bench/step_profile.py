"""Where a training step's time goes, by table size: sampler, gather, score + loss, gradient, optimizer.

Steps:
1. For each table size, generate a synthetic typed KG with exactly that many entity rows and
   draw a fixed set of batches from the real tf.data sampler (JoBi: joint, p 0.3).
2. Time, each as its own XLA-compiled function over the same batches (median of
   ``--repeats`` passes over ``--steps`` batches):
   a. ``sampler``: producing batches with tf.data (runs beside the step in training);
   b. ``gather``: the entity and relation rows a batch reads (``tf.gather``) and a sum;
   c. ``forward``: model call + loss (gathers, query products, scores, softmax / BCE);
   d. ``forward_backward``: c plus the gradients (the gathers' gradients are sparse);
   e. ``step``: d plus the optimizer update (Keras's ``train_step`` without ``fit``).
   Derived: score + loss = c - b, gradient = d - c, optimizer = e - d.
3. Print one JSON line with every median in milliseconds. It also carries the CPU user/system
   seconds and minor page faults of each timed part and of b-e together (``cpu``, compilation
   excluded), and exits 1 if b-e together spent more than 10% of their user CPU time in the kernel.

With ``--dataset NAME`` (FB15k-237, say) the graph is that dataset and ``--variants`` lists
what to profile on it: ``baseline`` (no pair head, p 0, no pair labels drawn), ``jobi``,
``joint`` (pair head, p 0), ``biasedneg`` (p, no pair head): where JoBi's extra cost goes.

Run:  python bench/step_profile.py                               # 15k and 2M entities, auto
      python bench/step_profile.py --sizes 2000000 --optimizer adam --steps 5   # the dense cost
      python bench/step_profile.py --quick
      JOBI_TF_DATA_DIR=../shared/datasets python bench/step_profile.py --dataset fb15k-237 --dim 200 \
          --batch-size 1000 --neg 100 --shared-negatives 1000 --variants baseline joint biasedneg jobi
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
from _common import Usage, compiled_train_step, data_dir, emit, kernel_check, machine, peak_rss_gib  # noqa: E402, I001

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402
from step_time_vs_size import graph  # noqa: E402

from jobi_tf.config import SamplerConfig  # noqa: E402
from jobi_tf.config.fields import OPTIMIZERS  # noqa: E402
from jobi_tf.data.index import build_index  # noqa: E402
from jobi_tf.data.triples import read_split_folder  # noqa: E402
from jobi_tf.models import JoBiModel  # noqa: E402
from jobi_tf.optimizers import choose_optimizer, make_optimizer  # noqa: E402
from jobi_tf.sampling import make_train_dataset  # noqa: E402


def _median_ms(fn, batches: list, repeats: int) -> tuple[float, Usage]:
    """Median milliseconds per batch over ``repeats`` passes, and the CPU usage of the passes."""
    times = []
    with Usage() as used:
        for _ in range(repeats):
            start = time.perf_counter()
            for batch in batches:
                out = fn(batch)
            tf.nest.map_structure(lambda t: t.numpy(), out)
            times.append((time.perf_counter() - start) / len(batches))
    return 1000 * statistics.median(times), used


#: ``--variants``: (pair head, p) of each, ``None`` for the spec's ``--p``.
VARIANTS = {"baseline": (False, 0.0), "joint": (True, 0.0), "biasedneg": (False, None), "jobi": (True, None)}


def profile(
    index, optimizer_name: str, args: argparse.Namespace, variant: str = "jobi"
) -> tuple[dict[str, float], dict[str, Usage]]:
    """Milliseconds per batch of each part, and the CPU usage of each part's timed passes.

    ``compiled_parts`` is the usage of b-e together: the one long enough to judge the kernel's share.
    """
    joint, p = VARIANTS[variant]
    cfg = SamplerConfig(
        batch_size=args.batch_size,
        neg=args.neg,
        p=args.p if p is None else p,
        shared_negatives=args.shared_negatives,
        biased_chunk=args.biased_chunk,
    )
    pair_every = args.pair_every if joint else 1
    ds = make_train_dataset(index, cfg, seed=0, pair_labels=joint, pair_every=pair_every)
    batches = iter(ds)
    next(batches)  # pipeline start-up
    usages: dict[str, Usage] = {}
    with Usage() as usages["sampler"]:
        start = time.perf_counter()
        batches = [next(batches) for _ in range(args.steps)]
        sampler_ms = 1000 * (time.perf_counter() - start) / args.steps
    keras.utils.set_random_seed(0)
    model = JoBiModel(
        index.num_entities, index.num_relations, model="complex", dim=args.dim, joint=joint, pair_every=pair_every
    )
    model.compile(optimizer=make_optimizer(optimizer_name, 0.001), jit_compile=True)
    model(batches[0])  # build
    tables = [model.entity_embeddings, model.triple_relations] + ([model.pair_relations] if joint else [])

    @tf.function(jit_compile=True)
    def gather(x):
        t = x["triples"]
        rows = [tf.gather(tables[0], t[:, 0]), tf.gather(tables[0], t[:, 2])]
        rows += [tf.gather(table, t[:, 1]) for table in tables[1:]]
        for key in ("candidates", "chunk_candidates", "shared_candidates"):
            if key in x:
                rows.append(tf.gather(tables[0], x[key]))
        return tf.add_n([tf.reduce_sum(r) for r in rows])

    @tf.function(jit_compile=True)
    def forward(x):
        return model.compute_loss(x=x, y_pred=model(x, training=True))

    @tf.function(jit_compile=True)
    def forward_backward(x):
        with tf.GradientTape() as tape:
            loss = model.compute_loss(x=x, y_pred=model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        return loss, [g.values if isinstance(g, tf.IndexedSlices) else g for g in grads]

    step = compiled_train_step(model)  # d plus the optimizer's update

    out = {"sampler": sampler_ms}
    parts = (("gather", gather), ("forward", forward), ("forward_backward", forward_backward), ("step", step))
    for _, fn in parts:
        fn(batches[0])  # trace and compile, outside the measured passes
    with Usage() as usages["compiled_parts"]:
        for name, fn in parts:
            out[name], usages[name] = _median_ms(fn, batches, args.repeats)
    out["score_and_loss"] = out["forward"] - out["gather"]
    out["gradient"] = out["forward_backward"] - out["forward"]
    out["optimizer"] = out["step"] - out["forward_backward"]
    return {k: round(v, 1) for k, v in out.items()}, usages


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[15_000, 2_000_000])
    parser.add_argument("--optimizer", default="auto", choices=OPTIMIZERS)
    parser.add_argument("--triples", type=int, default=1_000_000)
    parser.add_argument("--relations", type=int, default=1000)
    parser.add_argument("--dim", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--neg", type=int, default=100)
    parser.add_argument("--p", type=float, default=0.3)
    parser.add_argument("--shared-negatives", type=int, default=0)
    parser.add_argument("--biased-chunk", type=int, default=0)
    parser.add_argument("--pair-every", type=int, default=1, help="the pair head on every N-th positive")
    parser.add_argument("--dataset", help="profile this dataset ($JOBI_TF_DATA_DIR/NAME) instead of synthetic sizes")
    parser.add_argument("--variants", nargs="+", default=["jobi"], choices=sorted(VARIANTS))
    parser.add_argument("--steps", type=int, default=20, help="distinct batches per pass")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="tiny sizes (20 repeats): proves the script runs")
    args = parser.parse_args()
    if args.quick:
        args.sizes, args.triples, args.relations = [2_000, 20_000], 20_000, 20
        # 20 repeats: enough CPU time for the kernel check to measure more than timer ticks
        args.batch_size, args.neg, args.dim, args.steps, args.repeats = 100, 10, 8, 3, 20
    results, used, cpu, usages = {}, {}, {}, {}
    if args.dataset:
        _, _, index = build_index(read_split_folder(data_dir(args.dataset, None)), args.dataset)
        cases = [(variant, index, variant) for variant in args.variants]
    else:
        cases = [(str(size), graph(size, args), args.variants[0]) for size in args.sizes]
    for name, index, variant in cases:
        used[name] = choose_optimizer(args.optimizer, index.num_entities)
        results[name], parts = profile(index, used[name], args, variant)
        cpu[name] = {part: usage.record() for part, usage in parts.items()}
        usages[name] = parts["compiled_parts"]
        print(f"{name:>9} ({used[name]}): {results[name]}", file=sys.stderr)
        keras.backend.clear_session()
    emit(
        {
            "bench": "step_profile",
            "metric": "median milliseconds per training step, by part",
            "value": results,
            "optimizer_used": used,
            "median_of": args.repeats,
            "cpu": cpu,
            "kernel_check": kernel_check(usages),
            "command": " ".join(["python", *sys.argv]),
            "machine": machine(),
            "config": {
                "dataset": args.dataset or "synthetic",
                "variants": {
                    v: {"joint": VARIANTS[v][0], "p": VARIANTS[v][1] if VARIANTS[v][1] is not None else args.p}
                    for v in args.variants
                },  # fmt: skip
                "model": f"complex dim {args.dim}",
                "biased_chunk": args.biased_chunk,
                "pair_every": args.pair_every,
                "batch_size": args.batch_size,
                "neg": args.neg,
                "shared_negatives": args.shared_negatives,
                "batches": args.steps,
                "train_triples": args.triples,
                "quick": args.quick,
            },
            "peak_rss_gib": round(peak_rss_gib(), 2),
            "tf": tf.__version__,
            "keras": keras.__version__,
            "cpus": os.cpu_count(),
        }
    )


if __name__ == "__main__":
    main()
