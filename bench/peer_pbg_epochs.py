"""PyTorch-BigGraph (PBG) trained epoch by epoch, resumably, each epoch's embeddings exported
(for `bench/accuracy_per_hour.py`; runs in PBG's own virtualenv, as `bench/peer_pbg.py`,
whose config, import, worker warm-up and export code it reuses).

Steps:
1. First call: ``OUT/settings.json`` records the flags (all but ``--epochs``); later calls
   with other settings are refused (use another ``--out``). PBG's TSV importer runs once
   (``OUT/pbg_data``, marked done by ``OUT/pbg_data/.imported``; train first, then valid and
   test so that every entity gets a row; only train is trained on), as in ``peer_pbg.py``.
2. ``OUT/config.py`` is ``peer_pbg.py``'s config with ``num_epochs = --epochs`` and
   ``checkpoint_preservation_interval = 1`` (PBG then keeps every epoch's checkpoint version
   instead of deleting the previous one).
3. Train with PBG's ``train``: PBG itself resumes from its checkpoint version ``v`` (= epochs
   done; it trains epochs ``v+1 .. --epochs``), so a killed call loses at most the epoch in
   progress and rerunning continues. The torch seed is ``--seed + v`` (a resumed call does not
   replay the first call's edge order). Each epoch's training seconds are PBG's own
   ``Processed N edges in X s`` (one bucket here; logged after the Hogwild pass, before the
   checkpoint is written), appended with the epoch number to ``OUT/epoch_seconds.jsonl`` and
   fsync'd as PBG logs them; an epoch redone after a kill is logged again and its last line
   counts. Worker start-up is outside it (``--warm-workers``, as ``peer_pbg.py``). This
   process and PBG's workers die with the process that started them (``PR_SET_PDEATHSIG``),
   and a lock on ``OUT/.lock`` keeps a second driver from training in the same folder.
4. Export each epoch ``e`` (a multiple of ``--export-every``) not yet exported, from PBG's
   checkpoint version ``e``, with ``peer_pbg.export`` into ``OUT/exports/epoch-<e>/`` (written
   as ``.tmp`` and renamed; recorded in ``OUT/exported.json``), then delete the checkpoint
   versions older than the current one (kept to resume) unless ``--keep-versions``.
   ``--check N``: the first exported epoch also gets PBG's own scores of N test triples
   (``peer_pbg.check_scores``) for the caller's mapping check.
5. One JSON line on stdout: epochs done, per-epoch seconds and edges, exported epochs, PBG's
   full resolved config, versions. PBG's log goes to stderr and is appended to ``OUT/pbg.log``.

Run:  /tmp/pbgvenv/bin/python bench/peer_pbg_epochs.py --data-dir ../shared/datasets/kinship \\
          --out /tmp/pbg-epochs-kinship --dim 100 --epochs 3
"""

from __future__ import annotations

import argparse
import ctypes
import fcntl
import json
import logging
import os
import random
import re
import shutil
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
# At module level, as in peer_pbg.py: PBG's spawned Hogwild workers import this module as
# ``__mp_main__``, so torch, PBG and peer_pbg are imported before the timed epochs.
import attr  # noqa: E402
import peer_pbg  # noqa: E402
import torch  # noqa: E402
from torchbiggraph.checkpoint_storage import CHECKPOINT_STORAGES  # noqa: E402
from torchbiggraph.train import train  # noqa: E402

DATA_SUBDIR, CHECKPOINT_SUBDIR = peer_pbg.DATA_SUBDIR, peer_pbg.CHECKPOINT_SUBDIR
EXPORTS, VIEWS = "exports", "views"
STARTING = re.compile(r"Starting epoch (\d+) /")
#: Flags that must stay the same over the calls of one ``--out`` (``--epochs`` may grow).
SETTINGS = (
    "data_dir", "dim", "batch_size", "uniform_negs", "batch_negs", "lr", "workers", "loss", "operator",
    "comparator", "init_scale", "hogwild_delay", "warm_workers", "seed", "export_every",
)  # fmt: skip


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


class EpochSeconds(logging.Handler):
    """Appends ``{"epoch", "edges", "seconds"}`` to a JSON-lines file at each of PBG's
    ``Processed N edges in X s`` lines (the epoch from its ``Starting epoch E /`` line)."""

    def __init__(self, path: Path) -> None:
        super().__init__(logging.INFO)
        self.path = path
        self.epoch: int | None = None

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        m = STARTING.search(message)
        if m:
            self.epoch = int(m.group(1))
            return
        m = peer_pbg.PROCESSED.search(message)
        if m and self.epoch is not None:
            line = {"epoch": self.epoch, "edges": int(m.group(1)), "seconds": float(m.group(2)), "pid": os.getpid()}
            with open(self.path, "a") as f:
                f.write(json.dumps(line) + "\n")
                f.flush()
                os.fsync(f.fileno())


def epoch_seconds(path: Path, done: int) -> dict[int, dict]:
    """Epoch → its last logged ``{"edges", "seconds"}``, for the epochs PBG finished (≤ ``done``)."""
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


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    peer_pbg.add_flags(parser)
    parser.add_argument("--out", required=True, help="working folder (resumed when it exists)")
    parser.add_argument("--epochs", type=int, required=True, help="train until this many epochs are done")
    parser.add_argument("--export-every", type=int, default=1, help="export the epochs that are multiples of this")
    parser.add_argument("--keep-versions", action="store_true", help="keep every PBG checkpoint version")
    return parser.parse_args()


def same_settings(args, data_dir: Path, out: Path) -> None:
    """Record the flags in ``OUT/settings.json``, or refuse flags other than those recorded; on
    a fresh start, clear whatever PBG would resume from."""
    settings = {k: getattr(args, k) for k in SETTINGS}
    settings["data_dir"] = str(data_dir.resolve())
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


def export_epochs(args, train_config, out: Path, data_dir: Path, done: int) -> tuple[list[int], dict | None]:
    """Export every epoch up to ``done`` due (``--export-every``) and not yet exported; the
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
        peer_pbg.export(view_config, tmp)
        if args.check and not exported:
            check = peer_pbg.check_scores(view_config, tmp, data_dir, args.check, args.seed)
            check["epoch"] = epoch
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        exported.append(epoch)
        write_json_atomic(exported_path, exported)
        shutil.rmtree(out / VIEWS / f"v{epoch}", ignore_errors=True)
    return exported, check


def main() -> None:
    args = parse_args()
    stdout = peer_pbg.own_stdout()
    die_with_parent()
    data_dir, out = Path(args.data_dir), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    lock = open(out / ".lock", "w")  # one driver per folder: a second one waits (closed at exit)
    fcntl.flock(lock, fcntl.LOCK_EX)
    same_settings(args, data_dir, out)
    splits = peer_pbg.split_files(data_dir)
    edge_paths = [str(out / DATA_SUBDIR / f"{s}_partitioned") for s in splits]
    raw = peer_pbg.config_dict(args, out, edge_paths)
    raw["checkpoint_preservation_interval"] = 1
    peer_pbg.write_config_module(out / "config.py", raw)
    loader, config = peer_pbg.start_pbg(out, "a", EpochSeconds(out / "epoch_seconds.jsonl"))
    import_s, imported = 0.0, out / DATA_SUBDIR / ".imported"
    if not imported.exists():
        random.seed(args.seed)  # the importer shuffles entity and relation names with `random`
        import_s = peer_pbg.import_tsv(config, data_dir, splits)
        imported.touch()

    train_config = attr.evolve(config, edge_paths=[edge_paths[0]])
    ckpt = Path(train_config.checkpoint_path)
    before = CHECKPOINT_STORAGES.make_instance(str(ckpt)).load_version() if ckpt.exists() else 0
    train_wall = None
    if before < args.epochs:
        torch.manual_seed(args.seed + before)  # initial embeddings (first call) and the edge order
        subprocess_init = peer_pbg.worker_setup(config, loader, args.warm_workers, die_with_parent)
        start = time.perf_counter()
        train(train_config, subprocess_init=subprocess_init)
        train_wall = time.perf_counter() - start
    done = CHECKPOINT_STORAGES.make_instance(str(ckpt)).load_version()
    exported, check = export_epochs(args, train_config, out, data_dir, done)
    dropped = [] if args.keep_versions else drop_versions(train_config, ckpt, done)

    seconds = epoch_seconds(out / "epoch_seconds.jsonl", done)
    record = {
        "peer": "pytorch-biggraph",
        "data_dir": str(data_dir),
        "epochs_done": done,
        "epochs_before": before,
        "epoch_seconds": [seconds.get(e, {}).get("seconds") for e in range(1, done + 1)],
        "epoch_edges": [seconds.get(e, {}).get("edges") for e in range(1, done + 1)],
        "exported": sorted(exported),
        "exports": str(out / EXPORTS),
        "dropped_versions": dropped,
        "train_wall_s": None if train_wall is None else round(train_wall, 2),
        **peer_pbg.provenance(args, raw, train_config, import_s, "checkpoint_preservation_interval"),
        "check": check,
    }
    stdout.write(json.dumps(record) + "\n")
    stdout.flush()


if __name__ == "__main__":
    main()
