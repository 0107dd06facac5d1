"""Queries per second of ``jobi-tf predict --queries`` (batched) against one query per call.

Steps:
1. Take an export (``--export EXPORT_BASE/N``) or export a run folder (``--run``) to a
   temporary folder first; load it in this process (`LocalPredictor`), as ``--model`` does.
2. Write a query file of ``--queries`` (head, relation) rows: the test triples of the run's
   graph, cycled (FB15k-237's 20,466 test triples give 100,000 rows with repeats).
3. Batched: check the file and answer every query with `answer_queries` (``--batch-size``
   per request), formatting each answer as a JSON line, as the CLI does (written to
   /dev/null). Timed from reading the file to the last line.
4. One per call, same run: the first ``--single`` queries asked one at a time through the
   same predictor (`ask`), the way a loop over ``jobi-tf predict --head --relation`` calls
   would, without the process start-ups; its rate is per query.
5. Print one JSON line with both rates, their ratio and the CPU user/system seconds of each
   part (exit 1 if the kernel took more than 10% of user time).

Run:  python bench/batch_queries.py --export exports/fb15k-237/1 --data-dir ../shared/datasets/fb15k-237
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
from _common import Usage, emit, kernel_check, machine, peak_rss_gib  # noqa: E402, I001

from jobi_tf.export import export_run  # noqa: E402
from jobi_tf.serving.batch import answer_queries, format_answer, read_queries  # noqa: E402
from jobi_tf.serving.client import LocalPredictor, ask  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--export", help="an export version folder (EXPORT_BASE/N)")
    source.add_argument("--run", help="a run folder, exported to a temporary folder first")
    parser.add_argument("--data-dir", required=True, help="folder with test.txt (its (head, relation) pairs)")
    parser.add_argument("--queries", type=int, default=100_000)
    parser.add_argument("--single", type=int, default=1_000, help="queries asked one per call")
    parser.add_argument("--batch-size", type=int, default=512)
    parser.add_argument("-k", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        export = args.export or str(export_run(args.run, Path(tmp) / "export").path)
        test = [line.split("\t")[:2] for line in (Path(args.data_dir) / "test.txt").read_text().splitlines()]
        rows = [test[i % len(test)] for i in range(args.queries)]
        path = Path(tmp) / "queries.tsv"
        path.write_text("head\trelation\n" + "".join(f"{h}\t{r}\n" for h, r in rows), encoding="utf-8")
        predictor = LocalPredictor(export)
        ask(predictor, head=rows[0][0], relation=rows[0][1], k=args.k)  # warm-up: traces the signature
        list(answer_queries(predictor, read_queries(path), k=args.k, batch_size=args.batch_size))  # warm-up

        with Usage() as batched, open(os.devnull, "w") as sink:
            start = time.perf_counter()
            answered = 0
            for answer in answer_queries(predictor, read_queries(path), k=args.k, batch_size=args.batch_size):
                sink.write(format_answer(answer, as_tsv=False) + "\n")
                answered += 1
            batched_seconds = time.perf_counter() - start
        with Usage() as single:
            start = time.perf_counter()
            for head, relation in rows[: args.single]:
                ask(predictor, head=head, relation=relation, k=args.k)
            single_seconds = time.perf_counter() - start

    batched_rate, single_rate = answered / batched_seconds, args.single / single_seconds
    usages = {"batched": batched, "single": single}
    emit(
        {
            "bench": "batch_queries",
            "export": export if args.export else None,
            "queries": answered,
            "batch_size": args.batch_size,
            "k": args.k,
            "batched_queries_per_second": round(batched_rate, 1),
            "batched_seconds": round(batched_seconds, 2),
            "single_queries": args.single,
            "single_queries_per_second": round(single_rate, 1),
            "ratio": round(batched_rate / single_rate, 2),
            "peak_rss_gib": round(peak_rss_gib(), 2),
            "cpu": {k: u.record() for k, u in usages.items()},
            "kernel_check": kernel_check(usages),
            "machine": machine(),
            "command": " ".join(["python", *sys.argv]),
        }
    )


if __name__ == "__main__":
    main()
