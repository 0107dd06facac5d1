"""The slot prior (`jobi_tf.models.slot_prior`): counts, offsets, and the same score everywhere."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import tensorflow as tf
from references import slot_log_counts_by_loop

from jobi_tf.config import DataConfig, EvalConfig, ModelConfig, RunConfig, TrainConfig
from jobi_tf.contracts.scored_batch import ScoredBatch
from jobi_tf.data.index import index_from_ids
from jobi_tf.evaluation.ranking import FilteredEvaluator, tie_ranks
from jobi_tf.models import JoBiModel
from jobi_tf.models.slot_prior import SlotPrior, SparseSlotPrior, slot_counts, slot_log_counts, untrained_loss
from jobi_tf.regimes.checks import check
from jobi_tf.runtime.errors import ConfigError, JobiError

E, R = 12, 3


def _graph(seed: int = 0):
    rng = np.random.default_rng(seed)
    every = np.unique(
        np.stack([rng.integers(E, size=200), rng.integers(R, size=200), rng.integers(E, size=200)], 1), axis=0
    )
    every = every[rng.permutation(len(every))]
    # Skewed slots: the first entities fill most of them, so the counts differ.
    train = np.concatenate(
        [every[:60], np.stack([rng.integers(E, size=40), rng.integers(R, size=40), rng.integers(3, size=40)], 1)]
    )
    train = np.unique(train, axis=0)
    seen = {tuple(t) for t in train.tolist()}
    rest = np.array([t for t in every[60:].tolist() if tuple(t) not in seen])
    return index_from_ids({"train": train, "valid": rest[:15], "test": rest[15:30]}, E, R, "test")


def _counts_by_loop(train: np.ndarray) -> np.ndarray:
    return slot_log_counts_by_loop(train, E, R)


def test_the_table_holds_log_one_plus_the_count_of_each_entity_in_each_slot():
    index = _graph()
    np.testing.assert_allclose(slot_log_counts(index.train, E, R), _counts_by_loop(index.train), rtol=1e-5, atol=1e-6)


def test_a_table_above_the_limit_is_refused_naming_the_flag(monkeypatch):
    import jobi_tf.models.slot_prior as module

    monkeypatch.setattr(module, "MAX_PRIOR_ENTRIES", 2 * R * E - 1)
    with pytest.raises(ConfigError, match="slot_prior|slot-prior"):
        slot_log_counts(_graph().train, E, R)


def _sparse(table: np.ndarray, weight: float) -> SparseSlotPrior:
    """A sparse prior holding ``table``'s nonzero entries (any values, as the dense one takes)."""
    slots, entities = np.nonzero(table)
    keys = slots.astype(np.int64) * E + entities
    return SparseSlotPrior(weight, E, R, keys, table[slots, entities])


@pytest.mark.parametrize("store", ["dense", "sparse"])
def test_offsets_equal_a_numpy_reference_in_every_direction(store):
    rng = np.random.default_rng(1)
    table = rng.normal(size=(2 * R, E)).astype(np.float32)
    table[rng.random(table.shape) < 0.4] = 0  # entities absent from a slot
    prior = SlotPrior(tf.Variable(table), 0.7, R) if store == "dense" else _sparse(table, 0.7)
    h, r, t = rng.integers(E, size=9), rng.integers(R, size=9), rng.integers(E, size=9)
    weighted = 0.7 * table
    tails = weighted[r] + weighted[R + r, h][:, None]
    heads = weighted[R + r] + weighted[r, t][:, None]
    triples = weighted[r, t] + weighted[R + r, h]
    relations = weighted[:R, t].T + weighted[R:, h].T
    got_tails, got_heads = prior.tails(tf.constant(h), tf.constant(r)), prior.heads(tf.constant(r), tf.constant(t))
    np.testing.assert_allclose(tf.convert_to_tensor(got_tails), tails, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(tf.convert_to_tensor(got_heads), heads, rtol=1e-5, atol=1e-6)
    for lo, hi in [(0, 5), (5, 11), (11, E)]:  # ranking reads a block of entities at a time
        np.testing.assert_allclose(got_tails[:, lo:hi], tails[:, lo:hi], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got_heads[:, lo:hi], heads[:, lo:hi], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(
        prior.triples(tf.constant(h), tf.constant(r), tf.constant(t)), triples, rtol=1e-5, atol=1e-6
    )
    np.testing.assert_allclose(prior.relations(tf.constant(h), tf.constant(t)), relations, rtol=1e-5, atol=1e-6)
    # A triple's score is the same whichever direction asks it.
    np.testing.assert_allclose(tails[np.arange(9), t], triples, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(heads[np.arange(9), h], triples, rtol=1e-5, atol=1e-6)


def _model(
    index, reciprocal: bool = True, weight: float = 1.0, zero: bool = False, loss: str = "full-softmax"
) -> JoBiModel:
    model = JoBiModel(
        num_entities=E,
        num_relations=R,
        model="complex",
        dim=4,
        loss=loss,
        reciprocal=reciprocal,
        slot_prior=weight,
    )
    model.prior.fill(index.train)
    if zero:  # every bilinear score 0: the model is its prior alone
        for var in (model.entity_embeddings, model.triple_relations):
            var.assign(np.zeros(var.shape, np.float32))
    return model


def _popularity_ranks(index, triples: np.ndarray, tail: bool) -> np.ndarray:
    """Filtered realistic ranks of each answer when candidates are scored by their slot count."""
    counts = np.expm1(_counts_by_loop(index.train))
    known = {tuple(x) for s in ("train", "valid", "test") for x in index.split(s).tolist()}
    ranks = []
    for h, r, t in triples.tolist():
        answer, slot = (t, r) if tail else (h, R + r)
        others = [e for e in range(E) if e != answer and ((h, r, e) if tail else (e, r, t)) not in known]
        above = sum(counts[slot, e] > counts[slot, answer] for e in others)
        tied = sum(counts[slot, e] == counts[slot, answer] for e in others)
        ranks.append(1 + above + tied / 2)
    return np.array(ranks)


@pytest.mark.parametrize(
    "reciprocal, loss, chunk",
    [(True, "full-softmax", 100), (False, "full-softmax", 100), (False, "sampled-softmax", 5)],
)
def test_an_untrained_model_ranks_as_counting_slot_frequencies_does(reciprocal, loss, chunk):
    index = _graph()
    model = _model(index, reciprocal, zero=True, loss=loss)
    evaluator = FilteredEvaluator(index, EvalConfig(rank_type="realistic", chunk_size=chunk))  # 5: in blocks
    ranks = evaluator.ranks(model, index.test)
    got = tie_ranks(ranks.optimistic, ranks.pessimistic, "realistic")
    expected = np.concatenate(
        [_popularity_ranks(index, index.test, tail=False), _popularity_ranks(index, index.test, tail=True)]
    )
    np.testing.assert_allclose(got, expected)


@pytest.mark.parametrize("loss", ["full-softmax", "sampled-softmax"])
def test_evaluation_and_score_triples_add_the_prior_to_the_bilinear_score(loss):
    index = _graph()
    with_prior = _model(index, reciprocal=False, loss=loss)
    plain = JoBiModel(num_entities=E, num_relations=R, model="complex", dim=4, loss=loss)
    for var in ("entity_embeddings", "triple_relations"):
        getattr(plain, var).assign(getattr(with_prior, var))
    h, r, t = index.test[:, 0], index.test[:, 1], index.test[:, 2]
    table = _counts_by_loop(index.train)
    expected = plain.score_triples(index.test).numpy() + table[r, t] + table[R + r, h]
    np.testing.assert_allclose(with_prior.score_triples(index.test).numpy(), expected, rtol=1e-5, atol=1e-6)


def test_training_logits_add_the_prior_and_the_untrained_loss_is_its_softmax_loss():
    index = _graph()
    model = _model(index, reciprocal=True, zero=True)
    batch = ScoredBatch(model, {"triples": tf.constant(index.train, tf.int32)})
    logits = model.objective.logits(batch)
    table = _counts_by_loop(index.train)
    h, r, t = index.train[:, 0], index.train[:, 1], index.train[:, 2]
    np.testing.assert_allclose(logits["triple_tail"], table[r] + table[R + r, h][:, None], rtol=1e-5)
    np.testing.assert_allclose(logits["triple_head"], table[R + r] + table[r, t][:, None], rtol=1e-5)
    loss = float(model.objective.loss({"triples": tf.constant(index.train, tf.int32)}, logits))
    assert loss == pytest.approx(untrained_loss(slot_log_counts(index.train, E, R), index.train, 1.0), rel=1e-5)
    assert loss < 2 * math.log(E)  # the prior starts below a uniform softmax


def test_the_counts_are_saved_but_not_trained():
    model = _model(_graph(), weight=0.5)
    assert model.slot_log_counts.path in {w.path for w in model.non_trainable_weights}
    assert model.slot_log_counts.path not in {w.path for w in model.trainable_weights}
    assert model.get_config()["slot_prior"] == 0.5


def _cfg(**train) -> RunConfig:
    return RunConfig(
        data=DataConfig(dataset="synthetic"), model=ModelConfig(reciprocal=True), train=TrainConfig(**train)
    )


def test_the_full_softmax_without_relation_prediction_and_sampled_losses_take_a_prior():
    check(_cfg(loss="full-softmax", slot_prior=1.0))
    check(_cfg(loss="sampled-softmax", slot_prior=1.0))
    with pytest.raises(ConfigError, match="slot-prior|slot_prior"):
        check(_cfg(loss="k-vs-all", slot_prior=1.0))
    with pytest.raises(ConfigError, match="relation-prediction"):
        check(_cfg(loss="full-softmax", slot_prior=1.0, relation_prediction=1.0))
    with pytest.raises(ValueError, match="full-softmax"):
        JoBiModel(num_entities=E, num_relations=R, loss="k-vs-all", slot_prior=1.0)
    sampled = JoBiModel(num_entities=E, num_relations=R, loss="sampled-softmax", slot_prior=1.0)
    assert not sampled.prior.in_loss and not hasattr(sampled, "slot_log_counts")  # no [2R, E] table


@pytest.mark.parametrize(
    "reciprocal, loss", [(True, "full-softmax"), (False, "full-softmax"), (False, "sampled-softmax")]
)
def test_the_export_scores_and_ranks_with_the_prior(reciprocal, loss, tmp_path):
    from jobi_tf.config import ExportConfig
    from jobi_tf.data.vocab import Vocab
    from jobi_tf.export.savedmodel import export_saved_model

    index = _graph()
    model = _model(index, reciprocal=reciprocal, weight=0.6, loss=loss)
    rng = np.random.default_rng(2)
    for var in (model.entity_embeddings, model.triple_relations):
        var.assign(0.3 * rng.normal(size=var.shape).astype(np.float32))
    entities, relations = Vocab.from_labels([f"e{i}" for i in range(E)]), Vocab.from_labels([f"r{i}" for i in range(R)])
    result = export_saved_model(model, entities, relations, tmp_path, ExportConfig(), train_triples=index.train)
    loaded = tf.saved_model.load(str(result.path))

    def call(signature, **inputs):
        tensors = {k: tf.constant(v, tf.int32 if k == "k" else tf.string) for k, v in inputs.items()}
        return {k: v.numpy() for k, v in loaded.signatures[signature](**tensors).items()}

    every = np.array([(h, r, t) for h in range(E) for r in range(R) for t in range(E)], np.int32)
    scores = model.score_triples(tf.constant(every)).numpy().reshape(E, R, E)  # bilinear + prior (tested above)
    h, r, t = index.test[:, 0], index.test[:, 1], index.test[:, 2]
    out = call("score", head=entities.decode(h), relation=relations.decode(r), tail=entities.decode(t))
    np.testing.assert_allclose(out["score"], scores[h, r, t], rtol=1e-5, atol=1e-5)
    k = 4
    out = call("predict_tail", head=entities.decode(h), relation=relations.decode(r), k=k)
    best = np.sort(scores[h, r, :], axis=1)[:, ::-1][:, :k]
    np.testing.assert_allclose(out["scores"], best, rtol=1e-5, atol=1e-5)
    out = call("predict_head", relation=relations.decode(r), tail=entities.decode(t), k=k)
    # A reciprocal model ranks heads with the inverse relation's rows; the prior's part is the same.
    queries = model.head_queries(tf.constant(r), tf.constant(t))
    table = 0.6 * _counts_by_loop(index.train)
    heads = (
        model.scorer.score_candidates(queries, model.entity_embeddings).numpy() + table[R + r] + table[r, t][:, None]
    )
    best = np.sort(heads, axis=1)[:, ::-1][:, :k]
    np.testing.assert_allclose(out["scores"], best, rtol=1e-5, atol=1e-5)
    out = call("predict_relation", head=entities.decode(h), tail=entities.decode(t), k=R)
    np.testing.assert_allclose(out["scores"], np.sort(scores[h, :, t], axis=1)[:, ::-1], rtol=1e-5, atol=1e-5)


def _run_cfg(lr: float, epochs: int = 1, init: str = "table-glorot", regularization: float = 0.05) -> RunConfig:
    """The stall tests' small 1-vs-all run (`test_stalls._cfg`), with the prior."""
    from test_stalls import _cfg as stall_cfg

    return stall_cfg(lr, init, regularization, epochs, slot_prior=1.0)


def test_a_run_that_learns_nothing_beyond_the_prior_warns_against_the_priors_own_loss(tmp_path, caplog):
    """With a prior the untrained loss is the prior's, not 2 ln N; a run whose tables cannot move
    (lr 1e-12) sits there and says so; the counts are saved with the weights and restored."""
    import json
    import logging

    from jobi_tf.api.run import restore_model
    from jobi_tf.config.runs import RunFolder
    from jobi_tf.training.trainer import load_data, train

    caplog.set_level(logging.WARNING)
    result = train(_run_cfg(lr=1e-12), tmp_path / "run", verbose=0)
    lines = [r.getMessage() for r in caplog.records if r.name == "jobi_tf.training.stalls"]
    assert len(lines) == 1 and lines[0].startswith("epoch 1 ended at the slot prior's own loss (triple loss ")
    [warning] = json.loads((tmp_path / "run" / "metrics.json").read_text())["warnings"]
    _, _, index = load_data(_run_cfg(lr=1e-12))
    prior_loss = untrained_loss(slot_log_counts(index.train, index.num_entities, index.num_relations), index.train, 1.0)
    assert warning["uniform_loss"] == pytest.approx(prior_loss, rel=1e-6)
    assert abs(warning["triple_loss"] - prior_loss) < 0.01 * prior_loss < 2 * math.log(index.num_entities)
    assert result.metrics["valid"]["mrr"] > 0.05  # the counts rank far above chance (1 / 200 entities)
    model = restore_model(RunFolder(tmp_path / "run"))
    np.testing.assert_allclose(
        model.slot_log_counts.numpy(), slot_log_counts(index.train, index.num_entities, index.num_relations)
    )


def test_a_run_whose_loss_leaves_the_priors_is_not_warned(tmp_path):
    """On this small typed graph the counts say nearly all: the first epoch may end near the
    prior's own loss (warned), the third ends well below it (not warned)."""
    from jobi_tf.training.trainer import load_data, train

    cfg = _run_cfg(lr=0.2, epochs=3, init="row-glorot", regularization=0.0)
    result = train(cfg, tmp_path / "run", verbose=0)
    _, _, index = load_data(cfg)
    counts = slot_log_counts(index.train, index.num_entities, index.num_relations)
    prior_loss = untrained_loss(counts, index.train, 1.0)
    losses = [h["triple_loss"] for h in result.metrics["history"]]
    assert losses[2] < 0.99 * prior_loss
    assert 3 not in [w["epoch"] for w in result.metrics.get("warnings", [])]


def test_a_sampled_run_trains_without_the_counts_and_ranks_and_reloads_with_them(tmp_path):
    """Sampled training's loss leaves the counts out (the same seed trains the same tables with
    and without them); validation, test and a reloaded run rank with them; the sparse counts
    live beside the weights and equal the dense table's nonzero entries."""
    import json

    from jobi_tf.api.run import load_run
    from jobi_tf.training.trainer import load_data, train

    base = _cfg(loss="sampled-softmax", epochs=1, eval_every=1, jit_compile=False)
    base = dataclasses.replace(base, model=ModelConfig(model="complex", dim=8), seed=5)
    plain = train(base, tmp_path / "plain", verbose=0)
    with_counts = train(
        dataclasses.replace(base, train=dataclasses.replace(base.train, slot_prior=1.0)), tmp_path / "prior", verbose=0
    )
    history = [json.loads((tmp_path / d / "metrics.json").read_text())["history"] for d in ("plain", "prior")]
    assert history[0][0]["triple_loss"] == pytest.approx(history[1][0]["triple_loss"], rel=1e-6)
    assert with_counts.metrics["test"]["mrr"] != pytest.approx(plain.metrics["test"]["mrr"])
    _, _, index = load_data(base)
    keys, values = slot_counts(index.train, index.num_entities, index.num_relations)
    dense = slot_log_counts(index.train, index.num_entities, index.num_relations)
    assert len(keys) == np.count_nonzero(dense)
    np.testing.assert_allclose(values, dense.reshape(-1)[keys], rtol=1e-6)
    run = load_run(tmp_path / "prior")  # the counts come from the folder, not the data
    assert run.evaluate("test")["mrr"] == pytest.approx(with_counts.metrics["test"]["mrr"], rel=1e-6)
    # One validation each: the same best weights, so the weight can be moved after training.
    run.use_slot_prior(0)
    assert run.evaluate("test")["mrr"] == pytest.approx(plain.metrics["test"]["mrr"], rel=1e-6)
    other = load_run(tmp_path / "plain")  # trained without: the counts come from its data
    other.use_slot_prior(1.0)
    assert other.evaluate("test")["mrr"] == pytest.approx(with_counts.metrics["test"]["mrr"], rel=1e-6)
    with pytest.raises(JobiError, match="--prior-weight: must be a finite number >= 0"):
        other.use_slot_prior(-1)
    assert other.model.slot_prior == 1.0 and other.model.get_config()["slot_prior"] == 1.0  # the prior owns it
    other.use_slot_prior(0)
    assert other.model.get_config()["slot_prior"] == 0.0
    with pytest.raises(ConfigError, match="--slot-prior: must be a finite number >= 0"):
        other.model.prior = SparseSlotPrior(float("nan"), E, R)


def test_the_cli_moves_a_sampled_runs_weight_and_refuses_a_one_vs_all_runs(tmp_path):
    import json

    from click.testing import CliRunner
    from jobi_tf.cli.main import main as cli

    from jobi_tf.api.run import load_run
    from jobi_tf.training.trainer import train

    sampled = dataclasses.replace(_cfg(loss="sampled-softmax", epochs=1, jit_compile=False), seed=5)
    train(sampled, tmp_path / "sampled", verbose=0)
    runner = CliRunner()
    outs = {}
    for weight in ("0", "1"):
        flag = "--prior-weight" if weight == "1" else "--slot-prior"  # the older spelling still works
        result = runner.invoke(cli, ["evaluate", str(tmp_path / "sampled"), flag, weight])
        assert result.exit_code == 0, result.output
        outs[weight] = json.loads(result.output.strip().splitlines()[-1])
    assert outs["0"]["slot_prior"] == 0.0 and outs["1"]["slot_prior"] == 1.0
    assert outs["0"]["mrr"] != pytest.approx(outs["1"]["mrr"])
    export_args = ["export", str(tmp_path / "sampled"), "--out", str(tmp_path / "x"), "--prior-weight", "1"]
    result = runner.invoke(cli, export_args)
    assert result.exit_code == 0, result.output
    assert json.loads(result.output.strip().splitlines()[-1])["slot_prior"] == 1.0
    # The approximate signatures serve the counts too (tests/test_export_cells_counts.py), or the tables alone.
    for weight in ("1", "0"):
        result = runner.invoke(cli, [*export_args[:-1], weight, "--cells", "2", "--force"])
        assert result.exit_code == 0, result.output
        assert json.loads(result.output.strip().splitlines()[-1])["slot_prior"] == float(weight)
    refused = runner.invoke(cli, ["evaluate", str(tmp_path / "sampled"), "--prior-weight", "-1"])
    assert refused.exit_code != 0 and "--prior-weight: must be a finite number >= 0" in refused.output
    train(_run_cfg(lr=0.1), tmp_path / "one-vs-all", verbose=0)
    with pytest.raises(JobiError, match="only a sampled run's weight can change"):
        load_run(tmp_path / "one-vs-all").use_slot_prior(0.5)
    refused = runner.invoke(cli, ["evaluate", str(tmp_path / "one-vs-all"), "--hub-weight", "1"])
    assert refused.exit_code != 0 and "--hub-weight:" in refused.output and "only a sampled run" in refused.output
    refused = runner.invoke(cli, ["evaluate", str(tmp_path / "sampled"), "--hub-weight", "-1"])
    assert refused.exit_code != 0 and "--hub-weight: must be a finite number >= 0" in refused.output


def test_unreadable_counts_are_named_in_one_line(tmp_path):
    (tmp_path / "slot_counts.npz").write_bytes(b"not a zip")
    with pytest.raises(JobiError, match="slot_counts.npz: cannot read the slot prior's counts"):
        SparseSlotPrior(1.0, E, R).load(tmp_path / "slot_counts.npz")
    prior = SparseSlotPrior(1.0, E + 5, R)
    prior.fill(np.array([[E + 4, R - 1, E + 3]]))
    prior.save(tmp_path / "big.npz")
    with pytest.raises(JobiError, match="belong to a larger graph"):
        SparseSlotPrior(1.0, E, R).load(tmp_path / "big.npz")
    with pytest.raises(JobiError, match="no counts yet"):
        SparseSlotPrior(1.0, E, R).triples(tf.constant([0]), tf.constant([0]), tf.constant([0]))


def test_a_sampled_run_chooses_the_weight_on_validation_and_keeps_it(tmp_path, monkeypatch):
    """--choose-slot-prior ranks the validation set at each weight after training, keeps the
    best (ties: the smaller), tests with it, and `load_run` ranks with it again; a choice of 0
    leaves the prior out of the reloaded model."""
    import json

    from jobi_tf.api.run import load_run
    from jobi_tf.training import prior_weight
    from jobi_tf.training.trainer import train

    base = _cfg(loss="sampled-softmax", epochs=1, jit_compile=False, slot_prior=1.0, choose_slot_prior=True)
    result = train(dataclasses.replace(base, seed=5), tmp_path / "run", verbose=0)
    chosen = result.metrics["slot_prior"]
    mrr = {float(w): m for w, m in chosen["valid_mrr"].items()}
    assert set(mrr) == set(prior_weight.WEIGHTS) and chosen["chosen"] == max(mrr, key=lambda w: (mrr[w], -w))
    run = load_run(tmp_path / "run")
    assert run.evaluate("test")["mrr"] == pytest.approx(result.metrics["test"]["mrr"], rel=1e-6)
    assert run.evaluate("valid")["mrr"] == pytest.approx(mrr[chosen["chosen"]], rel=1e-6)
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["slot_prior"] == chosen
    monkeypatch.setattr(prior_weight, "WEIGHTS", (0.0,))  # a choice of 0: the tables alone
    train(dataclasses.replace(base, seed=6), tmp_path / "zero", verbose=0)
    assert load_run(tmp_path / "zero").model.prior is None
    with pytest.raises(ConfigError, match="choose_slot_prior|choose-slot-prior"):
        _cfg(loss="sampled-softmax", choose_slot_prior=True)
    with pytest.raises(ConfigError, match="choose-slot-prior|choose_slot_prior"):
        check(_cfg(loss="full-softmax", slot_prior=1.0, choose_slot_prior=True))
