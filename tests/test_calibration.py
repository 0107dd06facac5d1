"""Calibration: Platt fits, corruptions, metrics, and probabilities in the export, against NumPy."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import tensorflow as tf
from click.testing import CliRunner
from jobi_tf.cli.main import main

from jobi_tf.calibration import Calibration, brier, corrupt, ece, fit_platt
from jobi_tf.config import ExportConfig
from jobi_tf.export import export_saved_model


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


def test_calibrate_command_writes_the_file_and_the_export_serves_probabilities(tmp_path):
    from tiny_cli import tiny_flags

    runner = CliRunner()
    run = tmp_path / "run"
    assert runner.invoke(main, ["-q", "train", *tiny_flags(2), "--out", str(run)]).exit_code == 0
    result = runner.invoke(main, ["-q", "calibrate", str(run), "--negatives", "2", "--min-positives", "5"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert (run / "calibration.json").is_file() and summary["rows"] == 3
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
