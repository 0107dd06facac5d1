"""A second weight of the slot counts for the queries asked from a hub (`jobi_tf.models.hub_route`):
ranked, chosen, saved and served, each against plain NumPy."""

from __future__ import annotations

import json

import numpy as np
import pytest
import tensorflow as tf
from references import all_scores, slot_log_counts_by_loop

from jobi_tf.config import DataConfig, EvalConfig, ExportConfig, ModelConfig, RunConfig, TrainConfig
from jobi_tf.data.index import index_from_ids
from jobi_tf.data.vocab import Vocab
from jobi_tf.evaluation.ranking import FilteredEvaluator, tie_ranks
from jobi_tf.models import JoBiModel
from jobi_tf.models import neighbourhood as nb
from jobi_tf.models.hub_route import HubRoute
from jobi_tf.models.slot_prior import SparseSlotPrior
from jobi_tf.runtime.errors import JobiError
from jobi_tf.training import prior_weight

E, R, W, V, HUB_W = 40, 3, 0.5, 0.8, 2.0
CAP = 6  # the hub rule's degree, small enough that a third of the graph's entities are hubs


def _graph(seed: int = 0):
    rng = np.random.default_rng(seed)
    drawn = np.stack([rng.integers(E, size=260), rng.integers(R, size=260), rng.integers(E, size=260)], 1)
    every = np.unique(drawn, axis=0)
    every = every[rng.permutation(len(every))]
    return index_from_ids({"train": every[:150], "valid": every[150:180], "test": every[180:220]}, E, R, "test")


def _routed_model(index, model_name: str = "complex") -> JoBiModel:
    model = JoBiModel(num_entities=E, num_relations=R, model=model_name, dim=4, loss="sampled-softmax", slot_prior=W)
    model.prior.fill(index.train)
    model.neighbourhood = nb.Neighbourhood(index.train, E, weight=V)
    model.prior.route = HubRoute.of(model.neighbourhood, HUB_W)
    model.triple_relations.assign(4.0 * model.triple_relations.numpy())  # scores of the counts' size
    return model


def _totals(index, model, model_name: str = "complex") -> tuple[np.ndarray, np.ndarray]:
    """float64 ``[E, R, E]`` totals of every triple as a tail query (weight of the head) and as a
    head query (weight of the tail): bilinear + w(given) x counts + v x the term from the given."""
    counts = slot_log_counts_by_loop(index.train, E, R)
    terms = np.stack([model.neighbourhood.dense(x) for x in range(E)]).astype(np.float64)
    w = np.where(np.asarray(model.prior.route.from_hub), HUB_W, W)
    bilinear = all_scores(model_name, model.entity_embeddings.numpy(), model.triple_relations.numpy())
    both = counts[None, :R, :] + counts[R:, :, None].transpose(1, 0, 2)  # [h, r, t]
    as_tail = bilinear + w[:, None, None] * both + terms[:, None, :]
    as_head = bilinear + w[None, None, :] * both + terms.T[:, None, :]
    return as_tail, as_head


def _reference_ranks(index, as_tail, as_head, triples) -> np.ndarray:
    """Filtered realistic ranks, head queries first, by loops."""
    known = {tuple(x) for s in ("train", "valid", "test") for x in index.split(s).tolist()}
    out = []
    for tail_side in (False, True):
        for h, r, t in triples.tolist():
            total = as_tail[h, r, :] if tail_side else as_head[:, r, t]
            answer = t if tail_side else h
            rivals = [e for e in range(E) if e != answer and ((h, r, e) if tail_side else (e, r, t)) not in known]
            out.append(1 + sum(total[rivals] > total[answer]) + sum(total[rivals] == total[answer]) / 2)
    return np.array(out)


@pytest.mark.parametrize("model_name, chunk", [("complex", 7), ("distmult", 100), ("simple", 7)])
def test_evaluation_ranks_each_query_with_its_groups_weight(model_name, chunk, monkeypatch):
    monkeypatch.setattr(nb, "MAX_DEGREE", CAP)
    index = _graph()
    model = _routed_model(index, model_name)
    from_hub = np.asarray(model.prior.route.from_hub)
    asked_from = np.r_[index.test[:, 2], index.test[:, 0]]
    assert from_hub[asked_from].any() and not from_hub[asked_from].all()  # both groups are asked
    evaluator = FilteredEvaluator(index, EvalConfig(rank_type="realistic", chunk_size=chunk, eval_batch_size=16))
    ranks = evaluator.ranks(model, index.test)
    expected = _reference_ranks(index, *_totals(index, model, model_name), index.test)
    np.testing.assert_allclose(tie_ranks(ranks.optimistic, ranks.pessimistic, "realistic"), expected)
    model.prior.route = HubRoute(W, from_hub)  # the hubs' weight the same: as with no route
    same = evaluator.ranks(model, index.test)
    model.prior.route = None
    np.testing.assert_array_equal(same.optimistic, evaluator.ranks(model, index.test).optimistic)
    assert not np.array_equal(same.get(), expected)  # the hubs' own weight moved some ranks


def test_the_exact_and_approximate_signatures_serve_the_route(tmp_path, monkeypatch):
    """The exact signatures equal NumPy; the approximate ones, every cell probed, equal the exact
    ones under the export's own numbering (the route renumbered with the entities)."""
    from jobi_tf.export.savedmodel import export_saved_model

    monkeypatch.setattr(nb, "MAX_DEGREE", CAP)
    index = _graph()
    model = _routed_model(index)
    as_tail, as_head = _totals(index, model)
    entities = Vocab.from_labels([f"e{i}" for i in range(E)])
    relations = Vocab.from_labels([f"r{i}" for i in range(R)])
    cfg = ExportConfig(filter_known=False, cells=4)
    loaded = tf.saved_model.load(str(export_saved_model(model, entities, relations, tmp_path, cfg).path))
    h, r, t = (index.test[:, i] for i in range(3))
    names = {"head": entities.decode(h), "relation": relations.decode(r), "tail": entities.decode(t)}
    columns = {k: tf.constant(v) for k, v in names.items()}
    got = loaded.signatures["score"](**columns)["score"].numpy()
    np.testing.assert_allclose(got, as_tail[h, r, t], rtol=1e-5, atol=1e-5)  # a triple: its tail query's weight
    k = tf.constant(E)
    for side, expected in (("tail", as_tail[h, r, :]), ("head", as_head[:, r, t].T)):
        asked = {"head": columns["head"]} if side == "tail" else {"tail": columns["tail"]}
        exact = loaded.signatures[f"predict_{side}"](relation=columns["relation"], k=k, **asked)
        np.testing.assert_allclose(exact["scores"].numpy(), -np.sort(-expected, axis=1), rtol=1e-5, atol=1e-5)
        every_cell = {"k": k, "probe": tf.constant(4)}
        near = loaded.signatures[f"predict_{side}_approximate"](relation=columns["relation"], **every_cell, **asked)
        np.testing.assert_allclose(near["scores"].numpy(), exact["scores"].numpy(), rtol=1e-5, atol=1e-5)
        best = exact["scores"].numpy()[:, :1] > exact["scores"].numpy()[:, 1:2]  # (ties may order either way)
        np.testing.assert_array_equal(near[f"{side}s"].numpy()[:, :1][best], exact[f"{side}s"].numpy()[:, :1][best])


class _Graph:
    def __init__(self, shares: np.ndarray) -> None:
        self.shares = shares


def test_each_group_chooses_on_its_own_queries_and_a_small_group_does_not():
    n = 300
    triples = np.stack([np.arange(n), np.zeros(n, int), np.arange(n) + n], 1)  # heads 0..299, tails 300..599
    shares = np.ones(2 * n)
    shares[:150] = 0  # half the tail queries ask from a hub; every head query from a reached entity
    from_hub = np.r_[np.zeros(n, bool), shares[:n] == 0]  # head queries first
    rng = np.random.default_rng(0)
    base = rng.uniform(0.1, 0.2, 2 * n)
    reciprocal = {(w, v): base.copy() for w in (0.25, 0.5, 1.0) for v in (0.0, 1.0)}
    reciprocal[0.25, 1.0][~from_hub] += 0.1  # best for the reached queries
    reciprocal[1.0, 0.0][from_hub] += 0.1  # best for those from a hub (and so best with v too)
    reciprocal[1.0, 1.0][from_hub] += 0.1
    route = prior_weight.route_by_hub(reciprocal, _Graph(shares), triples)
    assert (route["weight"], route["neighbourhood"], route["hub_weight"]) == (0.25, 1.0, 1.0)
    assert route["queries_from_hub"] == 150
    want = np.where(from_hub, reciprocal[1.0, 0.0], reciprocal[0.25, 1.0]).mean()
    assert route["valid_mrr"] == pytest.approx(want)
    assert route["valid_mrr"] > max(rr.mean() for rr in reciprocal.values())
    shares[:] = 1
    shares[: prior_weight.MIN_ROUTED_QUERIES - 1] = 0  # one query short of choosing its own weight
    assert prior_weight.route_by_hub(reciprocal, _Graph(shares), triples) is None


def test_the_route_is_saved_with_the_counts_and_renumbered_with_the_entities(tmp_path):
    index = _graph()
    prior = SparseSlotPrior(W, E, R)
    prior.fill(index.train)
    from_hub = np.random.default_rng(1).random(E) < 0.3
    prior.route = HubRoute(HUB_W, from_hub)
    prior.save(tmp_path / "slot_counts.npz")
    back = SparseSlotPrior(0.0, E, R)
    back.load(tmp_path / "slot_counts.npz")
    assert (back.weight, back.route.hub_weight) == (W, HUB_W)
    np.testing.assert_array_equal(back.route.from_hub, from_hub)
    new_id = np.random.default_rng(2).permutation(E)
    moved = back.renumbered(new_id)
    np.testing.assert_array_equal(np.asarray(moved.route.from_hub)[new_id], from_hub)
    given = np.arange(E)
    np.testing.assert_array_equal(moved.groups(new_id[given]).numpy(), back.groups(given).numpy())
    np.testing.assert_array_equal(back.group_weights(back.groups(given)).numpy(), np.where(from_hub, HUB_W, W))
    h, t = index.test[:, 0], index.test[:, 2]
    every = back.relations(h, t).numpy()  # relation prediction: each triple's own offset, at every relation
    for r in range(R):
        np.testing.assert_allclose(every[:, r], back.triples(h, np.full_like(h, r), t).numpy(), rtol=1e-6)
    wrong = SparseSlotPrior(W, E + 1, R)
    with pytest.raises(JobiError, match=r"slot_counts.npz: the hub route holds 40 entities, not 41"):
        wrong.load(tmp_path / "slot_counts.npz")


def test_a_run_chooses_the_hubs_weight_keeps_it_and_evaluates_with_it(tmp_path, monkeypatch):
    from click.testing import CliRunner
    from jobi_tf.cli.main import main as cli

    from jobi_tf.api.run import load_run
    from jobi_tf.training.trainer import train

    monkeypatch.setattr(nb, "MAX_DEGREE", 40)  # the synthetic graph's mean degree: many hubs
    cfg = RunConfig(
        data=DataConfig(dataset="synthetic"),
        model=ModelConfig(model="complex", dim=8, reciprocal=True),
        train=TrainConfig(
            loss="sampled-softmax", epochs=1, jit_compile=False, slot_prior=1.0, choose_slot_prior=True, neighbourhood=1
        ),
        eval=EvalConfig(valid_sample=200),
        seed=5,
    )
    result = train(cfg, tmp_path / "run", verbose=0)
    chosen = result.metrics["slot_prior"]
    route = chosen["hub_route"]
    assert route["queries_from_hub"] >= prior_weight.MIN_ROUTED_QUERIES
    assert (chosen["chosen"], chosen["neighbourhood"]) == (route["weight"], route["neighbourhood"])
    assert route["valid_mrr"] >= max(chosen["valid_mrr"].values())
    run = load_run(tmp_path / "run")
    assert run.prior_weights == {"slot_prior": route["weight"], "hub_weight": route["hub_weight"]}
    assert run.evaluate("test")["mrr"] == pytest.approx(result.metrics["test"]["mrr"], rel=1e-6)
    out = CliRunner().invoke(cli, ["evaluate", str(tmp_path / "run")])
    assert out.exit_code == 0, out.output
    assert json.loads(out.output.strip().splitlines()[-1])["hub_weight"] == route["hub_weight"]
    run.use_slot_prior(route["weight"])  # one weight for every query again
    assert "hub_weight" not in run.prior_weights
    run.use_hub_weight(route["hub_weight"])  # the same route, set by hand: the same test
    assert run.evaluate("test")["mrr"] == pytest.approx(result.metrics["test"]["mrr"], rel=1e-6)
    run.use_slot_prior(0)
    run.use_hub_weight(2.0)  # counts for the queries from a hub only
    assert run.prior_weights == {"slot_prior": 0.0, "hub_weight": 2.0} and run.model.prior is not None
    moved = ["--prior-weight", str(route["weight"]), "--hub-weight", str(route["hub_weight"])]
    out = CliRunner().invoke(cli, ["evaluate", str(tmp_path / "run"), *moved])
    assert out.exit_code == 0, out.output
    record = json.loads(out.output.strip().splitlines()[-1])
    assert record["mrr"] == pytest.approx(result.metrics["test"]["mrr"], rel=1e-6)
    out = CliRunner().invoke(cli, ["export", str(tmp_path / "run"), "--out", str(tmp_path / "x"), *moved])
    assert out.exit_code == 0, out.output
    assert json.loads(out.output.strip().splitlines()[-1])["hub_weight"] == route["hub_weight"]
    served = tf.saved_model.load(str(tmp_path / "x" / "1"))
    np.testing.assert_array_equal(served.slot_prior.from_hub.numpy(), np.asarray(run.model.prior.route.from_hub))
