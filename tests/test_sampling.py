"""NegativeSampler and make_train_dataset against NumPy / brute-force references."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import tensorflow as tf
from references import pair_labels

from jobi_tf.config import SamplerConfig
from jobi_tf.runtime.errors import ConfigError
from jobi_tf.runtime.types import RELATION, TAIL
from jobi_tf.sampling import negatives
from jobi_tf.sampling.batch_plan import BatchPlan
from jobi_tf.sampling.pipelines import NegativeSampler, make_train_dataset, steps_per_epoch


def _pools(index):
    """Brute-force training heads/tails per relation, as Python sets."""
    heads = {r: set() for r in range(index.num_relations)}
    tails = {r: set() for r in range(index.num_relations)}
    for h, r, t in index.train.tolist():
        heads[r].add(h)
        tails[r].add(t)
    return heads, tails


def _batch(index, size, seed=0):
    rng = np.random.default_rng(seed)
    return index.train[rng.choice(len(index.train), size=size, replace=False)]


def _np(features):
    return {k: v.numpy() for k, v in features.items()}


def _take(ds, n):
    return [_np(x) for x in itertools.islice(iter(ds), n)]


def _assert_same_features(a, b):
    assert set(a) == set(b)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


# -- per-triple negatives ------------------------------------------------------------------


def test_dataset_shapes_and_dtypes(small_typed_index):
    cfg = SamplerConfig(shared_negatives=0, batch_size=32, neg=7, p=0.3)
    (x,) = _take(make_train_dataset(small_typed_index, cfg, seed=1), 1)
    assert set(x) == {
        "triples",
        "candidates",
        "corrupt_tail",
        "valid_negative",
        "pair_labels",
        "positive_corrupt_tail",
    }
    assert x["triples"].shape == (32, 3) and x["triples"].dtype == np.int32
    assert x["positive_corrupt_tail"].shape == (32,) and x["positive_corrupt_tail"].dtype == np.bool_
    for k, dtype in [
        ("candidates", np.int32),
        ("corrupt_tail", np.bool_),
        ("valid_negative", np.bool_),
        ("pair_labels", np.float32),
    ]:
        assert x[k].shape == (32, 7), k
        assert x[k].dtype == dtype, k
    assert x["candidates"].min() >= 0 and x["candidates"].max() < small_typed_index.num_entities


@pytest.fixture(scope="module")
def big_draw(small_typed_index):
    """One batch of 256 positives x 100 negatives (25.6k draws) at p = 0.3, a coin per negative."""
    index = small_typed_index
    triples = _batch(index, 256)
    cfg = SamplerConfig(shared_negatives=0, batch_size=256, neg=100, p=0.3, corrupt_side="per-negative")
    sampler = NegativeSampler.from_settings(index, cfg, seed=5, provenance=True)
    return triples, _np(sampler(tf.constant(triples), tf.constant(17, tf.int64)))


def test_candidates_are_entity_ids(big_draw, small_typed_index):
    _, x = big_draw
    assert x["candidates"].min() >= 0
    assert x["candidates"].max() < small_typed_index.num_entities
    # Uniform draws reach (almost) every entity with 25k draws over 300 entities.
    assert len(np.unique(x["candidates"][~x["biased"]])) > 0.95 * small_typed_index.num_entities


def test_share_of_biased_draws_is_p(big_draw):
    _, x = big_draw
    n, p = x["biased"].size, 0.3
    std = np.sqrt(p * (1 - p) / n)
    assert abs(x["biased"].mean() - p) < 5 * std, x["biased"].mean()


def test_head_tail_coin_is_fair(big_draw):
    _, x = big_draw
    n = x["corrupt_tail"].size
    assert abs(x["corrupt_tail"].mean() - 0.5) < 5 * np.sqrt(0.25 / n)
    # And independent of the biased coin: both sides get biased draws at about rate p.
    for side in (True, False):
        sel = x["corrupt_tail"] == side
        assert abs(x["biased"][sel].mean() - 0.3) < 5 * np.sqrt(0.21 / sel.sum())


def test_p_zero_gives_no_biased_draws(small_typed_index):
    triples = _batch(small_typed_index, 128)
    sampler = NegativeSampler.from_settings(
        small_typed_index, SamplerConfig(shared_negatives=0, batch_size=128, neg=50, p=0.0), provenance=True, seed=5
    )
    x = _np(sampler(tf.constant(triples), tf.constant(3, tf.int64)))
    assert not x["biased"].any()
    # Uniform draws: pair labels are then a mix, and about |pool| / E of them are 1.
    assert 0 < x["pair_labels"].mean() < 0.6


def test_p_one_gives_only_biased_draws(small_typed_index):
    triples = _batch(small_typed_index, 64)
    sampler = NegativeSampler.from_settings(
        small_typed_index, SamplerConfig(shared_negatives=0, batch_size=64, neg=20, p=1.0), provenance=True, seed=2
    )
    x = _np(sampler(tf.constant(triples), tf.constant(0, tf.int64)))
    assert x["biased"].all()
    np.testing.assert_array_equal(x["pair_labels"], 1.0)


def test_biased_candidates_come_from_the_relations_training_pool(big_draw, small_typed_index):
    triples, x = big_draw
    heads, tails = _pools(small_typed_index)
    checked = 0
    for i, k in zip(*np.nonzero(x["biased"]), strict=True):
        rel = int(triples[i, 1])
        pool = tails[rel] if x["corrupt_tail"][i, k] else heads[rel]
        assert int(x["candidates"][i, k]) in pool, (i, k)
        checked += 1
    assert checked > 1000


def test_biased_draws_are_uniform_over_the_pool(small_typed_index):
    index = small_typed_index
    heads, tails = _pools(index)
    rel = 3
    rows = index.train[index.train[:, 1] == rel]
    triples = rows[np.arange(64) % len(rows)]
    sampler = NegativeSampler.from_settings(
        index, SamplerConfig(shared_negatives=0, batch_size=64, neg=200, p=1.0), provenance=True, seed=8
    )
    x = _np(sampler(tf.constant(triples), tf.constant(1, tf.int64)))
    for side, pool in ((True, tails[rel]), (False, heads[rel])):
        drawn = x["candidates"][x["corrupt_tail"] == side]
        assert set(drawn.tolist()) == pool  # every pool member is reached, nothing else
        counts = np.array([np.sum(drawn == e) for e in sorted(pool)], np.float64)
        expected = len(drawn) / len(pool)
        chi2 = np.sum((counts - expected) ** 2 / expected)
        dof = len(pool) - 1
        assert chi2 < dof + 5 * np.sqrt(2 * dof), chi2


def test_pair_labels_equal_the_numpy_reference(big_draw, small_typed_index):
    triples, x = big_draw
    rel = np.broadcast_to(triples[:, 1:2], x["candidates"].shape)
    expected = pair_labels(small_typed_index, rel, x["candidates"], x["corrupt_tail"])
    np.testing.assert_array_equal(x["pair_labels"], expected)
    assert np.all(x["pair_labels"][x["biased"]] == 1.0)
    assert np.any(x["pair_labels"][~x["biased"]] == 0.0)
    assert np.any(x["pair_labels"][~x["biased"]] == 1.0)


def test_pair_labels_on_arbitrary_inputs(small_typed_index):
    index = small_typed_index
    rng = np.random.default_rng(9)
    rel = rng.integers(index.num_relations, size=(40, 9)).astype(np.int32)
    ent = rng.integers(index.num_entities, size=(40, 9)).astype(np.int32)
    # Include the largest keys and the extreme ids so the searchsorted clipping is exercised.
    rel[0, :] = index.num_relations - 1
    ent[0, :] = [0, index.num_entities - 1] * 4 + [index.num_entities - 1]
    tail = rng.random((40, 9)) < 0.5
    got = NegativeSampler.from_settings(index, SamplerConfig(shared_negatives=0)).pair_labels(
        tf.constant(rel), tf.constant(ent), tf.constant(tail)
    )
    np.testing.assert_array_equal(got.numpy(), pair_labels(index, rel, ent, tail))


def test_valid_negative_is_false_exactly_where_the_candidate_is_the_replaced_entity(big_draw):
    triples, x = big_draw
    replaced = np.where(x["corrupt_tail"], triples[:, 2:3], triples[:, 0:1])
    np.testing.assert_array_equal(x["valid_negative"], x["candidates"] != replaced)
    assert not x["valid_negative"].all()  # some collisions happen with 25k draws from small pools


def test_same_seed_and_step_give_identical_features(small_typed_index):
    triples = tf.constant(_batch(small_typed_index, 32))
    cfg = SamplerConfig(shared_negatives=0, batch_size=32, neg=10, p=0.4)
    a = _np(NegativeSampler.from_settings(small_typed_index, cfg, seed=3)(triples, tf.constant(8, tf.int64)))
    b = _np(NegativeSampler.from_settings(small_typed_index, cfg, seed=3)(triples, tf.constant(8, tf.int64)))
    _assert_same_features(a, b)
    c = _np(NegativeSampler.from_settings(small_typed_index, cfg, seed=3)(triples, tf.constant(9, tf.int64)))
    d = _np(NegativeSampler.from_settings(small_typed_index, cfg, seed=4)(triples, tf.constant(8, tf.int64)))
    for other in (c, d):
        assert not np.array_equal(a["candidates"], other["candidates"])
        assert not np.array_equal(a["corrupt_tail"], other["corrupt_tail"])


# -- the dataset ---------------------------------------------------------------------------


def test_an_epoch_covers_distinct_training_triples(small_typed_index):
    index = small_typed_index
    cfg = SamplerConfig(shared_negatives=0, batch_size=300, neg=2, p=0.5)
    steps = steps_per_epoch(index, cfg.batch_size)
    assert steps == len(index.train) // 300
    batches = _take(make_train_dataset(index, cfg, seed=0), 2 * steps)
    train = {tuple(x) for x in index.train.tolist()}
    assert len(train) == len(index.train)  # the synthetic graph has no duplicate triples
    epochs = []
    for e in range(2):
        rows = [tuple(x) for b in batches[e * steps : (e + 1) * steps] for x in b["triples"].tolist()]
        assert len(rows) == steps * cfg.batch_size
        assert len(set(rows)) == len(rows), "a triple appears twice within an epoch"
        assert set(rows) <= train
        epochs.append(rows)
    assert epochs[0] != epochs[1], "each epoch has its own order"


def test_dataset_negatives_are_keyed_on_the_global_step(small_typed_index):
    index = small_typed_index
    cfg = SamplerConfig(shared_negatives=0, batch_size=500, neg=5, p=0.3)
    steps = steps_per_epoch(index, cfg.batch_size)
    batches = _take(make_train_dataset(index, cfg, seed=6), steps + 2)
    sampler = NegativeSampler.from_settings(index, cfg, seed=6)
    for step in (0, 1, steps, steps + 1):
        direct = _np(sampler(tf.constant(batches[step]["triples"]), tf.constant(step, tf.int64)))
        _assert_same_features(batches[step], direct)


def test_resume_at_an_epoch_gives_the_same_batches(small_typed_index):
    index = small_typed_index
    cfg = SamplerConfig(shared_negatives=0, batch_size=500, neg=6, p=0.25)
    steps = steps_per_epoch(index, cfg.batch_size)
    fresh = _take(make_train_dataset(index, cfg, seed=2), 2 * steps + 1)
    resumed = _take(make_train_dataset(index, cfg, seed=2, initial_epoch=1), steps + 1)
    for a, b in zip(fresh[steps:], resumed, strict=True):
        _assert_same_features(a, b)
    assert not np.array_equal(fresh[0]["triples"], fresh[steps]["triples"])
    other_seed = _take(make_train_dataset(index, cfg, seed=3), 1)[0]
    assert not np.array_equal(other_seed["triples"], fresh[0]["triples"])


def test_dataset_ends_after_the_last_epoch(small_typed_index):
    cfg = SamplerConfig(shared_negatives=0, batch_size=1000, neg=1)
    steps = steps_per_epoch(small_typed_index, cfg.batch_size)
    got = list(make_train_dataset(small_typed_index, cfg, initial_epoch=2, epochs=4))
    assert len(got) == 2 * steps


def test_steps_per_epoch_rejects_a_batch_larger_than_train(small_typed_index):
    n = len(small_typed_index.train)
    assert steps_per_epoch(small_typed_index, n) == 1
    assert steps_per_epoch(small_typed_index, 7) == n // 7
    with pytest.raises(ConfigError) as info:
        steps_per_epoch(small_typed_index, n + 1)
    assert "--batch-size" in str(info.value) and str(n) in str(info.value)
    with pytest.raises(ConfigError):
        make_train_dataset(small_typed_index, SamplerConfig(shared_negatives=0, batch_size=n + 1))


# -- shared negatives ----------------------------------------------------------------------


def _expand_shared(x, c):
    cand = np.concatenate([x["candidates"], np.repeat(x["shared_candidates"], c, axis=0)], axis=1)
    tail = np.concatenate([x["corrupt_tail"], x["shared_corrupt_tail"]], axis=1)
    return cand, tail


@pytest.mark.parametrize("p, neg", [(0.3, 20), (0.5, 7), (0.0, 6)])
def test_shared_negatives(small_typed_index, p, neg):
    index = small_typed_index
    b, c = 64, 16
    cfg = SamplerConfig(batch_size=b, neg=neg, p=p, shared_negatives=c, corrupt_side="per-negative")
    (x,) = _take(make_train_dataset(index, cfg, seed=4), 1)
    k_b = int(round(p * neg))
    k_u = neg - k_b
    assert x["candidates"].shape == (b, k_b) and x["corrupt_tail"].shape == (b, k_b)
    assert x["shared_candidates"].shape == (b // c, k_u) and x["shared_corrupt_tail"].shape == (b, k_u)
    assert x["pair_labels"].shape == (b, neg) and x["valid_negative"].shape == (b, neg)
    assert x["candidates"].dtype == np.int32 and x["shared_candidates"].dtype == np.int32
    assert x["pair_labels"].dtype == np.float32 and x["valid_negative"].dtype == np.bool_
    assert x["shared_candidates"].min() >= 0 and x["shared_candidates"].max() < index.num_entities

    triples = x["triples"]
    heads, tails = _pools(index)
    # The per-triple negatives are all biased: from the relation's pool.
    for i, k in itertools.product(range(b), range(k_b)):
        pool = tails if x["corrupt_tail"][i, k] else heads
        assert int(x["candidates"][i, k]) in pool[int(triples[i, 1])]
    # The shared ones differ between chunks (one draw per chunk, not one per batch).
    if k_u >= 5:
        assert len({tuple(row) for row in x["shared_candidates"].tolist()}) == b // c

    cand, tail = _expand_shared(x, c)
    rel = np.broadcast_to(triples[:, 1:2], cand.shape)
    np.testing.assert_array_equal(x["pair_labels"], pair_labels(index, rel, cand, tail))
    np.testing.assert_array_equal(x["pair_labels"][:, :k_b], 1.0)
    replaced = np.where(tail, triples[:, 2:3], triples[:, 0:1])
    np.testing.assert_array_equal(x["valid_negative"], cand != replaced)


def test_shared_negatives_are_deterministic_per_step(small_typed_index):
    cfg = SamplerConfig(batch_size=40, neg=10, p=0.2, shared_negatives=8)
    triples = tf.constant(_batch(small_typed_index, 40))
    a = _np(NegativeSampler.from_settings(small_typed_index, cfg, seed=1)(triples, tf.constant(5, tf.int64)))
    b = _np(NegativeSampler.from_settings(small_typed_index, cfg, seed=1)(triples, tf.constant(5, tf.int64)))
    _assert_same_features(a, b)
    c = _np(NegativeSampler.from_settings(small_typed_index, cfg, seed=1)(triples, tf.constant(6, tf.int64)))
    assert not np.array_equal(a["shared_candidates"], c["shared_candidates"])


# -- one side per positive ----------------------------------------------------------------


def test_per_positive_side_is_one_coin_per_positive(small_typed_index):
    index = small_typed_index
    triples = _batch(index, 256)
    cfg = SamplerConfig(shared_negatives=0, batch_size=256, neg=40, p=0.3, corrupt_side="per-positive")
    x = _np(
        NegativeSampler.from_settings(index, cfg, seed=5, provenance=True)(
            tf.constant(triples), tf.constant(17, tf.int64)
        )
    )
    side = x["corrupt_tail"]
    # Every negative of a positive corrupts the same slot; the coin is fair across positives.
    assert (side == side[:, :1]).all()
    np.testing.assert_array_equal(x["positive_corrupt_tail"], side[:, 0])
    assert abs(side[:, 0].mean() - 0.5) < 5 * np.sqrt(0.25 / 256)
    assert abs(x["biased"].mean() - 0.3) < 5 * np.sqrt(0.21 / x["biased"].size)
    heads, tails = _pools(index)
    for i, k in zip(*np.nonzero(x["biased"]), strict=True):
        pool = tails if side[i, k] else heads
        assert int(x["candidates"][i, k]) in pool[int(triples[i, 1])]
    rel = np.broadcast_to(triples[:, 1:2], side.shape)
    np.testing.assert_array_equal(x["pair_labels"], pair_labels(index, rel, x["candidates"], side))
    replaced = np.where(side, triples[:, 2:3], triples[:, 0:1])
    np.testing.assert_array_equal(x["valid_negative"], x["candidates"] != replaced)


def test_per_positive_side_leaves_the_candidates_of_the_default_mode_unchanged(small_typed_index):
    """Only the side coin changes, so the uniform draws are the per-negative mode's."""
    triples = tf.constant(_batch(small_typed_index, 64))
    step = tf.constant(3, tf.int64)
    cfg = SamplerConfig(shared_negatives=0, batch_size=64, neg=9, p=0.0, corrupt_side="per-negative")
    per_neg = _np(NegativeSampler.from_settings(small_typed_index, cfg, seed=2)(triples, step))
    assert "positive_corrupt_tail" not in per_neg
    cfg = SamplerConfig(shared_negatives=0, batch_size=64, neg=9, p=0.0, corrupt_side="per-positive")
    per_pos = _np(NegativeSampler.from_settings(small_typed_index, cfg, seed=2)(triples, step))
    np.testing.assert_array_equal(per_neg["candidates"], per_pos["candidates"])
    assert not np.array_equal(per_neg["corrupt_tail"], per_pos["corrupt_tail"])


def test_per_positive_side_with_shared_negatives(small_typed_index):
    index = small_typed_index
    b, c, neg, p = 64, 16, 10, 0.3
    cfg = SamplerConfig(batch_size=b, neg=neg, p=p, shared_negatives=c, corrupt_side="per-positive")
    (x,) = _take(make_train_dataset(index, cfg, seed=4), 1)
    cand, tail = _expand_shared(x, c)
    assert (tail == tail[:, :1]).all()
    np.testing.assert_array_equal(x["positive_corrupt_tail"], tail[:, 0])
    assert 0 < tail[:, 0].mean() < 1
    triples = x["triples"]
    rel = np.broadcast_to(triples[:, 1:2], cand.shape)
    np.testing.assert_array_equal(x["pair_labels"], pair_labels(index, rel, cand, tail))
    replaced = np.where(tail, triples[:, 2:3], triples[:, 0:1])
    np.testing.assert_array_equal(x["valid_negative"], cand != replaced)


def test_unknown_corrupt_side_names_the_flag():
    with pytest.raises(ConfigError) as info:
        SamplerConfig(shared_negatives=0, corrupt_side="both")
    assert "--corrupt-side" in str(info.value)


# -- full softmax --------------------------------------------------------------------------


@pytest.mark.parametrize("table_limit", [1 << 28, 0])  # the [relations, entities] table, and the key search
def test_full_softmax_dense_pair_labels(small_typed_index, table_limit, monkeypatch):
    monkeypatch.setattr(negatives, "DENSE_SLOT_TABLE_BYTES", table_limit)
    index = small_typed_index
    cfg = SamplerConfig(shared_negatives=0, batch_size=16, neg=1)
    (x,) = _take(make_train_dataset(index, cfg, seed=0, full_softmax=True, slot_rows=True), 1)
    assert set(x) == {"triples", "pair_labels_tail", "pair_labels_head"}
    e = index.num_entities
    heads, tails = _pools(index)
    exp_tail = np.zeros((16, e), np.float32)
    exp_head = np.zeros((16, e), np.float32)
    for i, rel in enumerate(x["triples"][:, 1].tolist()):
        exp_tail[i, sorted(tails[rel])] = 1.0
        exp_head[i, sorted(heads[rel])] = 1.0
    assert x["pair_labels_tail"].dtype == np.float32
    np.testing.assert_array_equal(x["pair_labels_tail"], exp_tail)
    np.testing.assert_array_equal(x["pair_labels_head"], exp_head)
    # Each row's own positive is, by construction, a training pair.
    rows = np.arange(16)
    assert np.all(x["pair_labels_tail"][rows, x["triples"][:, 2]] == 1.0)
    assert np.all(x["pair_labels_head"][rows, x["triples"][:, 0]] == 1.0)


def test_full_softmax_without_joint_yields_only_positives(small_typed_index):
    (x,) = _take(
        make_train_dataset(small_typed_index, SamplerConfig(shared_negatives=0, batch_size=16), full_softmax=True), 1
    )
    assert set(x) == {"triples"} and x["triples"].shape == (16, 3)


def test_sampled_training_builds_no_dense_slot_table(small_typed_index):
    sampler = NegativeSampler.from_settings(small_typed_index, SamplerConfig(shared_negatives=0, batch_size=16, neg=4))
    sampler(tf.constant(small_typed_index.train[:16], tf.int32), tf.constant(0, tf.int64))
    assert sampler._slot_tables is None  # only 1-vs-all pair labels need it
    sampler.dense_pair_labels(tf.constant(small_typed_index.train[:16], tf.int32))
    assert sampler._slot_tables is not None


def test_training_batches_carry_no_provenance(small_typed_index):
    """``biased`` is for inspecting the sampler; training batches leave it out (the model reads no such feature)."""
    cfg = SamplerConfig(shared_negatives=0, batch_size=16, neg=4, p=0.5)
    triples, step = tf.constant(_batch(small_typed_index, 16)), tf.constant(1, tf.int64)
    plain = _np(NegativeSampler.from_settings(small_typed_index, cfg, seed=1)(triples, step))
    inspected = _np(NegativeSampler.from_settings(small_typed_index, cfg, seed=1, provenance=True)(triples, step))
    assert "biased" not in plain and set(inspected) - set(plain) == {"biased"}
    np.testing.assert_array_equal(plain["candidates"], inspected["candidates"])


# -- membership lookups and chunk-shared biased negatives ----------------------------------


@pytest.mark.parametrize("dense_bytes", [negatives.DENSE_MEMBERSHIP_BYTES, 0])
def test_slot_membership_equals_the_numpy_reference_in_both_forms(small_typed_index, dense_bytes):
    """The dense byte table and the sorted-key search answer alike, extreme ids included."""
    index = small_typed_index
    rng = np.random.default_rng(11)
    rel = rng.integers(index.num_relations, size=(30, 7)).astype(np.int32)
    ent = rng.integers(index.num_entities, size=(30, 7)).astype(np.int32)
    rel[0], ent[0] = index.num_relations - 1, index.num_entities - 1
    rel[1], ent[1] = 0, 0
    tail = rng.random((30, 7)) < 0.5
    slots = negatives.SlotMembership(index, dense_bytes=dense_bytes)
    got = slots.contains(tf.constant(rel), tf.constant(ent), tf.constant(tail)).numpy()
    np.testing.assert_array_equal(got.astype(np.float32), pair_labels(index, rel, ent, tail))
    assert got.any() and not got.all()
    # One relation and side per row (`[30, 1]`, as the sampler passes them), broadcast.
    got = slots.contains(tf.constant(rel[:, :1]), tf.constant(ent), tf.constant(tail[:, :1])).numpy()
    expected = pair_labels(index, np.broadcast_to(rel[:, :1], ent.shape), ent, np.broadcast_to(tail[:, :1], ent.shape))
    np.testing.assert_array_equal(got.astype(np.float32), expected)


def test_a_membership_built_inside_a_traced_function_searches_the_sorted_keys(small_typed_index):
    # A parameter-server step builds its sampler while traced: no hash table, the same answers.
    index = small_typed_index
    rng = np.random.default_rng(5)
    rel = rng.integers(index.num_relations, size=(20, 6)).astype(np.int32)
    ent = rng.integers(index.num_entities, size=(20, 6)).astype(np.int32)
    ent[:, 0] = index.train[:20, TAIL]
    rel[:, 0] = index.train[:20, RELATION]
    tail = np.ones((20, 6), bool)

    @tf.function
    def traced(r, e, t):
        slots = negatives.SlotMembership(index, dense_bytes=0)
        assert slots._hash is None
        # Shared candidates (two groups of ten rows) are answered from the candidates' slots.
        return slots.contains(r, e, t), slots.contains_shared(r[:, :1], e[::10], t[:, :1], 10)

    got, shared = (x.numpy() for x in traced(tf.constant(rel), tf.constant(ent), tf.constant(tail)))
    np.testing.assert_array_equal(got.astype(np.float32), pair_labels(index, rel, ent, tail))
    assert got[:, 0].all() and not got.all()
    repeated = np.repeat(ent[::10], 10, axis=0)
    expected = pair_labels(index, np.broadcast_to(rel[:, :1], repeated.shape), repeated, tail)
    np.testing.assert_array_equal(shared.astype(np.float32), expected)
    assert shared.any()


@pytest.mark.parametrize(
    "dense_bytes, slots_per_entity",
    # The dense table; the hash table, asked of every row's candidates (a group of fewer rows
    # than an entity has slots), and each candidate's slots marking their rows (more rows).
    [(negatives.DENSE_MEMBERSHIP_BYTES, None), (0, float("inf")), (0, 0.0)],
    ids=["dense", "hash", "mark-rows"],
)
@pytest.mark.parametrize("side_per_candidate", [False, True])
def test_shared_candidates_get_the_labels_of_the_per_row_search(
    small_typed_index, dense_bytes, slots_per_entity, side_per_candidate
):
    """`contains_shared` answers as the reference does for every row and its group's candidates."""
    index = small_typed_index
    rng = np.random.default_rng(12)
    groups, rows_per_group, k = 3, 4, 9
    rows = groups * rows_per_group
    rel = rng.integers(index.num_relations, size=(rows, 1)).astype(np.int32)
    shared = rng.integers(index.num_entities, size=(groups, k)).astype(np.int32)
    # Every row's own training tail and head among its group's candidates, so both labels occur.
    for i in range(rows):
        h, r, t = index.train[rng.integers(len(index.train))]
        rel[i, 0] = r
        shared[i // rows_per_group, (2 * (i % rows_per_group)) % k] = t
        shared[i // rows_per_group, (2 * (i % rows_per_group) + 1) % k] = h
    shared[0, 0], shared[-1, -1] = 0, index.num_entities - 1
    tail = rng.random((rows, k if side_per_candidate else 1)) < 0.5
    slots = negatives.SlotMembership(index, dense_bytes=dense_bytes)
    if slots_per_entity is not None:
        slots._slots_per_entity = slots_per_entity  # which of the two searches answers
    got = slots.contains_shared(tf.constant(rel), tf.constant(shared), tf.constant(tail), rows_per_group).numpy()
    repeated = np.repeat(shared, rows_per_group, axis=0)
    expected = pair_labels(index, np.broadcast_to(rel, repeated.shape), repeated, np.broadcast_to(tail, repeated.shape))
    np.testing.assert_array_equal(got.astype(np.float32), expected)
    assert got.any() and not got.all()


@pytest.mark.parametrize("side", ["per-positive", "per-negative"])
@pytest.mark.parametrize("biased_chunk", [0, 4])
def test_the_sampler_gives_the_same_pair_labels_with_the_dense_table_and_the_key_search(
    small_typed_index, biased_chunk, side
):
    cfg = SamplerConfig(batch_size=32, neg=10, p=0.3, shared_negatives=8, biased_chunk=biased_chunk, corrupt_side=side)
    dense = NegativeSampler.from_settings(small_typed_index, cfg, seed=3)
    searched = NegativeSampler.from_settings(small_typed_index, cfg, seed=3)
    searched._slots = negatives.SlotMembership(small_typed_index, dense_bytes=0)
    assert searched._slots._table is None and dense._slots._table is not None
    triples, step = tf.constant(_batch(small_typed_index, 32)), tf.constant(5, tf.int64)
    a, b = _np(dense(triples, step)), _np(searched(triples, step))
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)
    assert 0 < a["pair_labels"].mean() < 1


def test_a_model_without_a_pair_head_gets_the_same_batches_without_pair_labels(small_typed_index):
    for cfg in (
        SamplerConfig(shared_negatives=0, batch_size=32, neg=10, p=0.3),
        SamplerConfig(batch_size=32, neg=10, p=0.3, shared_negatives=8),
        SamplerConfig(batch_size=32, neg=10, p=0.3, shared_negatives=8, biased_chunk=4),
    ):
        (full,) = _take(make_train_dataset(small_typed_index, cfg, seed=2), 1)
        (lean,) = _take(make_train_dataset(small_typed_index, cfg, seed=2, pair_labels=False), 1)
        assert "pair_labels" in full and "pair_labels" not in lean
        full.pop("pair_labels")
        _assert_same_features(full, lean)


@pytest.mark.parametrize("side", ["per-positive", "per-negative"])
def test_biased_negatives_shared_in_runs_of_the_batch_sorted_by_slot(small_typed_index, side):
    index = small_typed_index
    b, c, c_b, neg, p = 64, 16, 8, 10, 0.3
    cfg = SamplerConfig(batch_size=b, neg=neg, p=p, shared_negatives=c, biased_chunk=c_b, corrupt_side=side)
    sampler = NegativeSampler.from_settings(index, cfg, seed=4)
    given = _batch(index, b)
    x = _np(sampler(tf.constant(given), tf.constant(3, tf.int64)))
    k_b, k_u = int(round(p * neg)), neg - int(round(p * neg))
    assert "candidates" not in x and "corrupt_tail" not in x
    assert x["chunk_candidates"].shape == (b // c_b, k_b) and x["chunk_corrupt_tail"].shape == (b, k_b)
    assert x["shared_candidates"].shape == (b // c, k_u) and x["shared_corrupt_tail"].shape == (b, k_u)
    assert x["pair_labels"].shape == (b, neg) and x["valid_negative"].shape == (b, neg)
    triples = x["triples"]
    # The same positives, sorted by relation then corrupted side.
    assert sorted(map(tuple, triples.tolist())) == sorted(map(tuple, given.tolist()))
    key = triples[:, 1] * 2 + (x["positive_corrupt_tail"] if side == "per-positive" else 0)
    assert np.all(np.diff(key) >= 0)
    heads, tails = _pools(index)
    # Each shared biased negative fills the slot of a positive of its own run.
    for g, k in itertools.product(range(b // c_b), range(k_b)):
        e = int(x["chunk_candidates"][g, k])
        run = range(g * c_b, (g + 1) * c_b)
        sides = x["positive_corrupt_tail"] if side == "per-positive" else x["chunk_corrupt_tail"][:, k]
        assert any(e in (tails if sides[i] else heads)[int(triples[i, 1])] for i in run)
    if side == "per-positive":
        np.testing.assert_array_equal(x["chunk_corrupt_tail"], np.repeat(x["positive_corrupt_tail"][:, None], k_b, 1))
    else:  # one side per shared negative, the same for every positive of the run
        np.testing.assert_array_equal(x["chunk_corrupt_tail"], np.repeat(x["chunk_corrupt_tail"][::c_b], c_b, 0))
    cand = np.concatenate([np.repeat(x["chunk_candidates"], c_b, 0), np.repeat(x["shared_candidates"], c, 0)], 1)
    tail = np.concatenate([x["chunk_corrupt_tail"], x["shared_corrupt_tail"]], 1)
    rel = np.broadcast_to(triples[:, 1:2], cand.shape)
    np.testing.assert_array_equal(x["pair_labels"], pair_labels(index, rel, cand, tail))
    replaced = np.where(tail, triples[:, 2:3], triples[:, 0:1])
    np.testing.assert_array_equal(x["valid_negative"], cand != replaced)


def test_a_run_of_one_slot_gets_only_that_slots_negatives(small_typed_index):
    """Runs of one relation and side draw only from that slot: the per-triple bias, shared."""
    index = small_typed_index
    r = int(np.bincount(index.train[:, 1]).argmax())
    rows = index.train[index.train[:, 1] == r][:32]
    cfg = SamplerConfig(batch_size=32, neg=10, p=1.0, shared_negatives=32, biased_chunk=8, corrupt_side="per-negative")
    x = _np(NegativeSampler.from_settings(index, cfg, seed=0)(tf.constant(rows), tf.constant(3, tf.int64)))
    np.testing.assert_array_equal(x["pair_labels"], 1.0)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"biased_chunk": 10}, "--biased-chunk: needs --shared-negatives"),
        ({"biased_chunk": 7, "shared_negatives": 10}, "--biased-chunk: must divide --batch-size 500"),
    ],
)
def test_biased_chunk_is_checked_naming_the_flag(settings, message):
    with pytest.raises(ConfigError, match=message):
        SamplerConfig(**{"batch_size": 500, "shared_negatives": 0, "p": 0.3, **settings})


def test_the_training_stream_runs_without_tf_data_autotuning(small_typed_index):
    """Freeing an autotuned iterator waits for the autotuner's sleeping thread (up to ~40 s at
    the end of every `fit` with TensorFlow 2.21), so the stream fixes its own parallelism."""
    import os

    from jobi_tf.sampling.pipelines import usable_cores

    ds = make_train_dataset(small_typed_index, SamplerConfig(shared_negatives=0, batch_size=8, neg=4), epochs=1)
    assert ds.options().autotune.enabled is False
    assert usable_cores() == len(os.sched_getaffinity(0))  # the cores this process may use, not the machine's
    it = iter(ds)
    next(it)
    del it  # freed at once (no autotuner thread to wait for)


@pytest.mark.parametrize("dense_bytes", [negatives.DENSE_MEMBERSHIP_BYTES, 0])
@pytest.mark.parametrize(
    "cfg",
    [
        SamplerConfig(shared_negatives=0, batch_size=32, neg=10, p=0.3, corrupt_side="per-negative"),
        SamplerConfig(batch_size=32, neg=10, p=0.3, shared_negatives=8),
        SamplerConfig(batch_size=32, neg=10, p=0.3, shared_negatives=8, corrupt_side="per-negative"),
        SamplerConfig(batch_size=32, neg=10, p=0.3, shared_negatives=16, biased_chunk=4),
    ],
    ids=["per-triple", "shared", "shared per-negative", "biased chunk"],
)
def test_pair_every_draws_the_pair_labels_of_every_nth_positive_only(small_typed_index, cfg, dense_bytes):
    """The same batch, its pair labels only for rows 0, 4, 8, ...: those rows' labels of a sampler
    that draws them all, and the NumPy reference's."""
    every = NegativeSampler.from_settings(small_typed_index, cfg, seed=3)
    fourth = NegativeSampler.from_settings(small_typed_index, cfg, seed=3, pair_every=4)
    for sampler in (every, fourth):
        sampler._slots = negatives.SlotMembership(small_typed_index, dense_bytes=dense_bytes)
    triples, step = tf.constant(_batch(small_typed_index, 32)), tf.constant(5, tf.int64)
    a, b = _np(every(triples, step)), _np(fourth(triples, step))
    assert b["pair_labels"].shape == (8, 10)
    np.testing.assert_array_equal(b["pair_labels"], a.pop("pair_labels")[::4])
    b.pop("pair_labels")
    _assert_same_features(a, b)
    assert 0 < a["valid_negative"].mean() <= 1


# -- the sampler's defaults: the recommended recipe, chosen when the run starts ----------------------
@pytest.mark.parametrize(
    "settings, sampled, replicas, chosen",
    [
        ({}, True, 1, (1000, 0)),  # the baseline (p 0): nothing biased to share
        ({"p": 0.3}, True, 1, (1000, 10)),  # README's first row
        ({"p": 0.3, "batch_size": 500}, True, 1, (500, 10)),  # the batch, whatever its size
        ({"p": 0.3, "batch_size": 125}, True, 1, (125, 0)),  # 10 does not divide it: per triple
        ({"p": 0.3}, True, 2, (500, 10)),  # each replica's batch
        ({"p": 0.3}, False, 1, (0, 0)),  # a loss that scores every entity draws no negatives
        ({"p": 0.3, "shared_negatives": 0}, True, 1, (0, 0)),  # given: kept, and no chunk without it
        ({"p": 0.3, "shared_negatives": 50, "biased_chunk": 5}, True, 1, (50, 5)),
    ],
)
def test_the_samplers_defaults_are_chosen_for_the_run(settings, sampled, replicas, chosen):
    cfg = SamplerConfig(**settings)
    assert (cfg.shared_negatives, cfg.biased_chunk) == (settings.get("shared_negatives"), settings.get("biased_chunk"))
    got = cfg.resolved(sampled=sampled, replicas=replicas)
    assert (got.shared_negatives, got.biased_chunk) == chosen and got.is_resolved
    assert got.resolved(sampled=sampled, replicas=replicas) == got


def test_a_pair_every_that_does_not_divide_the_default_chunk_keeps_biased_negatives_per_triple():
    assert SamplerConfig(p=0.3).resolved(pair_every=5).biased_chunk == 10
    assert SamplerConfig(p=0.3).resolved(pair_every=4).biased_chunk == 0


def test_the_api_and_the_cli_get_the_recommended_recipe():
    from jobi_tf.cli.train import config_from_command

    from jobi_tf import regimes
    from jobi_tf.config import RunConfig, with_settings

    cli = regimes.resolve(config_from_command(["--dataset", "fb15k-237", "--joint", "--p", "0.3"]))
    api = regimes.resolve(with_settings(RunConfig(), {"joint": True, "p": 0.3}))
    assert cli.sampler == api.sampler == SamplerConfig(p=0.3, shared_negatives=1000, biased_chunk=10)
    assert (cli.train.eval_every, cli.train.patience, cli.train.monitor) == (1, 10, "mrr")
    assert cli.train == api.train and cli.model == api.model


# -- negatives by degree, biased draws by frequency, the log-Q correction ------------------


def _chi2_ok(counts: np.ndarray, expected: np.ndarray) -> bool:
    chi2 = np.sum((counts - expected) ** 2 / expected)
    dof = len(counts) - 1
    return chi2 < dof + 5 * np.sqrt(2 * dof)


@pytest.mark.parametrize("distribution", ["degree", "mix"])
def test_unbiased_negatives_follow_the_degree_distribution(small_typed_index, distribution):
    """``--negative-distribution degree``: each entity in proportion to its training triple
    ends; ``mix``: half uniform, half by degree (NumPy's counts of the ends as reference)."""
    index = small_typed_index
    cfg = SamplerConfig(shared_negatives=0, batch_size=64, neg=400, p=0.0, negative_distribution=distribution)
    sampler = NegativeSampler.from_settings(index, cfg, seed=4, pair_labels=False)
    drawn = np.concatenate(
        [
            _np(sampler(tf.constant(_batch(index, 64, s)), tf.constant(s, tf.int64)))["candidates"].ravel()
            for s in range(4)
        ]
    )
    degree = np.bincount(index.train[:, [0, 2]].ravel(), minlength=index.num_entities).astype(np.float64)
    share = degree / degree.sum()
    if distribution == "mix":
        share = 0.5 / index.num_entities + 0.5 * share
    seen = share > 0
    assert set(np.unique(drawn)) <= set(np.flatnonzero(seen))
    counts = np.bincount(drawn, minlength=index.num_entities)[seen].astype(np.float64)
    assert _chi2_ok(counts, len(drawn) * share[seen])


def test_biased_draws_by_frequency_follow_the_slot_counts(small_typed_index):
    """``--biased-draw frequency``: a biased tail of relation r is each entity in proportion
    to the training triples (·, r, e)."""
    index = small_typed_index
    rel = 3
    rows = index.train[index.train[:, 1] == rel]
    triples = rows[np.arange(64) % len(rows)]
    cfg = SamplerConfig(shared_negatives=0, batch_size=64, neg=400, p=1.0, biased_draw="frequency")
    x = _np(
        NegativeSampler.from_settings(index, cfg, provenance=True, seed=9)(
            tf.constant(triples), tf.constant(1, tf.int64)
        )
    )
    for side, column in ((True, 2), (False, 0)):
        drawn = x["candidates"][x["corrupt_tail"] == side]
        entities, slot_counts = np.unique(rows[:, column], return_counts=True)
        assert set(drawn.tolist()) == set(entities.tolist())
        counts = np.array([np.sum(drawn == e) for e in entities], np.float64)
        assert _chi2_ok(counts, len(drawn) * slot_counts / slot_counts.sum())


@pytest.mark.parametrize("distribution", ["degree", "mix"])
def test_log_q_is_each_shared_negatives_draw_probability_over_a_uniform_draws(small_typed_index, distribution):
    index = small_typed_index
    cfg = SamplerConfig(
        batch_size=40, neg=10, p=0.3, shared_negatives=20, negative_distribution=distribution, logq_correction=True
    ).resolved()
    x = _np(
        NegativeSampler.from_settings(index, cfg, seed=2, pair_labels=False)(
            tf.constant(_batch(index, 40)), tf.constant(5, tf.int64)
        )
    )
    degree = np.bincount(index.train[:, [0, 2]].ravel(), minlength=index.num_entities)
    ratio = degree * index.num_entities / degree.sum()
    ratio = 0.5 + 0.5 * ratio if distribution == "mix" else ratio
    k_b = 3
    shared = np.repeat(x["shared_candidates"], 20, axis=0)
    np.testing.assert_allclose(x["negative_log_q"][:, k_b:], np.log(ratio[shared]), rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(x["negative_log_q"][:, :k_b], 0.0)


def test_the_sampled_softmax_subtracts_log_q_from_the_negatives_logits():
    """The corrected loss against NumPy: ``logsumexp(s - [0, log_q]) - s_0`` per positive."""
    from jobi_tf.losses.sampled_softmax import SampledSoftmax

    rng = np.random.default_rng(0)
    scores = rng.normal(size=(5, 2, 7)).astype(np.float32)  # [B, heads, 1 + K]
    log_q = rng.normal(size=(5, 6)).astype(np.float32)

    class Batch:
        features = {"valid_negative": tf.ones([5, 6], tf.bool), "negative_log_q": tf.constant(log_q)}

        def sampled(self):
            return tf.constant(scores)

    objective = SampledSoftmax()
    logits = objective.logits(Batch())[objective.name].numpy()
    corrected = scores[:, 0] - np.pad(log_q, [[0, 0], [1, 0]])
    np.testing.assert_allclose(logits, corrected, rtol=1e-6)
    loss = objective.loss({"triples": tf.zeros([5, 3], tf.int32)}, {objective.name: tf.constant(logits)}).numpy()
    want = np.mean(np.log(np.sum(np.exp(corrected), axis=1)) - corrected[:, 0])
    np.testing.assert_allclose(loss, want, rtol=1e-5)


@pytest.mark.parametrize(
    "settings, flag",
    [
        ({"negative_distribution": "popular"}, "negative-distribution"),
        ({"biased_draw": "by-count"}, "biased-draw"),
    ],
)
def test_the_draw_settings_are_checked_naming_the_flag(settings, flag):
    with pytest.raises(ConfigError, match=flag):
        SamplerConfig(**settings)


def test_the_sampler_takes_one_kind_of_settings_a_plan(small_typed_index):
    """One type per stage input: a run's `BatchPlan`; bare sampler settings go through
    `from_settings`, which builds the same sampled plan a run would."""
    settings = SamplerConfig(shared_negatives=0, batch_size=16, neg=4, p=0.5)
    with pytest.raises(TypeError, match="from_settings"):
        NegativeSampler(small_typed_index, settings)
    built = NegativeSampler.from_settings(small_typed_index, settings, seed=1, pair_every=2)
    assert built.plan == BatchPlan.sampled(settings, pair_every=2)
    assert built.plan.biased_chance == 0.5
