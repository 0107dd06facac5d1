"""Lazy Adam / Adagrad against NumPy references; sparse gradients stay sparse in ``fit``; resume."""

from __future__ import annotations

import dataclasses
import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from jobi_tf.config import DataConfig, ModelConfig, RunConfig, SamplerConfig, TrainConfig
from jobi_tf.models import JoBiModel
from jobi_tf.optimizers import (
    LAZY_MIN_ROWS,
    FusedAdam,
    LazyAdagrad,
    LazyAdam,
    RowAdagrad,
    choose_optimizer,
    make_optimizer,
)
from jobi_tf.regimes.checks import check
from jobi_tf.runtime.errors import ConfigError
from jobi_tf.sampling.pipelines import make_train_dataset
from jobi_tf.training.trainer import train

LR, B1, B2, EPS = 0.01, 0.9, 0.999, 1e-7
ROWS, WIDTH = 12, 3


def _steps(rng, always: list[int], others: list[int], num_steps: int = 5, extra: int = 4):
    """Sparse gradients ``(ids, values)``: ``always`` in every step (the first id twice), plus random ``others``."""
    steps = []
    for _ in range(num_steps):
        ids = np.array(always + [always[0]] + list(rng.choice(others, size=extra)), dtype=np.int32)
        steps.append((ids, rng.normal(size=(len(ids), WIDTH)).astype(np.float32)))
    return steps


def _dense(ids: np.ndarray, values: np.ndarray) -> np.ndarray:
    out = np.zeros((ROWS, WIDTH), np.float64)
    np.add.at(out, ids, values)  # repeated ids add up, as in the dense gradient
    return out


def _adam_reference(w0: np.ndarray, steps, lazy: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Adam in float64; ``lazy`` updates only the rows a step uses (moments included)."""
    w, m, v = w0.astype(np.float64), np.zeros_like(w0, np.float64), np.zeros_like(w0, np.float64)
    for t, (ids, values) in enumerate(steps, start=1):
        g = _dense(ids, values)
        rows = np.unique(ids) if lazy else np.arange(ROWS)
        alpha = LR * np.sqrt(1 - B2**t) / (1 - B1**t)
        m[rows] += (g[rows] - m[rows]) * (1 - B1)
        v[rows] += (g[rows] ** 2 - v[rows]) * (1 - B2)
        w[rows] -= m[rows] * alpha / (np.sqrt(v[rows]) + EPS)
    return w, m, v


def _adagrad_reference(w0: np.ndarray, steps, initial: float = 1e-10, eps: float = EPS) -> np.ndarray:
    w, acc = w0.astype(np.float64), np.full(w0.shape, initial)
    for ids, values in steps:
        g = _dense(ids, values)
        acc += g**2
        w -= LR * g / (np.sqrt(acc) + eps)  # PyTorch's Adagrad (kbc's): eps outside the root
    return w


def _run(optimizer, w0: np.ndarray, steps, sparse: bool = True) -> keras.Variable:
    table = keras.Variable(w0.copy(), name="table")
    for ids, values in steps:
        grad = tf.IndexedSlices(tf.constant(values), tf.constant(ids)) if sparse else tf.constant(_dense(ids, values))
        optimizer.apply_gradients([(grad, table)])
    return table


@pytest.fixture
def w0():
    return np.random.default_rng(0).normal(size=(ROWS, WIDTH)).astype(np.float32)


def test_rows_every_step_touches_match_dense_adam(w0):
    steps = _steps(np.random.default_rng(1), always=[0, 1, 2, 3, 4, 5], others=[6, 7, 8, 9, 10, 11])
    lazy = _run(LazyAdam(learning_rate=LR), w0, steps)
    dense = _run(keras.optimizers.Adam(learning_rate=LR), w0, steps, sparse=False)
    expected, _, _ = _adam_reference(w0, steps, lazy=False)
    np.testing.assert_allclose(lazy.numpy()[:6], expected[:6], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(lazy.numpy()[:6], dense.numpy()[:6], rtol=1e-6, atol=1e-7)


def test_untouched_rows_keep_weights_and_moments_exactly(w0):
    rng = np.random.default_rng(2)
    first = (np.array([0, 7, 7], np.int32), rng.normal(size=(3, WIDTH)).astype(np.float32))
    later = _steps(rng, always=[0, 1], others=[2, 3], num_steps=3)
    opt = LazyAdam(learning_rate=LR)
    table = _run(opt, w0, [first])
    after_first = [table.numpy()[7].copy(), opt._momentums[0].numpy()[7].copy(), opt._velocities[0].numpy()[7].copy()]
    for ids, values in later:
        opt.apply_gradients([(tf.IndexedSlices(tf.constant(values), tf.constant(ids)), table)])
    # Row 7 (used once, then never): weights and moments are bit-for-bit those after step 1.
    np.testing.assert_array_equal(table.numpy()[7], after_first[0])
    np.testing.assert_array_equal(opt._momentums[0].numpy()[7], after_first[1])
    np.testing.assert_array_equal(opt._velocities[0].numpy()[7], after_first[2])
    # Rows never used: initial weights, zero moments.
    never = [4, 5, 6, 8, 9, 10, 11]
    np.testing.assert_array_equal(table.numpy()[never], w0[never])
    assert not opt._momentums[0].numpy()[never].any() and not opt._velocities[0].numpy()[never].any()
    # Every row follows the lazy reference; dense Adam instead keeps moving row 7.
    w, m, v = _adam_reference(w0, [first, *later], lazy=True)
    np.testing.assert_allclose(table.numpy(), w, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(opt._momentums[0].numpy(), m, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(opt._velocities[0].numpy(), v, rtol=1e-5, atol=1e-9)
    dense = _run(keras.optimizers.Adam(learning_rate=LR), w0, [first, *later], sparse=False)
    assert not np.allclose(dense.numpy()[7], after_first[0])


@pytest.mark.parametrize("make", [LazyAdam, LazyAdagrad], ids=["lazy-adam", "lazy-adagrad"])
def test_repeated_ids_are_summed_before_the_update(w0, make):
    a, b, c = (np.full((1, WIDTH), x, np.float32) for x in (0.5, -2.0, 1.5))
    repeated = _run(make(learning_rate=LR), w0, [(np.array([3, 3, 5], np.int32), np.concatenate([a, b, c]))])
    summed = _run(make(learning_rate=LR), w0, [(np.array([3, 5], np.int32), np.concatenate([a + b, c]))])
    np.testing.assert_array_equal(repeated.numpy(), summed.numpy())


def test_lazy_adagrad_equals_dense_adagrad_on_every_row(w0):
    steps = _steps(np.random.default_rng(3), always=[0, 1], others=list(range(2, ROWS)))
    lazy = _run(LazyAdagrad(learning_rate=LR, epsilon=EPS), w0, steps)
    fused = _run(LazyAdagrad(learning_rate=LR, epsilon=EPS), w0, steps, sparse=False)
    np.testing.assert_allclose(lazy.numpy(), _adagrad_reference(w0, steps), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(fused.numpy(), _adagrad_reference(w0, steps), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(lazy.numpy(), fused.numpy(), rtol=1e-6, atol=1e-7)
    # Keras's own sparse Adagrad squares repeated slices separately: not dense Adagrad.
    keras_adagrad = dict(learning_rate=LR, epsilon=EPS, initial_accumulator_value=0.0)
    keras_sparse = _run(keras.optimizers.Adagrad(**keras_adagrad), w0, steps)
    assert not np.allclose(keras_sparse.numpy(), fused.numpy(), rtol=1e-6, atol=1e-7)


def _row_adagrad_reference(w0: np.ndarray, steps, initial: float = 1e-10, eps: float = EPS):
    """PyTorch-BigGraph's RowAdagrad in float64: one accumulator per row, fed the mean square."""
    w, acc = w0.astype(np.float64), np.full(w0.shape[0], initial)
    for ids, values in steps:
        g = _dense(ids, values)
        rows = np.unique(ids)
        acc[rows] += (g[rows] ** 2).mean(axis=1)
        w[rows] -= LR * g[rows] / (np.sqrt(acc[rows])[:, None] + eps)
    return w, acc


@pytest.mark.parametrize("sparse", [True, False], ids=["sparse", "dense"])
def test_row_adagrad_keeps_one_accumulator_per_row_of_the_named_tables(w0, sparse):
    steps = _steps(np.random.default_rng(6), always=[0, 1], others=list(range(2, ROWS - 2)))  # rows 10, 11: never
    opt = RowAdagrad(learning_rate=LR, epsilon=EPS, row_tables=("table",))
    table = _run(opt, w0, steps, sparse=sparse)
    w, acc = _row_adagrad_reference(w0, steps)
    np.testing.assert_allclose(table.numpy(), w, rtol=1e-5, atol=1e-6)
    (accumulator,) = [v for v in opt.variables if "accumulator" in v.name]
    assert accumulator.shape == (ROWS,)
    np.testing.assert_allclose(accumulator.numpy(), acc, rtol=1e-5, atol=1e-12)
    np.testing.assert_array_equal(table.numpy()[-2:], w0[-2:])  # untouched rows never move
    # Not element-wise Adagrad: a row's components share one step size.
    assert not np.allclose(table.numpy(), _adagrad_reference(w0, steps), rtol=1e-4, atol=1e-5)


def test_row_adagrad_updates_other_tables_element_wise(w0):
    """Tables not named in ``row_tables`` (a model's relation tables) get `LazyAdagrad`'s update."""
    steps = _steps(np.random.default_rng(7), always=[0], others=list(range(1, ROWS)))
    opt = RowAdagrad(learning_rate=LR, epsilon=EPS)  # default: the entity table only
    table = _run(opt, w0, steps)
    np.testing.assert_allclose(table.numpy(), _adagrad_reference(w0, steps), rtol=1e-5, atol=1e-6)
    assert [v.shape for v in opt.variables if "accumulator" in v.name] == [(ROWS, WIDTH)]


def test_row_adagrad_sums_repeated_ids_first(w0):
    a, b, c = (np.full((1, WIDTH), x, np.float32) for x in (0.5, -2.0, 1.5))
    make = lambda: RowAdagrad(learning_rate=LR, row_tables=("table",))  # noqa: E731
    repeated = _run(make(), w0, [(np.array([3, 3, 5], np.int32), np.concatenate([a, b, c]))])
    summed = _run(make(), w0, [(np.array([3, 5], np.int32), np.concatenate([a + b, c]))])
    np.testing.assert_array_equal(repeated.numpy(), summed.numpy())


@pytest.mark.parametrize("make", [LazyAdagrad, RowAdagrad], ids=["adagrad", "row-adagrad"])
def test_adagrad_updates_with_repeated_ids_compiled_match_numpy(w0, make):
    """Under XLA, as in training: repeated ids (kept as zero rows after their first, whose update
    must change nothing) give the reference's weights and accumulators."""
    steps = _steps(np.random.default_rng(8), always=[0, 1], others=list(range(2, ROWS - 2)))
    steps = [(np.concatenate([ids, ids[:2]]), np.concatenate([v, v[:2]])) for ids, v in steps]  # each repeats two
    opt = make(learning_rate=LR, epsilon=EPS, **({"row_tables": ("table",)} if make is RowAdagrad else {}))
    table = keras.Variable(w0.copy(), name="table")
    opt.build([table])
    apply = tf.function(lambda g: opt.apply_gradients([(g, table)]), jit_compile=True)
    for ids, values in steps:
        apply(tf.IndexedSlices(tf.constant(values), tf.constant(ids)))
    want, acc = _row_adagrad_reference(w0, steps) if make is RowAdagrad else (_adagrad_reference(w0, steps), None)
    np.testing.assert_allclose(table.numpy(), want, rtol=1e-5, atol=1e-6)
    if acc is not None:
        (accumulator,) = [v for v in opt.variables if "accumulator" in v.name]
        np.testing.assert_allclose(accumulator.numpy(), acc, rtol=1e-5, atol=1e-12)
    np.testing.assert_array_equal(table.numpy()[-2:], w0[-2:])  # never used: never moved


def test_a_model_trained_with_row_adagrad_has_row_accumulators_for_its_entity_table_only(small_typed_index):
    index = small_typed_index
    model = JoBiModel(index.num_entities, index.num_relations, model="complex", dim=4, joint=True, name="jobi")
    opt = make_optimizer("row-adagrad", 0.1)
    model.compile(optimizer=opt, jit_compile=True)
    ds = make_train_dataset(index, SamplerConfig(batch_size=64, neg=4, p=0.3), seed=0)
    before = model.entity_embeddings.numpy().copy()
    model.fit(ds, epochs=1, steps_per_epoch=2, verbose=0, shuffle=False)
    shapes = {v.name: tuple(v.shape) for v in opt.variables if "accumulator" in v.name}
    assert shapes == {
        "jobi_entity_embeddings_accumulator": (index.num_entities,),
        "jobi_triple_relations_accumulator": (index.num_relations, 8),
        "jobi_pair_relations_accumulator": (index.num_relations, 8),
    }
    assert not np.array_equal(model.entity_embeddings.numpy(), before)
    assert np.isfinite(model.entity_embeddings.numpy()).all()


@pytest.mark.parametrize("sparse", [True, False], ids=["sparse", "dense-fused"])
@pytest.mark.parametrize("initial", [1e-10, 0.0], ids=["default", "kbc"])
def test_adagrad_damps_tiny_first_gradients_unless_started_from_zero(w0, sparse, initial):
    """A gradient of 1e-5 moves a weight by lr / sqrt(2) from the default accumulator of 1e-10
    (as Keras's ``sqrt(G + 1e-10)``), by about lr from kbc's 0."""
    g = np.full((1, WIDTH), 1e-5, np.float32)
    opt = LazyAdagrad(learning_rate=0.1, initial_accumulator_value=initial)
    moved = _run(opt, w0, [(np.array([2], np.int32), g)], sparse=sparse)
    expected = 0.1 * 1e-5 / (np.sqrt(initial + 1e-10) + 1e-10)
    np.testing.assert_allclose(w0[2] - moved.numpy()[2], expected, rtol=1e-3)
    np.testing.assert_array_equal(moved.numpy()[3], w0[3])


def test_adagrad_starts_from_a_tiny_accumulator(w0):
    """A first update moves each touched weight by about lr when its gradient is not tiny."""
    g = np.full((1, WIDTH), 1e-4, np.float32)
    moved = _run(LazyAdagrad(learning_rate=0.1), w0, [(np.array([2], np.int32), g)])
    np.testing.assert_allclose(w0[2] - moved.numpy()[2], 0.1 * 1e-4 / (np.sqrt(1e-8 + 1e-10) + 1e-10), rtol=1e-4)
    assert np.all(w0[2] - moved.numpy()[2] > 0.09)  # Keras's defaults would move it by 3e-5
    np.testing.assert_array_equal(moved.numpy()[3], w0[3])


def test_dense_gradients_get_the_dense_update(w0):
    steps = _steps(np.random.default_rng(4), always=[0], others=[1, 2])
    lazy = _run(LazyAdam(learning_rate=LR), w0, steps, sparse=False)
    dense = _run(FusedAdam(learning_rate=LR), w0, steps, sparse=False)
    np.testing.assert_array_equal(lazy.numpy(), dense.numpy())


@pytest.mark.parametrize("sparse", [True, False], ids=["sparse", "dense"])
def test_fused_adam_is_dense_adam(w0, sparse):
    # Rows 6..11 are missing from some steps: dense Adam still moves them by their momentum.
    steps = _steps(np.random.default_rng(5), always=[0, 1], others=[2, 3, 4, 5, 6, 7, 8, 9, 10, 11])
    opt = FusedAdam(learning_rate=LR, epsilon=EPS)
    fused = _run(opt, w0, steps, sparse=sparse)
    w, m, v = _adam_reference(w0, steps, lazy=False)
    np.testing.assert_allclose(fused.numpy(), w, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(opt._momentums[0].numpy(), m, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(opt._velocities[0].numpy(), v, rtol=1e-5, atol=1e-7)
    keras_adam = _run(keras.optimizers.Adam(learning_rate=LR, epsilon=EPS), w0, steps, sparse=False)
    np.testing.assert_allclose(fused.numpy(), keras_adam.numpy(), rtol=1e-6, atol=1e-7)
    assert not np.allclose(fused.numpy(), _adam_reference(w0, steps, lazy=True)[0], rtol=1e-5, atol=1e-6)


def test_keras_adam_squares_repeated_slices_fused_adam_squares_their_sum():
    """Why `FusedAdam` is dense Adam and Keras's Adam on a sparse gradient is not quite: with id 0
    twice, Keras's second moment takes 1² + 1², dense Adam (2)²."""
    grad = tf.IndexedSlices(tf.ones([2, 1]), tf.constant([0, 0]), dense_shape=tf.constant([3, 1]))
    seconds = {}
    for opt in (keras.optimizers.Adam(learning_rate=LR), FusedAdam(learning_rate=LR)):
        table = keras.Variable(tf.zeros([3, 1]))
        opt.apply_gradients([(grad, table)])
        seconds[type(opt).__name__] = opt._velocities[0].numpy().ravel()
    np.testing.assert_allclose(seconds["FusedAdam"], [(1 - B2) * 4, 0, 0], rtol=1e-6)
    np.testing.assert_allclose(seconds["Adam"], [(1 - B2) * 2, 0, 0], rtol=1e-6)


class _RecordingLazyAdam(LazyAdam):
    """Notes, at trace time, whether each variable's gradient reached ``update_step`` sparse."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, name="recording_lazy_adam", **kwargs)
        self.seen: dict[str, bool] = {}

    def update_step(self, gradient, variable, learning_rate):
        self.seen[variable.name.split(":")[0].split("/")[-1]] = isinstance(gradient, tf.IndexedSlices)
        return super().update_step(gradient, variable, learning_rate)


@pytest.mark.parametrize("jit", [False, True], ids=["eager-graph", "xla"])
def test_table_gradients_reach_the_optimizer_sparse_in_fit(small_typed_index, jit):
    index = small_typed_index
    extra = 3  # rows no batch can use: the sampler draws ids below index.num_entities
    model = JoBiModel(index.num_entities + extra, index.num_relations, model="complex", dim=4, joint=True)
    opt = _RecordingLazyAdam(learning_rate=0.01)
    model.compile(optimizer=opt, jit_compile=jit)
    before = model.entity_embeddings.numpy()[-extra:].copy()
    ds = make_train_dataset(index, SamplerConfig(batch_size=64, neg=4, p=0.3), seed=0)
    model.fit(ds, epochs=1, steps_per_epoch=3, verbose=0, shuffle=False)
    assert opt.seen == {"entity_embeddings": True, "triple_relations": True, "pair_relations": True}
    np.testing.assert_array_equal(model.entity_embeddings.numpy()[-extra:], before)
    assert not opt._momentums[0].numpy()[-extra:].any()
    assert np.isfinite(model.entity_embeddings.numpy()).all()


def _cfg(epochs: int, optimizer: str) -> RunConfig:
    return RunConfig(
        data=DataConfig(dataset="synthetic", synthetic_entities=80, synthetic_relations=4, synthetic_triples=800),
        sampler=SamplerConfig(batch_size=100, neg=8, p=0.3),
        model=ModelConfig(model="complex", dim=8, joint=True),
        train=TrainConfig(epochs=epochs, eval_every=1, patience=10, jit_compile=False, optimizer=optimizer),
        seed=3,
    )


def test_lazy_adam_run_checkpoints_and_resumes_identically(tmp_path):
    straight = train(_cfg(4, "lazy-adam"), tmp_path / "straight", verbose=0)
    train(_cfg(2, "lazy-adam"), tmp_path / "resumed", verbose=0)
    (tmp_path / "resumed" / "metrics.json").unlink()  # as if stopped after epoch 2's checkpoint
    resumed = train(_cfg(4, "lazy-adam"), tmp_path / "resumed", verbose=0)
    assert [h["epoch"] for h in resumed.metrics["history"]] == [1, 2, 3, 4]
    for split in ("valid", "test"):
        assert resumed.metrics[split]["mrr"] == pytest.approx(straight.metrics[split]["mrr"], abs=1e-6)
    with np.load(tmp_path / "straight" / "checkpoint.npz") as a, np.load(tmp_path / "resumed" / "checkpoint.npz") as b:
        assert sum(k.startswith("optimizer/") for k in a.files) > 1  # iterations, moments
        for key in a.files:
            if key != "__state__":
                np.testing.assert_allclose(a[key], b[key], rtol=1e-5, atol=1e-6, err_msg=key)


def test_row_adagrad_run_checkpoints_and_resumes_identically(tmp_path):
    straight = train(_cfg(3, "row-adagrad"), tmp_path / "straight", verbose=0)
    train(_cfg(2, "row-adagrad"), tmp_path / "resumed", verbose=0)
    (tmp_path / "resumed" / "metrics.json").unlink()  # as if stopped after epoch 2's checkpoint
    resumed = train(_cfg(3, "row-adagrad"), tmp_path / "resumed", verbose=0)
    assert [h["epoch"] for h in resumed.metrics["history"]] == [1, 2, 3]
    assert resumed.metrics["test"]["mrr"] == pytest.approx(straight.metrics["test"]["mrr"], abs=1e-6)
    with np.load(tmp_path / "straight" / "checkpoint.npz") as a:
        assert (80,) in [a[k].shape for k in a.files if k.startswith("optimizer/")]  # the entity rows' accumulator


def test_auto_is_recorded_as_the_optimizer_it_chose(tmp_path):
    assert choose_optimizer("auto", LAZY_MIN_ROWS - 1) == "adam"
    assert choose_optimizer("auto", LAZY_MIN_ROWS) == "lazy-adam"
    assert choose_optimizer("adagrad", 10**9) == "adagrad"
    train(_cfg(1, "adam"), tmp_path / "run", verbose=0)
    saved = json.loads((tmp_path / "run" / "config.json").read_text())
    assert saved["train"]["optimizer"] == "adam"
    # A run saved with the optimizer auto picks resumes under auto (the default flag).
    (tmp_path / "run" / "metrics.json").unlink()
    train(_cfg(1, "auto"), tmp_path / "run", verbose=0)


def test_every_optimizer_flag_value_has_a_class():
    """``--optimizer``'s choices (the config's list) and the classes behind them stay in step."""
    from jobi_tf.config.fields import OPTIMIZERS
    from jobi_tf.optimizers import OPTIMIZER_CLASSES

    assert set(OPTIMIZERS) == {"auto", *OPTIMIZER_CLASSES}


def test_optimizer_names_are_validated_and_built():
    with pytest.raises(ConfigError, match=r"--optimizer: must be one of auto, adagrad, adam, lazy-adam, row-adagrad"):
        TrainConfig(optimizer="sgd")
    assert type(make_optimizer("adam", 0.1)) is FusedAdam
    assert isinstance(make_optimizer("lazy-adam", 0.1), LazyAdam)
    assert type(make_optimizer("adagrad", 0.1)) is LazyAdagrad
    assert type(make_optimizer("row-adagrad", 0.1)) is RowAdagrad
    with pytest.raises(ValueError, match="resolve 'auto' first"):
        make_optimizer("auto", 0.1)
    with pytest.raises(ValueError, match="amsgrad"):
        LazyAdam(amsgrad=True)


def test_the_accumulators_start_is_a_setting_of_the_adagrads_only(tmp_path):
    """``--initial-accumulator-value`` reaches Adagrad's slots; an optimizer that has none refuses
    it in one line, also when ``auto`` chose that optimizer."""
    for name in ("adagrad", "row-adagrad"):
        assert make_optimizer(name, 0.1, initial_accumulator_value=0.0).initial_accumulator_value == 0.0
        assert make_optimizer(name, 0.1).initial_accumulator_value == 1e-10
    assert type(make_optimizer("adam", 0.1, initial_accumulator_value=0.0)) is FusedAdam  # dropped: not its setting
    with pytest.raises(ConfigError, match=r"^--initial-accumulator-value: needs --optimizer adagrad or row-adagrad$"):
        check(dataclasses.replace(_cfg(1, "adam"), train=TrainConfig(optimizer="adam", initial_accumulator_value=0.0)))
    with pytest.raises(ConfigError, match=r"^--initial-accumulator-value: must be a finite number >= 0"):
        TrainConfig(initial_accumulator_value=-1.0)
    cfg = _cfg(1, "auto")
    cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, initial_accumulator_value=0.0))
    with pytest.raises(ConfigError, match=r"^--initial-accumulator-value: needs --optimizer adagrad or row-adagrad$"):
        train(cfg, tmp_path / "auto", verbose=0)
    assert not (tmp_path / "auto" / "config.json").exists()


def test_lazy_optimizers_serialize():
    for opt in (
        FusedAdam(learning_rate=0.01),
        LazyAdam(learning_rate=0.02, beta_1=0.8),
        LazyAdagrad(learning_rate=0.03),
        RowAdagrad(learning_rate=0.04, row_tables=("a", "b")),
    ):
        again = keras.optimizers.deserialize(keras.optimizers.serialize(opt))
        assert type(again) is type(opt)
        assert again.get_config() == opt.get_config()


def test_the_memory_guard_counts_one_accumulator_per_entity_row_for_row_adagrad(monkeypatch):
    """1000 entities at ComplEx 100 (rows of 200 floats): Adagrad's slots double the entity
    table (1.6 MB in all), row-adagrad's add 4 KB (0.8 MB): a 1.2 MB machine fits only the latter."""
    from types import SimpleNamespace

    from jobi_tf.regimes.checks import check_memory

    pages = {"SC_PAGE_SIZE": 4096, "SC_PHYS_PAGES": 1_200_000 // 4096}
    monkeypatch.setattr("os.sysconf", lambda name: pages[name])
    index = SimpleNamespace(num_entities=1000, num_relations=2)

    def cfg(optimizer):
        return RunConfig(model=ModelConfig(model="complex", dim=100), train=TrainConfig(optimizer=optimizer))

    with pytest.raises(ConfigError, match="--dim: .*need 0.0 GiB"):
        check_memory(cfg("adagrad"), index.num_entities, index.num_relations)
    check_memory(cfg("row-adagrad"), index.num_entities, index.num_relations)


@pytest.mark.parametrize("name", ["adagrad", "row-adagrad", "lazy-adam"])
def test_a_compiled_sparse_update_never_copies_the_table(name):
    """XLA copies a whole table (and its slot) when a step reads a slot's rows before a scatter-add
    into it: 167 ms a step instead of 5 at 1.85M x 200 floats. The optimized program must hold no
    copy of a table-shaped buffer."""
    import re

    from jobi_tf.optimizers import make_optimizer

    table = keras.Variable(tf.ones([5000, 8]), name="entity_embeddings")
    optimizer = make_optimizer(name, 0.1)
    optimizer.build([table])

    @tf.function(jit_compile=True)
    def step(ids, gradient):
        optimizer.apply_gradients([(tf.IndexedSlices(gradient, ids), table)])

    ids, gradient = tf.constant([1, 5, 1, 7]), tf.ones([4, 8])
    hlo = step.experimental_get_compiler_ir(ids, gradient)(stage="optimized_hlo")
    assert "scatter" in hlo
    assert not re.findall(r"f32\[5000,8\]\S* copy\(", hlo)
