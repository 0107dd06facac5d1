"""``--regularizer dura``: DURA's weighted penalty against NumPy, and in every entry point."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from jobi_tf.cli.main import main
from random_batches import sampled_batch

import jobi_tf
from jobi_tf import regimes
from jobi_tf.config import REGULARIZERS, ModelConfig, RunConfig, TrainConfig
from jobi_tf.models import JoBiModel
from jobi_tf.runtime.errors import ConfigError


def _squared_moduli(model: str, x: np.ndarray) -> np.ndarray:
    if model == "complex":  # |re + i im|^2 per component
        return np.abs(x[..., : x.shape[-1] // 2] + 1j * x[..., x.shape[-1] // 2 :]) ** 2
    return x**2


def _numpy_dura(model: str, h: np.ndarray, relations: list[np.ndarray], t: np.ndarray) -> np.ndarray:
    """Per positive: the paper's DURA_W term for each relation row, summed (float64)."""
    h2, t2 = _squared_moduli(model, h.astype(np.float64)), _squared_moduli(model, t.astype(np.float64))
    return sum(
        np.sum(0.5 * (h2 + t2) + 1.5 * (h2 * r2 + t2 * r2), axis=-1)
        for r2 in (_squared_moduli(model, r.astype(np.float64)) for r in relations)
    )


@pytest.mark.parametrize("model", ["complex", "distmult"])
@pytest.mark.parametrize("loss", ["sampled-softmax", "full-softmax"])
def test_the_penalty_is_dura_w_over_the_relation_rows_the_scores_used(model, loss):
    """Reciprocal 1-vs-all scores both directions: both rows count; sampled negatives on one
    side per positive: that side's row only."""
    rng = np.random.default_rng(4)
    x = sampled_batch(rng, e=15, r=3, b=6, k=5)
    side = rng.random(6) < 0.5
    side[:2] = [True, False]
    x["corrupt_tail"] = np.repeat(side[:, None], 5, 1)
    x["positive_corrupt_tail"] = side
    x["valid_negative"] = x["candidates"] != np.where(x["corrupt_tail"], x["triples"][:, 2:3], x["triples"][:, :1])
    if loss == "full-softmax":
        x = {"triples": x["triples"]}
    kw = dict(num_entities=15, num_relations=3, model=model, dim=4, reciprocal=True, loss=loss)
    plain = JoBiModel(**kw)
    reg = JoBiModel(**kw, regularization=0.2, regularizer="dura")
    for a, b in zip(reg.weights, plain.weights, strict=True):
        a.assign(rng.normal(size=b.shape).astype("float32"))
        b.assign(a)
    ent, rel = plain.entity_embeddings.numpy(), plain.triple_relations.numpy()
    h, r, t = (x["triples"][:, i] for i in range(3))
    if loss == "full-softmax":
        relations = [rel[r], rel[r + 3]]
    else:
        relations = [np.where(side[:, None], rel[r], rel[r + 3])]
    per_positive = _numpy_dura(model, ent[h], relations, ent[t])
    expected = float(plain.compute_loss(x=x, y_pred=plain(x))) + 0.2 * per_positive.mean()
    np.testing.assert_allclose(float(reg.compute_loss(x=x, y_pred=reg(x))), expected, rtol=1e-5)
    assert JoBiModel.from_config(reg.get_config()).regularizer == "dura"


def test_it_is_a_regularizer_choice_for_complex_and_distmult_only():
    assert "dura" in REGULARIZERS
    regimes.check(RunConfig(train=TrainConfig(loss="full-softmax", regularizer="dura", regularization=0.05)))
    with pytest.raises(ConfigError, match="--model: --regularizer dura needs --model complex or distmult"):
        regimes.check(RunConfig(model=ModelConfig(model="simple"), train=TrainConfig(regularizer="dura")))
    with pytest.raises(ConfigError, match="--relation-penalty: needs --regularizer n3"):
        regimes.check(RunConfig(train=TrainConfig(regularizer="dura", relation_penalty=0.5)))
    with pytest.raises(ValueError, match="dura regularizer supports"):
        m = JoBiModel(num_entities=5, num_relations=2, model="simple", dim=2, regularization=0.1, regularizer="dura")
        m(sampled_batch(np.random.default_rng(0), e=5, r=2))


def test_a_one_vs_all_run_trains_with_it(tmp_path):
    data = jobi_tf.load_dataset("synthetic")
    run = jobi_tf.train(
        data, run_dir=tmp_path / "run", loss="full-softmax", reciprocal=True, regularizer="dura",
        regularization=0.05, optimizer="adagrad", lr=0.1, dim=16, batch_size=500, epochs=2, eval_every=2, verbose=0,
    )  # fmt: skip
    assert run.config.train.regularizer == "dura"
    assert run.metrics["test"]["mrr"] > 10 / data.index.num_entities  # far above a random ranking


def test_the_cli_offers_it(tmp_path):
    args = ["-q", "train", "--dataset", "synthetic", "--loss", "full-softmax", "--reciprocal", "--dim", "8"]
    args += ["--regularizer", "dura", "--regularization", "0.05", "--epochs", "1", "--eval-every", "1"]
    result = CliRunner().invoke(main, [*args, "--out", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "run" / "config.json").read_text())["train"]["regularizer"] == "dura"
    assert "dura:" in CliRunner().invoke(main, ["train", "--help"]).output
