"""A sampled run's slot-prior weight (and neighbourhood weight), chosen on validation once its tables are trained.

Why after training: a sampled loss leaves the slot counts out (`jobi_tf.models.slot_prior`), so
the trained tables are the same whatever weight ``W`` the counts get, and ``W`` can be chosen
the way any setting is, by validation, at the cost of a few rankings of the validation sample
instead of a run per value. It matters: the weight that ranked best fell as the tables learned
more (FB15k-237: 0.25, where the command's 1 lost 0.015 test MRR; 1.85M entities after three
epochs: 0.5; docs/replicated-graph.md).

With ``--neighbourhood v`` the pairs ``(W, 0)`` and ``(W, v)`` are ranked, ``W`` over a finer
grid (`WEIGHTS_WITH_NEIGHBOURHOOD`): with the neighbourhood's term the best ``W`` at 1.85M
entities fell between the grid's points (0.375 in two runs of three; docs/replicated-graph.md).
The same rankings then choose a second ``W`` for the queries asked from a hub, which the term
never reaches (`jobi_tf.models.hub_route`): no extra ranking, each query keeps its own rank.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from jobi_tf.models.hub_route import HubRoute, queries_from_hub
from jobi_tf.models.neighbourhood import save_weight

__all__ = [
    "WEIGHTS",
    "WEIGHTS_WITH_NEIGHBOURHOOD",
    "MIN_ROUTED_QUERIES",
    "best_weight",
    "best_pair",
    "choose_prior_weight",
    "route_by_hub",
]

logger = logging.getLogger(__name__)

#: The weights tried: 0 (the tables alone) to 2 (the counts above the tables).
WEIGHTS = (0.0, 0.25, 0.5, 1.0, 2.0)
#: The counts' weights tried beside a neighbourhood weight.
WEIGHTS_WITH_NEIGHBOURHOOD = (0.0, 0.25, 0.375, 0.5, 0.75, 1.0, 2.0)
#: Fewest validation queries of a group (asked from a hub, or not) that choose its own weight.
#: Neighbouring weights rank within about a hundredth of MRR of each other (the grids of
#: docs/replicated-graph.md); a few dozen queries would choose among them on noise, so below
#: this every query takes the one best weight.
MIN_ROUTED_QUERIES = 100


def best_weight(mrr: dict[float, float]) -> float:
    """The weight of the highest MRR; ties go to the smaller weight (less of the counts)."""
    return max(mrr, key=lambda w: (mrr[w], -w))


def best_pair(mrr: dict[tuple[float, float], float]) -> tuple[float, float]:
    """The ``(W, v)`` of the highest MRR; ties go to the smaller ``W``, then the smaller ``v``."""
    return max(mrr, key=lambda pair: (mrr[pair], -pair[0], -pair[1]))


def choose_prior_weight(model, evaluator, triples: np.ndarray, counts_path: Path, neighbourhood_path: Path) -> dict:
    """Rank ``triples`` (the run's validation sample) at each of `WEIGHTS` (with a neighbourhood
    score, each of `WEIGHTS_WITH_NEIGHBOURHOOD` with and without it) and keep the best MRR (ties:
    the smaller weights) as ``model.prior``'s weight, also in ``counts_path`` (the run's
    ``slot_counts.npz``, which `jobi_tf.api.load_run` reads), and the neighbourhood's in
    ``neighbourhood_path``. With a neighbourhood, the queries asked from a hub get their own
    weight where they are enough to choose it (`route_by_hub`). Returns the MRR of each choice
    and the choice, for ``metrics.json``."""
    prior, near = model.prior, getattr(model, "neighbourhood", None)
    given = near.weight if near is not None else 0.0
    grid = [(w, 0.0) for w in WEIGHTS]
    if given:
        grid = [(w, v) for w in WEIGHTS_WITH_NEIGHBOURHOOD for v in (0.0, given)]
    reciprocal, prior.route = {}, None  # the grid ranks every query with one weight
    for weight, v in grid:
        _use(model, prior, near, weight, v)
        reciprocal[weight, v] = 1.0 / evaluator.ranks(model, triples).get(evaluator.cfg.rank_type)
    mrr = {pair: float(rr.mean()) for pair, rr in reciprocal.items()}
    chosen, chosen_v = best_pair(mrr)
    route = route_by_hub(reciprocal, near, triples) if given else None
    if route is not None:
        chosen, chosen_v = route["weight"], route["neighbourhood"]
    _use(model, prior, near, chosen, chosen_v)
    prior.route = None if route is None else HubRoute.of(near, route["hub_weight"])
    model.prior = prior if chosen or prior.route else None
    prior.save(counts_path)
    if near is not None:
        save_weight(neighbourhood_path, chosen_v)
    logger.info(
        "slot prior: W = %g%s%s chosen on %d validation triples (MRR %s)",
        chosen,
        f", neighbourhood v = {chosen_v:g}" if given else "",
        "" if route is None else f", W = {route['hub_weight']:g} for queries asked from a hub",
        len(triples),
        ", ".join(f"{_label(w, v, given)}: {m:.4f}" for (w, v), m in mrr.items()),
    )
    out = {"valid_mrr": {_label(w, v, given): m for (w, v), m in mrr.items()}, "chosen": chosen}
    if given:
        out["neighbourhood"] = chosen_v
    if route is not None:
        out["hub_route"] = route
    return {**out, "valid_triples": len(triples)}


def route_by_hub(reciprocal: dict, near, triples: np.ndarray) -> dict | None:
    """The best ``(W, v)`` for the queries ``near`` steps from and the best ``W`` for those asked
    from a hub (`jobi_tf.models.hub_route`), each on its own queries' reciprocal ranks
    (``reciprocal[(W, v)]``: head queries first, then tail queries, as `FilteredEvaluator.ranks`).
    None when either group has fewer than `MIN_ROUTED_QUERIES` queries: one weight for all."""
    from_hub = queries_from_hub(near, triples)
    if min(from_hub.sum(), (~from_hub).sum()) < MIN_ROUTED_QUERIES:
        return None
    reached = {pair: float(rr[~from_hub].mean()) for pair, rr in reciprocal.items()}
    hub = {w: float(rr[from_hub].mean()) for (w, v), rr in reciprocal.items() if not v}  # (no term from a hub)
    weight, v = best_pair(reached)
    hub_weight = best_weight(hub)
    routed = np.where(from_hub, reciprocal[hub_weight, 0.0], reciprocal[weight, v])
    return {
        "weight": weight,
        "neighbourhood": v,
        "hub_weight": hub_weight,
        "queries_from_hub": int(from_hub.sum()),
        "valid_mrr": float(routed.mean()),
    }


def _use(model, prior, near, weight: float, v: float) -> None:
    """Rank with ``weight`` x the counts and ``v`` x the neighbourhood term (0: left out)."""
    prior.weight = weight
    model.prior = prior if weight else None  # 0: the tables alone
    if near is not None:
        near.weight = v


def _label(weight: float, v: float, given: float) -> str:
    """``metrics.json``'s key: the weight alone as before, ``"W,v"`` with a neighbourhood."""
    return f"{weight:g}" if not given else f"{weight:g},{v:g}"
