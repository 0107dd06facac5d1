"""``--slot-prior-in-loss``: the slot counts join a sampled softmax's training logits.

Each sampled candidate's logit gets ``W`` times its triple's slot log counts over the
positive's (`negative_prior`); checked against NumPy counts and a NumPy softmax of the
model's own full scores (bilinear plus prior) of every candidate triple.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from references import slot_log_counts_by_loop

from jobi_tf.config import DataConfig, ModelConfig, RunConfig, SamplerConfig, TrainConfig
from jobi_tf.contracts.scored_batch import ScoredBatch
from jobi_tf.data.index import index_from_ids
from jobi_tf.models import JoBiModel
from jobi_tf.regimes.checks import check
from jobi_tf.runtime.errors import ConfigError
from jobi_tf.sampling.batch_plan import BatchPlan
from jobi_tf.sampling.negatives import NegativeSampler
from jobi_tf.sampling.slot_membership import SlotMembership

E, R, W = 40, 4, 0.7


@pytest.fixture(scope="module")
def index():
    """A graph whose slots are skewed (a few entities fill most of them), so counts differ."""
    rng = np.random.default_rng(3)
    skewed = np.minimum(rng.geometric(0.15, size=(600, 2)) - 1, E - 1)
    train = np.unique(np.stack([skewed[:, 0], rng.integers(R, size=600), skewed[:, 1]], 1), axis=0)
    train = np.concatenate(
        [train, np.stack([rng.integers(E, size=200), rng.integers(R, size=200), rng.integers(E, size=200)], 1)]
    )
    train = np.unique(train, axis=0)
    held = np.stack([rng.integers(E, size=20), rng.integers(R, size=20), rng.integers(E, size=20)], 1)
    return index_from_ids({"train": train, "valid": held[:10], "test": held[10:]}, E, R, "test")


def _log_counts(index) -> np.ndarray:
    return slot_log_counts_by_loop(index.train, E, R)


@pytest.mark.parametrize("form", ["dense", "hash", "search"])
def test_log_counts_equal_a_numpy_count_in_every_form(index, form):
    rng = np.random.default_rng(1)
    rel = rng.integers(R, size=(25, 6)).astype(np.int32)
    ent = rng.integers(E, size=(25, 6)).astype(np.int32)
    tail = rng.random((25, 6)) < 0.5
    expected = np.where(tail, _log_counts(index)[rel, ent], _log_counts(index)[R + rel, ent])
    dense_bytes = 1 << 26 if form == "dense" else 0
    if form == "search":  # built while traced (a parameter-server step): no hash table
        got = tf.function(lambda: SlotMembership(index, dense_bytes, counts=True).log_counts(rel, ent, tail))()
    else:
        got = SlotMembership(index, dense_bytes, counts=True).log_counts(rel, ent, tail)
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-6)
    assert len(np.unique(expected)) > 3  # the counts differ, zeros included
    with pytest.raises(ValueError, match="counts=True"):
        SlotMembership(index, dense_bytes).log_counts(rel, ent, tail)


def test_the_index_counts_each_slot_key(index):
    table = np.expm1(_log_counts(index)).round().astype(int).reshape(-1)
    np.testing.assert_array_equal(index.slot_counts, table[index.slot_keys])
    assert index.slot_counts.min() >= 1 and index.slot_counts.sum() == 2 * len(index.train)


LAYOUTS = {
    "per-triple": dict(batch_size=40, neg=12, p=0.3),
    "per-triple, side per positive": dict(batch_size=40, neg=12, p=0.3, corrupt_side="per-positive"),
    "shared": dict(batch_size=40, neg=10, p=0.3, shared_negatives=20, corrupt_side="per-negative"),
    "shared, biased runs": dict(batch_size=40, neg=10, p=0.3, shared_negatives=20, biased_chunk=10),
}


def _cfg(sampler: dict, **train) -> RunConfig:
    settings = dict(loss="sampled-softmax", slot_prior=W, slot_prior_in_loss=True) | train
    return RunConfig(
        data=DataConfig(dataset="synthetic"),
        model=ModelConfig(model="complex", dim=6, joint=False),
        train=TrainConfig(**settings),
        sampler=SamplerConfig(**sampler),
    )


def _batch(index, cfg: RunConfig, step: int = 0) -> tuple[BatchPlan, dict[str, tf.Tensor]]:
    plan = BatchPlan.for_run(cfg.sampler, cfg.train, joint=cfg.model.joint)
    triples = tf.constant(index.train[np.random.default_rng(step).permutation(len(index.train))[:40]], tf.int32)
    return plan, NegativeSampler(index, plan, seed=5)(triples, tf.constant(step, tf.int64))


def _columns(x: dict, plan: BatchPlan) -> tuple[np.ndarray, np.ndarray]:
    """``[B, K]`` candidates and their sides, in the order of the logits' columns."""
    x = {k: np.asarray(v) for k, v in x.items()}
    b = len(x["triples"])
    if "chunk_candidates" in x:
        own, own_tail = np.repeat(x["chunk_candidates"], plan.biased_chunk, 0), x["chunk_corrupt_tail"]
    else:
        own, own_tail = x["candidates"], x.get("corrupt_tail")
    cand, tail = [own], [own_tail]
    if "shared_candidates" in x:
        cand.append(np.repeat(x["shared_candidates"], plan.shared, 0))
        tail.append(x["shared_corrupt_tail"])
    cand = np.concatenate(cand, 1)
    if "positive_corrupt_tail" in x:
        return cand, np.broadcast_to(x["positive_corrupt_tail"][:, None], cand.shape)
    return cand, np.concatenate(tail, 1).reshape(b, -1)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_sampler_gives_each_candidates_prior_over_its_positives(index, layout):
    plan, x = _batch(index, _cfg(LAYOUTS[layout]))
    assert plan.prior_weight == W and "negative_prior" in plan.features()
    cand, tail = _columns(x, plan)
    h, r, t = (np.asarray(x["triples"])[:, i][:, None] for i in range(3))
    lc = _log_counts(index)
    candidate = np.where(tail, lc[r, cand] + lc[R + r, h], lc[r, t] + lc[R + r, cand])
    positive = lc[r, t] + lc[R + r, h]
    np.testing.assert_allclose(np.asarray(x["negative_prior"]), W * (candidate - positive), rtol=1e-5, atol=1e-6)
    assert np.abs(np.asarray(x["negative_prior"])).max() > 0.5


@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_loss_is_the_softmax_of_the_scores_the_model_ranks_with(index, layout):
    """The triple loss equals a NumPy softmax over each candidate triple's full score: the
    bilinear score plus ``W`` times its slot log counts, as `score_triples` gives it."""
    cfg = _cfg(LAYOUTS[layout])
    plan, x = _batch(index, cfg, step=2)
    tf.keras.utils.set_random_seed(0)
    model = JoBiModel(num_entities=E, num_relations=R, model="complex", dim=6, loss="sampled-softmax", slot_prior=W)
    model.prior.fill(index.train)
    logits = model.objective.logits(ScoredBatch(model, x))
    loss = float(model.objective.loss(x, logits))

    cand, tail = _columns(x, plan)
    triples = np.asarray(x["triples"])
    h, r, t = (np.repeat(triples[:, i][:, None], cand.shape[1], 1) for i in range(3))
    corrupted = np.stack([np.where(tail, h, cand), r, np.where(tail, cand, t)], -1).reshape(-1, 3)
    full = np.concatenate(
        [model.score_triples(triples).numpy()[:, None], model.score_triples(corrupted).numpy().reshape(cand.shape)], 1
    ).astype(np.float64)
    full = np.where(np.pad(np.asarray(x["valid_negative"]), [[0, 0], [1, 0]], constant_values=True), full, -np.inf)
    expected = np.mean(np.log(np.exp(full - full.max(1, keepdims=True)).sum(1)) + full.max(1) - full[:, 0])
    assert loss == pytest.approx(expected, rel=1e-4)

    # Without the counts in the loss, the same batch's loss differs (the counts matter here).
    del x["negative_prior"]
    assert float(model.objective.loss(x, model.objective.logits(ScoredBatch(model, x)))) != pytest.approx(
        loss, rel=1e-3
    )


def test_a_run_without_the_flag_draws_no_prior(index):
    cfg = _cfg(LAYOUTS["shared"], slot_prior_in_loss=False)
    plan, x = _batch(index, cfg)
    assert plan.prior_weight == 0 and "negative_prior" not in x


@pytest.mark.parametrize(
    "loss, weight, message",
    [
        ("sampled-softmax", 0.0, "--slot-prior W > 0"),
        ("sampled-bce", W, "needs --loss sampled-softmax"),
        ("full-softmax", W, "needs --loss sampled-bce or sampled-softmax"),
    ],
)
def test_the_flag_is_refused_in_one_line_where_it_has_no_meaning(loss, weight, message):
    sampler = {} if loss == "full-softmax" else LAYOUTS["per-triple"]
    with pytest.raises(ConfigError, match=message):
        check(_cfg(sampler, loss=loss, slot_prior=weight))
