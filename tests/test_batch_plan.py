"""`BatchPlan` and `jobi_tf.contracts.features`: the sampler writes what the plan promises, and a model or a
pipeline that disagrees with the plan is refused when the run is built."""

from __future__ import annotations

import pytest
import tensorflow as tf

from jobi_tf import regimes
from jobi_tf.config import RunConfig, SamplerConfig, with_settings
from jobi_tf.contracts import features as F
from jobi_tf.contracts.objectives import K_VS_ALL, ONE_VS_ALL, REGIME_NAMES, SAMPLED
from jobi_tf.models import JoBiModel
from jobi_tf.sampling.batch_plan import BatchPlan
from jobi_tf.sampling.negatives import NegativeSampler
from jobi_tf.sampling.pipelines import triple_batches

LAYOUTS = {
    "per triple, a side per negative": dict(shared_negatives=0, corrupt_side="per-negative"),
    "per triple, a side per positive": dict(shared_negatives=0),
    "shared": dict(shared_negatives=8),
    "shared, biased runs": dict(shared_negatives=8, biased_chunk=4),
    "shared, biased runs, a side per negative": dict(shared_negatives=8, biased_chunk=4, corrupt_side="per-negative"),
}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("pair_every", [1, 2])
def test_the_sampler_writes_exactly_the_plans_features_and_shapes(small_typed_index, layout, pair_every):
    cfg = SamplerConfig(batch_size=16, neg=5, p=0.4, **{"biased_chunk": 0, **LAYOUTS[layout]})
    plan = BatchPlan.sampled(cfg, pair_every=pair_every)
    triples = tf.constant(small_typed_index.train[:16], tf.int32)
    out = NegativeSampler(small_typed_index, plan, seed=2)(triples, tf.constant(3, tf.int64))
    want = plan.shapes(small_typed_index.num_entities)
    assert set(out) == set(want) == set(plan.features())
    for key, value in out.items():
        assert (value.dtype.name, tuple(value.shape)) == (F.FEATURES[key].dtype, want[key]), key
    assert plan.sorts_triples == (LAYOUTS[layout].get("biased_chunk", 0) > 0)


def test_p_has_one_name_per_layout():
    per_triple = BatchPlan.sampled(SamplerConfig(neg=10, p=0.25, shared_negatives=0, biased_chunk=0))
    shared = BatchPlan.sampled(SamplerConfig(neg=10, p=0.25, shared_negatives=1000, biased_chunk=0))
    assert (per_triple.biased_chance, per_triple.biased_count) == (0.25, 0)
    assert shared.biased_count == 2 and shared.shapes()[F.CANDIDATES] == (1000, 2)  # round(0.25 * 10)


@pytest.mark.parametrize(
    ("settings", "regime", "extra"),
    [
        ({}, SAMPLED, set()),
        ({"joint": True, "p": 0.3}, SAMPLED, {F.PAIR_LABELS}),
        ({"loss": "full-softmax"}, ONE_VS_ALL, set()),
        ({"loss": "full-softmax", "joint": True}, ONE_VS_ALL, {F.PAIR_LABELS_TAIL, F.PAIR_LABELS_HEAD}),
        ({"loss": "full-softmax", "slot_weight": 1.0}, ONE_VS_ALL, {F.PAIR_LABELS_TAIL, F.PAIR_LABELS_HEAD}),
        ({"loss": "k-vs-all", "joint": True}, K_VS_ALL, {F.QUERY_PAIR_LABELS}),
    ],
)
def test_a_runs_plan_holds_what_its_models_objectives_read(settings, regime, extra):
    cfg = regimes.resolve(with_settings(RunConfig(), settings))
    plan = BatchPlan.for_run(cfg.sampler, cfg.train, joint=cfg.model.joint)
    model = JoBiModel.for_run(cfg.model, cfg.train, 30, 4)
    assert plan.regime == regime and extra <= set(plan.features())
    plan.check_model(model)  # by construction


def test_a_model_that_reads_other_rows_than_the_batches_is_refused():
    cfg = regimes.resolve(with_settings(RunConfig(), {"joint": True, "pair_every": 5}))
    plan = BatchPlan.for_run(cfg.sampler, cfg.train, joint=cfg.model.joint)
    other_cfg = with_settings(cfg, {"pair_every": 2})
    other = JoBiModel.for_run(other_cfg.model, other_cfg.train, 30, 4)
    with pytest.raises(ValueError, match="every 2th positive, the batches hold the pair labels of every 5th"):
        plan.check_model(other)
    baseline_cfg = with_settings(cfg, {"joint": False, "pair_every": 1})
    baseline = BatchPlan.for_run(baseline_cfg.sampler, baseline_cfg.train, joint=False)
    with pytest.raises(ValueError, match=r"the model reads \['pair_labels'\]"):
        baseline.check_model(JoBiModel.for_run(cfg.model, cfg.train, 30, 4))


def test_a_pipeline_that_is_not_the_plans_is_refused(small_typed_index):
    cfg = SamplerConfig(batch_size=16, neg=5, p=0.4, shared_negatives=8, biased_chunk=0)
    plan = BatchPlan.sampled(cfg)
    batches = triple_batches(small_typed_index, plan, epochs=1)  # checked as it is built
    other = BatchPlan.sampled(SamplerConfig(batch_size=16, neg=6, p=0.4, shared_negatives=8, biased_chunk=0))
    with pytest.raises(ValueError, match=r"feature '\w+': the pipeline gives \w+ \[[0-9, ]+\], the plan \w+ \["):
        other.check_batches(batches.element_spec)
    lean = BatchPlan.sampled(cfg, pair_labels=False)
    with pytest.raises(ValueError, match=r"the batches hold .*'pair_labels'.*build them from the run's BatchPlan"):
        lean.check_batches(batches.element_spec)


def test_a_feature_is_its_key():
    assert F.TRIPLES == "triples" and {"triples": 1}[F.TRIPLES] == 1 and F.FEATURES["pair_labels"] is F.PAIR_LABELS
    assert all(f.dtype in ("int32", "bool", "float32") and f.writer.startswith("jobi_tf.") for f in F.FEATURES.values())


def test_regimes_are_found_in_their_folder_and_every_loss_has_one():
    from jobi_tf import losses
    from jobi_tf.runtime import plugins

    assert set(regimes.names()) == set(REGIME_NAMES) == set(regimes.REGIMES)
    assert all(regimes.get(n).name == n for n in regimes.names())
    assert {losses.loss_class(n).regime for n in losses.names()} <= set(regimes.names())
    assert "k-vs-all: batches of distinct training queries" in plugins.about("regime")
