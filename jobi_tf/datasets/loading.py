"""Resolve a `DataConfig` to splits: synthetic, a folder, or a named benchmark.

It sits above both `jobi_tf.data` (parsing, vocabularies, indexes) and `jobi_tf.datasets`
(the TFDS builders, which use `jobi_tf.data`), so `jobi_tf.data` never imports `jobi_tf.datasets`.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np

from jobi_tf.config import DataConfig
from jobi_tf.data.folder import read_folder_index
from jobi_tf.data.index import KGIndex, build_index
from jobi_tf.data.synthetic import SyntheticSpec, make_typed_kg
from jobi_tf.data.triples import read_split_folder
from jobi_tf.data.vocab import Vocab

__all__ = ["load_index", "load_splits", "LOCAL_COPIES_ENV"]

logger = logging.getLogger(__name__)

#: A folder holding local copies of benchmarks as ``<name>/{train,valid,test}.txt``.
LOCAL_COPIES_ENV = "JOBI_TF_DATA_DIR"


def load_splits(cfg: DataConfig, seed: int = 0, *, as_bytes: bool = False) -> tuple[dict[str, np.ndarray], str]:
    """``({"train", "valid", "test"}: (N, 3) str arrays, source name)`` for a data config.

    ``as_bytes`` gives a named benchmark's labels as UTF-8 bytes (a quarter of the memory;
    see `jobi_tf.datasets.load_named`); other sources give ``str`` either way.

    * ``dataset="synthetic"``: the typed generator, sized by ``cfg.synthetic_*`` and ``seed``.
    * ``data_dir`` without ``dataset``: the folder's ``train.txt``, ``valid.txt``, ``test.txt``.
    * a benchmark name: its TensorFlow-Datasets builder, which downloads the public files,
      or works offline from ``data_dir`` (or ``$JOBI_TF_DATA_DIR/<name>``) when given.
    """
    if cfg.dataset == "synthetic":
        spec = SyntheticSpec(
            num_entities=cfg.synthetic_entities,
            num_relations=cfg.synthetic_relations,
            num_triples=cfg.synthetic_triples,
            num_types=cfg.synthetic_types,
            seed=seed,
        )
        return make_typed_kg(spec), "synthetic"
    if cfg.dataset is None:
        return read_split_folder(cfg.data_dir), str(cfg.data_dir)
    from jobi_tf import datasets  # imports TensorFlow Datasets only when a name is used

    manual = cfg.data_dir
    local_root = os.environ.get(LOCAL_COPIES_ENV)
    if manual is None and local_root and (Path(local_root) / cfg.dataset / "train.txt").is_file():
        manual = str(Path(local_root) / cfg.dataset)
        logger.info("using the local copy of %s in %s", cfg.dataset, manual)
    return datasets.load_named(cfg.dataset, manual_dir=manual, as_bytes=as_bytes), cfg.dataset


def load_index(cfg: DataConfig, seed: int = 0) -> tuple[Vocab, Vocab, KGIndex]:
    """``(entity_vocab, relation_vocab, index)`` for a data config.

    A folder (``data_dir`` without ``dataset``) is read straight to ids
    (`jobi_tf.data.folder`), which FB1.9M-size graphs need; other sources go through
    `load_splits` and `build_index`. Both give the same vocabularies and ids.
    """
    if cfg.dataset is None:
        return read_folder_index(cfg.data_dir, str(cfg.data_dir))
    splits, source = load_splits(cfg, seed=seed, as_bytes=True)
    return build_index(splits, source)
