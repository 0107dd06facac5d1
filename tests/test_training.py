"""Training runs: run folder contents, resume, refusal of mismatched runs, nothing written on bad data."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from jobi_tf.api import load_run
from jobi_tf.config import DataConfig, ModelConfig, RunConfig, SamplerConfig, TrainConfig
from jobi_tf.runtime.errors import CheckpointMismatchError, DatasetFormatError
from jobi_tf.training.checkpoints import load_checkpoint
from jobi_tf.training.trainer import build_model, load_data, make_optimizer, train


def _cfg(epochs=2, joint=True, **train_kw) -> RunConfig:
    return RunConfig(
        data=DataConfig(dataset="synthetic", synthetic_entities=80, synthetic_relations=4, synthetic_triples=800),
        sampler=SamplerConfig(batch_size=100, neg=8, p=0.3),
        model=ModelConfig(model="complex", dim=8, joint=joint),
        train=TrainConfig(epochs=epochs, eval_every=1, patience=10, jit_compile=False, **train_kw),
        seed=3,
    )


def test_run_folder_holds_config_vocab_checkpoints_logs_and_metrics(tmp_path):
    result = train(_cfg(), tmp_path / "run", verbose=0)
    run = tmp_path / "run"
    for name in ("config.json", "entities.txt", "relations.txt", "checkpoint.npz", "best.weights.npz", "metrics.json"):
        assert (run / name).is_file(), name
    assert any((run / "tensorboard").rglob("events.out.tfevents.*"))
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics == result.metrics
    for split in ("valid", "test"):
        for key in ("mrr", "hits@1", "hits@3", "hits@10"):
            assert 0.0 <= metrics[split][key] <= 1.0
    assert set(metrics["test"]["head"]) >= {"mrr", "hits@10"} and "tail" in metrics["test"]
    assert metrics["epochs"] == 2 and metrics["train_seconds"] > 0
    assert [h["epoch"] for h in metrics["history"]] == [1, 2]
    assert "pair_loss" in metrics["history"][0] and "val_hits_at_10" in metrics["history"][0]
    assert all(h["positives_per_second"] > 0 and h["positives_per_second_median"] > 0 for h in metrics["history"])


def test_resumed_run_ends_where_an_uninterrupted_run_ends(tmp_path):
    straight = train(_cfg(epochs=4), tmp_path / "straight", verbose=0)
    train(_cfg(epochs=2), tmp_path / "resumed", verbose=0)
    (tmp_path / "resumed" / "metrics.json").unlink()  # as if stopped after epoch 2's checkpoint
    resumed = train(_cfg(epochs=4), tmp_path / "resumed", verbose=0)
    assert resumed.metrics["epochs"] == 4
    assert [h["epoch"] for h in resumed.metrics["history"]] == [1, 2, 3, 4]
    for split in ("valid", "test"):
        assert resumed.metrics[split]["mrr"] == pytest.approx(straight.metrics[split]["mrr"], abs=1e-4)


@pytest.mark.parametrize("monitor", ["hits@10", "mrr"])
def test_best_epoch_is_the_best_validation_of_the_monitored_metric(tmp_path, monitor):
    result = train(_cfg(epochs=6, monitor=monitor), tmp_path / "run", verbose=0)
    history = result.metrics["history"]
    values = [h[monitor] for h in history]
    first_best = history[values.index(max(values))]["epoch"]  # ties keep the earlier epoch
    assert result.metrics["best_epoch"] == first_best
    assert result.metrics["valid"][monitor] == pytest.approx(max(values))


def test_checkpoint_restores_weights_and_optimizer_state(tmp_path):
    cfg = _cfg(epochs=1)
    train(cfg, tmp_path / "run", verbose=0)
    _, _, index = load_data(cfg)
    model, optimizer = build_model(index, cfg), make_optimizer(cfg.train, index.num_entities)
    optimizer.build(model.trainable_variables)
    state = load_checkpoint(tmp_path / "run" / "checkpoint.npz", model, optimizer)
    assert state["epoch"] == 1
    assert int(optimizer.iterations.numpy()) > 0
    with np.load(tmp_path / "run" / "checkpoint.npz") as data:
        key = next(k for k in data.files if k.endswith("entity_embeddings") and k.startswith("model/"))
        np.testing.assert_array_equal(data[key], model.entity_embeddings.numpy())


def test_a_folder_with_another_run_is_refused(tmp_path):
    train(_cfg(epochs=1), tmp_path / "run", verbose=0)
    with pytest.raises(CheckpointMismatchError, match="joint was True, now False"):
        train(_cfg(epochs=1, joint=False), tmp_path / "run", verbose=0)


def test_bad_data_writes_nothing(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.txt").write_text("a\tr\tb\nb\tr\n")
    (data / "valid.txt").write_text("a\tr\tb\n")
    (data / "test.txt").write_text("a\tr\tb\n")
    cfg = dataclasses.replace(_cfg(), data=DataConfig(dataset=None, data_dir=str(data)))
    with pytest.raises(DatasetFormatError, match=r"train.txt:2: expected 3 tab-separated fields, got 2"):
        train(cfg, tmp_path / "run", verbose=0)
    assert not (tmp_path / "run").exists()


def test_load_run_rebuilds_the_best_model(tmp_path):
    result = train(_cfg(epochs=2), tmp_path / "run", verbose=0)
    run = load_run(tmp_path / "run")
    again = run.evaluator().evaluate(run.model, "test")
    assert again["mrr"] == pytest.approx(result.metrics["test"]["mrr"], abs=1e-9)


def test_full_softmax_joint_training_runs(tmp_path):
    cfg = dataclasses.replace(
        _cfg(epochs=1), train=TrainConfig(epochs=1, eval_every=1, loss="full-softmax", jit_compile=False)
    )
    result = train(cfg, tmp_path / "run", verbose=0)
    assert "pair_loss" in result.metrics["history"][0]


def test_checkpoint_files_are_npz_even_when_written_in_row_blocks(tmp_path, monkeypatch):
    import keras

    import jobi_tf.training.checkpoints as checkpoints

    monkeypatch.setattr(checkpoints, "_ROWS_PER_BLOCK", 3)  # 7 rows: blocks of 3, 3, 1
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(7), keras.layers.Dense(1)])
    checkpoints.save_weights(tmp_path / "w.npz", model)
    with np.load(tmp_path / "w.npz") as data:
        assert len(data.files) == len(model.weights)
        for v in model.weights:
            np.testing.assert_array_equal(data[f"model/{v.path}"], v.numpy())


def test_weights_and_checkpoints_load_back_in_row_blocks(tmp_path, monkeypatch):
    """Tables longer than a block are read back a block of rows at a time, exactly."""
    import keras

    import jobi_tf.training.checkpoints as checkpoints
    from jobi_tf.models import JoBiModel

    monkeypatch.setattr(checkpoints, "_ROWS_PER_BLOCK", 3)  # 10 entities: blocks of 3, 3, 3, 1

    def model(seed):
        keras.utils.set_random_seed(seed)
        return JoBiModel(num_entities=10, num_relations=2, model="complex", dim=4, joint=True, name="m")

    saved = model(1)
    optimizer = keras.optimizers.Adam()
    optimizer.build(saved.trainable_variables)
    for var in optimizer.variables:
        if len(var.shape) == 2:
            var.assign(np.random.default_rng(2).normal(size=var.shape).astype(np.float32))
    checkpoints.save_weights(tmp_path / "w.npz", saved)
    checkpoints.save_checkpoint(tmp_path / "c.npz", saved, optimizer, {"epoch": 3})

    restored = model(5)
    assert not np.array_equal(restored.entity_embeddings.numpy(), saved.entity_embeddings.numpy())
    checkpoints.load_weights(tmp_path / "w.npz", restored)
    for a, b in zip(restored.weights, saved.weights, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())

    other = model(6)
    other_opt = keras.optimizers.Adam()
    other_opt.build(other.trainable_variables)
    assert checkpoints.load_checkpoint(tmp_path / "c.npz", other, other_opt) == {"epoch": 3}
    for a, b in zip([*other.weights, *other_opt.variables], [*saved.weights, *optimizer.variables], strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())

    wrong = JoBiModel(num_entities=11, num_relations=2, model="complex", dim=4, joint=True, name="m")
    before = [v.numpy().copy() for v in wrong.weights]
    with pytest.raises(checkpoints.CheckpointMismatchError, match="entity_embeddings has shape"):
        checkpoints.load_weights(tmp_path / "w.npz", wrong)
    for v, b in zip(wrong.weights, before, strict=True):  # a mismatch changes nothing
        np.testing.assert_array_equal(v.numpy(), b)


def test_throughput_is_the_epoch_mean_and_the_median_window(monkeypatch):
    """100 steps of 10 positives, 0.1 s each except 10 slow ones of 1.1 s: mean 10 / 0.2 = 50 /s;
    windows of 10 steps, the first (compilation) left out: 9 at 100 /s, so the median is 100."""
    import jobi_tf.training.callbacks as training

    clock = iter(np.cumsum([0.0] + [1.1 if i in range(20, 30) else 0.1 for i in range(100)]))
    monkeypatch.setattr(training.time, "perf_counter", lambda: float(next(clock)))
    monkeypatch.setattr(training.Throughput, "WINDOW_POSITIVES", 100)
    callback, logs = training.Throughput(batch_size=10), {}
    callback.on_epoch_begin(0)
    for step in range(100):
        callback.on_train_batch_end(step)
    callback.on_epoch_end(0, logs)
    assert logs["positives_per_second"] == pytest.approx(1000 / 20.0)
    assert logs["positives_per_second_median"] == pytest.approx(100.0)


def test_validation_inside_epochs_ranks_the_sample_and_stops_early_there(tmp_path, monkeypatch):
    """``--eval-every-steps 2 --valid-sample 10``: validations every 2 steps rank the 10 fixed
    triples (20 queries), record their step and seconds, and early stopping acts on them: the
    run stops inside an epoch, keeps the best step's weights, and a rerun returns its metrics."""
    from jobi_tf.evaluation.ranking import FilteredEvaluator

    scripted = iter([0.5, 0.6, 0.4, 0.3])  # best at the 2nd validation, patience 2: stop at the 4th
    seen = []
    real = FilteredEvaluator.evaluate

    def evaluate(self, model, split="test", **kw):
        metrics = real(self, model, split, **kw)
        if split == "valid":
            seen.append(metrics["count"])
            metrics = {**metrics, "mrr": next(scripted)}
        return metrics

    monkeypatch.setattr(FilteredEvaluator, "evaluate", evaluate)
    cfg = _cfg(epochs=5, eval_every_steps=4)
    cfg = dataclasses.replace(
        cfg,
        sampler=dataclasses.replace(cfg.sampler, batch_size=20),  # 10 steps an epoch
        train=dataclasses.replace(cfg.train, patience=2),
        eval=dataclasses.replace(cfg.eval, valid_sample=10),
    )
    result = train(cfg, tmp_path / "run", verbose=0).metrics
    history = result["history"]
    assert seen == [20, 20, 20, 20]
    assert [(h["epoch"], h.get("step")) for h in history] == [(1, 4), (1, 8), (1, None), (2, 4)]
    assert all(h["valid_seconds"] > 0 for h in history)
    assert (result["best_epoch"], result["best_step"]) == (1, 8)
    assert result["test"]["count"] == 2 * len(load_data(cfg)[2].split("test"))  # the test set stays whole
    with np.load(tmp_path / "run" / "checkpoint.npz") as data:
        state = json.loads(data["__state__"].tobytes().decode("utf-8"))
    assert (state["epoch"], state["step"]) == (1, 4)  # written by the validation that stopped the run
    assert train(cfg, tmp_path / "run", verbose=0).metrics == result


def test_throughput_leaves_the_validations_inside_an_epoch_out(monkeypatch):
    """Three 1-second steps with a 5-second validation after the first: 3 s of training."""
    from jobi_tf.training import callbacks

    clock, paused = iter([0.0, 1.0, 7.0, 8.0]), [0.0]
    monkeypatch.setattr(callbacks.time, "perf_counter", lambda: next(clock))
    throughput = callbacks.Throughput(10, paused=lambda: paused[0])
    throughput.set_params({"steps": 3})
    throughput.on_epoch_begin(0)
    throughput.on_train_batch_end(0)
    paused[0] = 5.0  # a validation ran after step 1
    throughput.on_train_batch_end(1)
    throughput.on_train_batch_end(2)
    logs = {}
    throughput.on_epoch_end(0, logs)
    assert logs["epoch_seconds"] == 3.0 and logs["positives_per_second"] == 10.0
