"""A sampled run's slot-prior weight, chosen on validation once its tables are trained.

Why after training: a sampled loss leaves the slot counts out (`jobi_tf.models.slot_prior`), so
the trained tables are the same whatever weight ``W`` the counts get, and ``W`` can be chosen
the way any setting is, by validation, at the cost of a few rankings of the validation sample
instead of a run per value. It matters: the weight that ranked best fell as the tables learned
more (FB15k-237: 0.25, where the command's 1 lost 0.015 test MRR; 1.85M entities after three
epochs: 0.5; docs/replicated-graph.md).
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

__all__ = ["WEIGHTS", "best_weight", "choose_prior_weight"]

logger = logging.getLogger(__name__)

#: The weights tried: 0 (the tables alone) to 2 (the counts above the tables).
WEIGHTS = (0.0, 0.25, 0.5, 1.0, 2.0)


def best_weight(mrr: dict[float, float]) -> float:
    """The weight of the highest MRR; ties go to the smaller weight (less of the counts)."""
    return max(mrr, key=lambda w: (mrr[w], -w))


def choose_prior_weight(model, evaluator, triples: np.ndarray, counts_path: Path) -> dict:
    """Rank ``triples`` (the run's validation sample) at each of `WEIGHTS` and keep the best MRR
    (ties: the smaller weight) as ``model.prior``'s weight, also in ``counts_path`` (the run's
    ``slot_counts.npz``, which `jobi_tf.api.load_run` reads). Returns the MRR of each weight and
    the choice, for ``metrics.json``."""
    prior = model.prior
    mrr = {}
    for weight in WEIGHTS:
        prior.weight = weight
        model.prior = prior if weight else None  # 0: the tables alone
        mrr[weight] = evaluator.evaluate(model, "valid", triples=triples)["mrr"]
    chosen = best_weight(mrr)
    prior.weight = chosen
    model.prior = prior if chosen else None
    prior.save(counts_path)
    logger.info(
        "slot prior: W = %g chosen on %d validation triples (MRR %s)",
        chosen,
        len(triples),
        ", ".join(f"{w:g}: {m:.4f}" for w, m in mrr.items()),
    )
    return {"valid_mrr": {f"{w:g}": m for w, m in mrr.items()}, "chosen": chosen, "valid_triples": len(triples)}
