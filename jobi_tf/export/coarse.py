"""The copy of the entity rows that ranks an approximate query's candidates before float32 scores them.

Why a copy: reading the probed cells' rows is most of an approximate query (10^5 rows at 1.85M
entities, docs/serving.md), and only the best few hundred need float32. The copy keeps the rows'
``dims`` principal directions (the top eigenvectors of ``rows^T rows``, uncentred, since a score is
an inner product and not a distance) in bfloat16: at dim 200 ComplEx (400 numbers a row), half the
directions in bfloat16 are a quarter of float32's bytes. A query is projected on the same
directions, so the copy's score is ``<P^T q, bf16(P^T x)>``: the inner product less the part of
``x`` outside the directions, which is why its best ``k + RESCORED`` are scored again from the
float32 rows (`jobi_tf.export.approximate`). The same two steps are FAISS's PCA-then-quantize
index and its re-ranking (Jégou et al., 2011).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

__all__ = ["CoarseRows", "principal_directions"]

#: Rows read at a time while the copy is built: memory stays a block of rows, never a second table.
_BLOCK = 65_536


def principal_directions(rows: np.ndarray, dims: int) -> np.ndarray:
    """float32 ``[W, dims]``: the ``dims`` eigenvectors of ``rows^T rows`` with the largest
    eigenvalues, largest first; the Gram matrix summed in float64 a block of rows at a time."""
    width = rows.shape[1]
    gram = np.zeros((width, width), np.float64)
    for start in range(0, len(rows), _BLOCK):
        part = np.asarray(rows[start : start + _BLOCK], np.float64)
        gram += part.T @ part
    _, vectors = np.linalg.eigh(gram)  # eigenvalues in increasing order
    return np.ascontiguousarray(vectors[:, ::-1][:, :dims], np.float32)


class CoarseRows(tf.Module):
    """The projected bfloat16 rows ``[E, dims]`` and the directions ``[W, dims]`` (variables).

    Args:
        rows: float32 ``[E, W]``, the export's table in its own numbering.
        share: the share of the ``W`` directions kept (at least one).
    """

    def __init__(self, rows: np.ndarray, share: float) -> None:
        super().__init__(name="coarse_rows")
        dims = max(1, min(rows.shape[1], int(round(share * rows.shape[1]))))
        directions = principal_directions(rows, dims)
        blocks = [
            tf.cast(np.asarray(rows[start : start + _BLOCK], np.float32) @ directions, tf.bfloat16)
            for start in range(0, len(rows), _BLOCK)
        ]
        self.values = tf.Variable(tf.concat(blocks, 0), trainable=False, name="values")
        self.directions = tf.Variable(directions, trainable=False, name="directions")

    def query(self, query: tf.Tensor) -> tf.Tensor:
        """``[dims]``: a ``[W]`` query on the copy's directions, to score its rows with."""
        return tf.linalg.matvec(self.directions.value(), query, transpose_a=True)
