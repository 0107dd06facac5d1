"""One top-10 query against an export of a large graph: exact, approximate, and a plain table-vector product.

Loads a version folder once and asks it the test triples' (head, relation) queries one at a time
and in batches: ``predict_tail`` (exact, every entity scored) against one NumPy product of the
same entity table with one vector (the bound an exact query cannot beat: it streams the table),
and ``predict_tail_approximate`` (an export made with ``--cells``) at each ``--probe``, with its
recall@10: the share of the exact top 10 it returns. The first query's answers are also asked of
``jobi-tf predict`` in another process, to check the signature against the command users run.
``--reference`` (another export of the same weights, e.g. float32 beside a ``--table-dtype bfloat16``
one) gives the share of its exact top 10 that this export's exact answers keep.

    python bench/serving_scale.py --export /work/exports/k137/1 --data-dir /work/data/replicated/K137
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

sys.path.insert(0, str(Path(__file__).parent))
from _common import emit, numpy_blas, peak_rss_gib, percentiles, provenance, versions  # noqa: E402, I001  (first: TensorFlow's allocator)

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--export", required=True, help="a version folder (EXPORT_BASE/N)")
    parser.add_argument("--data-dir", required=True, help="the graph folder whose test.txt gives the queries")
    parser.add_argument("--queries", type=int, default=200, help="single queries timed (the first test triples)")
    parser.add_argument("--batch", type=int, default=100, help="queries per batched request")
    parser.add_argument("--probes", default="8,16,32,64,128", help="probe values of the approximate signature")
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--reference", help="a version folder of the same weights whose exact top-k is the truth")
    parser.add_argument(
        "--slack", default="", help="also sweep the cells' slack (comma-separated), 0 = centroid score alone"
    )
    args = parser.parse_args()

    started = time.perf_counter()
    loaded = tf.saved_model.load(args.export)
    load_seconds = time.perf_counter() - started
    heads, relations = _queries(Path(args.data_dir) / "test.txt", max(args.queries, args.batch))
    exact = loaded.signatures["predict_tail"]
    k = tf.constant(args.k, tf.int32)

    def ask(signature, first: int, count: int, **extra) -> dict:
        out = signature(
            head=tf.constant(heads[first : first + count]),
            relation=tf.constant(relations[first : first + count]),
            k=k,
            **extra,
        )
        return {name: value.numpy() for name, value in out.items()}

    record = {
        "bench": "serving_scale",
        "metric": "ms per top-10 tail query, one at a time (p50, p99) and per batched request",
        "export": args.export,
        "load_seconds": round(load_seconds, 2),
        "export_bytes": sum(f.stat().st_size for f in Path(args.export).rglob("*") if f.is_file()),
    }
    table = tf.cast(loaded.entities.values, tf.float32).numpy()  # rows [E, W] in float32, as a user's NumPy holds them
    table = np.ascontiguousarray(table.T) if loaded.entities.values.name.startswith("entity_columns") else table
    record["table_dtype"] = loaded.entities.values.dtype.name
    record["entities"], record["width"] = table.shape
    record["matvec_ms"] = _matvec_ms(table, args.queries)
    record["numpy_blas"] = numpy_blas()
    record["matmat_batch_ms"] = _matmat_ms(table, args.batch)
    record["exact"], answers = _timed(
        lambda i: ask(exact, i, 1), args.queries, lambda i: ask(exact, i * args.batch, args.batch)
    )
    record["exact"]["over_matvec"] = round(record["exact"]["p50_ms"] / record["matvec_ms"]["p50_ms"], 3)
    record["exact"]["batch_over_matmat"] = round(record["exact"]["batch_ms"] / record["matmat_batch_ms"], 3)
    record["predict_cli_agrees"] = _cli_agrees(args.export, heads[0], relations[0], args.k, answers[0])
    if args.reference:
        record["reference"] = {"export": args.reference, "exact_top_k_kept": _kept(args.reference, ask, answers)}
    if "predict_tail_approximate" in loaded.signatures:
        approximate = loaded.signatures["predict_tail_approximate"]
        record["approximate"] = {}
        for probe in map(int, args.probes.split(",")):
            p = {"probe": tf.constant(probe, tf.int32)}
            timing, found = _timed(
                lambda i, p=p: ask(approximate, i, 1, **p),
                args.queries,
                lambda i, p=p: ask(approximate, i * args.batch, args.batch, **p),
                first_pass=True,
            )
            recall = [len(set(a) & set(e)) / len(e) for a, e in zip(found, answers, strict=True) if len(e)]
            record["approximate"][str(probe)] = {**timing, "recall_at_10": round(float(np.mean(recall)), 4)}
        record["slack"] = float(loaded.cells.slack.numpy())
        record["recall_by_slack"] = _slack_sweep(loaded, args, approximate, ask, answers)
    record["peak_rss_gib"] = round(peak_rss_gib(), 2)
    emit({**record, **provenance(__file__), "versions": versions()})


def _kept(reference: str, ask, answers: list[list[bytes]]) -> float:
    """The share of the ``reference`` export's exact top-k (one query at a time) in ``answers``."""
    exact = tf.saved_model.load(reference).signatures["predict_tail"]
    truth = [[a for a in ask(exact, i, 1)["tails"][0].tolist() if a] for i in range(len(answers))]
    return round(float(np.mean([len(set(a) & set(t)) / len(t) for a, t in zip(answers, truth, strict=True) if t])), 4)


def _slack_sweep(loaded, args, approximate, ask, answers) -> dict:
    """recall@10 at each probe for each ``--slack`` (the export's own restored after)."""
    own, sweep = loaded.cells.slack.numpy(), {}
    for slack in [float(x) for x in args.slack.split(",") if x]:
        loaded.cells.slack.assign(slack)
        for probe in map(int, args.probes.split(",")):
            found = [
                ask(approximate, i, 1, probe=tf.constant(probe, tf.int32))["tails"][0] for i in range(args.queries)
            ]
            recall = [len({a for a in f if a} & set(e)) / len(e) for f, e in zip(found, answers, strict=True) if e]
            sweep.setdefault(str(slack), {})[str(probe)] = round(float(np.mean(recall)), 4)
    loaded.cells.slack.assign(own)
    return sweep


def _queries(path: Path, count: int) -> tuple[list[str], list[str]]:
    """The (head, relation) names of the first ``count`` test triples."""
    rows = [line.split("\t") for line in path.read_text(encoding="utf-8").splitlines()[:count]]
    return [r[0] for r in rows], [r[1] for r in rows]


def _matvec_ms(table: np.ndarray, repeats: int) -> dict:
    """p50 and p99 ms of ``table @ v`` for a fresh random ``v`` each time (NumPy, float32)."""
    rng = np.random.default_rng(0)
    times = []
    for _ in range(min(repeats, 100)):
        vector = rng.normal(size=table.shape[1]).astype(np.float32)
        started = time.perf_counter()
        np.dot(table, vector)
        times.append(1000 * (time.perf_counter() - started))
    return percentiles(times)


def _matmat_ms(table: np.ndarray, batch: int) -> float:
    """Median ms of ``table @ Q`` for ``batch`` random query columns (NumPy, float32; 3 runs):
    the plain product a batched request is compared with."""
    queries = np.random.default_rng(1).normal(size=(table.shape[1], batch)).astype(np.float32)
    times = []
    for _ in range(3):
        started = time.perf_counter()
        np.dot(table, queries)
        times.append(1000 * (time.perf_counter() - started))
    return round(statistics.median(times), 1)


def _timed(one, count: int, batch, first_pass: bool = False) -> tuple[dict, list[list[bytes]]]:
    """p50/p99 ms of ``one(i)`` for the first ``count`` queries (after 3 warm-up calls), ms of
    one batched request (median of 3), and each single query's answers. ``first_pass``: the
    queries are first asked once each, timed apart (``first_pass_*``): the approximate
    signatures compile one XLA program per size class of candidates, on its first query."""
    first = []
    for i in range(count if first_pass else 3):
        started = time.perf_counter()
        one(i)
        first.append(1000 * (time.perf_counter() - started))
    for _ in range(3):
        batch(0)
    times, answers = [], []
    for i in range(count):
        started = time.perf_counter()
        out = one(i)
        times.append(1000 * (time.perf_counter() - started))
        answers.append([a for a in out["tails"][0].tolist() if a])
    batch_ms = []
    for _ in range(3):
        started = time.perf_counter()
        batch(0)
        batch_ms.append(1000 * (time.perf_counter() - started))
    timing = {**percentiles(times), "batch_ms": round(statistics.median(batch_ms), 1)}
    if first_pass:
        timing |= {f"first_pass_{name}": value for name, value in percentiles(first).items()}
    return timing, answers


def _cli_agrees(export: str, head: str, relation: str, k: int, answers: list[bytes]) -> bool:
    """``jobi-tf predict --model EXPORT --head H --relation R -k K --json`` lists the same tails."""
    command = ["jobi-tf", "predict", "--model", export, "--head", head, "--relation", relation, "-k", str(k), "--json"]
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    if done.returncode:
        sys.exit(f"jobi-tf predict failed: {done.stderr.strip().splitlines()[-1:]}")
    printed = json.loads(done.stdout.strip().splitlines()[-1])
    return [name for name in printed["entities"] if name] == [a.decode() for a in answers]


if __name__ == "__main__":
    main()
