"""Label ↔ id mapping for entities and relations.

Labels are sorted before numbering (as PyKEEN does), so the same dataset always gives the
same ids whatever the order of its files, and a vocabulary saved as plain text (one label
per line, line number = id) can be read by any tool.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from jobi_tf.runtime.atomic import write_text_atomic
from jobi_tf.runtime.errors import DatasetFormatError

__all__ = ["Vocab", "write_labels"]


class Vocab:
    """An immutable sorted list of labels; a label's id is its position.

    Args:
        labels: 1-D string array, sorted and without repeats.

    >>> v = Vocab.from_labels(np.array(["b", "a", "b"]))
    >>> v.encode(np.array(["a", "b"])).tolist()
    [0, 1]
    """

    def __init__(self, labels: np.ndarray) -> None:
        labels = np.asarray(labels, dtype=str)
        if labels.ndim != 1:
            raise ValueError(f"labels must be 1-D. Received: labels.shape={labels.shape}")
        if len(labels) > 1 and not np.all(labels[1:] > labels[:-1]):
            raise ValueError("labels must be sorted and unique; use Vocab.from_labels")
        self.labels = labels

    @classmethod
    def from_labels(cls, labels: np.ndarray) -> Vocab:
        """Vocabulary of the distinct labels in any array (vectorised `np.unique`)."""
        return cls(np.unique(np.asarray(labels, dtype=str).ravel()))

    @classmethod
    def from_groups(cls, distinct: np.ndarray, group_of: np.ndarray) -> tuple[Vocab, np.ndarray]:
        """Vocabulary of labels already grouped (one label per group, any order), and ids.

        Args:
            distinct: ``(U,)`` str or UTF-8 bytes labels, one per group, all different.
            group_of: int ``(N,)`` group of every element.

        Returns:
            ``(vocab, ids)``: ids int32 ``(N,)``. UTF-8 byte order is code-point order, so
            bytes and str labels number alike.
        """
        order = np.argsort(distinct)
        rank = np.empty(len(order), np.int32)
        rank[order] = np.arange(len(order), dtype=np.int32)
        labels = distinct[order]
        if labels.dtype.kind == "S":
            labels = np.char.decode(labels, "utf-8")
        return cls(labels), rank[group_of]

    def __len__(self) -> int:
        return len(self.labels)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Vocab) and np.array_equal(self.labels, other.labels)

    def encode(self, labels: np.ndarray) -> np.ndarray:
        """Ids (int32, same shape) of labels; raises `KeyError` naming the first unknown one."""
        labels = np.asarray(labels, dtype=str)
        pos = np.searchsorted(self.labels, labels)
        pos_clipped = np.minimum(pos, len(self.labels) - 1)
        found = self.labels[pos_clipped] == labels
        if not np.all(found):
            raise KeyError(str(labels[~found].ravel()[0]))
        return pos_clipped.astype(np.int32)

    def decode(self, ids: np.ndarray) -> np.ndarray:
        """Labels of ids (same shape)."""
        return self.labels[np.asarray(ids)]

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write one label per line (UTF-8), atomically."""
        write_labels(path, self.labels)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Vocab:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except FileNotFoundError:
            raise DatasetFormatError(path, "vocabulary file not found") from None
        labels = np.array(text.split("\n")[:-1], dtype=str)
        try:
            return cls(labels)
        except ValueError as exc:
            raise DatasetFormatError(path, str(exc)) from None


def write_labels(path: str | os.PathLike[str], labels) -> None:
    """Write ``labels`` one per line (UTF-8), atomically: line number = id, in the order given
    (a `Vocab`'s sorted order, or an export's own: `jobi_tf.export.cells.cell_order`)."""
    write_text_atomic(path, "".join(f"{label}\n" for label in labels))
