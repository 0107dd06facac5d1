"""The tables negatives are drawn from: each slot's pool for biased draws, and every training
triple's ends (with their log-probabilities) for draws by degree (`NegativeSampler`'s)."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from jobi_tf.config import SamplerConfig
from jobi_tf.data.index import CSR, KGIndex
from jobi_tf.runtime.types import HEAD, RELATION, TAIL

__all__ = ["slot_pools", "draw_tables"]


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


def draw_tables(index: KGIndex, cfg: SamplerConfig) -> tuple[tf.Tensor | None, tf.Tensor | None]:
    """``(ends, log_q)`` for ``--negative-distribution``: every training triple's head and
    tail (a uniform pick is a pick by degree; None for uniform draws), and with
    ``--logq-correction`` each entity's ``log(Q(e)·E)``, float32 ``(E,)``: the log of its draw
    probability over a uniform draw's (entities never drawn get the value of a rare one)."""
    if cfg.negative_distribution == "uniform":
        return None, None
    train = index.train
    ends = np.concatenate([train[:, HEAD], train[:, TAIL]]).astype(np.int32)
    log_q = None
    if cfg.logq_correction:
        ratio = np.bincount(ends, minlength=index.num_entities) * (index.num_entities / len(ends))
        if cfg.negative_distribution == "mix":
            ratio = 0.5 + 0.5 * ratio
        log_q = tf.constant(np.log(np.maximum(ratio, 1.0 / len(ends))).astype(np.float32))
    return tf.constant(ends), log_q
