"""Read a ``train/valid/test.txt`` folder straight to ids, keeping one label per entity and relation.

Why: a NumPy string array is as wide as its longest label, so the label arrays of 19M
Freebase-style triples (relation names of 100 characters) would take about 6 GB as bytes
and four times that as ``str``. Here each field is cut out a block at a time, reduced to a
64-bit fingerprint (`jobi_tf.data.fingerprints`) and dropped:

1. Every file is validated and its fields located (`jobi_tf.data.triples.field_bounds`).
2. Entity fields (heads and tails of every split) and relation fields are fingerprinted.
3. Equal fingerprints are grouped with one sort; each group's first field is cut out as its
   label. Ids are positions in the sorted labels, the ids `build_index` gives.
4. Every field is compared with its group's label, so a fingerprint collision cannot merge
   two labels (the grouping then falls back to sorting the labels themselves).
5. Repeated triples are reported per split, as `read_triples` does.
"""

from __future__ import annotations

import dataclasses
import logging
import os

import numpy as np

from jobi_tf.data.fingerprints import fingerprint, group_by_fingerprint
from jobi_tf.data.index import KGIndex, index_from_ids
from jobi_tf.data.triples import cut_fields, field_bounds, read_file_bytes, split_paths, warn_repeated_triples
from jobi_tf.data.vocab import Vocab
from jobi_tf.runtime.types import HEAD, RELATION, SPLITS, TAIL

__all__ = ["read_folder_index"]

logger = logging.getLogger(__name__)

_BLOCK = 1 << 20  # fields cut out at a time


@dataclasses.dataclass(frozen=True)
class _Column:
    """One column (heads, relations or tails) of one file: the file's bytes and its fields' bounds."""

    buf: np.ndarray
    starts: np.ndarray
    lengths: np.ndarray

    def cut(self, rows: slice | np.ndarray, width: int) -> np.ndarray:
        return cut_fields(self.buf, self.starts[rows], self.lengths[rows], width)


def read_folder_index(folder: str | os.PathLike[str], source: str | None = None) -> tuple[Vocab, Vocab, KGIndex]:
    """``(entity_vocab, relation_vocab, index)`` of a split folder: what `build_index` gives
    for `read_split_folder`'s labels, with a few bytes of memory per field instead of the
    width of the longest label.

    Raises:
        DatasetFormatError: as `read_split_folder`.
    """
    paths = split_paths(folder)
    bounds = {split: field_bounds(read_file_bytes(path), path) for split, path in paths.items()}
    columns = {
        (split, c): _Column(buf, starts[c::3], lengths[c::3])
        for split, (buf, starts, lengths) in bounds.items()
        for c in (HEAD, RELATION, TAIL)
    }
    entities, entity_ids = _number([columns[s, c] for s in SPLITS for c in (HEAD, TAIL)])
    relations, relation_ids = _number([columns[s, RELATION] for s in SPLITS])
    ids = {}
    for i, split in enumerate(SPLITS):
        ids[split] = np.stack([entity_ids[2 * i], relation_ids[i], entity_ids[2 * i + 1]], axis=1)
        warn_repeated_triples(ids[split], paths[split])
    del bounds, columns
    return entities, relations, index_from_ids(ids, len(entities), len(relations), source or str(folder))


def _number(columns: list[_Column]) -> tuple[Vocab, list[np.ndarray]]:
    """Vocabulary of the labels of ``columns`` and each column's int32 ids."""
    width = max(int(c.lengths.max()) for c in columns)
    offsets = np.cumsum([0] + [len(c.starts) for c in columns])
    fp = np.concatenate(
        [fingerprint(c.cut(slice(lo, lo + _BLOCK), width)) for c in columns for lo in range(0, len(c.starts), _BLOCK)]
    )
    first, group_of = group_by_fingerprint(fp)
    del fp
    distinct = np.empty(len(first), f"S{width}")
    owner = np.searchsorted(offsets, first, side="right") - 1
    for k, column in enumerate(columns):
        mine = owner == k
        distinct[mine] = column.cut(first[mine] - offsets[k], width)
    for k, column in enumerate(columns):  # exact: every field equals its group's label
        for lo in range(0, len(column.starts), _BLOCK):
            hi = min(lo + _BLOCK, len(column.starts))
            if not np.array_equal(
                column.cut(slice(lo, hi), width), distinct[group_of[offsets[k] + lo : offsets[k] + hi]]
            ):
                return _number_by_sorting(columns, width, offsets)  # a fingerprint collision
    vocab, ids = Vocab.from_groups(distinct, group_of)
    return vocab, [ids[offsets[k] : offsets[k + 1]] for k in range(len(columns))]


def _number_by_sorting(columns: list[_Column], width: int, offsets: np.ndarray) -> tuple[Vocab, list[np.ndarray]]:
    labels = np.concatenate([c.cut(slice(None), width) for c in columns])
    distinct, group_of = np.unique(labels, return_inverse=True)
    vocab, ids = Vocab.from_groups(distinct, group_of.ravel())
    return vocab, [ids[offsets[k] : offsets[k + 1]] for k in range(len(columns))]
