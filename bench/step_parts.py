"""JoBi's step against the baseline's, cut in two parts, on graphs of different sizes.

Why: JoBi's epoch costs 1.3–1.4× the baseline's on FB15k-237 and 2.6–3.0× at 1.85M entities,
so a part of its step grows with the graph. A step is two parts that run one after the other
on a core: the input pipeline (`jobi_tf.sampling`: negatives, biased pools, pair labels'
membership tests) and the compiled train step (scores, losses, gradients, the optimizer's
gathers and scatters on the tables). This script times each alone, for the baseline and JoBi,
on each graph given:

* ``pipeline``: batches per second of the tf.data pipeline alone (``--steps`` batches after
  ten of warm-up), as training builds it;
* ``compiled``: the compiled step on those batches, materialised beforehand (median of
  ``--passes`` passes after two of warm-up).

The same settings on every graph and both sides: ComplEx ``--dim``, 1000 positives × 100
negatives, uniform ones shared by the batch, one corrupted side per positive, ``lazy-adam``
0.001 (what ``--optimizer auto`` trains from 100,000 entities; on FB15k-237 auto would be dense
Adam; ``--optimizer``, ``--lr`` change it); JoBi with p 0.3, ``--biased-chunk 10`` (or
``--biased-chunk``) and the pair head on every positive.

Run:  python bench/step_parts.py --data-dir $JOBI_TF_DATA_DIR/fb15k-237 /work/data/replicated/K137
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import emit, peak_rss_gib, provenance, shared_batch_sampler, timed_model_steps, versions  # noqa: E402, I001

import numpy as np  # noqa: E402

import jobi_tf  # noqa: E402
from jobi_tf.config import DataConfig  # noqa: E402
from jobi_tf.datasets.loading import load_index  # noqa: E402
from jobi_tf.sampling.pipelines import make_train_dataset  # noqa: E402

VARIANTS = {"baseline": dict(p=0.0, biased_chunk=0), "jobi": dict(p=0.3, biased_chunk=10)}


def time_parts(index, variant: str, args) -> dict:
    joint = variant == "jobi"
    settings = {**VARIANTS[variant], **({"biased_chunk": args.biased_chunk} if joint and args.biased_chunk else {})}
    settings |= {"biased_draw": args.biased_draw} if joint else {}
    cfg = shared_batch_sampler(**settings)
    pair_every = args.pair_every if joint else 1
    stream = iter(make_train_dataset(index, cfg, seed=0, pair_labels=joint, pair_every=pair_every))
    for _ in range(10):
        next(stream)
    start = time.perf_counter()
    batches = [next(stream) for _ in range(args.steps)]
    pipeline = (time.perf_counter() - start) / args.steps
    rows = {"distinct_entity_rows": round(statistics.mean(distinct_rows(b) for b in batches), 1)}
    if args.pipeline_only:
        return {"pipeline_ms": round(pipeline * 1e3, 2), **rows}
    passes = timed_model_steps(index, batches, joint=joint, pair_every=pair_every, args=args)
    compiled = statistics.median(passes)
    return {
        "pipeline_ms": round(pipeline * 1e3, 2),
        "compiled_ms": round(compiled * 1e3, 2),
        "compiled_passes_ms": [round(p * 1e3, 2) for p in passes],
        "sum_ms": round((pipeline + compiled) * 1e3, 2),
        **rows,
    }


def distinct_rows(batch: dict) -> int:
    """The entity rows a step reads and updates: the positives' heads and tails and every candidate."""
    ids = [np.asarray(batch["triples"])[:, [0, 2]].ravel()]
    ids += [
        np.asarray(batch[key]).ravel()
        for key in ("candidates", "shared_candidates", "chunk_candidates")
        if key in batch
    ]
    return len(np.unique(np.concatenate(ids)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", nargs="+", required=True, help="graph folders, smallest first")
    parser.add_argument("--dim", type=int, default=100)
    parser.add_argument("--steps", type=int, default=100, help="batches timed")
    parser.add_argument("--passes", type=int, default=5, help="timed passes of the compiled step")
    parser.add_argument("--optimizer", default="lazy-adam", help="both sides' optimizer")
    parser.add_argument("--lr", type=float, default=0.001)
    parser.add_argument("--biased-chunk", type=int, default=0, help="JoBi's --biased-chunk (0: 10)")
    parser.add_argument("--pair-every", type=int, default=1, help="JoBi's --pair-every (the recommended flags: 10)")
    parser.add_argument("--biased-draw", default="distinct", help="JoBi's --biased-draw (distinct: the paper's)")
    parser.add_argument("--pipeline-only", action="store_true", help="time the input pipeline alone (no model)")
    parser.add_argument("--label", help="what this run measures (kept in the raw file), e.g. which library it imported")
    args = parser.parse_args()
    graphs = {}
    for folder in args.data_dir:
        _, _, index = load_index(DataConfig(data_dir=folder))
        parts = {variant: time_parts(index, variant, args) for variant in VARIANTS}
        ratio = {
            key: round(parts["jobi"][key] / parts["baseline"][key], 3)
            for key in ("pipeline_ms", "compiled_ms", "sum_ms")
            if key in parts["jobi"]
        }
        graphs[folder] = {
            "entities": index.num_entities,
            "train": len(index.train),
            **parts,
            "jobi_over_baseline": ratio,
        }
        print(f"{folder}: {graphs[folder]}", file=sys.stderr)
        del index
    emit(
        {
            "bench": "step_parts",
            "metric": "ms per step of the input pipeline and of the compiled step, baseline and JoBi",
            "graphs": graphs,
            "settings": {
                "model": f"complex dim {args.dim}",
                "batch_size": 1000,
                "neg": 100,
                "shared_negatives": 1000,
                "corrupt_side": "per-positive",
                "optimizer": f"{args.optimizer} {args.lr}",
                "variants": VARIANTS,
                "jobi_biased_chunk": args.biased_chunk or VARIANTS["jobi"]["biased_chunk"],
                "jobi_pair_every": args.pair_every,
                "jobi_biased_draw": args.biased_draw,
                "steps": args.steps,
                "passes": args.passes,
            },
            "label": args.label,
            "jobi_tf_imported_from": str(Path(jobi_tf.__file__).parent),
            "peak_rss_gib": round(peak_rss_gib(), 2),
            **provenance(__file__),
            "versions": versions(),
        }
    )


if __name__ == "__main__":
    main()
