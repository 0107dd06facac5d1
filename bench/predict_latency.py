"""Median latency of one top-10 ``predict_tail`` query in-process, and the export's size.

Steps:
1. Take an export (``--export EXPORT_BASE/N``), or export a run folder (``--run``) to a
   temporary folder first. The latency does not depend on how well the run is trained.
2. Load it with ``tf.saved_model.load`` and call its ``predict_tail`` signature with one
   (head, relation) pair and k = 10, ``--queries`` times over random names of its vocabulary
   (after ``--warmup`` calls); each call includes reading the outputs back as NumPy.
3. Reference, same run: NumPy's bare work for one query on the same entity table (one
   single-threaded matrix-vector product and an ``argpartition`` top-10, no name lookups).
4. Sizes on disk: the export, the two tables it serves, and the run's ``checkpoint.npz``
   (weights + pair head + optimizer state) and ``best.weights.npz``.
5. Print one JSON line. It also carries the CPU user/system seconds and minor page faults of
   the timed queries and of the reference (``cpu``), and exits 1 if the queries spent more than
   10% of their user CPU time in the kernel (the NumPy reference is reported, not checked).

Run:  python bench/predict_latency.py --run /tmp/exp-run
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# One query is too small to split across threads: multi-threaded OpenBLAS matrix-vector
# products ran 14x slower than one thread on the shared 2-core machine (12 ms vs 0.85 ms).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).parent))
from _common import Usage, emit, kernel_check, machine, peak_rss_gib  # noqa: E402, I001

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from jobi_tf.export import directory_bytes, export_run  # noqa: E402

K = 10


def _file_bytes(path: Path) -> int | None:
    return path.stat().st_size if path.exists() else None


def _time_queries(signature, heads: np.ndarray, relations: np.ndarray) -> list[float]:
    k = tf.constant(K)
    times = []
    for head, relation in zip(heads, relations, strict=True):
        start = time.perf_counter()
        out = signature(head=tf.constant([head]), relation=tf.constant([relation]), k=k)
        out["tails"].numpy(), out["scores"].numpy()
        times.append(time.perf_counter() - start)
    return times


def _time_numpy_reference(table: np.ndarray, queries: np.ndarray) -> list[float]:
    times = []
    for query in queries:
        start = time.perf_counter()
        scores = table @ query
        best = np.argpartition(-scores, K)[:K]
        best[np.argsort(-scores[best])]
        times.append(time.perf_counter() - start)
    return times


def measure(export_dir: Path, run_dir: Path | None, queries: int, warmup: int, seed: int) -> dict:
    loaded = tf.saved_model.load(str(export_dir))
    signature = loaded.signatures["predict_tail"]
    entities = (export_dir / "assets" / "entities.txt").read_text(encoding="utf-8").splitlines()
    relations = (export_dir / "assets" / "relations.txt").read_text(encoding="utf-8").splitlines()
    rng = np.random.default_rng(seed)
    heads = np.array(entities, dtype=object)[rng.integers(len(entities), size=warmup + queries)]
    rels = np.array(relations, dtype=object)[rng.integers(len(relations), size=warmup + queries)]
    _time_queries(signature, heads[:warmup], rels[:warmup])
    usages: dict[str, Usage] = {}
    with Usage() as usages["queries"]:
        times = _time_queries(signature, heads[warmup:], rels[warmup:])

    variables = str(export_dir / "variables" / "variables")
    table = tf.train.load_variable(variables, "entity_embeddings/.ATTRIBUTES/VARIABLE_VALUE")
    relation_table = tf.train.load_variable(variables, "triple_relations/.ATTRIBUTES/VARIABLE_VALUE")
    vectors = rng.normal(size=(queries, table.shape[1])).astype(np.float32)
    with Usage() as usages["reference"]:
        reference = _time_numpy_reference(table, vectors)
    median, ref_median = statistics.median(times), statistics.median(reference)
    table_bytes = table.nbytes + relation_table.nbytes
    export_bytes = directory_bytes(export_dir)
    checkpoint = _file_bytes(run_dir / "checkpoint.npz") if run_dir else None
    info = json.loads((export_dir / "assets.extra" / "jobi_tf.json").read_text(encoding="utf-8"))
    return {
        "bench": "predict_latency",
        "metric": "ms per top-10 predict_tail query, one (head, relation) per call, in-process (median)",
        "value": round(median * 1e3, 3),
        "p90_ms": round(float(np.percentile(times, 90)) * 1e3, 3),
        "median_of": queries,
        "reference": "NumPy matrix-vector product + argpartition top-10 on the same entity table",
        "reference_ms": round(ref_median * 1e3, 3),
        "ratio": round(median / ref_median, 2),
        "export_bytes": export_bytes,
        "table_bytes": table_bytes,
        "checkpoint_bytes": checkpoint,
        "best_weights_bytes": _file_bytes(run_dir / "best.weights.npz") if run_dir else None,
        "export_to_checkpoint": round(export_bytes / checkpoint, 3) if checkpoint else None,
        "config": {
            "model": info["model"],
            "dim": info["dim"],
            "num_entities": info["num_entities"],
            "num_relations": info["num_relations"],
            "filter_known": info["filter_known"],
        },
        "cpu": {name: used.record() for name, used in usages.items()},
        "kernel_check": kernel_check({"queries": usages["queries"]}),
        "peak_rss_gib": round(peak_rss_gib(), 2),
        "tf": tf.__version__,
        "machine": machine(),
        "command": " ".join(["python", *sys.argv]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--run", help="a run folder to export to a temporary folder and measure")
    source.add_argument("--export", help="an existing export (EXPORT_BASE/N)")
    parser.add_argument("--filter-known", action="store_true", help="with --run: export with the known-facts filter")
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.export:
        export_dir = Path(args.export)
        info = json.loads((export_dir / "assets.extra" / "jobi_tf.json").read_text(encoding="utf-8"))
        run_dir = Path(info["run_dir"]) if "run_dir" in info else None
        emit(measure(export_dir, run_dir, args.queries, args.warmup, args.seed))
        return
    from jobi_tf.config import ExportConfig

    with tempfile.TemporaryDirectory() as base:
        result = export_run(args.run, base, ExportConfig(filter_known=args.filter_known))
        emit(measure(result.path, Path(args.run), args.queries, args.warmup, args.seed))


if __name__ == "__main__":
    main()
