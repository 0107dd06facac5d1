"""What a finished run shows in TensorBoard: grouped tags, steps in epochs from 1, best epoch, named embeddings."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import tensorflow as tf
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from jobi_tf.config import DataConfig, ModelConfig, RunConfig, SamplerConfig, TrainConfig
from jobi_tf.training.summaries import HPARAM_METRICS
from jobi_tf.training.trainer import train


def _cfg(joint: bool, reciprocal: bool = False) -> RunConfig:
    return RunConfig(
        data=DataConfig(dataset="synthetic", synthetic_entities=80, synthetic_relations=4, synthetic_triples=800),
        sampler=SamplerConfig(batch_size=100, neg=8, p=0.3),
        model=ModelConfig(dim=8, joint=joint, reciprocal=reciprocal),
        train=TrainConfig(epochs=4, eval_every=2, patience=10, jit_compile=False, lr=0.01, monitor="mrr"),
        seed=3,
    )


def _scalars(log_dir) -> dict[str, list[tuple[int, float]]]:
    events = EventAccumulator(str(log_dir), size_guidance={"tensors": 0})
    events.Reload()
    return {
        tag: [(e.step, float(tf.make_ndarray(e.tensor_proto))) for e in events.Tensors(tag)]
        for tag in events.Tags()["tensors"]
        if not tag.startswith("_hparams_") and tag != "triple_scorer"  # the Graphs tab's graph, not a scalar
    }


@pytest.fixture(scope="module")
def jobi_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("tb") / "run"
    return run_dir, train(_cfg(joint=True), run_dir, verbose=0).metrics


def test_tags_are_grouped_and_steps_are_epochs_from_one(jobi_run):
    run_dir, metrics = jobi_run
    scalars = _scalars(run_dir / "tensorboard")
    groups = {tag.split("/")[0] for tag in scalars}
    assert groups == {"loss", "speed", "optimizer", "valid", "best", "test"}
    assert [s for s, _ in scalars["loss/triple"]] == [1, 2, 3, 4]
    assert [s for s, _ in scalars["speed/epoch_seconds"]] == [1, 2, 3, 4]
    assert {"loss/pair", "loss/total"} <= set(scalars)
    valid = dict(scalars["valid/mrr"])
    assert sorted(valid) == [2, 4]  # the epochs validated, as metrics.json's history says
    for h in metrics["history"]:
        assert valid[h["epoch"]] == pytest.approx(h["mrr"])
        assert dict(scalars["valid/type_inconsistent"])[h["epoch"]] == pytest.approx(h["val_type_inconsistent"])


def test_best_and_test_points_are_at_the_tested_epoch(jobi_run):
    run_dir, metrics = jobi_run
    scalars = _scalars(run_dir / "tensorboard")
    best_epoch = metrics["best_epoch"]
    assert scalars["test/mrr"] == [(best_epoch, pytest.approx(metrics["test"]["mrr"]))]
    assert scalars["best/valid_mrr"][-1] == (best_epoch, pytest.approx(metrics["valid"]["mrr"]))
    assert set(HPARAM_METRICS) <= set(scalars)  # every HParams column has a value


def test_a_baseline_logs_no_duplicate_total_loss(tmp_path):
    train(_cfg(joint=False), tmp_path / "run", verbose=0)
    scalars = _scalars(tmp_path / "run" / "tensorboard")
    assert "loss/triple" in scalars and "loss/total" not in scalars and "loss/pair" not in scalars


def test_projector_holds_named_entity_and_relation_tables(tmp_path):
    from jobi_tf.api import load_run

    train(_cfg(joint=False, reciprocal=True), tmp_path / "run", verbose=0)
    log_dir = tmp_path / "run" / "tensorboard"
    config = (log_dir / "projector_config.pbtxt").read_text()
    assert 'metadata_path: "entities.tsv"' in config and 'metadata_path: "relations.tsv"' in config
    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(log_dir)))  # what the Projector reads
    run = load_run(tmp_path / "run")
    np.testing.assert_array_equal(
        reader.get_tensor("entities/.ATTRIBUTES/VARIABLE_VALUE"), run.entity_embeddings().vectors
    )
    entities = (log_dir / "entities.tsv").read_text().splitlines()
    assert entities[0] == "name\ttrain_degree" and [x.split("\t")[0] for x in entities[1:]] == run.entities
    relations = (log_dir / "relations.tsv").read_text().splitlines()
    assert relations == run.relations + [f"{r}⁻¹" for r in run.relations]  # the inverse rows, named
    events = EventAccumulator(str(log_dir), size_guidance={"tensors": 0})
    events.Reload()
    assert "triple_scorer" in events.Tags()["tensors"]  # the Graphs tab's graph of the test-time scorer


def test_hparams_show_the_dataset_name_not_a_path(tmp_path):
    folder = DataConfig(dataset=None, data_dir=str(tmp_path / "graphs" / "g1"))
    cfg = dataclasses.replace(_cfg(joint=False), data=folder)
    assert cfg.hparams()["dataset"] == "g1"


def test_projector_of_a_large_graph_shows_its_most_frequent_entities(tmp_path, monkeypatch):
    from jobi_tf.models import JoBiModel
    from jobi_tf.training import summaries

    monkeypatch.setattr(summaries, "PROJECTOR_MAX_ENTITIES", 3)
    model = JoBiModel(num_entities=6, num_relations=2, model="distmult", dim=2)
    model.entity_embeddings.assign(np.arange(12, dtype=np.float32).reshape(6, 2))
    train = np.array([[5, 0, 4], [5, 1, 2], [4, 0, 5], [0, 1, 5]])  # degrees: 5 -> 4, 4 -> 2, then 0 and 2 -> 1
    labels = np.array([f"e{i}" for i in range(6)])
    summaries.write_projector(tmp_path, model, labels, np.array(["r0", "r1"]), train)
    rows = (tmp_path / "entities.tsv").read_text().splitlines()[1:]
    assert [r.split("\t") for r in rows] == [["e0", "1"], ["e4", "2"], ["e5", "4"]]  # id order kept
    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(tmp_path)))
    np.testing.assert_array_equal(
        reader.get_tensor("entities/.ATTRIBUTES/VARIABLE_VALUE"), np.arange(12).reshape(6, 2)[[0, 4, 5]]
    )
