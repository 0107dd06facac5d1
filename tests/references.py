"""Plain NumPy/Python references that tests compare the library against (kept out of the library)."""

from __future__ import annotations

import numpy as np

from jobi_tf.data.index import KGIndex
from jobi_tf.runtime.types import HEAD, RELATION, TAIL


def pair_labels(index: KGIndex, relations, entities, corrupt_tail) -> np.ndarray:
    """float32 pair label of each corrupted triple: 1 when the substituted entity occurs in that
    slot of that relation in train (a tail of the relation for a corrupted tail, else a head)."""
    train = index.train
    tails = {(int(r), int(t)) for r, t in zip(train[:, RELATION], train[:, TAIL], strict=True)}
    heads = {(int(r), int(h)) for r, h in zip(train[:, RELATION], train[:, HEAD], strict=True)}
    rel, ent, side = np.broadcast_arrays(np.asarray(relations), np.asarray(entities), np.asarray(corrupt_tail))
    out = [
        ((r, e) in tails) if is_tail else ((r, e) in heads)
        for r, e, is_tail in zip(rel.ravel().tolist(), ent.ravel().tolist(), side.ravel().tolist(), strict=True)
    ]
    return np.array(out, np.float32).reshape(rel.shape)
