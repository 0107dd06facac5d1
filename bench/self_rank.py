"""How often a model's top answer to a test query is the query's own entity.

Why: the filtered protocol removes the other true answers from a query's ranking, not the
entity the query is about, so a model that scores ``(h, r, h)`` highest loses Hits@1 on every
such query while keeping the true answer second or third. PyTorch-BigGraph's WN18RR model at
jobi-tf's work per positive had test Hits@1 0.018 against Hits@3 0.306; this says whether
that is the reason, and compares with a jobi-tf run on the same graph.

Steps:
1. Load the model: a jobi-tf run folder (``--run``, its tested weights) or a PBG export
   (``--pbg-export``, read as `bench/pbg_vs_jobi.py` reads it: a reciprocal ComplEx).
2. Score every entity for each test triple's tail query ``(h, r, ?)`` and head query
   ``(?, r, t)``.
3. Print one JSON line: per direction, the share of queries whose highest-scored entity is the
   query's own entity (``h`` for tail queries, ``t`` for head queries) and the share whose
   highest is the true answer (unfiltered); and the relation rows' mean real and mean absolute
   imaginary part (ComplEx: ``s(h, r, h) = Σ Re(r_i)·|h_i|²``, so relation rows near the
   identity, PBG's initial operators, make every query's own entity its top answer).

Run:  python bench/self_rank.py --data-dir ../shared/datasets/wn18rr --pbg-export PBG_EXPORT_DIR
      python bench/self_rank.py --data-dir ../shared/datasets/wn18rr --run runs/aph/wn18rr-baseline-s0/run
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).parent))
from _common import emit, machine  # noqa: E402, I001

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from jobi_tf.data.index import build_index  # noqa: E402
from jobi_tf.data.triples import read_split_folder  # noqa: E402


def top_answers(model, heads: np.ndarray, relations: np.ndarray, tails: np.ndarray, batch: int = 2048):
    """``(tail_top [N], head_top [N])``: each query's highest-scored entity id."""
    table = tf.convert_to_tensor(model.entity_embeddings)
    tail_top, head_top = [], []
    for start in range(0, len(heads), batch):
        h, r, t = (tf.constant(x[start : start + batch]) for x in (heads, relations, tails))
        tail_top.append(tf.argmax(tf.matmul(model.tail_queries(h, r), table, transpose_b=True), axis=1).numpy())
        head_top.append(tf.argmax(tf.matmul(model.head_queries(r, t), table, transpose_b=True), axis=1).numpy())
    return np.concatenate(tail_top), np.concatenate(head_top)


def shares(heads: np.ndarray, tails: np.ndarray, tail_top: np.ndarray, head_top: np.ndarray) -> dict:
    """Per direction, the share of queries whose top answer is the query's own entity / the truth."""
    return {
        "tail_queries": {
            "top_is_query_entity": round(float(np.mean(tail_top == heads)), 4),
            "top_is_true_answer": round(float(np.mean(tail_top == tails)), 4),
        },
        "head_queries": {
            "top_is_query_entity": round(float(np.mean(head_top == tails)), 4),
            "top_is_true_answer": round(float(np.mean(head_top == heads)), 4),
        },
        "queries_per_direction": len(heads),
        "test_triples_with_head_equal_tail": int(np.sum(heads == tails)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", required=True, type=Path, help="the graph's folder (train/valid/test.txt)")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--run", type=Path, help="a jobi-tf run folder")
    source.add_argument("--pbg-export", type=Path, help="an export of a PBG checkpoint (bench/peer_pbg.py)")
    parser.add_argument("--dim", type=int, default=200, help="with --pbg-export: ComplEx dim (PBG's dimension / 2)")
    args = parser.parse_args()
    splits = read_split_folder(args.data_dir)
    entities, relations, _ = build_index(splits, args.data_dir.name)
    if args.run:
        from jobi_tf.api import load_run

        run = load_run(args.run)
        if run.entities != entities.labels.tolist() or run.relations != relations.labels.tolist():
            raise SystemExit(f"--run {args.run}: its vocabularies are not those of --data-dir {args.data_dir}")
        model = run.model
    else:
        import pbg_vs_jobi

        model, _, _ = pbg_vs_jobi.pbg_model(args.pbg_export, entities, relations, args.dim)
    test = splits["test"]
    heads, rels, tails = (np.asarray(v.encode(test[:, i])) for i, v in ((0, entities), (1, relations), (2, entities)))
    tail_top, head_top = top_answers(model, heads, rels, tails)
    real, imaginary = np.split(np.asarray(model.triple_relations.numpy()), 2, axis=1)
    emit(
        {
            "bench": "self_rank",
            "metric": "share of test queries whose highest-scored entity is the query's own entity",
            "value": shares(heads, tails, tail_top, head_top),
            "relation_rows": {
                "real_part_mean": round(float(real.mean()), 3),
                "imaginary_part_abs_mean": round(float(np.abs(imaginary).mean()), 3),
            },
            "model": str(args.run or args.pbg_export),
            "graph": str(args.data_dir),
            "tf": tf.__version__,
            "machine": machine(),
            "command": " ".join(["python", *sys.argv]),
        }
    )


if __name__ == "__main__":
    main()
