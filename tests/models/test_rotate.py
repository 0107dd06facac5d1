"""RotatE against a NumPy reference of the paper's distance, and a run through training, evaluation,
export and prediction: a scorer that is not a dot product goes every way a bilinear one goes."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import jobi_tf
from jobi_tf.config import ModelConfig, RunConfig, TrainConfig
from jobi_tf.export.served_tables import EntityTable
from jobi_tf.models.scorers import get_scorer
from jobi_tf.models.scorers import rotate as rotate_module
from jobi_tf.regimes import check
from jobi_tf.runtime.errors import ConfigError, ExportError


def _complex(rows: np.ndarray) -> np.ndarray:
    d = rows.shape[-1] // 2
    return rows[..., :d] + 1j * rows[..., d:]


def _reference(h: np.ndarray, phases: np.ndarray, t: np.ndarray) -> np.ndarray:
    """``-sum_i |h_i e^{i theta_i} - t_i|`` (Sun et al., 2019, without the margin)."""
    return -np.abs(_complex(h) * np.exp(1j * phases) - _complex(t)).sum(axis=-1)


def test_score_and_both_queries_match_numpy():
    rng = np.random.default_rng(0)
    scorer, dim = get_scorer("rotate", 5), 5
    h, t, r = rng.normal(size=(7, 2 * dim)), rng.normal(size=(7, 2 * dim)), rng.uniform(-np.pi, np.pi, (7, dim))
    expected = _reference(h, r, t)
    h_, r_, t_ = (tf.constant(x) for x in (h, r, t))
    np.testing.assert_allclose(scorer.score(h_, r_, t_).numpy(), expected, rtol=1e-9)
    every_tail = scorer.score_candidates(scorer.tail_query(h_, r_), t_).numpy()  # [7, 7]
    every_head = scorer.score_candidates(scorer.head_query(r_, t_), h_).numpy()
    np.testing.assert_allclose(every_tail, _reference(h[:, None], r[:, None], t[None]), rtol=1e-9)
    np.testing.assert_allclose(every_head, _reference(h[None], r[:, None], t[:, None]), rtol=1e-9)


def test_each_examples_own_candidates_and_blocks_of_queries_score_alike(monkeypatch):
    rng = np.random.default_rng(1)
    scorer, dim = get_scorer("rotate", 3), 3
    h, r = rng.normal(size=(4, 2 * dim)), rng.uniform(-np.pi, np.pi, (4, dim))
    own, every = rng.normal(size=(4, 5, 2 * dim)), rng.normal(size=(9, 2 * dim))
    query = scorer.tail_query(tf.constant(h), tf.constant(r))
    np.testing.assert_allclose(
        scorer.score_candidates(query, tf.constant(own)).numpy(), _reference(h[:, None], r[:, None], own), rtol=1e-9
    )
    whole = scorer.score_candidates(query, tf.constant(every)).numpy()
    monkeypatch.setattr(rotate_module, "_BLOCK_ELEMENTS", 2 * every.size)  # two queries a block, one padded
    blocked = tf.function(scorer.score_candidates, input_signature=[tf.TensorSpec([None, 2 * dim], tf.float64)] * 2)
    np.testing.assert_allclose(blocked(query, tf.constant(every)).numpy(), whole, rtol=1e-12)
    np.testing.assert_allclose(whole, _reference(h[:, None], r[:, None], every[None]), rtol=1e-9)


def test_it_declares_a_distance_and_the_dot_product_paths_refuse_it_by_name():
    scorer = get_scorer("rotate", 2)
    assert not scorer.dot_product and not scorer.has_relation_query()
    with pytest.raises(ExportError, match="--table-dtype bfloat16: the rotate scorer is not a dot product"):
        EntityTable(np.zeros((3, 4), np.float32), scorer, dtype="bfloat16")
    assert not EntityTable(np.zeros((3, 4), np.float32), scorer).by_column
    with pytest.raises(
        ConfigError, match="--relation-prediction: the rotate scorer has no relation query; leave it at 0"
    ):
        check(RunConfig(model=ModelConfig(model="rotate"), train=TrainConfig(relation_prediction=0.5)))
    with pytest.raises(ConfigError, match="--regularizer: n3 is a bilinear model's penalty"):
        check(RunConfig(model=ModelConfig(model="rotate"), train=TrainConfig(regularizer="n3", regularization=0.1)))


def test_it_trains_evaluates_exports_and_predicts(tmp_path):
    """A cycle of 12 entities with ``next`` and ``prev``: sampled training lifts the training
    triples' rank well above chance; the export (no ``predict_relation``) answers as the run."""
    n = 12
    nxt = [(f"e{i}", "next", f"e{(i + 1) % n}") for i in range(n)]
    prv = [(t, "prev", h) for h, _, t in nxt]
    data = jobi_tf.load_dataset({"train": nxt + prv, "valid": nxt[:3], "test": prv[:3]})
    settings = {"loss": "sampled-softmax", "neg": 8, "optimizer": "adam", "lr": 0.05, "batch_size": 8}
    run = jobi_tf.train(
        data, model="rotate", dim=8, epochs=40, eval_every=40, regularizer="l2", run_dir=tmp_path / "run", **settings
    )
    assert run.evaluate(nxt + prv)["mrr"] > 0.6  # chance: about 0.25 among 12 entities
    result = run.export(tmp_path / "export")
    served = tf.saved_model.load(str(result.path))
    assert "predict_relation" not in served.signatures and "predict_tail" in served.signatures
    asked = {"head": tf.constant(["e0", "e5"]), "relation": tf.constant(["next", "next"]), "k": tf.constant(3)}
    answers = served.signatures["predict_tail"](**asked)
    expected = [run.predict_tails(h, "next", k=3, filter_known=False) for h in ("e0", "e5")]
    assert [[x.decode() for x in row] for row in answers["tails"].numpy()] == [[a for a, _ in e] for e in expected]
    rows = np.array(nxt[:4])
    scored = served.signatures["score"](
        **{k: tf.constant(rows[:, i]) for i, k in enumerate(("head", "relation", "tail"))}
    )
    np.testing.assert_allclose(scored["score"].numpy(), run.score(nxt[:4]), rtol=1e-5)
