"""Filtered evaluation against ~2M entities: queries per second and a 5,000-triple test evaluation.

Steps:
1. Load the graph folder written by ``bench/make_big_kg.py`` (its filter holds every
   train/valid/test fact), and a ComplEx dim-100 model with random weights (the time does
   not depend on the values).
2. Warm up on one batch, then rank the first ``--triples`` test triples (default 5,000) in
   both directions with `FilteredEvaluator`: queries go ``--eval-batch-size`` at a time
   against blocks of ``--chunk-size`` entities, the filter applied per block.
3. Reference, same run: the bare scoring matmuls of the same queries against the whole
   table, block by block (no filter, no counting).
4. Print one JSON line: wall time of the evaluation, queries per second, the reference and
   the ratio, and the peak RSS of the process. The record also carries the CPU user/system
   seconds and minor page faults of the evaluation and of the reference (``cpu``), and exits 1
   if the evaluation spent more than 10% of its user CPU time in the kernel (the reference is
   reported, not checked: it is not the library's code).

Run:  python bench/big_eval.py --data-dir /work/bigkg
      python bench/big_eval.py --quick            # a tiny generated graph: proves the script runs
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).parent))
from _common import Usage, emit, kernel_check, peak_rss_gib  # noqa: E402, I001

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from jobi_tf.config import DataConfig, EvalConfig, RunConfig  # noqa: E402
from jobi_tf.data.synthetic import SyntheticSpec, write_typed_kg  # noqa: E402
from jobi_tf.evaluation import FilteredEvaluator  # noqa: E402
from jobi_tf.models import JoBiModel  # noqa: E402
from jobi_tf.training import load_data  # noqa: E402


def bare_matmuls(model: JoBiModel, triples: np.ndarray, batch: int, chunk: int) -> None:
    table, n = model.entity_embeddings, model.num_entities
    for start in range(0, len(triples), batch):
        t = triples[start : start + batch]
        for q in (model.tail_queries(t[:, 0], t[:, 1]), model.head_queries(t[:, 1], t[:, 2])):
            for lo in range(0, n, chunk):
                tf.matmul(q, table[lo : lo + chunk], transpose_b=True).numpy()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", help="folder from bench/make_big_kg.py")
    parser.add_argument("--dim", type=int, default=100)
    parser.add_argument("--triples", type=int, default=5000, help="test triples ranked (both directions)")
    parser.add_argument("--eval-batch-size", type=int, default=1000)
    parser.add_argument("--chunk-size", type=int, default=100_000)
    parser.add_argument("--no-reference", dest="reference", action="store_false")
    parser.add_argument("--quick", action="store_true", help="a 20k-entity graph: proves the script runs")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if args.quick:
            args.data_dir = str(Path(tmp) / "kg")
            spec = SyntheticSpec(num_entities=20_000, num_relations=50, num_triples=200_000, num_types=10)
            write_typed_kg(spec, args.data_dir)
            args.dim, args.triples, args.eval_batch_size, args.chunk_size = 16, 400, 100, 7_000
        if not args.data_dir:
            parser.error("give --data-dir (a folder from bench/make_big_kg.py) or --quick")
        emit(run(args))


def run(args: argparse.Namespace) -> dict:
    start = time.perf_counter()
    _, relations, index = load_data(RunConfig(data=DataConfig(dataset=None, data_dir=args.data_dir)))
    load_seconds = time.perf_counter() - start
    cfg = EvalConfig(eval_batch_size=args.eval_batch_size, chunk_size=args.chunk_size)
    evaluator = FilteredEvaluator(index, cfg, relation_labels=relations.labels)
    model = JoBiModel(index.num_entities, index.num_relations, model="complex", dim=args.dim)
    test = index.test[: args.triples]
    evaluator.ranks(model, test[: args.eval_batch_size])  # warm-up: tracing

    usages: dict[str, Usage] = {}
    with Usage() as usages["evaluation"]:
        start = time.perf_counter()
        ranks = evaluator.ranks(model, test)
        seconds = time.perf_counter() - start
    metrics = evaluator.metrics_from_ranks(ranks)
    record = {
        "bench": "big_eval",
        "metric": "seconds for a filtered test evaluation (both directions) against every entity",
        "value": round(seconds, 2),
        "queries": 2 * len(test),
        "queries_per_second": round(2 * len(test) / seconds, 1),
        "mrr_random_weights": round(metrics["mrr"], 6),
    }
    if args.reference:
        with Usage() as usages["reference"]:
            start = time.perf_counter()
            bare_matmuls(model, test, args.eval_batch_size, args.chunk_size)
            reference = time.perf_counter() - start
        record.update(reference_bare_matmuls_s=round(reference, 2), ratio_to_reference=round(seconds / reference, 2))
    record.update(
        peak_rss_gib=round(peak_rss_gib(), 2),
        load_seconds=round(load_seconds, 1),
        cpu={name: used.record() for name, used in usages.items()},
        kernel_check=kernel_check({"evaluation": usages["evaluation"]}),
        graph={
            "entities": index.num_entities,
            "relations": index.num_relations,
            "known_facts": len(index.known_tails.values),
        },
        config={
            "model": f"complex dim {args.dim}, random weights",
            "eval_batch_size": args.eval_batch_size,
            "chunk_size": args.chunk_size,
            "rank_type": cfg.rank_type,
            "quick": args.quick,
        },
        tf=tf.__version__,
        cpus=os.cpu_count(),
    )
    return record


if __name__ == "__main__":
    main()
