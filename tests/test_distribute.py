"""Distributed training: a mirrored step equals a single-device step; strategies and checks."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from jobi_tf.config import RunConfig, SamplerConfig, with_settings
from jobi_tf.distributed.strategy import configure_devices, is_chief, make_strategy
from jobi_tf.models import JoBiModel
from jobi_tf.optimizers import make_optimizer
from jobi_tf.regimes.checks import check_placement
from jobi_tf.runtime.errors import ConfigError, JobiError
from jobi_tf.sampling.pipelines import make_train_dataset


def _batch(index, shared_negatives: int, pair_every: int = 1, biased_chunk: int = 0) -> dict[str, np.ndarray]:
    cfg = SamplerConfig(batch_size=8, neg=6, p=0.5, shared_negatives=shared_negatives, biased_chunk=biased_chunk)
    return next(iter(make_train_dataset(index, cfg, seed=1, pair_every=pair_every)))


def _one_step(strategy, index, batch, weights, optimizer: str, jit: bool, loss: str, pair_every=1) -> list[np.ndarray]:
    """Weights and optimizer slots after one ``fit`` step on ``batch`` from ``weights``."""
    with strategy.scope():
        model = _model(index, loss, pair_every)
        opt = make_optimizer(optimizer, 0.05)
        model.compile(optimizer=opt, jit_compile=jit)
        opt.build(model.trainable_variables)
        model.set_weights(weights)
    model.fit(tf.data.Dataset.from_tensors(batch).repeat(), epochs=1, steps_per_epoch=1, verbose=0)
    return [v.numpy() for v in model.weights] + [v.numpy() for v in opt.variables]


@pytest.fixture(scope="module")
def mirrored():
    """One strategy for the module: strategies made one after another in a process share
    collective-op keys, and a second one can trip over the first one's instances."""
    return make_strategy("mirrored")


def _model(index, loss: str, pair_every: int = 1) -> JoBiModel:
    """JoBi with sampled negatives; 1-vs-all without the pair head (its dense gradients take
    the optimizers' dense paths, `LazyAdagrad`'s fused kernel among them)."""
    joint = loss == "sampled-softmax"
    return JoBiModel(
        index.num_entities, index.num_relations, model="complex", dim=4, joint=joint, loss=loss, pair_every=pair_every
    )


@pytest.mark.parametrize(
    "optimizer,shared,loss,pair_every,biased_chunk",
    [
        ("adam", 0, "sampled-softmax", 1, 0),
        ("lazy-adam", 0, "sampled-softmax", 1, 0),
        ("lazy-adam", 4, "sampled-softmax", 1, 0),
        ("lazy-adam", 4, "sampled-softmax", 2, 0),  # each replica's every 2nd positive: the same rows
        ("lazy-adam", 4, "sampled-softmax", 2, 2),  # and each replica's runs of 2 share their biased negatives
        ("adam", 0, "sampled-softmax", 2, 0),  # per triple: the pair rows split with their positives
        ("adagrad", 0, "sampled-softmax", 1, 0),
        ("adagrad", 0, "full-softmax", 1, 0),
        ("row-adagrad", 0, "sampled-softmax", 1, 0),
        ("row-adagrad", 0, "full-softmax", 1, 0),
    ],
)
def test_mirrored_step_with_two_replicas_equals_single_device_step(
    small_typed_index, mirrored, optimizer, shared, loss, pair_every, biased_chunk
):
    """Same initial weights, same global batch (negatives fixed): the 2-replica step (each
    replica gets half the batch; gradients summed across replicas, sparse ones gathered)
    leaves the weights and optimizer slots the single-device step leaves."""
    assert mirrored.num_replicas_in_sync == 2
    batch = _batch(small_typed_index, shared, pair_every, biased_chunk)
    assert ("chunk_candidates" in batch) == bool(biased_chunk)
    if loss == "full-softmax":
        batch = {"triples": batch["triples"]}
    weights = [w.copy() for w in _model(small_typed_index, loss, pair_every).get_weights()]
    args = (small_typed_index, batch, weights, optimizer)
    single = _one_step(tf.distribute.get_strategy(), *args, True, loss, pair_every)
    twice = _one_step(mirrored, *args, False, loss, pair_every)  # as train() does
    assert not np.allclose(single[0], weights[0])  # the step did move the entity table
    assert len(single) == len(twice)
    # The two paths sum the gradient in different orders (per replica, then across), and
    # Adagrad's first step divides by the gradient's own magnitude, which amplifies float32
    # rounding where a gradient is tiny: 1.3e-6 on one of 2,400 weights was seen on an AVX2
    # CPU, 8.4e-6 on an AVX-512 one (full-softmax, one run in four; the entity table's dense,
    # fused update). A real error (a gradient twice too large, a row left out) changes the
    # accumulators by a factor or the weights by about the learning rate (0.05 here).
    for a, b in zip(single, twice, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=5e-5)


def test_mirrored_needs_two_devices_and_says_how_to_get_them(monkeypatch):
    assert len(tf.config.list_logical_devices("CPU")) == 2  # tests/conftest.py split the CPU
    with pytest.raises(ConfigError, match="--gpus: GPU 3 does not exist"):
        make_strategy("mirrored", gpus="3")
    with pytest.raises(ConfigError, match="--gpus: must be comma-separated"):
        make_strategy("mirrored", gpus="first")
    with pytest.raises(ConfigError, match="--gpus: only applies"):
        make_strategy("default", gpus="0")


def test_multi_worker_without_tf_config_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    with pytest.raises(ConfigError, match=r"--strategy: multi-worker reads the cluster from \$TF_CONFIG"):
        make_strategy("multi-worker")
    monkeypatch.setenv("TF_CONFIG", "{not json")
    with pytest.raises(JobiError, match=r"\$TF_CONFIG: not JSON"):
        make_strategy("multi-worker")


def test_logical_cpus_cannot_change_once_tensorflow_started(monkeypatch):
    assert configure_devices(2) == 2  # already so: accepted
    with pytest.raises(JobiError, match="--logical-cpus 3: TensorFlow has already started with 2"):
        configure_devices(3)
    monkeypatch.setenv("JOBI_TF_LOGICAL_CPUS", "two")
    with pytest.raises(JobiError, match=r"\$JOBI_TF_LOGICAL_CPUS: must be an integer"):
        configure_devices()


def test_batch_must_split_evenly_into_replicas_and_shared_chunks():
    check_placement(RunConfig(sampler=SamplerConfig(batch_size=8, shared_negatives=0)), 2)
    with pytest.raises(ConfigError, match=r"--batch-size: must be a multiple of 2 \(2 replicas\)"):
        check_placement(RunConfig(sampler=SamplerConfig(batch_size=9, shared_negatives=0)), 2)
    with pytest.raises(ConfigError, match=r"multiple of 8 \(2 replicas x --shared-negatives 4\)"):
        check_placement(RunConfig(sampler=SamplerConfig(batch_size=12, shared_negatives=4)), 2)


def test_shared_negatives_left_to_the_run_are_each_replicas_batch():
    from jobi_tf import regimes

    two = regimes.resolve(RunConfig(sampler=SamplerConfig(batch_size=1000, p=0.3)), replicas=2)
    assert (two.sampler.shared_negatives, two.sampler.biased_chunk) == (500, 10)
    check_placement(two, 2)
    odd = regimes.resolve(RunConfig(sampler=SamplerConfig(batch_size=9)), replicas=2)
    assert odd.sampler.shared_negatives == 0  # no equal slices: refused below, naming the batch
    with pytest.raises(ConfigError, match=r"--batch-size: must be a multiple of 2 \(2 replicas\)"):
        check_placement(odd, 2)


@pytest.mark.parametrize(
    ("settings", "says"),
    [
        # 60 positives in runs of 20 split into 2 slices of 30: a run would straddle the replicas.
        (
            {"batch_size": 60, "shared_negatives": 30, "p": 0.5, "biased_chunk": 20},
            r"multiple of 40 \(2 replicas x --biased-chunk 20\)",
        ),
        # Per triple, the pair labels of every 4th positive: 6 rows split into 2 slices of 3.
        (
            {"batch_size": 12, "shared_negatives": 0, "joint": True, "pair_every": 4},
            r"multiple of 8 \(2 replicas x --pair-every 4\)",
        ),
        ({"batch_size": 12, "shared_negatives": 4}, r"multiple of 8 \(2 replicas x --shared-negatives 4\)"),
        ({"batch_size": 8, "steps_per_execution": 4}, r"--steps-per-execution: must be 1 with several replicas"),
    ],
)
def test_replicas_refuse_slices_that_split_a_group_of_positives(settings, says):
    """Every feature with a row per group of positives must split with its positives."""
    cfg = with_settings(RunConfig(), {"biased_chunk": 0, **settings})
    with pytest.raises(ConfigError, match=says) as caught:
        check_placement(cfg, 2)
    assert "\n" not in str(caught.value)
    check_placement(cfg, 1)  # one device: nothing to split


def test_replicas_accept_slices_of_whole_groups():
    cfg = with_settings(RunConfig(), {"batch_size": 80, "shared_negatives": 40, "p": 0.5, "biased_chunk": 20})
    check_placement(with_settings(cfg, {"joint": True, "pair_every": 4}), 2)


def test_a_lone_process_is_the_chief(mirrored):
    assert is_chief(tf.distribute.get_strategy())
    assert is_chief(mirrored)


def test_train_runs_under_the_mirrored_strategy_and_writes_its_run_folder(tmp_path, mirrored):
    from jobi_tf.config import DataConfig, DistributeConfig, TrainConfig
    from jobi_tf.training.trainer import train

    cfg = RunConfig(
        data=DataConfig(dataset="synthetic", synthetic_entities=200, synthetic_relations=6, synthetic_triples=2000),
        sampler=SamplerConfig(batch_size=100, neg=8, p=0.3),
        train=TrainConfig(epochs=2, eval_every=1),
        distribute=DistributeConfig(strategy="mirrored"),
    )
    result = train(cfg, tmp_path / "run", verbose=0, strategy=mirrored)
    assert (tmp_path / "run" / "checkpoint.npz").exists()
    assert result.metrics["epochs"] == 2 and 0 < result.metrics["test"]["mrr"] <= 1
    assert len(result.metrics["history"]) == 2
    odd = RunConfig(sampler=SamplerConfig(batch_size=101), distribute=DistributeConfig(strategy="mirrored"))
    with pytest.raises(ConfigError, match="--batch-size: must be a multiple of 2"):
        train(odd, tmp_path / "odd", verbose=0, strategy=mirrored)
    assert not (tmp_path / "odd").exists()  # refused before anything was written


def test_train_runs_mirrored_with_biased_chunks_and_pair_every_or_refuses_in_one_line(tmp_path, mirrored):
    """A mirrored JoBi run whose replicas each get whole runs of biased negatives and whole
    pair rows trains; one whose runs straddle the replicas is refused before anything is written."""
    from jobi_tf.config import DataConfig, DistributeConfig, TrainConfig
    from jobi_tf.training.trainer import train

    data = DataConfig(dataset="synthetic", synthetic_entities=200, synthetic_relations=6, synthetic_triples=2000)
    cfg = with_settings(
        RunConfig(data=data, distribute=DistributeConfig(strategy="mirrored"), train=TrainConfig(epochs=1)),
        {"batch_size": 100, "neg": 8, "p": 0.5, "shared_negatives": 50, "biased_chunk": 10},
    )
    cfg = with_settings(cfg, {"joint": True, "pair_every": 5})
    result = train(cfg, tmp_path / "run", verbose=0, strategy=mirrored)
    assert result.metrics["epochs"] == 1 and 0 < result.metrics["test"]["mrr"] <= 1
    assert np.isfinite(result.metrics["history"][0]["loss"]) and "pair_loss" in result.metrics["history"][0]
    straddling = with_settings(cfg, {"biased_chunk": 20, "shared_negatives": 50, "pair_every": 2})
    with pytest.raises(ConfigError, match=r"^--batch-size: .*2 replicas x --biased-chunk 20") as caught:
        train(straddling, tmp_path / "straddling", verbose=0, strategy=mirrored)
    assert "\n" not in str(caught.value)
    assert not (tmp_path / "straddling").exists()


def test_a_mirrored_run_with_the_slot_prior_counts_its_graph_and_keeps_the_counts(tmp_path, mirrored):
    """The prior's table is a mirrored variable: filled once from the training triples, read by
    both replicas' steps, saved with the best weights."""
    from jobi_tf.api.run import restore_model
    from jobi_tf.config import DataConfig, DistributeConfig, ModelConfig, TrainConfig
    from jobi_tf.config.runs import RunFolder
    from jobi_tf.models.slot_prior import slot_log_counts
    from jobi_tf.training.trainer import load_data, train

    cfg = RunConfig(
        data=DataConfig(dataset="synthetic", synthetic_entities=200, synthetic_relations=6, synthetic_triples=2000),
        sampler=SamplerConfig(batch_size=100),
        model=ModelConfig(dim=8, reciprocal=True),
        train=TrainConfig(loss="full-softmax", slot_prior=1.0, optimizer="adagrad", lr=0.1, epochs=1, eval_every=1),
        distribute=DistributeConfig(strategy="mirrored"),
    )
    result = train(cfg, tmp_path / "run", verbose=0, strategy=mirrored)
    assert 0.05 < result.metrics["valid"]["mrr"] <= 1  # far above a random ranking's (1 / 200 entities)
    _, _, index = load_data(cfg)
    counts = slot_log_counts(index.train, index.num_entities, index.num_relations)
    np.testing.assert_array_equal(restore_model(RunFolder(tmp_path / "run")).slot_log_counts.numpy(), counts)
