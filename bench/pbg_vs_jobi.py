"""PyTorch-BigGraph (PBG) as a same-run peer: trained by PBG, ranked by jobi-tf's filtered evaluator.

Why: one ranking code for both systems. `bench/peer_pbg.py` trains PBG in ``--peer-python``
(its own virtualenv) and exports its tables; they are copied into a reciprocal ComplEx
`JoBiModel` (`pbg_model`), checked against PBG's own scores of a few test triples
(`check_mapping`, ``max_abs_diff``), and ranked on test and valid by `FilteredEvaluator` (what
``jobi-tf evaluate`` runs; realistic ties). One JSON line: PBG's full resolved config, its
training seconds and positives per second, the metrics, the check, the closest jobi-tf flags
and what still differs (``jobi_tf_match``), how PBG draws negatives (``negatives``).

Mapping (read in torchbiggraph 1.0.0's ``model.py``): ``ComplexDiagonalDynamicOperator`` treats
a D-vector as ``[real (D/2) | imag (D/2)]`` and multiplies it, as complex numbers, by the
relation's row; ``DotComparator`` is ``Re(<a, conj(b)>)``. With ``dynamic_relations`` PBG has
two operator tables: ``MultiRelationEmbedder.forward`` scores tail negatives as
``<lhs_r * E[h], E[t']>`` and head negatives as ``<E[h'], rhs_r * E[t]>``. That is a reciprocal
ComplEx: ``triple_relations[r] = lhs_r`` (tail queries) and ``triple_relations[R + r] = rhs_r``
(head queries ``(t, r⁻¹, ?)``); one entity table (PBG sets the same parameter on both sides).
PBG's ``rhs_pos`` is our ``score_triples``. Negatives (``model.py`` ``forward_direction_agnostic``,
``prepare_negatives``; ``losses.py`` ``SoftmaxLossFunction``; ``train.py``): both sides of every
positive, one uniform draw per chunk (``num_batch_negs``, or ``num_uniform_negs`` when that is 0)
and side, with replacement, the positive's own entity kept; a softmax per side, summed over the
batch. Optimizer: ``RowAdagrad`` on entities, ``Adagrad`` on operators, Hogwild workers.

Run:  JOBI_TF_DATA_DIR=../shared/datasets python bench/pbg_vs_jobi.py --dataset fb15k-237 \\
          --peer-python /tmp/pbgvenv/bin/python
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).parent))
from _common import Usage, data_dir, emit, machine, peak_rss_gib, versions  # noqa: E402, I001

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from jobi_tf.config import EvalConfig  # noqa: E402
from jobi_tf.data.index import build_index  # noqa: E402
from jobi_tf.data.triples import read_split_folder  # noqa: E402
from jobi_tf.evaluation.ranking import FilteredEvaluator  # noqa: E402
from jobi_tf.models import JoBiModel  # noqa: E402

#: Metrics kept per split (the per-relation breakdown is left out of the one line).
KEPT = ("mrr", "hits@1", "hits@3", "hits@10", "mean_rank", "count", "rank_type")


def add_pbg_flags(parser: argparse.ArgumentParser) -> None:
    """PBG's settings in jobi-tf terms (also `accuracy_per_hour.py`'s ``--flags`` for ``pbg``)."""
    parser.add_argument("--dim", type=int, default=200, help="ComplEx dim in jobi-tf terms; PBG's dimension is 2x")
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--uniform-negs", type=int, default=50, help="PBG num_uniform_negs (per side and chunk)")
    parser.add_argument("--batch-negs", type=int, default=0, help="PBG num_batch_negs (0: chunks of --uniform-negs)")
    parser.add_argument("--lr", type=float, default=0.1, help="Adagrad learning rate (PBG's optimizer)")
    parser.add_argument("--workers", type=int, default=2, help="PBG's Hogwild processes")
    parser.add_argument("--hogwild-delay", type=float, default=0.0, help="see peer_pbg.py (PBG's default: 2)")
    parser.add_argument(
        "--warm-workers",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="time PBG's epochs from when its workers are up (see peer_pbg.py)",
    )
    parser.add_argument("--check", type=int, default=5, help="test triples whose scores PBG and we compare")


def peer_flags(p: argparse.Namespace, seed: int) -> list[str]:
    """`add_pbg_flags`'s settings as `peer_pbg.py`'s flags (PBG's terms)."""
    return [
        "--dim", str(2 * p.dim),
        "--batch-size", str(p.batch_size),
        "--uniform-negs", str(p.uniform_negs),
        "--batch-negs", str(p.batch_negs),
        "--lr", str(p.lr),
        "--workers", str(p.workers),
        "--operator", "complex_diagonal",
        "--hogwild-delay", str(p.hogwild_delay),
        "--seed", str(seed),
        "--check", str(p.check),
        "--warm-workers" if p.warm_workers else "--no-warm-workers",
    ]  # fmt: skip


def run_peer(args, folder: Path, out: Path) -> tuple[dict, list[str], Usage]:
    """`peer_pbg.py` in PBG's virtualenv; its JSON line, command and CPU use (it and its workers)."""
    script = str(Path(__file__).parent / "peer_pbg.py")
    command = [args.peer_python, script, "--data-dir", str(folder), "--out", str(out), "--epochs", str(args.epochs)]
    command += ["--loss", "softmax", *peer_flags(args, args.seed)]
    with Usage(resource.RUSAGE_CHILDREN) as used:
        stdout = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=True).stdout
    return json.loads(stdout.strip().splitlines()[-1]), command, used


def pbg_model(out: Path, entities, relations, dim: int) -> tuple[JoBiModel, np.ndarray, dict]:
    """A reciprocal ComplEx `JoBiModel` holding PBG's parameters; also, for each PBG entity row,
    our id, and how many of our entities / relations PBG had no row for (left at zero)."""
    pbg_entities = json.loads((out / "entities.json").read_text())
    pbg_relations = json.loads((out / "relations.json").read_text())
    embeddings = np.load(out / "entity_embeddings.npy")
    lhs, rhs = np.load(out / "relation_lhs_operator.npy"), np.load(out / "relation_rhs_operator.npy")
    if embeddings.shape[1] != 2 * dim or lhs.shape[1] != 2 * dim:
        raise SystemExit(f"PBG's tables are {embeddings.shape[1]} wide, expected 2 * --dim = {2 * dim}")
    ours = entities.encode(np.array(pbg_entities))  # our id of each PBG row
    rel_ours = relations.encode(np.array(pbg_relations))
    e, r = len(entities), len(relations)
    table = np.zeros((e, 2 * dim), np.float32)
    table[ours] = embeddings
    rel_table = np.zeros((2 * r, 2 * dim), np.float32)
    rel_table[rel_ours] = lhs  # tail queries (h, r, ?): the lhs operator multiplies the head
    rel_table[r + rel_ours] = rhs  # head queries as (t, r⁻¹, ?): the rhs operator multiplies the tail
    model = JoBiModel(e, r, model="complex", dim=dim, reciprocal=True, name="pbg")
    model.entity_embeddings.assign(table)
    model.triple_relations.assign(rel_table)
    missing = {"entities": int(e - len(np.unique(ours))), "relations": int(r - len(np.unique(rel_ours)))}
    return model, ours, missing


def check_mapping(model: JoBiModel, out: Path, entities, relations, pbg_to_ours: np.ndarray) -> dict:
    """Our scores of PBG's checked triples against PBG's own, in PBG's entity order."""
    triples = json.loads((out / "check_triples.json").read_text())
    pbg = np.load(out / "check_scores.npz")
    h = tf.constant(entities.encode(np.array([t[0] for t in triples])))
    r = tf.constant(relations.encode(np.array([t[1] for t in triples])))
    t = tf.constant(entities.encode(np.array([t[2] for t in triples])))
    table = model.entity_embeddings
    tails = model.scorer.score_candidates(model.tail_queries(h, r), table).numpy()[:, pbg_to_ours]
    heads = model.scorer.score_candidates(model.head_queries(r, t), table).numpy()[:, pbg_to_ours]
    ours = {
        "score_triples vs rhs_pos (tail side)": (model.score_triples(tf.stack([h, r, t], 1)).numpy(), pbg["rhs_pos"]),
        "head query at the true head vs lhs_pos": (
            tf.reduce_sum(model.head_queries(r, t) * tf.gather(table, h), -1).numpy(),
            pbg["lhs_pos"],
        ),
    }
    # PBG puts -1e9 at the true entity of each all-entity row (its own positive): compare the rest.
    for name, mine, theirs in (
        ("tail query vs every entity", tails, pbg["rhs_neg"]),
        ("head query vs every entity", heads, pbg["lhs_neg"]),
    ):
        keep = theirs > -1e8
        ours[name] = (mine[keep], theirs[keep])
    diffs = {name: float(np.max(np.abs(a - b))) for name, (a, b) in ours.items()}
    scale = max(float(np.max(np.abs(b))) for _, b in ours.values())
    return {
        "triples": triples,
        "max_abs_diff": diffs,
        "max_abs_score": scale,
        "pbg_rhs_pos": [round(float(x), 6) for x in pbg["rhs_pos"]],
        "ours_score_triples": [round(float(x), 6) for x in ours["score_triples vs rhs_pos (tail side)"][0]],
        "ok": max(diffs.values()) <= 1e-5 * max(1.0, scale),
    }


def jobi_tf_match(args) -> dict:
    chunk = args.batch_negs or args.uniform_negs
    flags = {
        "--model": "complex",
        "--dim": args.dim,
        "--reciprocal": True,
        "--loss": "sampled-softmax",
        "--batch-size": args.batch_size,
        "--neg": args.uniform_negs,
        "--shared-negatives": chunk,
        "--corrupt-side": "per-positive",
        "--p": 0.0,
        "--joint": False,
        "--optimizer": "row-adagrad",
        "--lr": args.lr,
        "--regularization": 0.0,
    }
    differences = [
        "PBG corrupts both sides of every positive (2 softmaxes, 2 x num_uniform_negs negatives); jobi-tf "
        "per-positive corrupts one (1 softmax): one PBG epoch trains as many queries as 2 jobi-tf epochs",
        "PBG draws head and tail negatives separately per chunk; jobi-tf shares one draw per chunk",
        "jobi-tf masks a negative equal to the positive; PBG does not",
        "PBG sums its loss over the batch, jobi-tf averages it",
        "both: row-wise Adagrad on entities (one accumulator per row), element-wise on relations; PBG's "
        "accumulators start at 0, jobi-tf's at 1e-10",
        "init: PBG N(0, 1e-3) entities and identity operators; jobi-tf Glorot-normal tables",
    ]
    if args.batch_negs:
        differences.insert(0, f"PBG adds {args.batch_negs - 1} in-batch negatives per side; jobi-tf has none")
    if args.batch_size % chunk:
        differences.append("jobi-tf needs --shared-negatives to divide --batch-size; PBG pads its last chunk")
    return {"flags": flags, "differences": differences}


def evaluate(model, evaluator, splits: list[str]) -> tuple[dict, dict]:
    """Filtered metrics per split (`KEPT`, and MRR / Hits per side) and each split's seconds."""
    metrics, eval_seconds = {}, {}
    for split in splits:
        start = time.perf_counter()
        m = evaluator.evaluate(model, split)
        eval_seconds[split] = round(time.perf_counter() - start, 1)
        metrics[split] = {k: m[k] for k in KEPT}
        for side in ("head", "tail"):
            metrics[split][side] = {k: m[side][k] for k in ("mrr", "hits@1", "hits@3", "hits@10")}
    return metrics, eval_seconds


#: How PBG draws and scores negatives (read in torchbiggraph 1.0.0), beside the counts of a run.
NEGATIVES = {
    "uniform_draw": "one draw of num_uniform_negs entities per chunk and side (torch.randint over all "
    "entities, with replacement), shared by the chunk's positives; negatives equal to the positive kept",
    "loss": "per positive and side: -pos + log(exp(pos) + sum exp(neg)), summed over the batch; "
    "loss = head side + tail side",
    "source": "torchbiggraph 1.0.0 model.py MultiRelationEmbedder.forward / forward_direction_agnostic / "
    "prepare_negatives, losses.py SoftmaxLossFunction, train.py Trainer.process_one_batch",
}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="fb15k-237", help="name (the folder under $JOBI_TF_DATA_DIR)")
    parser.add_argument("--data-dir", help="the dataset folder (overrides --dataset's)")
    parser.add_argument("--peer-python", required=True, help="python of a virtualenv with torchbiggraph")
    parser.add_argument("--out", help="PBG's working folder (default: /tmp/pbg_vs_jobi-DATASET)")
    add_pbg_flags(parser)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--splits", nargs="*", default=["test", "valid"], help="splits to rank")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    folder = data_dir(args.dataset, args.data_dir)
    name = args.dataset if not args.data_dir else Path(args.data_dir).name
    out = Path(args.out or f"/tmp/pbg_vs_jobi-{name}")
    peer, peer_command, peer_usage = run_peer(args, folder, out)

    entities, relations, index = build_index(read_split_folder(folder), name)
    model, pbg_to_ours, missing = pbg_model(out, entities, relations, args.dim)
    check = check_mapping(model, out, entities, relations, pbg_to_ours) if args.check else None
    evaluator = FilteredEvaluator(index, EvalConfig(), relation_labels=relations.labels)
    metrics, eval_seconds = evaluate(model, evaluator, args.splits)
    negatives = {
        "corrupted_sides_per_positive": 2,
        "negatives_scored_per_positive": 2 * (args.uniform_negs + max(args.batch_negs - 1, 0)),
        "chunk_size": args.batch_negs or args.uniform_negs,
        "batch_negatives": "the chunk's other positives' entities on that side" if args.batch_negs else "none",
        **NEGATIVES,
    }
    emit(
        {
            "bench": "pbg_vs_jobi",
            "dataset": name,
            "system": "PyTorch-BigGraph, trained by PBG, ranked by jobi-tf's FilteredEvaluator (filtered, realistic "
            "ties)",
            "model": f"PBG complex_diagonal dim {2 * args.dim} (= ComplEx {args.dim}), dot comparator, dynamic "
            "relations = reciprocal ComplEx (lhs operators: tail queries, rhs operators: head queries)",
            "pbg_settings": peer["pbg_config"],
            "pbg_overrides_of_defaults": peer["overrides_of_pbg_defaults"],
            "train_seconds": peer["train_seconds"],
            "train_epochs": peer["epochs"],
            "positives_per_s": peer["edges_per_s"],
            "train_wall_s_incl_startup_and_checkpoints": peer["train_wall_s"],
            "pbg_workers_warmed_before_timing": peer["warm_workers"],
            "peer_process_cpu": peer_usage.record(),
            "metrics": metrics,
            "eval_seconds": eval_seconds,
            "mapping_check": check,
            "not_in_pbg": missing,
            "negatives": negatives,
            "jobi_tf_match": jobi_tf_match(args),
            "command": shlex.join([sys.executable, *sys.argv]),
            "peer_command": shlex.join(peer_command),
            "cpu": machine()["cpu"],
            "cpus": os.cpu_count(),
            "versions": {**versions(), **{f"peer_{k}": v for k, v in peer["versions"].items()}},
            "peak_rss_gib": round(peak_rss_gib(), 2),
        }
    )


if __name__ == "__main__":
    main()
