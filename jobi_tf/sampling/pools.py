"""The pools biased negatives are drawn from: each slot's entities (`NegativeSampler`'s). The
other negatives' draws are `jobi_tf.sampling.distributions`'."""

from __future__ import annotations

import numpy as np

from jobi_tf.data.index import CSR, KGIndex
from jobi_tf.runtime.types import HEAD, RELATION, TAIL

__all__ = ["slot_pools"]


def slot_pools(index: KGIndex, draw: str = "distinct") -> tuple[CSR, CSR]:
    """The pools biased negatives are drawn from, tails then heads, keyed by relation:
    each slot's distinct entities (``distinct``, the paper's), or every training triple's
    entity in that slot, repeats kept (``frequency``: a uniform pick is then in proportion
    to how often the entity fills the slot)."""
    if draw == "distinct":
        return index.train_tails, index.train_heads
    train = index.train
    pools = []
    for side in (TAIL, HEAD):
        order = np.lexsort((train[:, side], train[:, RELATION]))
        counts = np.bincount(train[:, RELATION], minlength=index.num_relations)
        offsets = np.zeros(index.num_relations + 1, np.int64)
        np.cumsum(counts, out=offsets[1:])
        keys = np.arange(index.num_relations, dtype=np.int64)
        pools.append(CSR(keys, offsets, train[order, side].astype(np.int32)))
    return pools[0], pools[1]
