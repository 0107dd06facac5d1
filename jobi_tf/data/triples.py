"""Read and validate tab-separated triple files.

The format is the one every KG benchmark ships: one ``head<TAB>relation<TAB>tail`` per
line, UTF-8, LF line endings. Anything else gets a one-line `DatasetFormatError` naming the
file and line, because a silently mis-read benchmark gives numbers nobody can compare.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np

from jobi_tf.errors import DatasetFormatError
from jobi_tf.types import SPLITS

__all__ = ["read_triples", "read_split_folder", "parse_triples_text"]

logger = logging.getLogger(__name__)

_BOM = b"\xef\xbb\xbf"


def read_triples(path: str | os.PathLike[str]) -> np.ndarray:
    """Read one split file.

    Args:
        path: a ``train.txt``-style file.

    Returns:
        A string array of shape ``(N, 3)``: head, relation, tail labels, in file order.

    Raises:
        DatasetFormatError: missing file, a directory, an empty file, a BOM, CRLF line
            endings, invalid UTF-8, or a line without exactly three non-empty fields.
    """
    path = Path(path)
    if path.is_dir():
        raise DatasetFormatError(path, "is a directory, expected a triples file")
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise DatasetFormatError(path, "file not found") from None
    except OSError as exc:
        raise DatasetFormatError(path, f"cannot read: {exc.strerror}") from None
    return parse_triples_text(data, path)


def parse_triples_text(data: bytes, path: str | os.PathLike[str]) -> np.ndarray:
    """Validate and split the bytes of a triples file (see `read_triples`)."""
    if not data.strip():
        raise DatasetFormatError(path, "file is empty, expected at least one triple")
    if data.startswith(_BOM):
        raise DatasetFormatError(path, "starts with a UTF-8 byte-order mark; save the file without BOM", line=1)
    if b"\x00" in data:
        raise DatasetFormatError(path, "contains a NUL byte", line=data.count(b"\n", 0, data.index(b"\x00")) + 1)
    if b"\r" in data:
        line = data.count(b"\n", 0, data.index(b"\r")) + 1
        raise DatasetFormatError(path, "CR (Windows CRLF) line ending; convert the file to LF line endings", line=line)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise DatasetFormatError(path, "invalid UTF-8", line=line) from None
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    rows = [line.split("\t") for line in lines]
    for number, fields in enumerate(rows, start=1):
        if len(fields) != 3:
            raise DatasetFormatError(path, f"expected 3 tab-separated fields, got {len(fields)}", line=number)
        if not (fields[0] and fields[1] and fields[2]):
            raise DatasetFormatError(path, "empty field", line=number)
    _warn_duplicates(lines, path)
    return np.array(rows, dtype=str)


def _warn_duplicates(lines: list[str], path: str | os.PathLike[str]) -> None:
    """Log (do not fail) when a split repeats triples: they skew training and ranks."""
    if len(set(lines)) == len(lines):
        return
    seen: set[str] = set()
    first = None
    for number, line in enumerate(lines, start=1):
        if line in seen and first is None:
            first = number
        seen.add(line)
    n_dup = len(lines) - len(seen)
    logger.warning("%s:%d: %d duplicate triple(s) in this split (first here); they are kept", path, first, n_dup)


def read_split_folder(folder: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """Read ``train.txt``, ``valid.txt`` and ``test.txt`` from a folder.

    Returns:
        ``{"train": (N, 3), "valid": (M, 3), "test": (K, 3)}`` string arrays.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise DatasetFormatError(folder, "data folder not found (expected train.txt, valid.txt, test.txt)")
    return {split: read_triples(folder / f"{split}.txt") for split in SPLITS}
