"""PyTorch-BigGraph (PBG) trained on a triples folder by its own code, its embeddings exported for
jobi-tf's evaluator (runs in PBG's own virtualenv; PBG is never a dependency of jobi-tf).

Modes (``--mode``):
* ``once`` (default; `bench/pbg_vs_jobi.py`): a fresh ``OUT``, ``--epochs`` epochs timed, one export;
* ``epochs`` (`bench/accuracy_per_hour.py`, `bench/epoch_seconds.py`): resumable. Rerun with a
  larger ``--epochs`` and PBG continues from its checkpoint version (= epochs done; the torch
  seed is ``--seed`` + that); every ``--export-every``-th epoch is exported to
  ``OUT/exports/epoch-E/``. ``OUT/settings.json`` refuses other flags in the same folder.

How, both modes: ``OUT/config.py`` holds one entity type in one partition and one relation
entry with ``dynamic_relations=True`` (each relation gets its own operators, one per side: see
pbg_vs_jobi.py for how they map onto a reciprocal ComplEx); PBG's defaults elsewhere, but for
``overrides_of_pbg_defaults`` (``eval_fraction=0``, ``global_emb=False``, ``hogwild_delay``).
PBG's TSV importer reads train, valid and test (every entity gets a row; only train is trained
on). An epoch's seconds are PBG's own ``Processed N edges in X s``. Why ``--warm-workers``:
PBG's spawned Hogwild workers import torch, and torch's optimizer imports ``torch._dynamo`` on
first use (~3 s a worker), all inside PBG's timing of the first epoch; with it, training starts
once every worker is up (the wait is ``warm_workers.startup_s``). ``--check N``: PBG's own
scores of N test triples (its model with ``all_negs=True``), for the caller's mapping check.
PBG's log goes to stderr and ``OUT/pbg.log``; one JSON line on stdout.

PBG's chunk of shared negatives is ``num_batch_negs``, or ``num_uniform_negs`` when that is 0
(``MultiRelationEmbedder.forward``); its ``num_edge_chunks`` is about I/O, something else.

Run:  /tmp/pbgvenv/bin/python bench/peer_pbg.py --data-dir ../shared/datasets/kinship \\
          --out /tmp/pbg-kinship --dim 400 --epochs 1
      /tmp/pbgvenv/bin/python bench/peer_pbg.py --mode epochs --data-dir ../shared/datasets/kinship \\
          --out /tmp/pbg-epochs-kinship --dim 100 --epochs 3
"""

from __future__ import annotations

import argparse
import ctypes
import fcntl
import importlib
import json
import logging
import os
import pprint
import random
import re
import shutil
import signal
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
from torchbiggraph.checkpoint_storage import CHECKPOINT_STORAGES
from torchbiggraph.config import ConfigFileLoader, add_to_sys_path
from torchbiggraph.converters.import_from_tsv import convert_input_data
from torchbiggraph.edgelist import EdgeList
from torchbiggraph.entitylist import EntityList
from torchbiggraph.graph_storages import ENTITY_STORAGES, RELATION_TYPE_STORAGES
from torchbiggraph.model import make_model
from torchbiggraph.train import train
from torchbiggraph.types import Side
from torchbiggraph.util import SubprocessInitializer, set_logging_verbosity, setup_logging

#: Subfolders of ``--out`` this script owns (PBG resumes from, and its importer skips, whatever
#: it finds there: emptied for every ``once`` run and every fresh ``epochs`` folder).
DATA_SUBDIR, CHECKPOINT_SUBDIR, EXPORTS, VIEWS = "pbg_data", "pbg_checkpoints", "exports", "views"
PROCESSED = re.compile(r"Processed (\d+) edges in ([0-9.]+) s")
STARTING = re.compile(r"Starting epoch (\d+) /")
#: Flags that must stay the same over the ``epochs`` calls of one ``--out`` (``--epochs`` may grow).
SETTINGS = (
    "data_dir", "dim", "batch_size", "uniform_negs", "batch_negs", "lr", "workers", "loss", "operator",
    "comparator", "init_scale", "hogwild_delay", "warm_workers", "seed", "export_every",
)  # fmt: skip
#: Our settings that differ from PBG's defaults (or may), reported with the resolved config.
OVERRIDES = ("global_emb", "comparator", "loss_fn", "lr", "num_batch_negs", "eval_fraction", "hogwild_delay")


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
        # epochs mode: PBG keeps every epoch's checkpoint version instead of deleting the last
        **({"checkpoint_preservation_interval": 1} if args.mode == "epochs" else {}),
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
    relation 1, tail 2; it splits lines on any whitespace) over the named splits; its seconds."""
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


class EpochLog(logging.Handler):
    """PBG's ``Processed N edges in X s`` lines (one per bucket and epoch; one bucket here), each
    with its epoch (PBG's ``Starting epoch E /`` line); with ``path``, each also appended to that
    JSON-lines file and fsync'd, so a kill loses no finished epoch's seconds."""

    def __init__(self, path: Path | None = None) -> None:
        super().__init__(logging.INFO)
        self.path, self.epoch, self.buckets = path, None, []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if m := STARTING.search(message):
            self.epoch = int(m.group(1))
        elif m := PROCESSED.search(message):
            self.buckets.append({"edges": int(m.group(1)), "seconds": float(m.group(2))})
            if self.path is not None and self.epoch is not None:
                with open(self.path, "a") as f:
                    f.write(json.dumps({"epoch": self.epoch, **self.buckets[-1], "pid": os.getpid()}) + "\n")
                    f.flush()
                    os.fsync(f.fileno())


def export(config, out: Path) -> dict:
    """Checkpoint → ``.npy``/``.json`` files in ``out``: ``entities.json`` (names in PBG's row
    order), ``entity_embeddings.npy`` ``[E, D]``, ``relations.json``, and each side's operator
    table ``relation_{lhs,rhs}_operator.npy`` ``[R, D]`` (``complex_diagonal``: rows
    ``[real | imag]``); returns their names and shapes."""
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
    """PBG's own scores of ``n`` random test triples, by its model code (``all_negs=True``, as
    PBG's evaluation builds it: one forward pass scores each triple's two sides against every
    entity), to ``check_triples.json`` and ``check_scores.npz``."""
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


def parse_args() -> argparse.Namespace:
    """PBG's settings in its own terms, and the mode's."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("once", "epochs"), default="once", help="see the module's docstring")
    parser.add_argument("--data-dir", required=True, help="folder with train.txt (head, relation, tail)")
    parser.add_argument("--out", required=True, help="output folder (epochs mode: resumed when it exists)")
    parser.add_argument("--epochs", type=int, default=1, help="epochs mode: train until this many are done")
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
    parser.add_argument("--export-every", type=int, default=1, help="epochs mode: export the multiples of this")
    parser.add_argument("--keep-versions", action="store_true", help="epochs mode: keep every checkpoint version")
    return parser.parse_args()


def own_stdout():
    """Our stdout, kept for the one JSON line; PBG logs to stdout and its importer prints there,
    so both are sent to stderr."""
    stdout = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = os.fdopen(1, "w", buffering=1)
    return stdout


def start_pbg(args, out: Path, handler: logging.Handler):
    """The config module written, PBG's logging started (to stderr, ``OUT/pbg.log`` and
    ``handler``) and its config loaded: ``(splits, raw config, loader, config)``."""
    splits = [s for s in ("train", "valid", "test") if (Path(args.data_dir) / f"{s}.txt").exists()]
    if "train" not in splits:  # train first: PBG trains on the first edge path only
        sys.exit(f"{args.data_dir}/train.txt not found")
    raw = config_dict(args, out, [str(out / DATA_SUBDIR / f"{s}_partitioned") for s in splits])
    write_config_module(out / "config.py", raw)
    setup_logging()
    log_file = logging.FileHandler(out / "pbg.log", mode="a" if args.mode == "epochs" else "w")
    log_file.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    for h in (log_file, handler):
        logging.getLogger("torchbiggraph").addHandler(h)
    loader = ConfigFileLoader()
    config = loader.load_config(str(out / "config.py"))
    set_logging_verbosity(config.verbose)
    return splits, raw, loader, config


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


def provenance(args, raw: dict, train_config, import_s: float) -> dict:
    """What both modes report: PBG's full resolved config (``ConfigSchema.to_dict()``, defaults
    included), our overrides of its defaults, the worker warm-up, the import time, the versions."""
    more = ("checkpoint_preservation_interval",) if args.mode == "epochs" else ()
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


def _dist_version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def run_once(args, out: Path) -> dict:
    """A fresh PBG run of ``--epochs`` epochs, timed, exported (and checked) once."""
    for sub in (DATA_SUBDIR, CHECKPOINT_SUBDIR):
        shutil.rmtree(out / sub, ignore_errors=True)
    collect = EpochLog()
    random.seed(args.seed)  # the importer shuffles entity and relation names with `random`
    torch.manual_seed(args.seed)  # the initial embeddings and the edge order (workers seed by pid)
    splits, raw, loader, config = start_pbg(args, out, collect)
    subprocess_init = worker_setup(config, loader, args.warm_workers)
    import_s = import_tsv(config, Path(args.data_dir), splits)
    train_config = attr.evolve(config, edge_paths=config.edge_paths[:1])
    start = time.perf_counter()
    train(train_config, subprocess_init=subprocess_init)
    train_wall = time.perf_counter() - start
    exported = export(train_config, out)
    check = check_scores(train_config, out, Path(args.data_dir), args.check, args.seed) if args.check else None
    edges = sum(b["edges"] for b in collect.buckets)
    seconds = sum(b["seconds"] for b in collect.buckets)
    return {
        "peer": "pytorch-biggraph",
        "data_dir": args.data_dir,
        "imported_splits": splits,
        "trained_on": "train",
        "epochs": collect.buckets,
        "train_seconds": round(seconds, 2),
        "edges_per_s": round(edges / seconds) if seconds else None,
        "train_wall_s": round(train_wall, 2),
        **provenance(args, raw, train_config, import_s),
        "out": str(out),
        **exported,
        "check": check,
    }


# -- epochs mode --------------------------------------------------------------------------------
def die_with_parent() -> None:
    """Be killed when the parent process dies (Linux ``PR_SET_PDEATHSIG``): a caller killed with
    SIGKILL leaves no PBG process training on behind it (this driver and its Hogwild workers)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        pass


def write_json_atomic(path: Path, data) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    with open(tmp, "rb+") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)


def logged_seconds(path: Path, done: int) -> dict[int, dict]:
    """Epoch → its last logged ``{"edges", "seconds"}`` (an epoch redone after a kill is logged
    again), for the epochs PBG finished (≤ ``done``)."""
    out: dict[int, dict] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                rec = json.loads(line)
            except ValueError:  # a line cut by a kill
                continue
            if rec["epoch"] <= done:
                out[rec["epoch"]] = {"edges": rec["edges"], "seconds": rec["seconds"]}
    return out


def version_view(config, ckpt: Path, views: Path, version: int) -> Path:
    """A folder that reads as PBG's checkpoint at ``version`` (symlinks, as PBG's own snapshots)."""
    storage = CHECKPOINT_STORAGES.make_instance(str(ckpt))
    view = views / f"v{version}"
    shutil.rmtree(view, ignore_errors=True)
    view.mkdir(parents=True)
    sources = [storage.get_model_file(version)]
    for entity, econf in config.entities.items():
        sources += [storage.get_entity_partition_file(version, entity, p) for p in range(econf.num_partitions)]
    for src in sources:
        if not src.exists():
            raise SystemExit(f"{src}: PBG's checkpoint version {version} is gone; cannot export it")
        (view / src.name).symlink_to(src.resolve())
    (view / "checkpoint_version.txt").write_text(f"{version}\n")
    return view


def drop_versions(config, ckpt: Path, below: int) -> list[int]:
    """Delete PBG's checkpoint versions older than ``below`` and its snapshots of them."""
    storage = CHECKPOINT_STORAGES.make_instance(str(ckpt))
    dropped = []
    for version in range(1, below):
        if not storage.get_model_file(version).exists():
            continue
        for entity, econf in config.entities.items():
            for p in range(econf.num_partitions):
                storage.drop_entity_partition(version, entity, p)
        storage.drop_model(version)
        shutil.rmtree(storage.get_snapshot_path(version), ignore_errors=True)
        dropped.append(version)
    return dropped


def same_settings(args, out: Path) -> None:
    """Record the flags in ``OUT/settings.json``, or refuse flags other than those recorded; on
    a fresh start, clear whatever PBG would resume from."""
    settings = {k: getattr(args, k) for k in SETTINGS}
    settings["data_dir"] = str(Path(args.data_dir).resolve())
    settings_path = out / "settings.json"
    if settings_path.exists():
        saved = json.loads(settings_path.read_text())
        if saved != settings:
            keys = set(saved) | set(settings)
            diff = {k: (saved.get(k), settings.get(k)) for k in keys if saved.get(k) != settings.get(k)}
            sys.exit(f"{out}: holds a PBG run with other settings {diff}; use another --out or the same flags")
    if not (out / DATA_SUBDIR / ".imported").exists():
        for sub in (DATA_SUBDIR, CHECKPOINT_SUBDIR, EXPORTS, VIEWS):
            shutil.rmtree(out / sub, ignore_errors=True)
        for name in ("epoch_seconds.jsonl", "exported.json"):
            (out / name).unlink(missing_ok=True)
    write_json_atomic(settings_path, settings)


def export_epochs(args, train_config, out: Path, done: int) -> tuple[list[int], dict | None]:
    """Export every epoch up to ``done`` due (``--export-every``) and not yet exported, from its
    checkpoint version (written as ``.tmp``, renamed, recorded in ``OUT/exported.json``); the
    exported epochs, and PBG's own scores of the first export (``--check``)."""
    ckpt = Path(train_config.checkpoint_path)
    exported_path = out / "exported.json"
    exported: list[int] = json.loads(exported_path.read_text()) if exported_path.exists() else []
    check = None
    for epoch in range(1, done + 1):
        if epoch % args.export_every or epoch in exported:
            continue
        final = out / EXPORTS / f"epoch-{epoch}"
        tmp = final.with_name(final.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        view = version_view(train_config, ckpt, out / VIEWS, epoch)
        view_config = attr.evolve(train_config, checkpoint_path=str(view))
        export(view_config, tmp)
        if args.check and not exported:
            check = check_scores(view_config, tmp, Path(args.data_dir), args.check, args.seed)
            check["epoch"] = epoch
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        exported.append(epoch)
        write_json_atomic(exported_path, exported)
        shutil.rmtree(out / VIEWS / f"v{epoch}", ignore_errors=True)
    return exported, check


def run_epochs(args, out: Path) -> dict:
    """Train on to ``--epochs`` from PBG's own checkpoint, export the epochs due, drop old versions."""
    die_with_parent()
    lock = open(out / ".lock", "w")  # one driver per folder: a second one waits (closed at exit)
    fcntl.flock(lock, fcntl.LOCK_EX)
    same_settings(args, out)
    splits, raw, loader, config = start_pbg(args, out, EpochLog(out / "epoch_seconds.jsonl"))
    import_s, imported = 0.0, out / DATA_SUBDIR / ".imported"
    if not imported.exists():
        random.seed(args.seed)  # the importer shuffles entity and relation names with `random`
        import_s = import_tsv(config, Path(args.data_dir), splits)
        imported.touch()
    train_config = attr.evolve(config, edge_paths=config.edge_paths[:1])
    ckpt = Path(train_config.checkpoint_path)
    before = CHECKPOINT_STORAGES.make_instance(str(ckpt)).load_version() if ckpt.exists() else 0
    train_wall = None
    if before < args.epochs:
        torch.manual_seed(args.seed + before)  # initial embeddings (first call) and the edge order
        subprocess_init = worker_setup(config, loader, args.warm_workers, die_with_parent)
        start = time.perf_counter()
        train(train_config, subprocess_init=subprocess_init)
        train_wall = time.perf_counter() - start
    done = CHECKPOINT_STORAGES.make_instance(str(ckpt)).load_version()
    exported, check = export_epochs(args, train_config, out, done)
    dropped = [] if args.keep_versions else drop_versions(train_config, ckpt, done)
    seconds = logged_seconds(out / "epoch_seconds.jsonl", done)
    return {
        "peer": "pytorch-biggraph",
        "data_dir": args.data_dir,
        "epochs_done": done,
        "epochs_before": before,
        "epoch_seconds": [seconds.get(e, {}).get("seconds") for e in range(1, done + 1)],
        "epoch_edges": [seconds.get(e, {}).get("edges") for e in range(1, done + 1)],
        "exported": sorted(exported),
        "exports": str(out / EXPORTS),
        "dropped_versions": dropped,
        "train_wall_s": None if train_wall is None else round(train_wall, 2),
        **provenance(args, raw, train_config, import_s),
        "check": check,
    }


def main() -> None:
    args = parse_args()
    stdout = own_stdout()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    record = run_epochs(args, out) if args.mode == "epochs" else run_once(args, out)
    stdout.write(json.dumps(record) + "\n")
    stdout.flush()


if __name__ == "__main__":
    main()
