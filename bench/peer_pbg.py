"""PyTorch-BigGraph (PBG) trained on a triples folder, its embeddings exported for our evaluator
(runs in a separate benchmark virtualenv; PBG is never a dependency of jobi-tf).

Steps:
1. Write PBG's config module (``OUT/config.py``: one entity type ``all`` in one partition, one
   relation entry with ``dynamic_relations=True``, so every relation of the file gets its own
   operator parameters) from the flags; settings not given keep PBG's defaults, except those
   listed under ``overrides_of_pbg_defaults`` in the output (``eval_fraction=0``: train on every
   edge, as PBG's FB15k example; ``global_emb=False``: PBG refuses it with dynamic relations;
   ``hogwild_delay``: see ``--hogwild-delay``).
2. Import ``train.txt`` (and ``valid.txt``/``test.txt`` when present, as PBG's FB15k example
   does, so every entity of the dataset gets a row; only train is trained on) with PBG's TSV
   importer (``convert_input_data``, what ``torchbiggraph_import_from_tsv`` runs; columns 0, 1, 2
   = head, relation, tail). Note its importer splits lines on any whitespace.
3. Train with PBG's Python API (``torchbiggraph.train.train``, what ``torchbiggraph_train``
   runs), timed: PBG logs ``Processed N edges in X s`` once per bucket and epoch (one bucket
   here); those are the per-epoch training seconds and edges/s. The wall time of ``train``
   (worker start-up, checkpoint writing) is reported beside them. PBG starts its Hogwild
   workers (spawned processes importing torch and PBG) while its main process sets up, and
   torch 2.13's optimizer ``step`` imports ``torch._dynamo`` on first use (~3 s per worker,
   measured here): both land inside PBG's timing of the first epoch, several seconds of an
   FB15k-237 epoch. ``--warm-workers`` (default) imports ``torch._dynamo`` in PBG's worker
   initializer and has PBG's pool (``torchbiggraph.train.create_pool``, wrapped) returned only
   once every worker is up; the wait is reported as ``warm_workers.startup_s``. PBG's
   training itself is unchanged.
4. Read PBG's checkpoint (``embeddings_all_0.vN.h5`` and ``model.vN.h5`` via its
   ``CheckpointManager``) and the importer's name files, and write to ``--out``:
   ``entities.json`` (names in PBG's row order), ``entity_embeddings.npy`` ``[E, D]``,
   ``relations.json`` (PBG's dynamic relation order), ``relation_lhs_operator.npy`` and
   ``relation_rhs_operator.npy`` ``[R, D]`` (each row ``[real | imag]`` of the
   ``complex_diagonal`` operator; with dynamic relations PBG keeps one operator per side:
   the lhs one multiplies the head when tails are ranked, the rhs one the tail when heads are
   ranked; see ``bench/pbg_vs_jobi.py``).
5. ``--check N``: PBG's own scores, by its model code, for N random test triples: the model
   rebuilt from the checkpoint with ``all_negs=True`` (as PBG's evaluation does), so one
   forward pass gives each triple's two positive scores and its scores against every entity
   on each side; written to ``check_triples.json`` and ``check_scores.npz`` for the caller to
   compare with its own scoring.
6. One JSON line on stdout: timings, PBG's full resolved config (``ConfigSchema.to_dict()``,
   every field, defaults included), files, versions. PBG's own log goes to stderr and
   ``OUT/pbg.log``.

PBG has no setting for the size of the chunks negatives are shared in: it is ``num_batch_negs``,
or ``num_uniform_negs`` when ``num_batch_negs`` is 0 (``MultiRelationEmbedder.forward``); its
``num_edge_chunks`` splits the edge files for I/O, something else.

Run:  /tmp/pbgvenv/bin/python bench/peer_pbg.py --data-dir ../shared/datasets/kinship \\
          --out /tmp/pbg-kinship --dim 400 --epochs 1
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import pprint
import random
import re
import shutil
import sys
import time
from pathlib import Path

# At module level on purpose: PBG's Hogwild workers are spawned processes that import this
# module as ``__mp_main__`` when the pool starts; importing torch and PBG there (as PBG's own
# ``torchbiggraph_train`` entry point does) keeps those imports out of the timed first epoch.
import attr
import h5py
import numpy as np
import torch
import torchbiggraph
import torchbiggraph.train
import torchbiggraph.util
from torchbiggraph.checkpoint_manager import CheckpointManager
from torchbiggraph.config import ConfigFileLoader, add_to_sys_path
from torchbiggraph.converters.import_from_tsv import convert_input_data
from torchbiggraph.edgelist import EdgeList
from torchbiggraph.entitylist import EntityList
from torchbiggraph.graph_storages import ENTITY_STORAGES, RELATION_TYPE_STORAGES
from torchbiggraph.model import make_model
from torchbiggraph.train import train
from torchbiggraph.types import Side
from torchbiggraph.util import SubprocessInitializer, set_logging_verbosity, setup_logging

#: Subfolders of ``--out`` this script owns (emptied at every run: PBG resumes from, and its
#: importer skips, whatever it finds there).
DATA_SUBDIR, CHECKPOINT_SUBDIR = "pbg_data", "pbg_checkpoints"
PROCESSED = re.compile(r"Processed (\d+) edges in ([0-9.]+) s")


def config_dict(args, out: Path, edge_paths: list[str]) -> dict:
    """The dict PBG's config module returns (only what we set; PBG fills in the rest)."""
    return {
        "entity_path": str(out / DATA_SUBDIR),
        "edge_paths": edge_paths,
        "checkpoint_path": str(out / CHECKPOINT_SUBDIR),
        "entities": {"all": {"num_partitions": 1}},
        "relations": [{"name": "all_edges", "lhs": "all", "rhs": "all", "operator": args.operator}],
        "dynamic_relations": True,
        "dimension": args.dim,
        "global_emb": False,
        "comparator": args.comparator,
        "loss_fn": args.loss,
        "lr": args.lr,
        "num_epochs": args.epochs,
        "batch_size": args.batch_size,
        "num_uniform_negs": args.uniform_negs,
        "num_batch_negs": args.batch_negs,
        "workers": args.workers,
        "eval_fraction": 0.0,
        "hogwild_delay": args.hogwild_delay,
        **({"init_scale": args.init_scale} if args.init_scale is not None else {}),
    }


def write_config_module(path: Path, config: dict) -> None:
    body = pprint.pformat(config, indent=4, sort_dicts=False).replace("\n", "\n    ")
    path.write_text(
        '"""PBG config written by bench/peer_pbg.py (edge_paths: train first; only train is trained on)."""\n\n\n'
        f"def get_torchbiggraph_config():\n    return {body}\n"
    )


_STARTUP: dict[str, float] = {}


def import_tsv(config, data_dir: Path, splits) -> float:
    """PBG's own TSV importer (what ``torchbiggraph_import_from_tsv`` runs: columns head 0,
    relation 1, tail 2) over the named splits of ``data_dir``; returns its seconds."""
    start = time.perf_counter()
    convert_input_data(
        config.entities,
        config.relations,
        config.entity_path,
        config.edge_paths,
        [data_dir / f"{s}.txt" for s in splits],
        lhs_col=0,
        rhs_col=2,
        rel_col=1,
        dynamic_relations=config.dynamic_relations,
    )
    return time.perf_counter() - start


def _worker_pid(_: int) -> int:
    time.sleep(0.05)  # so that the tasks spread over the workers
    return os.getpid()


def _ready_pool(num_workers: int, *args, **kwargs):
    """PBG's ``create_pool``, returned once each of its ``num_workers`` processes has run
    its initializer (a task only runs in an initialized worker)."""
    start = time.perf_counter()
    pool = torchbiggraph.util.create_pool(num_workers, *args, **kwargs)
    seen: set[int] = set()
    while len(seen) < num_workers:
        seen.update(pool.map(_worker_pid, range(2 * num_workers), chunksize=1))
    _STARTUP["seconds"] = round(time.perf_counter() - start, 2)
    return pool


class _Collect(logging.Handler):
    """Keeps PBG's ``Processed N edges in X s`` lines (one per bucket and epoch)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.buckets: list[dict] = []

    def emit(self, record: logging.LogRecord) -> None:
        m = PROCESSED.search(record.getMessage())
        if m:
            self.buckets.append({"edges": int(m.group(1)), "seconds": float(m.group(2)), "at": time.perf_counter()})


def export(config, out: Path) -> dict:
    """Checkpoint → ``.npy``/``.json`` files in ``out``; returns their names and shapes."""
    entity_names = ENTITY_STORAGES.make_instance(config.entity_path).load_names("all", 0)
    relation_names = RELATION_TYPE_STORAGES.make_instance(config.entity_path).load_names()
    manager = CheckpointManager(config.checkpoint_path)
    embeddings, _ = manager.read("all", 0)
    state, _ = manager.read_model()
    manager.close()
    np.save(out / "entity_embeddings.npy", embeddings.numpy())
    (out / "entities.json").write_text(json.dumps(entity_names))
    (out / "relations.json").write_text(json.dumps(relation_names))
    files = {"entities": "entities.json", "entity_embeddings": "entity_embeddings.npy", "relations": "relations.json"}
    shapes = {"entity_embeddings": list(embeddings.shape)}
    for side in ("lhs", "rhs"):
        keys = sorted(k for k in state if k.startswith(f"{side}_operators.0."))
        if config.relations[0].operator == "complex_diagonal":
            table = np.concatenate([state[f"{side}_operators.0.real"], state[f"{side}_operators.0.imag"]], axis=1)
        else:  # another operator: its parameters as they are, one file each
            for k in keys:
                name = f"relation_{side}_operator_{k.rsplit('.', 1)[1]}.npy"
                np.save(out / name, state[k].numpy())
                files[name[:-4]] = name
            continue
        np.save(out / f"relation_{side}_operator.npy", table)
        files[f"relation_{side}_operator"] = f"relation_{side}_operator.npy"
        shapes[f"relation_{side}_operator"] = list(table.shape)
    return {"files": files, "shapes": shapes, "model_state_keys": sorted(state)}


def check_scores(config, out: Path, data_dir: Path, n: int, seed: int) -> dict:
    """PBG's own scores of ``n`` random test triples, by its model code (``all_negs=True``)."""
    entity_names = json.loads((out / "entities.json").read_text())
    relation_names = json.loads((out / "relations.json").read_text())
    ent, rel = {e: i for i, e in enumerate(entity_names)}, {r: i for i, r in enumerate(relation_names)}
    source = data_dir / "test.txt" if (data_dir / "test.txt").exists() else data_dir / "train.txt"
    lines = [line.split() for line in source.read_text(encoding="utf-8").splitlines() if line.strip()]
    lines = [w for w in lines if w[0] in ent and w[2] in ent and w[1] in rel]
    picked = [lines[i] for i in random.Random(seed).sample(range(len(lines)), min(n, len(lines)))]

    eval_config = attr.evolve(
        config, relations=[attr.evolve(r, all_negs=True) for r in config.relations], num_uniform_negs=0
    )
    model = make_model(eval_config)
    manager = CheckpointManager(config.checkpoint_path)
    embeddings, _ = manager.read("all", 0)
    state, _ = manager.read_model()
    manager.close()
    weights = torch.nn.Parameter(embeddings)
    model.set_embeddings("all", weights, Side.LHS)
    model.set_embeddings("all", weights, Side.RHS)
    model.load_state_dict(state, strict=False)
    model.eval()
    edges = EdgeList(
        EntityList.from_tensor(torch.tensor([ent[w[0]] for w in picked], dtype=torch.long)),
        EntityList.from_tensor(torch.tensor([ent[w[2]] for w in picked], dtype=torch.long)),
        torch.tensor([rel[w[1]] for w in picked], dtype=torch.long),
    )
    with torch.no_grad():
        scores = model(edges)
    np.savez(
        out / "check_scores.npz",
        lhs_pos=scores.lhs_pos.numpy(),  # (h, r, t) as scored for the head query
        rhs_pos=scores.rhs_pos.numpy(),  # (h, r, t) as scored for the tail query
        lhs_neg=scores.lhs_neg.numpy(),  # [n, E] (e, r, t) for every entity e in PBG's order; -1e9 at h
        rhs_neg=scores.rhs_neg.numpy(),  # [n, E] (h, r, e); -1e9 at t
    )
    (out / "check_triples.json").write_text(json.dumps(picked))
    return {"triples": len(picked), "from": source.name, "files": ["check_triples.json", "check_scores.npz"]}


def add_flags(parser: argparse.ArgumentParser) -> None:
    """The PBG settings this script and `peer_pbg_epochs.py` take (PBG's own terms)."""
    parser.add_argument("--data-dir", required=True, help="folder with train.txt (head, relation, tail)")
    parser.add_argument("--dim", type=int, default=400, help="PBG's dimension D (complex_diagonal: D/2 + D/2)")
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--uniform-negs", type=int, default=50, help="num_uniform_negs (per side, per chunk)")
    parser.add_argument("--batch-negs", type=int, default=0, help="num_batch_negs (also the chunk size when > 0)")
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--loss", default="softmax", help="loss_fn")
    parser.add_argument("--operator", default="complex_diagonal")
    parser.add_argument("--comparator", default="dot")
    parser.add_argument("--init-scale", type=float, help="init_scale (default: PBG's)")
    parser.add_argument(
        "--hogwild-delay",
        type=float,
        default=0.0,
        help="seconds PBG holds back every worker but the first in epoch 0 (PBG's default 2 would sit "
        "inside a one-epoch measurement)",
    )
    parser.add_argument(
        "--warm-workers",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="start the timed epochs only once every Hogwild worker has started, torch._dynamo imported (else "
        "worker start-up, ~3-7 s, falls inside PBG's timing of the first epoch)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seeds the importer's shuffles, the init and edge order")
    parser.add_argument("--check", type=int, default=5, help="test triples PBG scores itself for the mapping check")


def own_stdout():
    """Our stdout, kept for the one JSON line; PBG logs to stdout and its importer prints there,
    so both are sent to stderr."""
    stdout = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = os.fdopen(1, "w", buffering=1)
    return stdout


def split_files(data_dir: Path) -> list[str]:
    """The splits to import, train first (PBG trains on the first edge path only)."""
    splits = [s for s in ("train", "valid", "test") if (data_dir / f"{s}.txt").exists()]
    if "train" not in splits:
        sys.exit(f"{data_dir}/train.txt not found")
    return splits


def start_pbg(out: Path, mode: str, handler: logging.Handler):
    """PBG's logging (to stderr, ``OUT/pbg.log`` and ``handler``) and its config from ``OUT/config.py``:
    ``(loader, config)``."""
    setup_logging()
    log_file = logging.FileHandler(out / "pbg.log", mode=mode)
    log_file.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    for h in (log_file, handler):
        logging.getLogger("torchbiggraph").addHandler(h)
    loader = ConfigFileLoader()
    config = loader.load_config(str(out / "config.py"))
    set_logging_verbosity(config.verbose)
    return loader, config


def worker_setup(config, loader, warm: bool, *first) -> SubprocessInitializer:
    """What each Hogwild worker runs when it starts (``first`` before PBG's own); with ``warm``,
    torch._dynamo imported and PBG's pool returned only once every worker is up (`_ready_pool`)."""
    subprocess_init = SubprocessInitializer()
    for f in first:
        subprocess_init.register(f)
    subprocess_init.register(setup_logging, config.verbose)
    subprocess_init.register(add_to_sys_path, loader.config_dir.name)
    if warm:
        subprocess_init.register(importlib.import_module, "torch._dynamo")
        torchbiggraph.train.create_pool = _ready_pool
    return subprocess_init


#: Our settings that differ from PBG's defaults (or may), reported with the resolved config.
OVERRIDES = ("global_emb", "comparator", "loss_fn", "lr", "num_batch_negs", "eval_fraction", "hogwild_delay")


def provenance(args, raw: dict, train_config, import_s: float, *more: str) -> dict:
    """The fields both drivers report: PBG's full resolved config, our overrides of its defaults
    (`OVERRIDES` and ``more``), the worker warm-up, the import time and the versions."""
    return {
        "warm_workers": {"on": args.warm_workers, "startup_s": _STARTUP.get("seconds")},
        "import_s": round(import_s, 2),
        "pbg_config": train_config.to_dict(),
        "overrides_of_pbg_defaults": {k: raw[k] for k in (*OVERRIDES, *more)},
        "versions": {
            "torchbiggraph": getattr(torchbiggraph, "__version__", None) or _dist_version("torchbiggraph"),
            "torch": torch.__version__,
            "h5py": h5py.__version__,
            "python": sys.version.split()[0],
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_flags(parser)
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--epochs", type=int, default=1)
    args = parser.parse_args()
    stdout = own_stdout()

    data_dir, out = Path(args.data_dir), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for sub in (DATA_SUBDIR, CHECKPOINT_SUBDIR):
        shutil.rmtree(out / sub, ignore_errors=True)
    splits = split_files(data_dir)
    edge_paths = [str(out / DATA_SUBDIR / f"{s}_partitioned") for s in splits]
    raw = config_dict(args, out, edge_paths)
    write_config_module(out / "config.py", raw)

    collect = _Collect()
    random.seed(args.seed)  # the importer shuffles entity and relation names with `random`
    torch.manual_seed(args.seed)  # the initial embeddings and the edge order (workers seed by pid)
    loader, config = start_pbg(out, "w", collect)
    subprocess_init = worker_setup(config, loader, args.warm_workers)
    import_s = import_tsv(config, data_dir, splits)

    train_config = attr.evolve(config, edge_paths=[edge_paths[0]])
    start = time.perf_counter()
    train(train_config, subprocess_init=subprocess_init)
    train_wall = time.perf_counter() - start

    exported = export(train_config, out)
    check = check_scores(train_config, out, data_dir, args.check, args.seed) if args.check else None
    edges = sum(b["edges"] for b in collect.buckets)
    seconds = sum(b["seconds"] for b in collect.buckets)
    record = {
        "peer": "pytorch-biggraph",
        "data_dir": str(data_dir),
        "imported_splits": splits,
        "trained_on": "train",
        "epochs": [{"edges": b["edges"], "seconds": b["seconds"]} for b in collect.buckets],
        "train_seconds": round(seconds, 2),
        "edges_per_s": round(edges / seconds) if seconds else None,
        "train_wall_s": round(train_wall, 2),
        **provenance(args, raw, train_config, import_s),
        "out": str(out),
        **exported,
        "check": check,
    }
    stdout.write(json.dumps(record) + "\n")
    stdout.flush()


def _dist_version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


if __name__ == "__main__":
    main()
