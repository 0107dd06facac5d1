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

from jobi_tf.data.fingerprints import unique_first
from jobi_tf.runtime.atomic import replacing
from jobi_tf.runtime.errors import DatasetFormatError
from jobi_tf.runtime.types import SPLITS

__all__ = [
    "read_triples",
    "read_split_folder",
    "parse_triples_text",
    "field_bounds",
    "cut_fields",
    "read_file_bytes",
    "split_paths",
    "write_triples",
]

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
    return parse_triples_text(read_file_bytes(path), path)


def read_file_bytes(path: str | os.PathLike[str]) -> bytes:
    """The bytes of a split file, or a `DatasetFormatError` saying why not."""
    path = Path(path)
    if path.is_dir():
        raise DatasetFormatError(path, "is a directory, expected a triples file")
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise DatasetFormatError(path, "file not found") from None
    except OSError as exc:
        raise DatasetFormatError(path, f"cannot read: {exc.strerror}") from None


def parse_triples_text(data: bytes, path: str | os.PathLike[str]) -> np.ndarray:
    """Validate and split the bytes of a triples file into str ``(N, 3)`` (see `read_triples`)."""
    buf, starts, lengths = field_bounds(data, path)
    fields = cut_fields(buf, starts, lengths).reshape(-1, 3)
    warn_repeated_triples(fields, path)
    return _decode(fields)


def field_bounds(data: bytes, path: str | os.PathLike[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Validate a triples file and locate its fields, without cutting them out.

    Vectorised: in a well-formed file the tabs and newlines alternate tab, tab, newline, so
    one array of separator positions gives every field (no Python object per line). A
    malformed file takes a slower path that finds its first bad line.

    Returns:
        ``(buf, starts, lengths)``: the file as uint8 ``(B,)``, and the byte offset and
        length of every field, ``(3 N,)`` in file order (head, relation, tail, head, ...),
        int32 below 2 GiB.
    """
    _check_encoding(data, path)
    buf = np.frombuffer(data, dtype=np.uint8)
    seps = _separators(buf)
    kinds = buf[np.minimum(seps, len(buf) - 1)]
    kinds[seps == len(buf)] = ord("\n")  # a missing final newline
    if len(seps) % 3 or not (kinds.reshape(-1, 3) == np.array([9, 9, 10], np.uint8)).all():
        _raise_first_bad_line(buf, path)
    del kinds
    starts = np.empty_like(seps)
    starts[0] = 0
    np.add(seps[:-1], 1, out=starts[1:])
    lengths = np.subtract(seps, starts, out=seps)
    empty = np.flatnonzero(lengths == 0)
    if len(empty):
        raise DatasetFormatError(path, "empty field", line=int(empty[0]) // 3 + 1)
    return buf, starts, lengths


def _separators(buf: np.ndarray, block: int = 1 << 26) -> np.ndarray:
    """Sorted positions of every tab and newline, plus ``len(buf)`` when the last line has no newline.

    int32 when the file is under 2 GiB (half the memory); found in blocks, so the boolean
    temporaries stay at ``block`` bytes.
    """
    dtype = np.int32 if len(buf) < 2**31 - 1 else np.int64
    parts = []
    for lo in range(0, len(buf), block):
        part = buf[lo : lo + block]
        parts.append((np.flatnonzero((part == 9) | (part == 10)) + lo).astype(dtype))
    if buf[-1] != ord("\n"):
        parts.append(np.array([len(buf)], dtype))
    return np.concatenate(parts)


def _raise_first_bad_line(buf: np.ndarray, path: str | os.PathLike[str]) -> None:
    """Raise for the first line without exactly three non-empty fields."""
    ends = np.flatnonzero(buf == ord("\n"))
    if buf[-1] != ord("\n"):
        ends = np.append(ends, len(buf))
    starts = np.concatenate([[0], ends[:-1] + 1])
    tabs = np.flatnonzero(buf == ord("\t"))
    per_line = np.bincount(np.searchsorted(ends, tabs), minlength=len(ends))
    first_tab = np.minimum(np.cumsum(per_line) - per_line, max(len(tabs) - 2, 0))
    if len(tabs) >= 2:
        tab1, tab2 = tabs[first_tab], tabs[first_tab + 1]
    else:
        tab1 = tab2 = np.zeros(len(ends), np.int64)
    three = per_line == 2
    empty = three & ((tab1 == starts) | (tab2 == tab1 + 1) | (ends == tab2 + 1))
    line = int(np.flatnonzero(~three | empty)[0])
    if not three[line]:
        raise DatasetFormatError(path, f"expected 3 tab-separated fields, got {per_line[line] + 1}", line=line + 1)
    raise DatasetFormatError(path, "empty field", line=line + 1)


def _check_encoding(data: bytes, path: str | os.PathLike[str]) -> None:
    if not data.strip():
        raise DatasetFormatError(path, "file is empty, expected at least one triple")
    if data.startswith(_BOM):
        raise DatasetFormatError(path, "starts with a UTF-8 byte-order mark; save the file without BOM", line=1)
    if b"\x00" in data:
        raise DatasetFormatError(path, "contains a NUL byte", line=data.count(b"\n", 0, data.index(b"\x00")) + 1)
    if b"\r" in data:
        line = data.count(b"\n", 0, data.index(b"\r")) + 1
        raise DatasetFormatError(path, "CR (Windows CRLF) line ending; convert the file to LF line endings", line=line)
    if data.isascii():
        return
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise DatasetFormatError(path, "invalid UTF-8", line=line) from None


def cut_fields(
    buf: np.ndarray, start: np.ndarray, length: np.ndarray, width: int | None = None, block: int = 1 << 20
) -> np.ndarray:
    """Fields ``buf[start:start + length]`` as a NUL-padded fixed-width bytes array (``S`` dtype).

    ``width`` defaults to the longest field; cutting happens in blocks of fields.
    """
    width = max(int(length.max()) if width is None else width, 1)
    out = np.zeros((len(start), width), dtype=np.uint8)
    if len(start) == 0:
        return out.view(f"S{width}").ravel()
    windows = np.lib.stride_tricks.sliding_window_view
    tail_start = max(len(buf) - width, 0)  # fields closer than `width` to the end read a padded copy
    tail = np.concatenate([buf[tail_start:], np.zeros(width, np.uint8)])
    beyond = np.arange(width)[None, :]
    for lo in range(0, len(start), block):
        s, n = start[lo : lo + block], length[lo : lo + block]
        near_end = s + width > len(buf)
        rows = np.empty((len(s), width), np.uint8)
        inside = s[~near_end]
        if len(inside):
            first = int(inside.min())
            rows[~near_end] = windows(buf[first : int(inside.max()) + width], width)[inside - first]
        rows[near_end] = windows(tail, width)[s[near_end] - tail_start]
        rows[beyond >= n[:, None]] = 0
        out[lo : lo + block] = rows
    return out.view(f"S{width}").ravel()


def _decode(fields: np.ndarray) -> np.ndarray:
    """UTF-8 bytes array → str array of the same shape (a plain cast when it is all ASCII)."""
    if fields.size == 0 or np.frombuffer(fields.tobytes(), np.uint8).max() < 0x80:
        return fields.astype(str)
    return np.char.decode(fields, "utf-8")


def warn_repeated_triples(rows: np.ndarray, path: str | os.PathLike[str]) -> None:
    """Log (do not fail) when a split repeats triples, naming the first repeated line: they
    skew training and ranks. ``rows``: ``(N, 3)`` label fields or ids, in file order."""
    rows = np.ascontiguousarray(rows)
    as_bytes = rows.view(f"S{3 * rows.dtype.itemsize}").ravel()  # one fixed-width value per line
    first_seen, _ = unique_first(as_bytes)
    n_dup = len(as_bytes) - len(first_seen)
    if n_dup == 0:
        return
    repeated = np.ones(len(as_bytes), bool)
    repeated[first_seen] = False
    first = int(np.argmax(repeated)) + 1
    logger.warning("%s:%d: %d duplicate triple(s) in this split (first here); they are kept", path, first, n_dup)


def read_split_folder(folder: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """Read ``train.txt``, ``valid.txt`` and ``test.txt`` from a folder.

    Returns:
        ``{"train": (N, 3), "valid": (M, 3), "test": (K, 3)}`` string arrays.
    """
    return {split: read_triples(path) for split, path in split_paths(folder).items()}


def split_paths(folder: str | os.PathLike[str]) -> dict[str, Path]:
    folder = Path(folder)
    if not folder.is_dir():
        raise DatasetFormatError(folder, "data folder not found (expected train.txt, valid.txt, test.txt)")
    return {split: folder / f"{split}.txt" for split in SPLITS}


def write_triples(
    path: str | os.PathLike[str],
    triples: np.ndarray,
    entity_labels: np.ndarray,
    relation_labels: np.ndarray,
    chunk: int = 1_000_000,
) -> None:
    """Write id triples as ``head<TAB>relation<TAB>tail`` lines, a chunk at a time, atomically.

    Args:
        path: the file to write (``<path>.tmp`` first, then renamed).
        triples: int ``(N, 3)`` (head, relation, tail) ids.
        entity_labels, relation_labels: str ``(E,)`` and ``(R,)``, label of each id.
        chunk: lines formatted at once (bounds memory).
    """
    ents = np.char.encode(np.asarray(entity_labels, dtype=str), "utf-8")
    rels = np.char.encode(np.asarray(relation_labels, dtype=str), "utf-8")
    with replacing(path) as tmp, open(tmp, "wb") as f:
        for start in range(0, len(triples), chunk):
            part = triples[start : start + chunk]
            line = np.strings.add(ents[part[:, 0]], b"\t")
            line = np.strings.add(np.strings.add(line, rels[part[:, 1]]), b"\t")
            line = np.strings.add(np.strings.add(line, ents[part[:, 2]]), b"\n")
            f.write(b"".join(line.tolist()))
