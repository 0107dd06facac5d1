"""`Dataset` and `load_dataset`: a graph for the Python API, by name, folder or triples."""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from jobi_tf.config import DataConfig
from jobi_tf.data.index import KGIndex, build_index
from jobi_tf.data.vocab import Vocab
from jobi_tf.runtime.errors import ConfigError, DatasetFormatError, JobiError
from jobi_tf.runtime.types import SPLITS

__all__ = ["Dataset", "load_dataset", "python_errors", "SYNTHETIC"]

#: Names `load_dataset` resolves itself; anything else must be a folder.
SYNTHETIC = "synthetic"


@contextlib.contextmanager
def python_errors() -> Iterator[None]:
    """Config errors raised inside name the field a Python caller passed, not its CLI flag."""
    try:
        yield
    except ConfigError as exc:
        raise exc.for_python() from None


@dataclasses.dataclass(frozen=True)
class Dataset:
    """A knowledge graph with its vocabularies and id-encoded splits, ready to train on.

    Attributes:
        entities, relations: the vocabularies (id = position).
        index: the id-encoded splits and lookup tables (`jobi_tf.data.index.KGIndex`).
        data: how to load it again (recorded in a run's ``config.json``); None for triples
            given in memory, which `train` writes into the run folder instead.
        splits: the label triples given in memory, else None.
    """

    entities: Vocab
    relations: Vocab
    index: KGIndex
    data: DataConfig | None
    splits: Mapping[str, np.ndarray] | None = None

    @property
    def num_entities(self) -> int:
        return self.index.num_entities

    @property
    def num_relations(self) -> int:
        return self.index.num_relations

    def triples(self, split: str) -> np.ndarray:
        """The labels of a split as a str ``(N, 3)`` array."""
        ids = self.index.split(split)
        return np.stack(
            [self.entities.labels[ids[:, 0]], self.relations.labels[ids[:, 1]], self.entities.labels[ids[:, 2]]], axis=1
        )

    def __repr__(self) -> str:
        sizes = ", ".join(f"{s}={len(self.index.split(s))}" for s in SPLITS)
        return f"Dataset({self.num_entities} entities, {self.num_relations} relations, {sizes})"


def load_dataset(
    source: str | os.PathLike[str] | Mapping[str, Any] | DataConfig = SYNTHETIC,
    *,
    data_dir: str | os.PathLike[str] | None = None,
    seed: int = 0,
) -> Dataset:
    """Load a graph.

    Args:
        source: a benchmark name (``"fb15k-237"``, ``"wn18rr"``, ...: downloaded once through
            TensorFlow Datasets, or read offline from ``data_dir`` or ``$JOBI_TF_DATA_DIR``),
            ``"synthetic"`` (the built-in typed graph), a folder with ``train.txt``,
            ``valid.txt``, ``test.txt``, a `DataConfig`, or in-memory triples
            ``{"train": [(head, relation, tail), ...], "valid": ..., "test": ...}``.
        data_dir: with a benchmark name, its local copy.
        seed: the synthetic graph's seed.
    """
    from jobi_tf.datasets import NAMES
    from jobi_tf.datasets.loading import load_index

    if isinstance(source, Mapping):
        return _from_triples(source)
    with python_errors():
        if isinstance(source, DataConfig):
            cfg = source
        elif str(source).strip().lower().replace("_", "-") in (*NAMES, SYNTHETIC):
            name = str(source).strip().lower().replace("_", "-")
            cfg = DataConfig(dataset=name, data_dir=None if data_dir is None else str(data_dir))
        elif Path(source).is_dir():
            cfg = DataConfig(dataset=None, data_dir=str(source))
        else:
            raise JobiError(
                f"{source}: neither a known dataset ({', '.join((*NAMES, SYNTHETIC))}) nor a folder "
                "with train.txt, valid.txt, test.txt"
            )
        entities, relations, index = load_index(cfg, seed=seed)
    return Dataset(entities, relations, index, cfg)


def _from_triples(splits: Mapping[str, Any]) -> Dataset:
    missing = [s for s in SPLITS if s not in splits]
    if missing:
        raise DatasetFormatError("triples", f"lacks the split(s) {', '.join(missing)}; give train, valid and test")
    arrays = {}
    for split in SPLITS:
        rows = np.asarray(splits[split], dtype=str)
        if rows.size == 0:
            rows = rows.reshape(0, 3)
        if rows.ndim != 2 or rows.shape[1] != 3:
            raise DatasetFormatError(
                f"triples[{split!r}]", f"must be (head, relation, tail) rows; got shape {rows.shape}"
            )
        odd = rows == ""
        for char in "\t\n\r":  # a label the run folder's text files could not hold
            odd |= np.char.find(rows, char) >= 0
        bad = np.flatnonzero(odd.any(axis=1))
        if len(bad):
            raise DatasetFormatError(
                f"triples[{split!r}]", f"row {bad[0]}: a label is empty or holds a tab or line break: {rows[bad[0]]}"
            )
        arrays[split] = rows
    if len(arrays["train"]) == 0:
        raise DatasetFormatError("triples['train']", "is empty")
    entities, relations, index = build_index(arrays, "triples")
    return Dataset(entities, relations, index, None, arrays)
