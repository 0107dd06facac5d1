"""Calibration: Platt fits, corruptions, metrics, and probabilities in the export, against NumPy."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import tensorflow as tf
from click.testing import CliRunner
from jobi_tf.cli.main import main

from jobi_tf.config import ExportConfig
from jobi_tf.evaluation.calibration import (
    ISOTONIC_EPS,
    Calibration,
    _rectangular,
    brier,
    corrupt,
    ece,
    fit_isotonic,
    fit_platt,
)
from jobi_tf.export.savedmodel import export_saved_model
from jobi_tf.export.served_tables import interpolate


def _isotonic_reference(y: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The weighted isotonic fit by brute force: for each point, max over lower ends of the min
    over upper ends of the block mean (the min-max formula of isotonic regression)."""
    n = len(y)
    means = np.full((n, n), np.nan)
    for i in range(n):
        for j in range(i, n):
            means[i, j] = np.sum(w[i : j + 1] * y[i : j + 1]) / np.sum(w[i : j + 1])
    return np.array([max(min(means[i, j] for j in range(k, n)) for i in range(k + 1)) for k in range(n)])


@pytest.mark.parametrize("seed", range(5))
def test_isotonic_fit_equals_the_min_max_formula(seed):
    rng = np.random.default_rng(seed)
    scores = rng.normal(size=40)
    labels = (rng.random(40) < 1 / (1 + np.exp(-2 * scores))).astype(float)
    weights = rng.uniform(0.2, 2.0, size=40)
    knots, values = fit_isotonic(scores, labels, weights)
    order = np.argsort(scores)
    expected = np.clip(_isotonic_reference(labels[order], weights[order]), ISOTONIC_EPS, 1 - ISOTONIC_EPS)
    # Each point's fitted value is its block's value; blocks sit at their weighted mean score.
    np.testing.assert_allclose(np.unique(expected.round(12)), np.unique(values.round(12)))
    assert np.all(np.diff(knots) > 0) and np.all(np.diff(values) >= 0)


def test_row_wise_interpolation_equals_numpy_interp_with_padded_rows():
    rng = np.random.default_rng(4)
    fits = []
    for n in (1, 3, 7):
        knots = np.sort(rng.normal(size=n))
        fits.append((knots, np.sort(rng.random(n))))
    knots, values = _rectangular(fits)
    x = rng.normal(scale=2, size=(3, 50))
    got = interpolate(tf.constant(knots, tf.float32), tf.constant(values, tf.float32), tf.constant(x, tf.float32))
    expected = np.stack([np.interp(x[i], k, v) for i, (k, v) in enumerate(fits)])
    np.testing.assert_allclose(got.numpy(), expected, atol=1e-6)
    cal = Calibration(None, None, np.zeros(3, bool), "isotonic", knots, values)
    np.testing.assert_allclose(cal.probability(x, np.arange(3)[:, None]), expected, atol=1e-12)


def test_platt_fit_recovers_the_generating_parameters():
    rng = np.random.default_rng(0)
    scores = rng.normal(size=50_000) * 3
    labels = rng.random(len(scores)) < 1 / (1 + np.exp(-(1.7 * scores - 0.8)))
    a, b = fit_platt(scores, labels)
    assert a == pytest.approx(1.7, abs=0.05) and b == pytest.approx(-0.8, abs=0.05)
    # Weights count a class as many times: doubling the negatives' weight shifts b by -log 2.
    a2, b2 = fit_platt(scores, labels, np.where(labels, 1.0, 2.0))
    assert a2 == pytest.approx(a, abs=0.02) and b2 == pytest.approx(b - np.log(2), abs=0.03)


def test_brier_and_ece_by_hand():
    p, y = np.array([0.05, 0.15, 0.95, 0.85]), np.array([0, 1, 1, 1])
    assert brier(p, y) == pytest.approx((0.05**2 + 0.85**2 + 0.05**2 + 0.15**2) / 4)
    # Bins 0 and 1 hold one prediction each, bins 8 and 9 one each: |conf - acc| per bin, weighted.
    assert ece(p, y) == pytest.approx((0.05 + 0.85 + 0.05 + 0.15) / 4)


@pytest.mark.parametrize("typed", [False, True])
def test_corruptions_change_one_side_and_are_never_known_facts(small_typed_index, typed):
    index = small_typed_index
    rng = np.random.default_rng(1)
    neg, tail = corrupt(index.test, index, rng, typed=typed)
    known = {tuple(t) for s in ("train", "valid", "test") for t in index.split(s).tolist()}
    assert not any(tuple(t) in known for t in neg.tolist())
    np.testing.assert_array_equal(neg[tail, 0], index.test[tail, 0])
    np.testing.assert_array_equal(neg[~tail, 2], index.test[~tail, 2])
    np.testing.assert_array_equal(neg[:, 1], index.test[:, 1])
    if typed:
        tails = {(r, t) for _, r, t in index.train.tolist()}
        heads = {(r, h) for h, r, _ in index.train.tolist()}
        pairs = zip(neg.tolist(), tail.tolist(), strict=True)
        in_slot = [((r, t) in tails) if side else ((r, h) in heads) for (h, r, t), side in pairs]
        assert np.mean(in_slot) > 0.99  # from the slot pools (uniform only where a pool is empty)


def test_calibration_round_trips_through_its_file(tmp_path):
    cal = Calibration(np.array([1.5, 0.5]), np.array([-0.2, 0.1]), np.array([False, True]))
    cal.save(tmp_path / "c.json")
    again = Calibration.load(tmp_path / "c.json")
    np.testing.assert_array_equal(again.a, cal.a)
    np.testing.assert_array_equal(again.fallback, cal.fallback)
    np.testing.assert_allclose(
        again.probability(np.array([2.0, 2.0]), np.array([0, 1])), 1 / (1 + np.exp([-2.8, -1.1]))
    )


@pytest.mark.parametrize("reciprocal", [False, True])
def test_the_export_returns_sigma_of_a_score_plus_b_per_relation_row(random_export, tmp_path, reciprocal):
    source = random_export("complex", reciprocal=reciprocal)
    rows = len(source.relations) * (2 if reciprocal else 1)
    rng = np.random.default_rng(3)
    cal = Calibration(rng.uniform(0.5, 2, rows), rng.normal(size=rows), np.zeros(rows, bool))
    result = export_saved_model(
        source.model, source.entities, source.relations, tmp_path, ExportConfig(), calibration=cal
    )
    loaded = tf.saved_model.load(str(result.path))
    names = {"head": source.entities.decode([1, 2]), "relation": source.relations.decode([0, 3])}
    out = loaded.signatures["predict_tail"](**{k: tf.constant(v) for k, v in names.items()}, k=tf.constant(4))
    expected = 1 / (1 + np.exp(-(cal.a[[0, 3], None] * out["scores"].numpy() + cal.b[[0, 3], None])))
    np.testing.assert_allclose(out["probabilities"].numpy(), expected, rtol=1e-5)
    heads = loaded.signatures["predict_head"](
        relation=tf.constant(names["relation"]), tail=tf.constant(names["head"]), k=tf.constant(4)
    )
    row = np.array([0, 3]) + (len(source.relations) if reciprocal else 0)  # inverse rows rank heads
    expected = 1 / (1 + np.exp(-(cal.a[row, None] * heads["scores"].numpy() + cal.b[row, None])))
    np.testing.assert_allclose(heads["probabilities"].numpy(), expected, rtol=1e-5)
    info = json.loads((result.path / "assets.extra" / "jobi_tf.json").read_text())
    assert info["calibrated"] is True
    plain = tf.saved_model.load(str(source.path))
    assert "probabilities" not in plain.signatures["predict_tail"].structured_outputs


def test_the_export_interpolates_isotonic_rows(random_export, tmp_path):
    source = random_export("complex", reciprocal=True)
    rows = 2 * len(source.relations)
    rng = np.random.default_rng(5)
    fits = [(np.sort(rng.normal(scale=3, size=n)), np.sort(rng.random(n))) for n in rng.integers(1, 9, size=rows)]
    cal = Calibration(None, None, np.zeros(rows, bool), "isotonic", *_rectangular(fits))
    result = export_saved_model(
        source.model, source.entities, source.relations, tmp_path, ExportConfig(), calibration=cal
    )
    loaded = tf.saved_model.load(str(result.path))
    heads = source.entities.decode([1, 2, 3])
    relations = source.relations.decode([0, 3, 1])
    tails = loaded.signatures["predict_tail"](
        head=tf.constant(heads), relation=tf.constant(relations), k=tf.constant(5)
    )
    forward = [0, 3, 1]
    expected = np.stack([np.interp(s, *fits[r]) for s, r in zip(tails["scores"].numpy(), forward, strict=True)])
    np.testing.assert_allclose(tails["probabilities"].numpy(), expected, atol=1e-5)
    scored = loaded.signatures["score"](
        head=tf.constant(heads), relation=tf.constant(relations), tail=tails["tails"][:, 0]
    )
    np.testing.assert_allclose(scored["probability"].numpy(), expected[:, 0], atol=1e-5)
    found = loaded.signatures["predict_head"](
        relation=tf.constant(relations), tail=tf.constant(heads), k=tf.constant(5)
    )
    inverse = [r + len(source.relations) for r in forward]  # a reciprocal model ranks heads with inverse rows
    expected = np.stack([np.interp(s, *fits[r]) for s, r in zip(found["scores"].numpy(), inverse, strict=True)])
    np.testing.assert_allclose(found["probabilities"].numpy(), expected, atol=1e-5)
    cal.save(tmp_path / "c.json")
    again = Calibration.load(tmp_path / "c.json")
    np.testing.assert_array_equal(again.knots, cal.knots)
    assert again.method == "isotonic"
    assert json.loads((result.path / "assets.extra" / "jobi_tf.json").read_text())["calibration"] == "isotonic"


@pytest.mark.parametrize("method", ["platt", "isotonic"])
def test_calibrate_command_writes_the_file_and_the_export_serves_probabilities(tmp_path, method):
    from tiny_cli import tiny_flags

    runner = CliRunner()
    run = tmp_path / "run"
    assert runner.invoke(main, ["-q", "train", *tiny_flags(2), "--out", str(run)]).exit_code == 0
    flags = ["--negatives", "2", "--min-positives", "5", "--method", method]
    result = runner.invoke(main, ["-q", "calibrate", str(run), *flags])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert (run / "calibration.json").is_file() and summary["rows"] == 3 and summary["method"] == method
    for kind in ("uniform", "typed"):
        metrics = summary["test"][kind]
        assert 0 <= metrics["brier_calibrated"] <= 1 and 0.5 <= metrics["accuracy_per_relation_thresholds"] <= 1
    assert runner.invoke(main, ["-q", "export", str(run), "--out", str(tmp_path / "e")]).exit_code == 0
    head = (run / "entities.txt").read_text().splitlines()[0]
    relation = (run / "relations.txt").read_text().splitlines()[0]
    answer = runner.invoke(
        main, ["-q", "predict", "--model", str(tmp_path / "e"), "--head", head, "--relation", relation, "--json"]
    )
    probabilities = json.loads(answer.stdout)["probabilities"]
    assert len(probabilities) == 10 and all(0 <= p <= 1 for p in probabilities)


def test_dataclass_is_frozen():
    cal = Calibration(np.zeros(1), np.zeros(1), np.zeros(1, bool))
    with pytest.raises(dataclasses.FrozenInstanceError):
        cal.method = "isotonic"
