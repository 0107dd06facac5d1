"""TuckER against a NumPy reference of the paper's formula, and a short run through the public API."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import jobi_tf
from jobi_tf.config import MODELS, DistributeConfig, ModelConfig, RunConfig
from jobi_tf.models.scorers import get_scorer
from jobi_tf.regimes import check
from jobi_tf.runtime.errors import ConfigError


def _reference(core, h, r, t):
    """``sum_ijk W_ijk h_i r_j t_k`` and its three queries, by NumPy's einsum."""
    return (
        np.einsum("ijk,bi,bj,bk->b", core, h, r, t),
        np.einsum("ijk,bi,bj->bk", core, h, r),
        np.einsum("ijk,bj,bk->bi", core, r, t),
        np.einsum("ijk,bi,bk->bj", core, h, t),
    )


def test_scores_and_queries_match_numpy():
    rng = np.random.default_rng(0)
    dim, n = 5, 6
    scorer = get_scorer("tucker", dim)
    core = scorer.core.numpy().astype(np.float64)
    assert core.shape == (dim, dim, dim) and np.abs(core).max() <= 1.0  # the paper's U(-1, 1)
    h, r, t = (rng.normal(size=(n, dim)) for _ in range(3))
    score, tail_q, head_q, relation_q = _reference(core, h, r, t)
    h_, r_, t_ = (tf.constant(x, tf.float64) for x in (h, r, t))
    np.testing.assert_allclose(scorer.score(h_, r_, t_).numpy(), score, rtol=1e-10)
    np.testing.assert_allclose(scorer.tail_query(h_, r_).numpy(), tail_q, rtol=1e-10)
    np.testing.assert_allclose(scorer.head_query(r_, t_).numpy(), head_q, rtol=1e-10)
    np.testing.assert_allclose(scorer.relation_query(h_, t_).numpy(), relation_q, rtol=1e-10)


def test_score_candidates_ranks_with_the_reference_scores():
    rng = np.random.default_rng(1)
    dim, b, k, e = 4, 3, 5, 7
    scorer = get_scorer("tucker", dim)
    core = scorer.core.numpy().astype(np.float64)
    h, r = rng.normal(size=(b, dim)), rng.normal(size=(b, dim))
    every, own = rng.normal(size=(e, dim)), rng.normal(size=(b, k, dim))
    query = scorer.tail_query(tf.constant(h), tf.constant(r))
    expected_every = np.einsum("ijk,bi,bj,ek->be", core, h, r, every)  # [B, E]: every entity
    expected_own = np.einsum("ijk,bi,bj,bck->bc", core, h, r, own)  # [B, K]: each example's candidates
    np.testing.assert_allclose(scorer.score_candidates(query, tf.constant(every)).numpy(), expected_every, rtol=1e-10)
    np.testing.assert_allclose(scorer.score_candidates(query, tf.constant(own)).numpy(), expected_own, rtol=1e-10)


def test_it_is_a_model_choice_and_refuses_parameter_servers():
    assert "tucker" in MODELS and get_scorer("tucker").entity_width(200) == 200
    assert not get_scorer("tucker").weights  # no dim: widths only, no core
    check(RunConfig(model=ModelConfig(model="tucker")))
    sharded = RunConfig(model=ModelConfig(model="tucker"), distribute=DistributeConfig(strategy="parameter-server"))
    with pytest.raises(ConfigError, match="--model: tucker's core tensor cannot be sharded"):
        check(sharded)


def test_it_trains_on_a_tiny_graph_and_its_run_reloads(tmp_path):
    """A cycle of 12 entities, ``next`` and its inverse ``prev``: a few epochs of k-vs-all
    training lift the training triples' rank well above chance, and the reloaded run (core
    from the checkpoint) scores as the trained model."""
    n = 12
    nxt = [(f"e{i}", "next", f"e{(i + 1) % n}") for i in range(n)]
    prv = [(t, "prev", h) for h, _, t in nxt]
    data = jobi_tf.load_dataset({"train": nxt + prv, "valid": nxt[:3], "test": prv[:3]})
    settings = {"loss": "k-vs-all", "reciprocal": True, "optimizer": "adam", "lr": 0.05, "batch_size": 8}
    run = jobi_tf.train(data, model="tucker", dim=8, epochs=30, eval_every=30, run_dir=tmp_path / "run", **settings)
    assert run.model.scorer.core.shape == (8, 8, 8)
    assert run.evaluate(nxt + prv)["mrr"] > 0.6  # chance: about 0.25 among 12 entities
    again = jobi_tf.load_run(run.path)
    np.testing.assert_allclose(again.score(nxt[:4]), run.score(nxt[:4]), rtol=1e-6)
