"""Wall time and peak memory of the full filtered FB15k-237 test evaluation.

Steps:
1. Load FB15k-237 the way ``jobi-tf train/evaluate --dataset fb15k-237`` does (its TFDS
   copy, prepared from the local files on the first run) and a ComplEx dim-200 model (a
   trained run's best weights with ``--run``, else random weights: the time does not depend
   on the values).
2. Rank all 20,466 test triples in both directions (40,932 queries) against all 14,541
   entities with `FilteredEvaluator`, ``--repeats`` times; keep the median.
3. Reference, same run: the bare scoring matmuls for the same queries (no filter, no
   counting), the lower bound of any implementation.
4. Print one JSON line; peak RSS is that of this whole process (TensorFlow included; also
   given after loading the data, before any evaluation). The record
   also carries the CPU user/system seconds and minor page faults of each evaluation and each
   reference run (``cpu``), and exits 1 if an evaluation spent more than 10% of its user CPU time
   in the kernel (the reference is reported, not checked: it is not the library's code).

Run:  python bench/eval_speed.py --data-dir ../shared/datasets/fb15k-237
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
from _common import Usage, data_dir, emit, kernel_check, machine, peak_rss_gib  # noqa: E402, I001

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from jobi_tf.config import DataConfig  # noqa: E402
from jobi_tf.loading import load_index  # noqa: E402
from jobi_tf.evaluation import FilteredEvaluator  # noqa: E402
from jobi_tf.models import JoBiModel  # noqa: E402


def bare_matmuls(model, triples: np.ndarray, batch: int) -> None:
    for start in range(0, len(triples), batch):
        t = triples[start : start + batch]
        for q in (model.tail_queries(t[:, 0], t[:, 1]), model.head_queries(t[:, 1], t[:, 2])):
            tf.matmul(q, model.entity_embeddings, transpose_b=True).numpy()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir")
    parser.add_argument("--run", help="a run folder whose best weights to load")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--eval-batch-size", type=int, default=1000)
    args = parser.parse_args()
    _, _, index = load_index(DataConfig(dataset="fb15k-237", data_dir=str(data_dir("fb15k-237", args.data_dir))))
    rss_after_load = peak_rss_gib()
    if args.run:
        from jobi_tf.api import load_run

        run = load_run(args.run)
        model, evaluator = run.model, run.evaluator()
    else:
        model = JoBiModel(index.num_entities, index.num_relations, model="complex", dim=200)
        evaluator = FilteredEvaluator(index)
    evaluator.evaluate(model, "valid")  # warm-up (tracing)
    times, ref = [], []
    usages: dict[str, Usage] = {}  # "evaluation #i", "reference #i"; only the evaluations are checked
    for i in range(1, args.repeats + 1):
        with Usage() as usages[f"evaluation #{i}"]:
            start = time.perf_counter()
            metrics = evaluator.evaluate(model, "test")
            times.append(time.perf_counter() - start)
        with Usage() as usages[f"reference #{i}"]:
            start = time.perf_counter()
            bare_matmuls(model, index.test, args.eval_batch_size)
            ref.append(time.perf_counter() - start)
    cpu = {part: [u.record() for k, u in usages.items() if k.startswith(part)] for part in ("evaluation", "reference")}
    emit(
        {
            "bench": "eval_speed",
            "metric": "seconds for the filtered FB15k-237 test evaluation (median)",
            "value": round(statistics.median(times), 2),
            "runs": [round(t, 2) for t in times],
            "reference_bare_matmuls_s": round(statistics.median(ref), 2),
            "ratio_to_reference": round(statistics.median(times) / statistics.median(ref), 2),
            "queries": 2 * len(index.test),
            "mrr": round(metrics["mrr"], 4),
            "peak_rss_gib": round(peak_rss_gib(), 2),
            "target_peak_rss_gb": 2.0,
            "peak_rss_after_load_gib": round(rss_after_load, 2),
            "median_of": args.repeats,
            "cpu": cpu,
            "kernel_check": kernel_check({k: u for k, u in usages.items() if k.startswith("evaluation")}),
            "tf": tf.__version__,
            "machine": machine(),
            "command": " ".join(["python", *sys.argv]),
        }
    )


if __name__ == "__main__":
    main()
