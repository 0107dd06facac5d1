"""Generate the FB1.9M-size synthetic typed KG on disk, timing it and its peak memory.

The graph is drawn by `jobi_tf.data.synthetic` (typed relations, Zipf-skewed entity and
relation frequencies) in chunks of 4M facts, deduplicated as int64 keys, and written to
``--out`` as the usual TSV splits (labels ``t{type}_e{id}``, ``r{id}``) with ``synthetic.json``
(the spec). One JSON line: wall time, peak RSS, split sizes, entities and relations that
occur, the CPU use (``cpu``).

The defaults are FB1.9M's sizes (1,892,241 entities, 3,247 relations, 19,323,513 training
triples) with 5,000 validation and 5,000 test triples.

Run:  python bench/make_big_kg.py --out /work/bigkg
      python bench/make_big_kg.py --out /tmp/smallkg --quick
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import Usage, emit, peak_rss_gib  # noqa: E402, I001

import numpy as np  # noqa: E402

from jobi_tf.data.synthetic import SyntheticSpec, write_typed_kg  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder to write (created)")
    parser.add_argument("--entities", type=int, default=1_892_241)
    parser.add_argument("--relations", type=int, default=3_247)
    parser.add_argument("--train", type=int, default=19_323_513)
    parser.add_argument("--valid", type=int, default=5_000)
    parser.add_argument("--test", type=int, default=5_000)
    parser.add_argument("--types", type=int, default=50)
    parser.add_argument("--communities", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="a 20k-entity graph: proves the script runs")
    args = parser.parse_args()
    if args.quick:
        args.entities, args.relations, args.train, args.valid, args.test = 20_000, 100, 200_000, 500, 500
    spec = SyntheticSpec(
        num_entities=args.entities,
        num_relations=args.relations,
        num_triples=args.train + args.valid + args.test,
        num_valid=args.valid,
        num_test=args.test,
        num_types=args.types,
        communities=args.communities,
        seed=args.seed,
    )
    with Usage() as used:
        start = time.perf_counter()
        sizes = write_typed_kg(spec, args.out)
        seconds = time.perf_counter() - start
    files = [Path(args.out) / f"{s}.txt" for s in ("train", "valid", "test")]
    emit(
        {
            "bench": "make_big_kg",
            "metric": "seconds to generate and write the graph",
            "value": round(seconds, 1),
            "peak_rss_gib": round(peak_rss_gib(), 2),
            "cpu": used.record(),
            "sizes": sizes,
            "bytes_on_disk": int(sum(f.stat().st_size for f in files)),
            "out": str(args.out),
            "config": {k: v for k, v in vars(args).items() if k != "out"},
            "numpy": np.__version__,
        }
    )


if __name__ == "__main__":
    main()
