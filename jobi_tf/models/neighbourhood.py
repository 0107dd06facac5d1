"""`Neighbourhood`: how close two entities are through the training graph, added to ranked scores.

Why: on a graph of many look-alike parts (the replicated graphs of docs/replicated-graph.md,
or any graph where a slot is filled by thousands of entities that differ only by whom they
are linked to), the slot counts rank the hubs and the tables rank the kind of answer, but
neither says *which* of the look-alikes: at 1.85M entities the counts cost the copied answers
0.071 → 0.050 (issue 79). Two entities a couple of steps apart through entities of few
neighbours most likely belong together. The score of ``(h, r, t)`` gains

    v · log(1 + 10 · RA(h, t)),    RA(h, t) = Σ_z A[h, z] · A[z, t] / deg(z)

over the undirected training multigraph (``A[x, z]``: the training triples between ``x`` and
``z``, either way, any relation; ``deg(z) = Σ_t A[z, t]``): resource allocation (Zhou, Lü and
Zhang, 2009, "Predicting missing links via local information"; Liben-Nowell and Kleinberg,
2007, for neighbourhood scores in link prediction), computed from the query's given entity
``h``, deterministic. An entity of degree above `MAX_DEGREE` (a hub) is no step (each path
through it adds under ``1 / MAX_DEGREE``) and no given entity: expanding from a hub would reach
much of the graph, so a query from a hub gets no term; without hubs an expansion is at most
``MAX_DEGREE²`` entries. A hub is still an end: a copy's link to its country lifts the country
(leaving hubs out as ends too cost the hub answers at 1.85M entities; docs/replicated-graph.md).
So the term is symmetric between two entities that are not hubs, and a triple with a hub at one
end has it only when asked from the other end (`score` adds a tail query's: from the head).

``v`` is a setting, not trained (the tables are the same whatever it is), chosen on validation
beside the slot counts' weight (`jobi_tf.training.prior_weight`). Measured at 1.85M entities on
whole splits: docs/replicated-graph.md, "The neighbourhood score".
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from jobi_tf.runtime.atomic import write_json_atomic
from jobi_tf.runtime.errors import ConfigError, JobiError

__all__ = ["Neighbourhood", "MAX_DEGREE", "SCALE", "save_weight", "read_weight"]

#: Entities of more neighbours than this (hubs) are no step of a path and ask with no term.
MAX_DEGREE = 2000
#: RA's factor inside the log: 10 · RA = 1 for two entities sharing one neighbour of degree 10.
SCALE = 10.0


class Neighbourhood:
    """The training graph as compressed rows, and the score ``v · log(1 + SCALE · RA)``.

    Args:
        train: int ``[T, 3]`` training triples (relations ignored).
        num_entities: ``E``.
        weight: ``v`` (0: the score is off, but the graph is kept for a weight set later).
    """

    def __init__(self, train: np.ndarray, num_entities: int, weight: float = 1.0) -> None:
        self.num_entities = int(num_entities)
        self.weight = weight
        train = np.asarray(train, np.int64).reshape(-1, 3)
        self._hold(np.concatenate([train[:, 0], train[:, 2]]), np.concatenate([train[:, 2], train[:, 0]]))

    def _hold(self, ends: np.ndarray, others: np.ndarray) -> None:
        """The rows of the edge ends ``ends -> others`` (each edge both ways), and each entity's share."""
        order = np.argsort(ends, kind="stable")
        self.neighbours = others[order].astype(np.int32)
        self.degree = np.bincount(ends, minlength=self.num_entities).astype(np.int64)
        self.start = np.concatenate([[0], np.cumsum(self.degree)])
        #: ``1 / deg``; 0 for a hub (degree above `MAX_DEGREE`) or an entity with no training triple.
        self.shares = np.where(self.degree <= MAX_DEGREE, 1.0 / np.maximum(self.degree, 1), 0.0) * (self.degree > 0)

    def renumbered(self, new_id: np.ndarray) -> Neighbourhood:
        """The same graph and ``v`` with entity ``e`` numbered ``new_id[e]`` (an export that numbers
        its entities cell by cell: `jobi_tf.export.cells.cell_order`)."""
        new_id = np.asarray(new_id, np.int64)
        out = object.__new__(Neighbourhood)
        out.num_entities, out.weight = self.num_entities, self.weight
        ends = np.repeat(np.arange(self.num_entities), self.degree)
        out._hold(new_id[ends], new_id[self.neighbours])
        return out

    @property
    def weight(self) -> float:
        return self._weight

    @weight.setter
    def weight(self, value: float) -> None:
        value = float(value)
        if not np.isfinite(value) or value < 0:
            raise ConfigError("neighbourhood", f"must be a finite weight >= 0, not {value!r}")
        self._weight = value

    def reach(self, given: int) -> tuple[np.ndarray, np.ndarray]:
        """The entities two steps from ``given`` and ``log(1 + SCALE · RA(given, e))`` of each:
        int64 ids, sorted, and float32 values (``v`` not applied). Every other entity's is 0."""
        if not self.shares[given]:  # a hub, or an entity with no training triple
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        via = self.neighbours[self.start[given] : self.start[given + 1]]
        via = via[self.shares[via] > 0]  # with multiplicity: A[given, z] paths through z
        if not len(via):
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        lengths = self.degree[via]
        firsts = np.repeat(self.start[via] - np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths)
        reached = self.neighbours[firsts + np.arange(int(lengths.sum()))]
        shares = np.repeat(self.shares[via], lengths)
        if len(reached) > self.num_entities // 8:  # dense counting beats sorting a large expansion
            ra = np.bincount(reached, weights=shares, minlength=self.num_entities)
            ids = np.flatnonzero(ra)
            ra = ra[ids]
        else:
            ids, which = np.unique(reached, return_inverse=True)
            ra = np.bincount(which, weights=shares, minlength=len(ids))
        return ids.astype(np.int64), np.log1p(SCALE * ra).astype(np.float32)

    def at(self, given: int, entities: np.ndarray) -> np.ndarray:
        """float32: the log term (``v`` not applied) of ``given`` and each of ``entities``."""
        ids, values = self.reach(given)
        entities = np.asarray(entities, np.int64)
        out = np.zeros(len(entities), np.float32)
        if len(ids):
            pos = np.minimum(np.searchsorted(ids, entities), len(ids) - 1)
            hit = ids[pos] == entities
            out[hit] = values[pos[hit]]
        return out

    def dense(self, given: int) -> np.ndarray:
        """float32 ``[E]``: ``v`` times the log term of ``given`` and every entity (tests, small graphs)."""
        out = np.zeros(self.num_entities, np.float32)
        ids, values = self.reach(given)
        out[ids] = self.weight * values
        return out


def save_weight(path: Path, weight: float) -> None:
    """Write the chosen neighbourhood weight to ``path`` (the run's ``neighbourhood.json``), replaced whole."""
    write_json_atomic(path, {"weight": weight, "max_degree": MAX_DEGREE, "scale": SCALE})


def read_weight(path: Path) -> float | None:
    """The weight `save_weight` wrote, or None where nothing was chosen."""
    if not path.exists():
        return None
    try:
        return float(json.loads(path.read_text(encoding="utf-8"))["weight"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise JobiError(f"{path}: cannot read the chosen neighbourhood weight ({exc})") from None
