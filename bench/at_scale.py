"""The headline figures at 1.85M entities in one file, read from the raw files that measured them.

Why a script: ``docs/results/scale/at-1.85m.json`` is what README's speed bullet quotes, and each
of its figures must come from a raw file with its own command; this reads those files (an epoch
of each side, one ranking, and the serving figures of one sitting of one recipe model: its exact
export against a plain NumPy product, its approximate export against the exact one and against
the run's evaluated test MRR), keeps their paths and commands beside the figures, and prints one
JSON line.

    python bench/at_scale.py --epochs docs/results/scale/epoch-seconds-K137-pbg-1c51498.json \\
        --ranking docs/results/scale/ranking-K137-tiles.json \\
        --serving docs/results/scale/serving-K137-s3-approximate-r2.json \\
        --serving-quality docs/results/scale/approximate-K137-s3-test-mrr.json \\
        --exact-serving docs/results/scale/serving-K137-s3-exact-r2.json \\
        --served-model docs/results/scale/served-model-K137-s3.json > docs/results/scale/at-1.85m.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def _read(path: str) -> dict:
    """The last JSON line of a raw file."""
    return json.loads(Path(path).read_text(encoding="utf-8").strip().splitlines()[-1])


def _capped(ranking: dict) -> dict:
    """The rates of a ranking run on this CPU capped to AVX2 (`_common.isa_limits`): the float32
    route (what ``--valid-dtype auto`` runs without bfloat16 dot products) against float32 training."""
    if "isa_limits" not in ranking["machine"]:
        sys.exit("--avx2-ranking: that raw file records no ISA cap (machine.isa_limits)")
    route = ranking["routes"]["one-pass"]
    return {
        "validation_seconds": route["seconds"],
        "ranking_flops_per_s": route["flops_per_s"],
        "training_flops_per_s": ranking["training"]["flops_per_s"],
        "ranking_share_of_training_rate": round(route["flops_per_s"] / ranking["training"]["flops_per_s"], 3),
        "isa_limits": ranking["machine"]["isa_limits"],
        "what": "an AVX-512 core capped to AVX2 instructions (XLA and oneDNN), not an AVX2-only machine",
    }


def _exact_query(serving: dict) -> dict:
    """One exact query's p50 and p99 in a serving_scale record, and its plain product's p50."""
    return {
        "exact_p50_ms": serving["exact"]["p50_ms"],
        "exact_p99_ms": serving["exact"]["p99_ms"],
        "matvec_ms": serving["matvec_ms"]["p50_ms"],
    }


def _bfloat16(serving: dict) -> dict:
    """The exact query of an export made with ``--table-dtype bfloat16`` (a serving_scale record
    with ``--reference``, the float32 export of the same weights)."""
    if serving.get("table_dtype") != "bfloat16" or "reference" not in serving:
        sys.exit("--bfloat16-serving: that raw file is not a bfloat16 export measured with --reference")
    return {
        **_exact_query(serving),
        "exact_top_10_kept": serving["reference"]["exact_top_k_kept"],
        "load_seconds": serving["load_seconds"],
        "export_bytes": serving["export_bytes"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", required=True, help="bench/epoch_seconds.py's raw file")
    parser.add_argument("--ranking", required=True, help="a ranking_speed raw file (bench/README.md: retired)")
    parser.add_argument("--route", default="bfloat16", help="the ranking route quoted (what --valid-dtype auto runs)")
    parser.add_argument(
        "--serving", required=True, help="bench/approximate_serving.py's raw file (an export with --cells): the timing"
    )
    parser.add_argument(
        "--serving-quality",
        required=True,
        help="bench/approximate_serving.py's raw file with --mrr, the whole test split",
    )
    parser.add_argument("--exact-serving", required=True, help="bench/serving_scale.py's raw file, an exact export")
    parser.add_argument("--served-model", required=True, help="the raw file of the run both exports were made from")
    parser.add_argument("--bfloat16-serving", help="bench/serving_scale.py's raw file of a bfloat16-table export")
    parser.add_argument(
        "--avx2-ranking", help="a ranking_speed raw file (retired) with the ISA capped to AVX2 (float32)"
    )
    args = parser.parse_args()
    epochs, ranking, exact = _read(args.epochs), _read(args.ranking), _read(args.exact_serving)
    route = ranking["routes"][args.route]
    record = {
        "graph": "FB15k-237 replicated, K = 137: 1,853,898 entities, 19,311,521 training triples; ComplEx dim 100",
        "epoch_seconds": {side: round(seconds, 2) for side, seconds in epochs["epoch_seconds"].items()},
        "epoch_ratio_jobi_over_baseline": epochs["jobi_over_baseline"]["median"],
        **_pbg_ratio(epochs),
        "validation_seconds": route["seconds"],
        "validation_route": args.route,
        "ranking_flops_per_s": route["flops_per_s"],
        "training_flops_per_s": ranking["training"]["flops_per_s"],
        "ranking_share_of_training_rate": round(route["flops_per_s"] / ranking["training"]["flops_per_s"], 3),
        "serving": {
            **_exact_query(exact),
            "exact_over_numpy": round(exact["exact"]["p50_ms"] / exact["matvec_ms"]["p50_ms"], 3),
            "numpy_blas": exact.get("numpy_blas"),
            "exact_batch_100_ms": exact["exact"]["batch_ms"],
            "load_seconds": exact["load_seconds"],
            "approximate": _approximate(_read(args.serving), _read(args.serving_quality), _read(args.served_model)),
        },
        **({"serving_bfloat16_table": _bfloat16(_read(args.bfloat16_serving))} if args.bfloat16_serving else {}),
        "cpu": ranking["machine"],
        **({"avx2_capped": _capped(_read(args.avx2_ranking))} if args.avx2_ranking else {}),
        "sources": _sources(args),
        "command": "python bench/at_scale.py " + " ".join(sys.argv[1:]),
    }
    print(json.dumps(record))


def _approximate(timing: dict, quality: dict, model: dict) -> dict:
    """The approximate signatures at one probe and slack (chosen on validation): the recall and the
    test MRR through them on the whole test split (``quality``, bench/approximate_serving.py with
    ``--mrr``) beside the run's evaluated test MRR, and their latency and throughput (``timing``)."""
    (setting, recall) = next(iter(quality["recall"].items()))
    if setting not in timing["latency"]:
        sys.exit(f"--serving: that raw file times no '{setting}' (it has {sorted(timing['latency'])})")
    return {
        "setting": setting,
        "slot_counts_served": quality["slot_counts_served"],
        "recall_at_10": {side: recall[side] for side in ("tail", "head", "both")},
        "p50_ms": timing["latency"][setting]["p50_ms"],
        "p99_ms": timing["latency"][setting]["p99_ms"],
        "queries_per_second": timing["clients"],
        "test_mrr_through_approximate": recall["mrr"],
        "test_mrr_through_exact": quality["mrr_exact"],
        "test_mrr_evaluated": round(model["test"]["mrr"], 4),
        "mrr_list_depth": quality["mrr_k"],
    }


def _sources(args) -> dict:
    """Each raw file read, with the command that made it."""
    files = ("epochs", "ranking", "serving", "serving_quality", "exact_serving", "served_model")
    files += ("avx2_ranking", "bfloat16_serving")
    found = {}
    for name in files:
        if path := getattr(args, name):
            record = _read(path)
            found[name] = {"file": path, "command": record.get("command", record.get("training_command"))}
    return found


def _pbg_ratio(epochs: dict) -> dict:
    """PyTorch-BigGraph's epoch over the baseline's, when the sitting trained it too (``--pbg-python``)."""
    seconds = epochs["epoch_seconds"]
    if "pytorch-biggraph" not in seconds:
        return {}
    return {"epoch_ratio_pbg_over_baseline": round(seconds["pytorch-biggraph"] / seconds["baseline"], 3)}


if __name__ == "__main__":
    main()
