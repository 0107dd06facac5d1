"""Named knowledge-graph benchmarks, prepared and cached through TensorFlow Datasets.

`load_named("fb15k-237")` gives the same ``{"train", "valid", "test"}`` arrays as
`jobi_tf.data.read_split_folder` on the published files, but TFDS keeps a prepared copy so
later runs need neither the download nor the parsing. `tensorflow_datasets` is imported
only inside `load_named`, so importing this package costs nothing.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from jobi_tf.runtime.errors import DatasetFormatError, JobiError
from jobi_tf.runtime.types import BENCHMARK_NAMES, DATASET_NAMES, benchmark_key

if TYPE_CHECKING:
    from jobi_tf.datasets.builders import KGTriplesBuilder

__all__ = ["NAMES", "TFDS_DIR_ENV", "load_named"]

logger = logging.getLogger(__name__)

#: The benchmarks `load_named` knows (same order as `jobi_tf.datasets.builders.BUILDERS`).
NAMES: tuple[str, ...] = BENCHMARK_NAMES

#: Environment variable naming the TFDS prepared-data folder when ``data_dir`` is not given.
TFDS_DIR_ENV = "JOBI_TF_TFDS_DIR"

_SPLIT_FILES = ("train.txt", "valid.txt", "test.txt")


def load_named(
    name: str,
    *,
    data_dir: str | os.PathLike[str] | None = None,
    manual_dir: str | os.PathLike[str] | None = None,
    verify_checksums: bool = True,
    as_bytes: bool = False,
) -> dict[str, np.ndarray]:
    """Prepare (once) and read a named benchmark.

    Args:
        name: one of `NAMES` (case and ``_``/``-`` are not significant).
        data_dir: TFDS prepared-data folder; default ``$JOBI_TF_TFDS_DIR`` if set, else the
            TFDS default (``$TFDS_DATA_DIR`` or ``~/tensorflow_datasets``).
        manual_dir: folder with ``train.txt``, ``valid.txt``, ``test.txt`` to build from
            instead of downloading (no network is used then). Default: the per-dataset
            folder ``<data_dir>/downloads/manual/<tfds name>``, used if it holds the files.
        verify_checksums: check each file's sha256 against the published one, where known.
        as_bytes: give UTF-8 ``bytes`` arrays instead of ``str``: a quarter of the memory
            (NumPy stores ``str`` as 4 bytes per character, as wide as the longest label:
            FB15k-237's train split is 455 MB as ``str``, 119 MB as bytes), and what
            `jobi_tf.data.index.build_index` turns into ids without converting.

    Returns:
        ``{"train": (N, 3), "valid": (M, 3), "test": (K, 3)}`` str (or bytes) arrays in file order.

    Raises:
        JobiError: unknown name, or the archive cannot be downloaded.
        DatasetFormatError: a split file is missing, malformed or has the wrong sha256.

    Once prepared, the TFDS copy in ``data_dir`` is reused as is: ``manual_dir`` and
    ``verify_checksums`` only matter the first time (delete the folder to rebuild).
    """
    key = _canonical_name(name)
    from jobi_tf.datasets.builders import TFDS_TO_FILE_SPLIT

    builder = _prepared_builder(key, data_dir, manual_dir, verify_checksums)
    logger.info("%s: reading prepared TFDS data from %s", key, builder.data_dir)
    return {stem: _read_split(builder, split, as_bytes) for split, stem in TFDS_TO_FILE_SPLIT.items()}


def _prepared_builder(
    key: str,
    data_dir: str | os.PathLike[str] | None,
    manual_dir: str | os.PathLike[str] | None,
    verify_checksums: bool,
) -> KGTriplesBuilder:
    """The TFDS builder of benchmark ``key`` (a `NAMES` entry), its data prepared in
    ``data_dir`` (once; see `load_named` for the arguments)."""
    import tensorflow_datasets as tfds

    from jobi_tf.datasets.builders import BUILDERS

    if data_dir is None:
        data_dir = os.environ.get(TFDS_DIR_ENV) or None
    builder = BUILDERS[key](data_dir=data_dir, verify_checksums=verify_checksums)
    if manual_dir is None:
        # Per-dataset default, unlike TFDS's shared <data_dir>/downloads/manual, so that the
        # train.txt of one benchmark is never picked up by another.
        manual = Path(builder.data_dir_root) / "downloads" / "manual" / builder.name
    else:
        manual = Path(manual_dir).expanduser()
        _check_manual_folder(manual, key)
    config = tfds.download.DownloadConfig(manual_dir=os.fspath(manual), try_download_gcs=False)
    builder.download_and_prepare(download_config=config)
    return builder


#: Examples read from the prepared copy at a time. Reading a split as one batch makes
#: TensorFlow hold all its strings at once, in its pooled allocator, which keeps that memory
#: for the rest of the process (0.6 GB for FB15k-237; measured in docs/performance.md).
_READ_BATCH = 65_536


def _read_split(builder, split: str, as_bytes: bool) -> np.ndarray:
    """One split of a prepared builder as ``(N, 3)``, ``_READ_BATCH`` examples at a time."""
    import tensorflow_datasets as tfds

    dataset = builder.as_dataset(split=split, batch_size=_READ_BATCH, shuffle_files=False)
    parts = [_to_triples(batch, as_bytes) for batch in tfds.as_numpy(dataset)]
    if not parts:
        return np.empty((0, 3), dtype=bytes if as_bytes else str)
    return np.concatenate(parts)  # widens to the longest label of any batch


def _canonical_name(name: str) -> str:
    """Map ``"FB15k_237"`` and the like to a `NAMES` entry, or fail with the known names."""
    if benchmark_key(name) not in NAMES:
        raise JobiError(f"unknown dataset {name!r}; known datasets: {', '.join(DATASET_NAMES)}")
    return benchmark_key(name)


def _check_manual_folder(folder: Path, name: str) -> None:
    """An explicit manual folder must hold all three splits: it means "do not download"."""
    if not folder.is_dir():
        raise DatasetFormatError(folder, f"manual folder for {name} not found (expected {', '.join(_SPLIT_FILES)})")
    missing = [file for file in _SPLIT_FILES if not (folder / file).is_file()]
    if missing:
        raise DatasetFormatError(folder, f"manual folder for {name} lacks {', '.join(missing)}")


def _to_triples(batch: dict[str, np.ndarray], as_bytes: bool = False) -> np.ndarray:
    """Turn TFDS's UTF-8 byte columns into one ``(N, 3)`` str (or bytes) array."""
    parts = [batch[part].tolist() for part in ("head", "relation", "tail")]
    if as_bytes:
        return np.stack([np.asarray(values, dtype=bytes) for values in parts], axis=1)
    return np.stack([np.array([value.decode("utf-8") for value in values], dtype=str) for values in parts], axis=1)
