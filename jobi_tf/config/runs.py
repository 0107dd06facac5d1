"""The run folder: its file names, creating or checking it, and reading a run back.

Training, grid, evaluation, export and the Python API all go through `RunFolder`, so the
layout is written down once::

    RUN/config.json          the RunConfig (compared on resume)
    RUN/entities.txt         entity vocabulary, one label per line (line number = id)
    RUN/relations.txt        relation vocabulary
    RUN/checkpoint.npz       weights + optimizer + loop state at the last validation
    RUN/checkpoint.previous.npz  the checkpoint before it (a damaged last one is not the end of the run)
    RUN/best.weights.npz     weights with the best validation metric so far
    RUN/*.npz.sha256         the SHA-256 of each .npz beside it (``sha256sum -c`` reads it)
    RUN/data.sha256          the SHA-256 of each file of a --data-dir run's data (its identity)
    RUN/metrics.json         final validation and test metrics
    RUN/tensorboard/         TensorBoard logs
    RUN/rung-<epochs>.json   metrics at each rung of a successive-halving search (jobi_tf.planning.grid)
    RUN/data/                the splits, when the run was trained on in-memory triples
    RUN/calibration.json     per-relation Platt scaling (jobi-tf calibrate), used by the export

A run folder is enough to rebuild the trained model (`jobi_tf.api.run.restore_model`): the
vocabularies give the table sizes and the weights are inside, so a run whose data folder
has moved can still score, predict and export. It lives with the config because it is where
a `RunConfig` is kept and compared on resume; loading its weights sits above the model.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

from jobi_tf.config import DataConfig, RunConfig
from jobi_tf.data.vocab import Vocab
from jobi_tf.runtime.atomic import write_json_atomic
from jobi_tf.runtime.digests import read_sha256sums, sha256_file, write_sha256sums
from jobi_tf.runtime.errors import CheckpointMismatchError, JobiError
from jobi_tf.runtime.types import SPLITS

__all__ = ["RunFolder"]


@dataclasses.dataclass(frozen=True)
class RunFolder:
    """Paths and reads of one run folder (nothing is created until `prepare`)."""

    path: Path

    def __init__(self, path: str | os.PathLike[str]) -> None:
        object.__setattr__(self, "path", Path(path))

    config = property(lambda self: self.path / "config.json")
    entities = property(lambda self: self.path / "entities.txt")
    relations = property(lambda self: self.path / "relations.txt")
    checkpoint = property(lambda self: self.path / "checkpoint.npz")
    previous_checkpoint = property(lambda self: self.path / "checkpoint.previous.npz")
    best_weights = property(lambda self: self.path / "best.weights.npz")
    slot_counts = property(lambda self: self.path / "slot_counts.npz")  # a sampled run's --slot-prior counts
    neighbourhood = property(lambda self: self.path / "neighbourhood.json")  # its chosen --neighbourhood weight
    metrics = property(lambda self: self.path / "metrics.json")
    tensorboard = property(lambda self: self.path / "tensorboard")
    data = property(lambda self: self.path / "data")
    calibration = property(lambda self: self.path / "calibration.json")
    data_digests = property(lambda self: self.path / "data.sha256")  # a --data-dir run's files: its data's identity

    def rung(self, epochs: int) -> Path:
        """``metrics.json`` as it was when a successive-halving search stopped the run at ``epochs``."""
        return self.path / f"rung-{epochs}.json"

    @property
    def finished(self) -> bool:
        return self.metrics.exists()

    def prepare(self, cfg: RunConfig, entities: Vocab, relations: Vocab) -> None:
        """Create the folder, or check that an existing one holds the same run; write ``cfg``
        (what is about to be trained) as its ``config.json``."""
        self.check_same_run(cfg, entities, relations)
        self.path.mkdir(parents=True, exist_ok=True)
        if cfg.data.data_dir is not None and not self.data_digests.exists():
            files = [Path(cfg.data.data_dir) / f"{split}.txt" for split in SPLITS]
            write_sha256sums(self.data_digests, {f.name: sha256_file(f) for f in files if f.is_file()})
        write_json_atomic(self.config, cfg.to_dict())
        entities.save(self.entities)
        relations.save(self.relations)

    def check_same_run(self, cfg: RunConfig, entities: Vocab, relations: Vocab) -> None:
        """`CheckpointMismatchError` unless the folder is new or holds the run ``cfg`` describes."""
        if not self.config.exists():
            return
        saved = self.read_config()
        was, now = saved.training_identity(), cfg.training_identity()
        if saved.data.data_dir is not None and cfg.data.data_dir is not None:
            for identity in (was, now):  # a folder is its files (`check_data`), not how its path is spelled
                identity["data"].pop("data_dir")
        if was != now:
            diff = _first_difference(was, now)
            raise CheckpointMismatchError(
                f"{self.path}: holds a different run ({diff}); use another --out or the same flags"
            )
        self.check_data(saved.data, cfg.data)
        self.check_vocabs(entities, relations)

    def check_data(self, saved: DataConfig, data: DataConfig) -> None:
        """The data folder must hold the files the run started with, however its path is spelled.

        Why by content: ``data/good``, ``./data/good/`` and its absolute path are one folder, and
        a copy elsewhere is the same data; a file changed since is refused, naming it. A run
        from before ``data.sha256`` is compared by resolved path.
        """
        if saved.data_dir is None or data.data_dir is None:
            return
        recorded = read_sha256sums(self.data_digests)
        if not recorded:
            if Path(saved.data_dir).resolve() != Path(data.data_dir).resolve():
                raise CheckpointMismatchError(
                    f"{self.path}: holds a different run (data.data_dir was {saved.data_dir!r}, now "
                    f"{data.data_dir!r}); use another --out or the same flags"
                )
            return
        for name, digest in recorded.items():
            path = Path(data.data_dir) / name
            if not path.is_file() or sha256_file(path) != digest:
                raise CheckpointMismatchError(
                    f"{path}: changed since the run in {self.path} started (not the file {self.data_digests.name} "
                    "records); restore it, or train into another --out"
                )

    def read_config(self) -> RunConfig:
        if not self.config.exists():
            raise JobiError(f"{self.path}: not a run folder (no config.json)")
        try:
            return RunConfig.from_dict(json.loads(self.config.read_text(encoding="utf-8")))
        except (ValueError, KeyError, TypeError) as exc:
            raise CheckpointMismatchError(f"{self.config}: unreadable run config ({exc})") from None

    def read_vocabs(self) -> tuple[Vocab, Vocab]:
        return Vocab.load(self.entities), Vocab.load(self.relations)

    def read_metrics(self) -> dict | None:
        """``metrics.json`` of a finished run, else None."""
        return json.loads(self.metrics.read_text(encoding="utf-8")) if self.finished else None

    def check_vocabs(self, entities: Vocab, relations: Vocab) -> None:
        """The data's vocabularies must be the run's (ids index the tables)."""
        if Vocab.load(self.entities) != entities or Vocab.load(self.relations) != relations:
            raise CheckpointMismatchError(f"{self.path}: the dataset's vocabulary differs from the saved run's")


def _first_difference(a: dict, b: dict, prefix: str = "") -> str:
    for key in sorted(set(a) | set(b)):
        if isinstance(a.get(key), dict) and isinstance(b.get(key), dict):
            found = _first_difference(a[key], b[key], f"{prefix}{key}.")
            if found:
                return found
        elif a.get(key) != b.get(key):
            return f"{prefix}{key} was {a.get(key)!r}, now {b.get(key)!r}"
    return ""
