"""What one 1-vs-all epoch would cost on a larger graph, from its FLOP count and a measured rate.

1-vs-all training (``--loss full-softmax``, reciprocal: every training triple asks two
queries) scores every entity for every query, so its work per epoch grows with entities ×
triples. The count, per epoch, for T training triples, N entities and rows of W floats
(ComplEx rank d: W = 2d): each of the 2T queries costs 2·N·W FLOPs forward (a multiply and an
add per float) and 4·N·W backward (the gradients for the query and for the table), so
**12·T·N·W**. The scoring products are nearly all of a 1-vs-all step, so the measured
seconds of an epoch give an effective rate (FLOP/s) that carries to other sizes on the same
machine and settings.

Steps:
1. Read a 1-vs-all run's epoch seconds from an `bench/accuracy_per_hour.py` raw file (its
   ``curve``: cumulative training seconds per epoch; the median of the epoch differences)
   and its graph's sizes (``--measured-triples``, ``--measured-entities``).
2. Effective rate = 12·T·N·W / median epoch seconds.
3. For each ``--graph NAME:ENTITIES:TRIPLES``, the projected seconds (and days) of one epoch
   at that rate and width.
4. One JSON line: the formula, the inputs, the rate and the projections.

Run:  python bench/one_vs_all_projection.py docs/results/accuracy-per-hour/fb15k-237-one-vs-all-s0.json \\
          --graph fb15k-237:14541:272115 wn18rr:40943:86835 fb1.9m-size:1883512:19323528 freebase-86m:86054151:338586276
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path


def epoch_flops(triples: int, entities: int, width: int) -> float:
    """FLOPs of one 1-vs-all epoch: 2 queries per triple, 6·N·W each (forward and backward)."""
    return 12.0 * triples * entities * width


def median_epoch_seconds(curve: list[dict]) -> float:
    """The median of an ``accuracy_per_hour`` curve's epoch-to-epoch training seconds."""
    seconds = [point["train_seconds"] for point in curve]
    steps = [b - a for a, b in zip([0.0, *seconds[:-1]], seconds, strict=True)]
    return statistics.median(steps)


def parse_graph(text: str) -> tuple[str, int, int]:
    try:
        name, entities, triples = text.split(":")
        return name, int(entities), int(triples)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--graph {text!r}: expected NAME:ENTITIES:TRIPLES") from None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("measured", type=Path, help="accuracy_per_hour.py JSON of a 1-vs-all run")
    parser.add_argument("--measured-entities", type=int, default=14_541, help="its graph's entities (FB15k-237)")
    parser.add_argument("--measured-triples", type=int, default=272_115, help="its training triples (FB15k-237)")
    parser.add_argument("--graph", type=parse_graph, nargs="+", required=True, help="NAME:ENTITIES:TRIPLES")
    args = parser.parse_args()
    record = json.loads(args.measured.read_text(encoding="utf-8"))
    if record.get("system") != "one-vs-all":
        sys.exit(f"{args.measured}: not a 1-vs-all run (system {record.get('system')!r})")
    model = record["settings"]["model"]
    width = 2 * model["dim"] if model["model"] in ("complex", "simple") else model["dim"]
    seconds = median_epoch_seconds(record["curve"])
    rate = epoch_flops(args.measured_triples, args.measured_entities, width) / seconds
    projections = {}
    for name, entities, triples in args.graph:
        flops = epoch_flops(triples, entities, width)
        projections[name] = {
            "entities": entities,
            "triples": triples,
            "epoch_flops": float(f"{flops:.3g}"),
            "epoch_seconds": round(flops / rate, 1),
            "epoch_days": round(flops / rate / 86_400, 3),
        }
    print(
        json.dumps(
            {
                "bench": "one_vs_all_projection",
                "formula": "epoch FLOPs = 12 * triples * entities * W (2 queries per triple, 6*N*W each)",
                "measured": str(args.measured),
                "measured_settings": {
                    "model": model,
                    "matmul_dtype": record["settings"]["train"]["matmul_dtype"],
                    "batch_size": record["settings"]["sampler"]["batch_size"],
                },
                "measured_machine": record.get("machine"),
                "measured_command": record.get("command"),
                "width": width,
                "median_epoch_seconds": round(seconds, 2),
                "effective_flops_per_second": float(f"{rate:.3g}"),
                "projections": projections,
                "command": "python bench/one_vs_all_projection.py " + " ".join(sys.argv[1:]),
            }
        )
    )


if __name__ == "__main__":
    main()
