"""The slot prior's weight for a finished sampled run, chosen on validation: what the counts add.

Why: a sampled run's ``--slot-prior W`` adds ``W · log(1 + count)`` of each entity in the asked
slot to every score it ranks (`jobi_tf.models.slot_prior`), and its loss leaves the counts out,
so the weight can be chosen after training without training again. This ranks the run's fixed
validation sample (``--valid-sample``, the run's own when it had one) at each weight of a grid
(default: `jobi_tf.training.prior_weight.WEIGHTS`, what ``--choose-slot-prior`` tries), keeps the
best validation MRR (ties: the smaller weight), and ranks the whole test set with the counts and
(unless ``--no-tables-alone``) without, split by answer on a replicated graph (hub / copied), in
float32; the run's own test and validations are kept. ``--neighbourhood V[,V2]``: W with 0, V, V2.

Run:  python bench/slot_prior_weight.py --run runs/probes/NAME --command "jobi-tf train ..."
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import emit, peak_rss_gib, provenance, versions  # noqa: E402, I001
from accuracy_per_hour import answer_parts, headline, replicated_hubs  # noqa: E402

from jobi_tf.api.run import restore_model  # noqa: E402
from jobi_tf.config import RunConfig  # noqa: E402
from jobi_tf.config.runs import RunFolder  # noqa: E402
from jobi_tf.datasets.loading import load_index  # noqa: E402
from jobi_tf.evaluation.ranking import FilteredEvaluator, validation_sample  # noqa: E402
from jobi_tf.models.hub_route import HubRoute, queries_from_hub  # noqa: E402
from jobi_tf.models.neighbourhood import Neighbourhood  # noqa: E402
from jobi_tf.models.slot_prior import SparseSlotPrior  # noqa: E402
from jobi_tf.training.prior_weight import WEIGHTS, WEIGHTS_WITH_NEIGHBOURHOOD, best_pair, route_by_hub  # noqa: E402

#: What each validation of the run's history keeps here (inside and at the end of each epoch).
KEPT = ("epoch", "step", "mrr", "hits@1", "hits@10", "valid_seconds", "epoch_seconds", "positives_per_second_median")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", required=True, type=Path, help="a finished sampled run folder")
    parser.add_argument("--command", required=True, help="the jobi-tf train command that made it, as run")
    parser.add_argument("--weights", help="comma-separated weights W to try (default: --choose-slot-prior's)")
    parser.add_argument("--neighbourhood", default="0", help="comma-separated V: also rank each W with V x the term")
    parser.add_argument("--valid-sample", type=int, default=None, help="validation triples (default: the run's)")
    parser.add_argument("--no-tables-alone", action="store_true", help="skip the test ranking without counts or term")
    parser.add_argument(
        "--route-by-reach",
        action="store_true",
        help="also: the library's (W, V) for queries the term reaches from and W for queries asked from a hub "
        "(no term), each chosen on its own validation queries (jobi_tf.models.hub_route); the test ranked with both",
    )
    args = parser.parse_args()

    cfg = RunConfig.from_dict(json.loads((args.run / "config.json").read_text(encoding="utf-8")))
    entities, _, index = load_index(cfg.data, seed=cfg.seed)
    hub = replicated_hubs(cfg.data.data_dir, entities)
    model = restore_model(RunFolder(args.run), cfg)
    prior = SparseSlotPrior(0.0, index.num_entities, index.num_relations)
    prior.fill(index.train)
    evaluator = FilteredEvaluator(index, cfg.eval)
    vs = sorted({0.0, *map(float, args.neighbourhood.split(","))})  # 0 is always ranked
    if args.route_by_reach and not vs[-1]:
        parser.error("--route-by-reach needs --neighbourhood V > 0 (the term's hubs define the groups)")
    model.neighbourhood = near = Neighbourhood(index.train, index.num_entities, 0.0) if vs[-1] else None
    size = cfg.eval.valid_sample if args.valid_sample is None else args.valid_sample
    valid = validation_sample(index.valid, size)

    def ranked(weight: float, triples, v: float = 0.0) -> dict:
        prior.weight = weight
        model.prior = prior if weight or prior.route else None  # 0: the plain one-pass ranking
        if near is not None:
            near.weight = v
        start = time.perf_counter()
        ranks = kept[weight, v, triples is valid] = evaluator.ranks(model, triples)
        out = {"weight": weight, "neighbourhood": v, **headline(evaluator.metrics_from_ranks(ranks))}
        if hub is not None:
            out["parts"] = answer_parts(ranks, cfg.eval.rank_type, hub)
        return {**out, "seconds": round(time.perf_counter() - start, 1)}

    kept = {}  # (W, V, validation?) -> the Ranks
    weights = args.weights.split(",") if args.weights else WEIGHTS_WITH_NEIGHBOURHOOD if near else WEIGHTS
    grid = [ranked(float(w), valid, v) for w in weights for v in vs]
    chosen, chosen_v = best_pair({(g["weight"], g["neighbourhood"]): g["mrr"] for g in grid})  # the library's rule
    record = {
        "bench": "slot_prior_weight",
        "metric": "filtered MRR of a run's best weights + W x log(1 + slot count), W chosen on validation; test",
        "run": str(args.run),
        "training_command": args.command,
        "config": json.loads((args.run / "config.json").read_text(encoding="utf-8")),
        "valid_sample": len(valid),
        "valid_grid": grid,
        "chosen_weight": chosen,
        "chosen_neighbourhood": chosen_v,
        "test_without_counts": None if args.no_tables_alone else ranked(0.0, index.test),
        "test_with_counts": ranked(chosen, index.test, chosen_v),
        "slot_count_entries": int(prior.keys.shape[0]),
    }
    if args.route_by_reach:
        record["routed_by_reach"] = routed(kept, near, valid, index.test, ranked, prior, evaluator, hub)
    if (args.run / "metrics.json").exists():  # the run's own test, at its command's weight
        ran = json.loads((args.run / "metrics.json").read_text(encoding="utf-8"))
        record["run_metrics"] = {
            "slot_prior": cfg.train.slot_prior,
            "test": headline(ran["test"]),
            "best_valid": headline(ran["valid"]),
            **{k: ran.get(k) for k in ("epochs", "best_epoch", "best_step", "train_seconds")},
            "validations": [{k: h[k] for k in KEPT if k in h} for h in ran["history"]],
        }
    record.update(peak_rss_gib=round(peak_rss_gib(), 2), **provenance(__file__), versions=versions())
    emit(record)


def routed(kept: dict, near, valid, test, ranked, prior, evaluator, hub) -> dict | None:
    """The library's second weight of the counts for the queries asked from a hub (`route_by_hub`,
    `jobi_tf.models.hub_route`), chosen from this grid's validation ranks; then the test split
    ranked once with the route, each query at its own group's weight. None: a group too small."""
    rank_type = evaluator.cfg.rank_type
    rr = {k[:2]: 1.0 / r.get(rank_type) for k, r in kept.items() if k[2]}  # validation's
    route = route_by_hub(rr, near, valid)
    if route is None:
        return None
    prior.route = HubRoute.of(near, route["hub_weight"])
    ranked(route["weight"], test, route["neighbourhood"])
    prior.route = None
    ranks = kept[route["weight"], route["neighbourhood"], False]
    reach = [~queries_from_hub(near, t) for t in (valid, test)]
    return {
        "reached": (route["weight"], route["neighbourhood"]),
        "from_hub": (route["hub_weight"], 0.0),
        "share_reached": [float(r.mean()) for r in reach],
        "queries_from_hub": route["queries_from_hub"],
        "valid_mrr": route["valid_mrr"],
        "test": headline(evaluator.metrics_from_ranks(ranks)),
        "parts": answer_parts(ranks, rank_type, hub) if hub is not None else None,
    }


if __name__ == "__main__":
    main()
