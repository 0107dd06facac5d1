"""The neighbourhood score (`jobi_tf.models.neighbourhood`) against plain NumPy: its terms, the
ranks it gives with and without the slot counts, its choice on validation, and its refusal to be
served before exports carry it."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import tensorflow as tf
from references import all_scores, slot_log_counts_by_loop

from jobi_tf.config import DataConfig, EvalConfig, ModelConfig, RunConfig, TrainConfig
from jobi_tf.data.index import index_from_ids
from jobi_tf.evaluation.ranking import FilteredEvaluator, tie_ranks, validation_sample
from jobi_tf.models import JoBiModel
from jobi_tf.models import neighbourhood as nb
from jobi_tf.runtime.errors import ConfigError, JobiError

E, R = 40, 3


def _graph(seed: int = 0):
    """A sparse random graph, duplicate edges and a self-loop included (they count in RA)."""
    rng = np.random.default_rng(seed)
    drawn = np.stack([rng.integers(E, size=260), rng.integers(R, size=260), rng.integers(E, size=260)], 1)
    every = np.unique(drawn, axis=0)
    every = every[rng.permutation(len(every))]
    train = np.concatenate([every[:150], [[5, 0, 5], [5, 1, 5]]])
    return index_from_ids({"train": train, "valid": every[150:180], "test": every[180:220]}, E, R, "test")


def _ra_by_matrix(train: np.ndarray, max_degree: int) -> np.ndarray:
    """float64 ``[E, E]``: log(1 + 10 H A H diag(1/deg) A), A counting each triple both ways, H
    keeping the entities of degree 1..cap (a hub is no step and no given entity; it is an end)."""
    a = np.zeros((E, E))
    for h, _, t in train.tolist():
        a[h, t] += 1
        a[t, h] += 1
    deg = a.sum(1)
    kept = (deg > 0) & (deg <= max_degree)
    share = np.where(kept, 1.0 / np.maximum(deg, 1), 0.0)
    return np.log1p(nb.SCALE * ((a * share) @ a) * kept[:, None])


@pytest.mark.parametrize("cap", [2000, 6])
def test_the_terms_are_resource_allocation_over_the_training_multigraph(cap, monkeypatch):
    monkeypatch.setattr(nb, "MAX_DEGREE", cap)  # 6: some entities carry no path
    index = _graph()
    near = nb.Neighbourhood(index.train, E, weight=0.5)
    expected = _ra_by_matrix(index.train, cap)
    got = np.stack([near.dense(x) for x in range(E)]) / 0.5
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-7)
    hubs = np.bincount(np.r_[index.train[:, 0], index.train[:, 2]], minlength=E) > cap
    both = ~hubs[:, None] & ~hubs[None, :]
    np.testing.assert_array_equal(got[both], got.T[both])  # between two non-hubs, the same from either side
    for x in (0, 5, 17):
        ids, values = near.reach(x)
        assert np.all(np.diff(ids) > 0) and np.all(values > 0)
        np.testing.assert_array_equal(near.at(x, np.arange(E)), got[x].astype(np.float32) * np.float32(1))
    if cap == 6:  # hubs: no term from them, one to them
        assert hubs.any() and not got[hubs].any() and got[:, hubs].any()


def test_a_large_expansion_is_counted_densely_to_the_same_terms(monkeypatch):
    index = _graph(1)
    near = nb.Neighbourhood(index.train, E)
    sparse = [near.reach(x) for x in range(E)]
    near.num_entities = 8  # every expansion is then "large" (over E / 8 = 1)
    for x, (ids, values) in enumerate(sparse):
        got_ids, got_values = near.reach(x)
        np.testing.assert_array_equal(got_ids, ids)
        np.testing.assert_allclose(got_values, values, rtol=1e-6)


def _reference_ranks(index, scores, counts, weight, terms, triples) -> np.ndarray:
    """Filtered realistic ranks, head queries first: bilinear + weight x counts + terms, by loops."""
    known = {tuple(x) for s in ("train", "valid", "test") for x in index.split(s).tolist()}
    out = []
    for tail_side in (False, True):
        for h, r, t in triples.tolist():
            answer = t if tail_side else h
            total = np.empty(E)
            for e in range(E):
                if tail_side:
                    total[e] = scores[h, r, e] + weight * (counts[r, e] + counts[R + r, h]) + terms[h, e]
                else:
                    total[e] = scores[e, r, t] + weight * (counts[R + r, e] + counts[r, t]) + terms[t, e]
            rivals = [e for e in range(E) if e != answer and ((h, r, e) if tail_side else (e, r, t)) not in known]
            above = sum(total[e] > total[answer] for e in rivals)
            tied = sum(total[e] == total[answer] for e in rivals)
            out.append(1 + above + tied / 2)
    return np.array(out)


@pytest.mark.parametrize("route", ["pairs", "union", "union in blocks"])
@pytest.mark.parametrize(
    "model_name, prior, chunk", [("complex", 1.0, 7), ("complex", 0.0, 100), ("distmult", 0.5, 100), ("simple", 0.5, 7)]
)
def test_evaluation_ranks_as_the_whole_score_by_numpy(model_name, prior, chunk, route, monkeypatch):
    """Every route (one pass over blocks, two passes for SimplE, one block) with the term's
    correction, its reached entities scored pair by pair a few at a time, or (a dot-product
    scorer) as blocks of a few columns of the queries' union."""
    from jobi_tf.evaluation import neighbourhood as correction

    monkeypatch.setattr(correction, "PAIRS", 37)
    monkeypatch.setattr(correction, "UNION_PRODUCTS_PER_PAIR", 0 if route == "pairs" else 10**9)
    if route == "union in blocks":
        monkeypatch.setattr(correction, "BLOCK", 50)  # 3 columns a block for 16 queries
    index = _graph()
    model = JoBiModel(
        num_entities=E, num_relations=R, model=model_name, dim=4, loss="sampled-softmax", slot_prior=prior
    )
    if prior:
        model.prior.fill(index.train)
    model.neighbourhood = nb.Neighbourhood(index.train, E, weight=0.8)
    ent, rel = model.entity_embeddings.numpy(), model.triple_relations.numpy()
    rel[:] *= 4.0  # bilinear scores of the terms' size, so the term reorders some answers
    model.triple_relations.assign(rel)
    terms = np.stack([model.neighbourhood.dense(x) for x in range(E)]).astype(np.float64)
    expected = _reference_ranks(
        index, all_scores(model_name, ent, rel), slot_log_counts_by_loop(index.train, E, R), prior, terms, index.test
    )
    evaluator = FilteredEvaluator(index, EvalConfig(rank_type="realistic", chunk_size=chunk, eval_batch_size=16))
    ranks = evaluator.ranks(model, index.test)
    np.testing.assert_allclose(tie_ranks(ranks.optimistic, ranks.pessimistic, "realistic"), expected)
    model.neighbourhood.weight = 0.0
    without = evaluator.ranks(model, index.test)
    counts = slot_log_counts_by_loop(index.train, E, R)
    plain = _reference_ranks(index, all_scores(model_name, ent, rel), counts, prior, 0 * terms, index.test)
    np.testing.assert_allclose(tie_ranks(without.optimistic, without.pessimistic, "realistic"), plain)
    assert not np.array_equal(expected, plain)  # the term moved some ranks


def test_the_top_answer_is_the_best_total():
    index = _graph()
    model = JoBiModel(num_entities=E, num_relations=R, model="complex", dim=4, loss="sampled-softmax")
    model.neighbourhood = nb.Neighbourhood(index.train, E, weight=50.0)  # the term decides
    evaluator = FilteredEvaluator(index, EvalConfig(chunk_size=7))
    ranks = evaluator.ranks(model, index.test, tails_only=True)
    ent, rel = model.entity_embeddings.numpy(), model.triple_relations.numpy()
    scores = all_scores("complex", ent, rel)
    known = {tuple(x) for s in ("train", "valid", "test") for x in index.split(s).tolist()}
    for (h, r, t), top in zip(index.test.tolist(), ranks.top1, strict=True):
        total = scores[h, r] + model.neighbourhood.dense(h)
        total[[e for e in range(E) if e != t and (h, r, e) in known]] = -np.inf
        assert top == int(np.argmax(total))


def _cfg(**train) -> RunConfig:
    base = dict(loss="sampled-softmax", epochs=1, jit_compile=False, slot_prior=1.0, choose_slot_prior=True)
    return RunConfig(
        data=DataConfig(dataset="synthetic"),
        model=ModelConfig(model="complex", dim=8, reciprocal=True),
        train=TrainConfig(**{**base, **train}),
        eval=EvalConfig(valid_sample=200),  # 14 rankings of it
        seed=5,
    )


def test_a_run_chooses_both_weights_on_validation_and_ranks_with_them_again(tmp_path):
    from jobi_tf.api.run import load_run
    from jobi_tf.training import prior_weight
    from jobi_tf.training.trainer import train

    result = train(_cfg(neighbourhood=1.0), tmp_path / "run", verbose=0)
    chosen = result.metrics["slot_prior"]
    pairs = {tuple(float(x) for x in k.split(",")): m for k, m in chosen["valid_mrr"].items()}
    assert set(pairs) == {(w, v) for w in prior_weight.WEIGHTS_WITH_NEIGHBOURHOOD for v in (0.0, 1.0)}
    best = prior_weight.best_pair(pairs)
    assert (chosen["chosen"], chosen["neighbourhood"]) == best
    saved = json.loads((tmp_path / "run" / "neighbourhood.json").read_text())
    assert saved == {"weight": best[1], "max_degree": nb.MAX_DEGREE, "scale": nb.SCALE}
    run = load_run(tmp_path / "run")
    assert run.neighbourhood_weight == best[1]
    assert run.evaluate("test")["mrr"] == pytest.approx(result.metrics["test"]["mrr"], rel=1e-6)
    sample = validation_sample(run.data.index.valid, 200)  # what the choice ranked

    def valid_mrr() -> float:
        return run.evaluator().evaluate(run.model, "valid", triples=sample)["mrr"]

    assert valid_mrr() == pytest.approx(pairs[best], rel=1e-6)
    run.use_neighbourhood(1.0)
    run.use_slot_prior(best[0])
    assert valid_mrr() == pytest.approx(pairs[best[0], 1.0], rel=1e-6)
    run.use_neighbourhood(0)
    assert valid_mrr() == pytest.approx(pairs[best[0], 0.0], rel=1e-6)
    run.use_neighbourhood(1.0)
    run.export(tmp_path / "cells", cells=4)  # the approximate export walks it too (below)
    rows = [[run.entities[i], run.relations[i % 3], run.entities[-i]] for i in range(1, 6)]
    exported = tf.saved_model.load(str(run.export(tmp_path / "export").path))  # the graph travels with it
    columns = {name: tf.constant([row[i] for row in rows]) for i, name in enumerate(("head", "relation", "tail"))}
    served = exported.signatures["score"](**columns)
    run.use_neighbourhood(0)
    assert not np.allclose(served["score"].numpy(), run.score(rows))  # the term is in what is served
    run.use_neighbourhood(1.0)
    np.testing.assert_allclose(served["score"].numpy(), run.score(rows), rtol=1e-6)
    with pytest.raises(ConfigError, match="neighbourhood"):
        run.use_neighbourhood(-1)
    from click.testing import CliRunner
    from jobi_tf.cli.main import main as cli

    run.use_neighbourhood(0)
    without = run.evaluate("test")["mrr"]
    for flag, v in (("--neighbourhood", "0"), ("--neighbourhood", "1")):
        result = CliRunner().invoke(cli, ["evaluate", str(tmp_path / "run"), flag, v, "--prior-weight", str(best[0])])
        assert result.exit_code == 0, result.output
        record = json.loads(result.output.strip().splitlines()[-1])
        assert record["neighbourhood"] == float(v)
        if v == "0":
            assert record["mrr"] == pytest.approx(without, rel=1e-6)
    refused = CliRunner().invoke(cli, ["evaluate", str(tmp_path / "run"), "--neighbourhood", "-1"])
    assert refused.exit_code != 0 and "--neighbourhood" in refused.output


def test_the_weight_file_and_the_setting_are_checked_in_one_line(tmp_path):
    bad = tmp_path / "neighbourhood.json"
    bad.write_text("{")
    with pytest.raises(JobiError, match="neighbourhood.json: cannot read"):
        nb.read_weight(bad)
    assert nb.read_weight(tmp_path / "none.json") is None
    with pytest.raises(ConfigError, match="neighbourhood"):
        TrainConfig(neighbourhood=-1.0)
    with pytest.raises(ConfigError, match="neighbourhood"):
        from jobi_tf.regimes.checks import check

        check(dataclasses.replace(_cfg(), train=TrainConfig(loss="full-softmax", neighbourhood=1.0)))


def _served_model(index, weight: float = 0.8):
    model = JoBiModel(num_entities=E, num_relations=R, model="complex", dim=4, loss="sampled-softmax", slot_prior=0.5)
    model.prior.fill(index.train)
    model.neighbourhood = nb.Neighbourhood(index.train, E, weight=weight)
    model.triple_relations.assign(4.0 * model.triple_relations.numpy())
    return model


@pytest.mark.parametrize("cap", [2000, 6])
def test_the_export_walks_the_graph_to_the_same_terms(cap, monkeypatch):
    from jobi_tf.export.served_neighbourhood import ServedNeighbourhood

    monkeypatch.setattr(nb, "MAX_DEGREE", cap)
    index = _graph()
    near = nb.Neighbourhood(index.train, E, weight=0.8)
    rows, ids, terms = (t.numpy() for t in ServedNeighbourhood(near).reach(np.arange(E)))
    served = np.zeros((E, E), np.float32)
    served[rows, ids] = terms
    np.testing.assert_array_equal(served, np.stack([near.dense(x) for x in range(E)]))
    new_id = np.random.default_rng(0).permutation(E)
    moved = near.renumbered(new_id)  # the same graph, other numbers (an approximate export's)
    for x in range(E):
        ids, values = near.reach(x)
        got_ids, got_values = moved.reach(new_id[x])
        order = np.argsort(new_id[ids])
        np.testing.assert_array_equal(got_ids, new_id[ids][order])
        np.testing.assert_allclose(got_values, values[order], rtol=1e-6)


def test_the_exact_signatures_score_and_rank_with_the_term():
    from jobi_tf.export.scorer_module import scorer_module

    index = _graph()
    model = _served_model(index)
    names = [str(i) for i in range(E)]
    vocab = _vocab_files(names, [str(r) for r in range(R)])
    module = scorer_module(model, *vocab)
    counts = slot_log_counts_by_loop(index.train, E, R)
    terms = np.stack([model.neighbourhood.dense(x) for x in range(E)]).astype(np.float64)
    total = all_scores("complex", model.entity_embeddings.numpy(), model.triple_relations.numpy())
    total = total + 0.5 * (counts[None, :R, :] + counts[R:, :, None].transpose(1, 0, 2)) + terms[:, None, :]
    h, r, t = (index.test[:, i] for i in range(3))
    got = module.score(*(tf.constant([str(x) for x in col]) for col in (h, r, t)))["score"].numpy()
    np.testing.assert_allclose(got, total[h, r, t], rtol=1e-5, atol=1e-5)
    out = module.predict_tail(tf.constant([str(x) for x in h]), tf.constant([str(x) for x in r]), tf.constant(E))
    np.testing.assert_allclose(out["scores"].numpy(), -np.sort(-total[h, r], axis=1), rtol=1e-5, atol=1e-5)
    heads = module.predict_head(tf.constant([str(x) for x in r]), tf.constant([str(x) for x in t]), tf.constant(E))
    np.testing.assert_allclose(heads["scores"].numpy(), -np.sort(-total[:, r, t].T, axis=1), rtol=1e-5, atol=1e-5)


def _vocab_files(entities, relations):
    import tempfile
    from pathlib import Path

    folder = Path(tempfile.mkdtemp())
    (folder / "e.txt").write_text("\n".join(entities) + "\n")
    (folder / "r.txt").write_text("\n".join(relations) + "\n")
    return str(folder / "e.txt"), str(folder / "r.txt")


def test_the_approximate_signatures_walk_the_term_too(tmp_path):
    """Probing every cell gives the exact answers; probing one, every answer carries its exact
    total (the term included), and every entity the term reaches is a candidate."""
    from jobi_tf.config import ExportConfig
    from jobi_tf.data.vocab import Vocab
    from jobi_tf.export.savedmodel import export_saved_model

    index = _graph()
    model = _served_model(index, weight=2.0)
    entities = Vocab.from_labels([f"e{i}" for i in range(E)])
    relations = Vocab.from_labels([f"r{i}" for i in range(R)])
    cfg = ExportConfig(filter_known=True, cells=4)
    result = export_saved_model(model, entities, relations, tmp_path, cfg, train_triples=index.train)
    loaded = tf.saved_model.load(str(result.path))
    h, r = entities.decode(index.test[:, 0]), relations.decode(index.test[:, 1])

    def ask(signature, **extra):
        out = loaded.signatures[signature](head=tf.constant(h), relation=tf.constant(r), k=tf.constant(E), **extra)
        return out["tails"].numpy().astype(str), out["scores"].numpy()

    exact_names, exact_scores = ask("predict_tail")
    names, scores = ask("predict_tail_approximate", probe=tf.constant(4))
    np.testing.assert_allclose(scores, exact_scores, rtol=1e-5, atol=1e-5)
    finite = np.isfinite(exact_scores)  # (known facts all score -inf, in any order)
    np.testing.assert_array_equal(names[finite], exact_names[finite])
    names, scores = ask("predict_tail_approximate", probe=tf.constant(1))
    exact = {(i, n): s for i, row in enumerate(exact_names) for n, s in zip(row, exact_scores[i], strict=True) if n}
    for i, (row, values) in enumerate(zip(names, scores, strict=True)):
        for name, value in zip(row, values, strict=True):
            if name:
                assert value == pytest.approx(exact[i, name], rel=1e-5, abs=1e-5)
        given = int(index.test[i, 0])
        unknown = {n for (j, n), value in exact.items() if j == i and np.isfinite(value)}  # (known: no answer)
        reached = set(entities.decode(model.neighbourhood.reach(given)[0]).tolist()) & unknown
        assert reached <= set(row)
