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


def all_scores(name: str, ent: np.ndarray, rel: np.ndarray) -> np.ndarray:
    """float64 ``[E, R, E]``: the score of every (head, relation, tail), from the papers' formulas."""
    ent, rel = ent.astype(np.float64), rel.astype(np.float64)
    if name == "distmult":
        return np.einsum("hd,rd,td->hrt", ent, rel, ent)
    d = ent.shape[1] // 2
    if name == "complex":  # Re(<h, r, conj(t)>)
        e, r = ent[:, :d] + 1j * ent[:, d:], rel[:, :d] + 1j * rel[:, d:]
        return np.real(np.einsum("hd,rd,td->hrt", e, r, np.conj(e)))
    # SimplE: (<h_head, r, t_tail> + <t_head, r_inv, h_tail>) / 2
    head_role, tail_role, fwd, inv = ent[:, :d], ent[:, d:], rel[:, :d], rel[:, d:]
    return 0.5 * (
        np.einsum("hd,rd,td->hrt", head_role, fwd, tail_role) + np.einsum("td,rd,hd->hrt", head_role, inv, tail_role)
    )


def bfloat16_rounded(x: np.ndarray) -> np.ndarray:
    """float32 ``x`` rounded to the nearest bfloat16 (ties to even), as float32: the top 16 bits
    of each float after adding half of the dropped part."""
    bits = np.ascontiguousarray(x, np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return rounded.astype(np.uint32).view(np.float32)


def slot_log_counts_by_loop(train: np.ndarray, num_entities: int, num_relations: int) -> np.ndarray:
    """float64 ``[2R, E]``: ``log(1 + count)`` of each entity in each slot of ``train``, tail slots
    first (row ``r``: tails of ``r``; row ``R + r``: its heads), counted by a plain loop."""
    counts = np.zeros((2 * num_relations, num_entities))
    for h, r, t in np.asarray(train).tolist():
        counts[r, t] += 1
        counts[num_relations + r, h] += 1
    return np.log1p(counts)
