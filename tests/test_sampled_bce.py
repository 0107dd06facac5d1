"""``--loss sampled-bce``: the logistic loss over sampled negatives, against NumPy, in every entry point."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from jobi_tf.cli.main import main
from random_batches import sampled_batch

import jobi_tf
from jobi_tf import regimes
from jobi_tf.config import LOSSES, RunConfig, TrainConfig
from jobi_tf.losses.sampled_bce import SampledBCE
from jobi_tf.models import JoBiModel
from jobi_tf.runtime.errors import ConfigError


def _numpy_logits(model: str, ent: np.ndarray, rel: np.ndarray, x: dict) -> np.ndarray:
    """``[B, 1 + K]``: the positive's score, then each candidate's from the side it replaces."""
    h, r, t = ent[x["triples"][:, 0]], rel[x["triples"][:, 1]], ent[x["triples"][:, 2]]
    c = ent[x["candidates"]]
    if model == "distmult":
        pos = np.sum(h * r * t, 1)
        as_tail, as_head = np.einsum("bd,bkd->bk", h * r, c), np.einsum("bd,bkd->bk", r * t, c)
    else:  # ComplEx: Re(<h, r, conj(t)>)
        d = ent.shape[1] // 2
        hc, rc, tc, cc = (v[..., :d] + 1j * v[..., d:] for v in (h, r, t, c))
        pos = np.real(np.sum(hc * rc * np.conj(tc), 1))
        as_tail = np.real(np.einsum("bd,bkd->bk", hc * rc, np.conj(cc)))
        as_head = np.real(np.einsum("bkd,bd->bk", cc * rc[:, None], np.conj(tc)))
    return np.concatenate([pos[:, None], np.where(x["corrupt_tail"], as_tail, as_head)], 1)


def _softplus(x: np.ndarray) -> np.ndarray:
    return np.log1p(np.exp(-np.abs(x))) + np.maximum(x, 0)


@pytest.mark.parametrize("model", ["distmult", "complex"])
def test_the_loss_and_the_pair_heads_match_numpy(model):
    rng = np.random.default_rng(3)
    x = sampled_batch(rng, e=20, r=4, b=6, k=7)
    x["valid_negative"][0, :3] = False  # accidental hits: not negatives
    x["valid_negative"][1, :] = False  # a positive with no valid negative at all
    m = JoBiModel(num_entities=20, num_relations=4, model=model, dim=5, joint=True, alpha=0.3, loss="sampled-bce")
    assert isinstance(m.objective, SampledBCE) and m.get_config()["loss"] == "sampled-bce"
    out = m(x)
    ent = m.entity_embeddings.numpy()
    tri = _numpy_logits(model, ent, m.triple_relations.numpy(), x)
    pair = _numpy_logits(model, ent, m.pair_relations.numpy(), x)
    np.testing.assert_allclose(out["triple"].numpy(), tri, rtol=1e-5, atol=1e-6)

    valid = x["valid_negative"].astype(np.float64)
    per_negative = (_softplus(tri[:, 1:]) * valid).sum(1) / np.maximum(valid.sum(1), 1)
    l_tri = np.mean(_softplus(-tri[:, 0]) + per_negative)
    assert per_negative[1] == 0.0  # only the positive's term is left
    labels = np.concatenate([np.ones((6, 1)), x["pair_labels"]], 1)  # JoBi's pair head, unchanged
    l_bi = np.mean(labels * _softplus(-pair) + (1 - labels) * _softplus(pair))
    np.testing.assert_allclose(float(m.compute_loss(x=x, y_pred=out)), l_tri + 0.3 * l_bi, rtol=1e-5)
    np.testing.assert_allclose(float(m.triple_loss_tracker.result()), l_tri, rtol=1e-5)


def test_it_is_a_loss_choice_of_the_sampled_regime():
    assert "sampled-bce" in LOSSES
    assert regimes.regime_of("sampled-bce").name == "sampled"
    regimes.check(RunConfig(train=TrainConfig(loss="sampled-bce")))
    with pytest.raises(ConfigError, match="--label-smoothing: needs --loss"):
        regimes.check(RunConfig(train=TrainConfig(loss="sampled-bce", label_smoothing=0.1)))


def test_jobi_trains_with_it_and_learns(tmp_path):
    data = jobi_tf.load_dataset("synthetic")
    run = jobi_tf.train(
        data, run_dir=tmp_path / "run", loss="sampled-bce", joint=True, p=0.3, dim=16, epochs=2, eval_every=2,
        batch_size=500, neg=16, lr=0.01, verbose=0,
    )  # fmt: skip
    history = run.metrics["history"][-1]
    assert history["triple_loss"] > 0 and history["pair_loss"] > 0
    assert run.metrics["test"]["mrr"] > 10 / data.index.num_entities  # far above a random ranking


def test_the_cli_offers_it(tmp_path):
    args = ["-q", "train", "--dataset", "synthetic", "--loss", "sampled-bce", "--joint", "--p", "0.3", "--dim", "8"]
    args += ["--epochs", "1", "--eval-every", "1", "--out", str(tmp_path / "run")]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "run" / "config.json").read_text())["train"]["loss"] == "sampled-bce"
    assert "sampled-bce:" in CliRunner().invoke(main, ["train", "--help"]).output
