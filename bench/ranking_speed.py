"""Filtered ranking's rate against the same core's 1-vs-all training products, one sitting.

Why: at 1.85M entities one validation of 5,000 triples is 10,000 queries against every
entity, about 7.4·10¹² FLOP of products; the ranking must run near the rate the core reaches
in training (what ``jobi-tf advise`` times) for validation to be affordable several times an
epoch. Each route ranks the same triples under the same weights:

* ``two-pass``: the general count, which reads each target's score in a first pass;
* ``one-pass``: float32, each target's score from a product of its tile's shape (`jobi_tf.evaluation.one_pass`);
* ``bfloat16``: the one-pass count of bfloat16 products (``--valid-dtype bfloat16``).

FLOPs are ``2·Q·E·W`` (Q queries, E entities, W floats a row); the training rate is
``jobi_tf.planning.advice.advise``'s (a kbc-fast step at ``--matmul-dtype auto``, timed here).
One-pass ranks must equal two-pass ranks exactly; bfloat16's MRR is given beside float32's.
Weights: ``--run``'s ``best.weights.npz``, else a random table (same rate, meaningless ranks).
``--slot-prior W`` times every route again with the slot counts' offsets (``ROUTE + counts``).
An AVX2 core's rates, measured on an AVX-512 one (recorded under ``machine.isa_limits``)::

    XLA_FLAGS=--xla_cpu_max_isa=AVX2 ONEDNN_MAX_CPU_ISA=AVX2 python bench/ranking_speed.py \
        --data-dir /work/data/replicated/K137 --dim 100 --routes one-pass --training-dtype float32

Run:  python bench/ranking_speed.py --data-dir /work/data/replicated/K137 --dim 100
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import Usage, emit, peak_rss_gib, provenance, versions  # noqa: E402, I001

import numpy as np  # noqa: E402

from jobi_tf.config import DataConfig, EvalConfig  # noqa: E402
from jobi_tf.datasets.loading import load_index  # noqa: E402
from jobi_tf.evaluation import one_pass  # noqa: E402
from jobi_tf.evaluation.ranking import FilteredEvaluator, rank_metrics, validation_sample  # noqa: E402
from jobi_tf.models import JoBiModel  # noqa: E402

ROUTES = ("one-pass", "bfloat16", "two-pass")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", required=True, help="graph folder (train/valid/test.txt)")
    parser.add_argument("--model", default="complex")
    parser.add_argument("--dim", type=int, default=100)
    parser.add_argument("--run", help="a run folder whose best.weights.npz to rank with (same graph and --dim)")
    parser.add_argument("--triples", type=int, default=0, help="validation triples to rank (0: all)")
    parser.add_argument("--routes", nargs="+", default=list(ROUTES), choices=ROUTES)
    parser.add_argument("--no-training-rate", action="store_true", help="skip timing the training step")
    parser.add_argument("--slot-prior", type=float, default=0.0, help="W > 0: also time each route with the counts")
    parser.add_argument(
        "--training-dtype",
        default="auto",
        choices=("auto", "float32", "bfloat16"),
        help="the training step's products (auto: as jobi-tf advise resolves it; float32 under an AVX2 ISA cap)",
    )
    return parser.parse_args()


def ranked_model(args, index):
    """The run's own model (its config) with its best weights, else a random one of ``--model``."""
    if not args.run:
        return JoBiModel(
            num_entities=index.num_entities, num_relations=index.num_relations, model=args.model, dim=args.dim
        )
    import json

    from jobi_tf.config import RunConfig
    from jobi_tf.training.checkpoints import load_weights
    from jobi_tf.training.trainer import build_model

    ran = RunConfig.from_dict(json.loads((Path(args.run) / "config.json").read_text(encoding="utf-8")))
    model = build_model(index, ran)
    load_weights(Path(args.run) / "best.weights.npz", model)
    return model


def time_routes(args, index, model, triples, flops: float, record: dict) -> dict:
    """Each route's ranks of ``triples`` (and with the counts, with ``--slot-prior``), timed into ``record``."""
    ranks, prior = {}, None
    if args.slot_prior:
        from jobi_tf.models.slot_prior import SparseSlotPrior

        prior = SparseSlotPrior(args.slot_prior, index.num_entities, index.num_relations)
        prior.fill(index.train)
        record["slot_prior"] = {"weight": args.slot_prior, "entries": int(prior.keys.shape[0])}
    timed = [(r, None) for r in args.routes] + ([(r, prior) for r in args.routes] if prior is not None else [])
    for base_route, with_prior in timed:
        model.prior = with_prior
        route = base_route if with_prior is None else f"{base_route} + counts"
        dtype = "bfloat16" if base_route == "bfloat16" else "float32"
        evaluator = FilteredEvaluator(index, EvalConfig(), dtype=dtype)
        original = one_pass.OnePassCounter.__dict__["handles"]
        if base_route == "two-pass":
            one_pass.OnePassCounter.handles = staticmethod(lambda scorer: False)
        try:
            evaluator.ranks(model, triples[:100])  # tracing and XLA compilation, untimed
            with Usage() as usage:
                ranks[route] = evaluator.ranks(model, triples)
        finally:
            one_pass.OnePassCounter.handles = original
        metrics = rank_metrics(ranks[route].get("realistic"))
        seconds = usage.wall
        record["routes"][route] = {
            "seconds": round(seconds, 1),
            "flops_per_s": flops / seconds,
            "mrr": metrics["mrr"],
            "hits@10": metrics["hits@10"],
            "cpu": usage.record(),
        }
        print(f"{route}: {seconds:.1f} s, {flops / seconds:.3g} FLOP/s, MRR {metrics['mrr']:.4f}", file=sys.stderr)
    return ranks


def compare_routes(ranks: dict, record: dict) -> None:
    """Whether one and two passes give the same ranks, and what bfloat16 changes, into ``record``."""
    for suffix in ("", " + counts"):
        if f"one-pass{suffix}" in ranks and f"two-pass{suffix}" in ranks:
            a, b = ranks[f"one-pass{suffix}"], ranks[f"two-pass{suffix}"]
            record[f"one_pass_equals_two_pass{suffix.replace(' + ', '_with_')}"] = bool(
                np.array_equal(a.optimistic, b.optimistic)
                and np.array_equal(a.pessimistic, b.pessimistic)
                and np.array_equal(a.top1, b.top1)
            )
    if "one-pass" in ranks and "bfloat16" in ranks:
        diff = ranks["bfloat16"].get("realistic") - ranks["one-pass"].get("realistic")
        record["bfloat16_vs_float32"] = {
            "mrr_difference": record["routes"]["bfloat16"]["mrr"] - record["routes"]["one-pass"]["mrr"],
            "queries_with_another_rank": int(np.sum(diff != 0)),
            "median_abs_rank_change_where_changed": float(np.median(np.abs(diff[diff != 0]))) if np.any(diff) else 0.0,
        }


def training_rate(args, index, record: dict) -> None:
    """jobi-tf advise's timed kbc-fast step, and each route's rate as a share of it, into ``record``."""
    from jobi_tf.planning.advice import advise

    advice = advise(index, 1.0, matmul_dtype=args.training_dtype)
    record["training"] = {
        "flops_per_s": advice.effective_rate,
        "seconds_per_step": advice.probe.seconds_per_step,
        "matmul_dtype": advice.matmul_dtype,
        "what": f"jobi-tf advise's kbc-fast step (rank 200, batch 500, --matmul-dtype {args.training_dtype}), "
        "timed here",
    }
    for entry in record["routes"].values():
        entry["share_of_training_rate"] = entry["flops_per_s"] / advice.effective_rate


def main() -> None:
    args = parse_args()
    started = time.perf_counter()
    _, _, index = load_index(DataConfig(data_dir=args.data_dir))
    load_seconds = time.perf_counter() - started
    model = ranked_model(args, index)
    triples = validation_sample(index.split("valid"), args.triples)
    width = int(model.entity_embeddings.shape[1])
    queries = 2 * len(triples)
    flops = 2.0 * queries * index.num_entities * width
    record: dict = {
        "bench": "ranking_speed",
        "metric": "ranking FLOP/s over the training products' (same core, one sitting)",
        "graph": {"data_dir": args.data_dir, "entities": index.num_entities, "train": len(index.train)},
        "queries": queries,
        "width": width,
        "ranking_flops": flops,
        "load_seconds": round(load_seconds, 1),
        "weights": args.run or "random",
        "routes": {},
    }
    compare_routes(time_routes(args, index, model, triples, flops, record), record)
    if not args.no_training_rate:
        training_rate(args, index, record)
    record.update(peak_rss_gib=round(peak_rss_gib(), 2), **provenance(__file__), versions=versions())
    emit(record)


if __name__ == "__main__":
    main()
