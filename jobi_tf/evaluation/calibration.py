"""Scores into probabilities: per-relation Platt scaling (or isotonic regression) fitted on validation triples.

A link predictor's score ranks candidates; it is not a probability (two relations' scores
live on different scales). `fit_calibration` fits, for every relation, ``p = σ(a·s + b)``
(``method="platt"``) or a non-decreasing piecewise-linear map (``method="isotonic"``: pool
adjacent violators, then linear interpolation between the pooled blocks, as scikit-learn's
``IsotonicRegression``; it needs no sigmoid shape but more data per relation) on
the validation positives against corrupted negatives (head or tail replaced by a random entity,
never a known fact), weighting the negatives so that both classes count equally whatever
their number (the correction for the negative-to-positive ratio). A relation with fewer than
``min_positives`` validation triples uses the parameters fitted on all relations. A
reciprocal model ranks heads with the inverse rows, whose scores have their own scale: they
get their own parameters (rows ``R..2R-1``), fitted on the head-query scores.

`evaluate_calibration` measures what a user of the probabilities gets on test: Brier score and
expected calibration error (10 equal-width bins) before (``σ(s)``) and after, and triple
classification with the standard protocol (one corrupted negative per test triple,
per-relation thresholds chosen on validation), with uniform and with type-consistent
corruptions (the replacement drawn from the entities seen in that slot: the hard variant).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np

from jobi_tf.data.index import KGIndex
from jobi_tf.data.keys import pack, sorted_contains
from jobi_tf.runtime.atomic import write_json_atomic
from jobi_tf.runtime.types import HEAD, RELATION, SPLITS, TAIL

__all__ = [
    "Calibration",
    "METHODS",
    "fit_platt",
    "fit_isotonic",
    "corrupt",
    "fit_calibration",
    "evaluate_calibration",
    "brier",
    "ece",
]

#: The calibration maps `fit_calibration` can fit.
METHODS = ("platt", "isotonic")

#: Isotonic probabilities are kept inside [EPS, 1 - EPS]: a block of all-negative
#: validation scores must not make a later test positive impossible.
ISOTONIC_EPS = 1e-3


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * z))  # overflow-free σ


def fit_platt(scores: np.ndarray, labels: np.ndarray, weights: np.ndarray | None = None) -> tuple[float, float]:
    """``(a, b)`` minimising the weighted log loss of ``σ(a·s + b)`` (Newton's method, a tiny ridge)."""
    s = np.asarray(scores, np.float64)
    y = np.asarray(labels, np.float64)
    w = np.ones_like(s) if weights is None else np.asarray(weights, np.float64)
    x = np.stack([s, np.ones_like(s)], axis=1)
    theta = np.zeros(2)
    for _ in range(100):
        p = _sigmoid(x @ theta)
        grad = x.T @ (w * (p - y)) + 1e-6 * theta
        hess = (x * (w * p * (1 - p))[:, None]).T @ x + 1e-6 * np.eye(2)
        step = np.linalg.solve(hess, grad)
        theta -= step
        if np.max(np.abs(step)) < 1e-10:
            break
    return float(theta[0]), float(theta[1])


def fit_isotonic(
    scores: np.ndarray, labels: np.ndarray, weights: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """``(knots, values)``: the weighted isotonic fit of ``labels`` on ``scores`` (pool adjacent
    violators), one knot per pooled block at its weighted mean score; values in [EPS, 1 - EPS]."""
    order = np.argsort(scores, kind="stable")
    s = np.asarray(scores, np.float64)[order]
    y = np.asarray(labels, np.float64)[order]
    w = (np.ones_like(s) if weights is None else np.asarray(weights, np.float64))[order]
    # Blocks as parallel stacks: summed weight, weighted label sum, weighted score sum.
    bw, by, bs = [], [], []
    for wi, yi, si in zip(w, y, s, strict=True):
        bw.append(wi)
        by.append(wi * yi)
        bs.append(wi * si)
        while len(bw) > 1 and by[-2] * bw[-1] >= by[-1] * bw[-2]:  # mean(prev) >= mean(last): pool
            wl, yl, sl = bw.pop(), by.pop(), bs.pop()
            bw[-1] += wl
            by[-1] += yl
            bs[-1] += sl
    weight = np.array(bw)
    knots, values = np.array(bs) / weight, np.array(by) / weight
    return knots, np.clip(values, ISOTONIC_EPS, 1 - ISOTONIC_EPS)


@dataclasses.dataclass(frozen=True)
class Calibration:
    """Per-row maps from score to probability: row ``r`` (forward relation) and, for a
    reciprocal model, row ``r + R`` (its inverse, for head queries). ``fallback``: rows
    fitted on all relations.

    ``platt``: ``σ(a[r]·s + b[r])``. ``isotonic``: linear interpolation between
    ``(knots[r, i], values[r, i])``, constant beyond the ends; rows with fewer knots than
    the widest repeat their last knot, so the tables are rectangular (as the export holds them).
    """

    a: np.ndarray | None
    b: np.ndarray | None
    fallback: np.ndarray
    method: str = "platt"
    knots: np.ndarray | None = None
    values: np.ndarray | None = None

    @property
    def rows(self) -> int:
        return len(self.fallback)

    def probability(self, scores: np.ndarray, rows: np.ndarray) -> np.ndarray:
        scores, rows = np.asarray(scores, np.float64), np.asarray(rows)
        if self.method == "platt":
            return _sigmoid(self.a[rows] * scores + self.b[rows])
        out = np.empty(np.broadcast(scores, rows).shape)
        scores, rows = np.broadcast_to(scores, out.shape), np.broadcast_to(rows, out.shape)
        for row in np.unique(rows):
            mine = rows == row
            out[mine] = np.interp(scores[mine], self.knots[row], self.values[row])
        return out

    def save(self, path: str | Path) -> None:
        body: dict = {"method": self.method, "fallback": self.fallback.tolist()}
        if self.method == "platt":
            body |= {"a": self.a.tolist(), "b": self.b.tolist()}
        else:
            body |= {"knots": self.knots.tolist(), "values": self.values.tolist()}
        write_json_atomic(path, body)

    @classmethod
    def load(cls, path: str | Path) -> Calibration:
        d = json.loads(Path(path).read_text(encoding="utf-8"))
        fallback = np.array(d["fallback"], bool)
        if d.get("method", "platt") == "platt":
            return cls(np.array(d["a"]), np.array(d["b"]), fallback)
        return cls(None, None, fallback, "isotonic", np.array(d["knots"]), np.array(d["values"]))


def _rectangular(fits: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Per-row knots and values padded to one width by repeating each row's last knot (at least 2)."""
    width = max(2, max(len(k) for k, _ in fits))

    def pad(x: np.ndarray) -> np.ndarray:
        return np.concatenate([x, np.full(width - len(x), x[-1])])

    return np.stack([pad(k) for k, _ in fits]), np.stack([pad(v) for _, v in fits])


def corrupt(
    triples: np.ndarray, index: KGIndex, rng: np.random.Generator, *, typed: bool = False, tries: int = 20
) -> tuple[np.ndarray, np.ndarray]:
    """One corrupted negative per triple and whether its tail was replaced.

    The head or the tail (a fair coin) is replaced by a uniform entity or, with ``typed``, by
    one seen in that slot of the relation in training; a replacement that forms a known fact
    (train, valid or test) is drawn again, up to ``tries`` times (then kept: rare).
    """
    triples = np.asarray(triples, np.int64)
    known = np.sort(_fact_keys(np.concatenate([index.split(s) for s in SPLITS]), index))
    tail = rng.random(len(triples)) < 0.5
    out = triples.copy()
    todo = np.arange(len(triples))
    for _ in range(tries):
        draw = rng.integers(index.num_entities, size=len(todo))
        if typed:
            rel = triples[todo, RELATION]
            for pools, side in ((index.train_tails, tail[todo]), (index.train_heads, ~tail[todo])):
                start, count = pools.offsets[rel], pools.offsets[rel + 1] - pools.offsets[rel]
                pick = start + (rng.random(len(todo)) * np.maximum(count, 1)).astype(np.int64)
                from_pool = pools.values[np.minimum(pick, len(pools.values) - 1)]
                draw = np.where(side & (count > 0), from_pool, draw)
        out[todo, TAIL] = np.where(tail[todo], draw, triples[todo, TAIL])
        out[todo, HEAD] = np.where(tail[todo], triples[todo, HEAD], draw)
        todo = todo[sorted_contains(known, _fact_keys(out[todo], index))]
        if len(todo) == 0:
            break
    return out, tail


def _fact_keys(triples: np.ndarray, index: KGIndex) -> np.ndarray:
    """One int64 key per triple: ``(h * R + r) * E + t``."""
    head_relation = pack(triples[:, HEAD], triples[:, RELATION], index.num_relations)
    return pack(head_relation, triples[:, TAIL], index.num_entities)


def _scores(model, triples: np.ndarray, tail_side: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Scores of triples as the model ranks them, and the calibration row of each: the forward
    score (row r) for a tail query; for a reciprocal model's head query, ``s(t, r⁻¹, h)`` (row r + R)."""
    import tensorflow as tf

    ids = tf.constant(triples, tf.int32)
    forward = model.score_triples(ids).numpy()
    rows = triples[:, RELATION].astype(np.int64)
    if not getattr(model, "reciprocal", False):
        return forward, rows
    inverse_rel = rows + model.num_relations
    h, t = model.entity_rows(ids[:, HEAD]), model.entity_rows(ids[:, TAIL])
    inverse = model.scorer.score(t, tf.gather(model.triple_relations, inverse_rel), h).numpy()
    return np.where(tail_side, forward, inverse), np.where(tail_side, rows, inverse_rel)


def fit_calibration(
    model, index: KGIndex, *, negatives: int = 5, min_positives: int = 20, seed: int = 0, method: str = "platt"
) -> Calibration:
    """Per-row Platt scaling (or isotonic regression) on validation positives and ``negatives`` corruptions each."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}. Received: method={method!r}")
    rng = np.random.default_rng(seed)
    valid = index.valid.astype(np.int64)
    rows_total = index.num_relations * (2 if getattr(model, "reciprocal", False) else 1)
    side = rng.random(len(valid)) < 0.5  # positives: as asked from either side
    parts = [(*_scores(model, valid, side), np.ones(len(valid)), np.ones(len(valid)))]
    for _ in range(negatives):  # each negative weighs 1/negatives: both classes count equally
        neg, tail = corrupt(valid, index, rng)
        parts.append((*_scores(model, neg, tail), np.zeros(len(neg)), np.full(len(neg), 1 / negatives)))
    scores, rows, labels, weights = (np.concatenate(x) for x in zip(*parts, strict=True))
    own = [np.sum(labels[rows == row]) >= min_positives for row in range(rows_total)]
    if method == "isotonic":
        everything = fit_isotonic(scores, labels, weights)
        fits = [
            fit_isotonic(scores[rows == row], labels[rows == row], weights[rows == row]) if own[row] else everything
            for row in range(rows_total)
        ]
        return Calibration(None, None, ~np.array(own, bool), "isotonic", *_rectangular(fits))
    a_all, b_all = fit_platt(scores, labels, weights)
    a, b = np.full(rows_total, a_all), np.full(rows_total, b_all)
    fallback = np.ones(rows_total, bool)
    for row in range(rows_total):
        mine = rows == row
        if np.sum(labels[mine]) >= min_positives:
            a[row], b[row] = fit_platt(scores[mine], labels[mine], weights[mine])
            fallback[row] = False
    return Calibration(a, b, fallback)


def brier(p: np.ndarray, y: np.ndarray) -> float:
    return float(np.mean((np.asarray(p) - np.asarray(y)) ** 2))


def ece(p: np.ndarray, y: np.ndarray, bins: int = 10) -> float:
    """Expected calibration error over equal-width probability bins."""
    p, y = np.asarray(p, np.float64), np.asarray(y, np.float64)
    which = np.minimum((p * bins).astype(int), bins - 1)
    total = 0.0
    for k in range(bins):
        inside = which == k
        if inside.any():
            total += inside.sum() / len(p) * abs(p[inside].mean() - y[inside].mean())
    return float(total)


def _thresholds(scores: np.ndarray, labels: np.ndarray, rows: np.ndarray, rows_total: int) -> np.ndarray:
    """Per-row score threshold maximising accuracy (a global one for rows without data)."""

    def best(s, y):
        order = np.argsort(s)
        s, y = s[order], y[order]
        # Cut i: the i lowest scores are called negative. Correct = negatives below + positives above.
        below_pos = np.concatenate([[0], np.cumsum(y)])
        below_neg = np.arange(len(s) + 1) - below_pos
        correct = below_neg + (below_pos[-1] - below_pos)
        cut = int(np.argmax(correct))
        edges = np.concatenate([[s[0] - 1.0], s, [s[-1] + 1.0]])
        return (edges[cut] + edges[cut + 1]) / 2  # between the cut's neighbours

    global_threshold = best(scores, labels)
    out = np.full(rows_total, global_threshold)
    for row in np.unique(rows):
        mine = rows == row
        out[row] = best(scores[mine], labels[mine])
    return out


def evaluate_calibration(model, index: KGIndex, calibration: Calibration, *, seed: int = 0) -> dict:
    """Brier/ECE before and after on test (positives and one corruption each), and triple
    classification accuracy with per-relation thresholds from validation, uniform and typed."""
    rng = np.random.default_rng(seed + 1)
    rows_total = calibration.rows
    out: dict = {}
    for kind, typed in (("uniform", False), ("typed", True)):
        sets = {}
        for split in ("valid", "test"):
            pos = index.split(split).astype(np.int64)
            side = rng.random(len(pos)) < 0.5
            neg, tail = corrupt(pos, index, rng, typed=typed)
            sp, rp = _scores(model, pos, side)
            sn, rn = _scores(model, neg, tail)
            labels = np.r_[np.ones(len(pos)), np.zeros(len(neg))]
            sets[split] = (np.concatenate([sp, sn]), np.concatenate([rp, rn]), labels)
        s, r, y = sets["test"]
        raw, calibrated = _sigmoid(s), calibration.probability(s, r)
        valid_scores, valid_rows, valid_labels = sets["valid"]
        thresholds = _thresholds(valid_scores, valid_labels, valid_rows, rows_total)
        out[kind] = {
            "brier_raw": brier(raw, y),
            "brier_calibrated": brier(calibrated, y),
            "ece_raw": ece(raw, y),
            "ece_calibrated": ece(calibrated, y),
            "accuracy_per_relation_thresholds": float(np.mean((s > thresholds[r]) == (y == 1))),
            "accuracy_calibrated_at_0.5": float(np.mean((calibrated > 0.5) == (y == 1))),
            "test_pairs": int(len(y) // 2),
        }
    return out
