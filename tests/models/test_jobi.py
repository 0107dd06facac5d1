"""JoBiModel: logits and losses against NumPy, heads, masking, serialization."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf
from random_batches import sampled_batch

from jobi_tf.config import ModelConfig, TrainConfig
from jobi_tf.models import JoBiModel
from jobi_tf.runtime.errors import ConfigError


def _numpy_distmult_logits(ent, rel, x):
    h, r, t = ent[x["triples"][:, 0]], rel[x["triples"][:, 1]], ent[x["triples"][:, 2]]
    pos = np.sum(h * r * t, 1)
    c = ent[x["candidates"]]
    as_tail = np.einsum("bd,bkd->bk", h * r, c)
    as_head = np.einsum("bd,bkd->bk", r * t, c)
    return np.concatenate([pos[:, None], np.where(x["corrupt_tail"], as_tail, as_head)], 1)


def test_logits_and_joint_loss_match_numpy():
    rng = np.random.default_rng(0)
    x = sampled_batch(rng)
    x["valid_negative"][0, 0] = False  # one accidental hit: must not count
    model = JoBiModel(num_entities=12, num_relations=3, model="distmult", dim=6, joint=True, alpha=0.7)
    out = model(x)
    ent = model.entity_embeddings.numpy()
    tri = _numpy_distmult_logits(ent, model.triple_relations.numpy(), x)
    pair = _numpy_distmult_logits(ent, model.pair_relations.numpy(), x)
    np.testing.assert_allclose(out["pair"].numpy(), pair, rtol=1e-5, atol=1e-6)
    valid = np.concatenate([np.ones((4, 1), bool), x["valid_negative"]], 1)
    np.testing.assert_allclose(out["triple"].numpy()[valid], tri[valid], rtol=1e-5, atol=1e-6)

    # L_tri: NLL of the positive in a softmax over itself and its *valid* negatives.
    l_tri = np.mean([np.log(np.sum(np.exp(row[v]))) - row[0] for row, v in zip(tri, valid, strict=True)])
    # L_bi: mean BCE over the positive (label 1) and its negatives.
    labels = np.concatenate([np.ones((4, 1)), x["pair_labels"]], 1)
    prob = 1 / (1 + np.exp(-pair))
    l_bi = np.mean(-(labels * np.log(prob) + (1 - labels) * np.log(1 - prob)))
    loss = model.compute_loss(x=x, y_pred=out)
    np.testing.assert_allclose(float(loss), l_tri + 0.7 * l_bi, rtol=1e-5)
    np.testing.assert_allclose(float(model.triple_loss_tracker.result()), l_tri, rtol=1e-5)
    np.testing.assert_allclose(float(model.pair_loss_tracker.result()), l_bi, rtol=1e-5)


def test_baseline_has_no_pair_head():
    model = JoBiModel(num_entities=12, num_relations=3, model="complex", dim=4, joint=False)
    assert model.pair_relations is None
    assert sorted(v.path.split("/")[-1] for v in model.weights) == ["entity_embeddings", "triple_relations"]
    out = model(sampled_batch(np.random.default_rng(1)))
    assert set(out) == {"triple"}


@pytest.mark.parametrize("name", ["distmult", "complex", "simple"])
def test_shared_negatives_score_like_per_triple_negatives(name):
    """Scoring shared candidates by matmul equals scoring them as per-triple candidates."""
    rng = np.random.default_rng(2)
    b, c, k = 6, 3, 4
    x = sampled_batch(rng, b=b, k=k)
    shared = rng.integers(12, size=(b // c, k)).astype(np.int32)
    shared_tail = rng.random((b, k)) < 0.5  # per positive: the side may differ within a chunk
    model = JoBiModel(num_entities=12, num_relations=3, model=name, dim=4, joint=True)
    ones = np.ones((b, k), bool)
    as_shared = model(
        {
            "triples": x["triples"],
            "shared_candidates": shared,
            "shared_corrupt_tail": shared_tail,
            "valid_negative": ones,
            "pair_labels": x["pair_labels"],
        }
    )
    as_own = model(
        {
            "triples": x["triples"],
            "candidates": np.repeat(shared, c, 0),
            "corrupt_tail": shared_tail,
            "valid_negative": ones,
            "pair_labels": x["pair_labels"],
        }
    )
    for key in ("triple", "pair"):
        np.testing.assert_allclose(as_shared[key].numpy(), as_own[key].numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["distmult", "complex", "simple"])
@pytest.mark.parametrize("shared", [False, True])
def test_one_side_per_positive_path_gives_the_per_candidate_logits(name, shared):
    """``positive_corrupt_tail`` only skips the unused side's scores; logits are unchanged."""
    rng = np.random.default_rng(4)
    b, c, k = 6, 3, 4
    x = sampled_batch(rng, b=b, k=k)
    side = rng.random(b) < 0.5
    x["corrupt_tail"] = np.repeat(side[:, None], k, 1)
    if shared:
        x["shared_candidates"] = rng.integers(12, size=(b // c, 2)).astype(np.int32)
        x["shared_corrupt_tail"] = np.repeat(side[:, None], 2, 1)
        x["valid_negative"] = np.ones((b, k + 2), bool)
        x["pair_labels"] = np.zeros((b, k + 2), np.float32)
    model = JoBiModel(num_entities=12, num_relations=3, model=name, dim=4, joint=True)
    both = model(x)
    one = model(dict(x, positive_corrupt_tail=side))
    for key in ("triple", "pair"):
        np.testing.assert_allclose(one[key].numpy(), both[key].numpy(), rtol=1e-5, atol=1e-6)


def test_full_softmax_logits_are_scores_of_every_entity():
    rng = np.random.default_rng(3)
    x = sampled_batch(rng)
    model = JoBiModel(num_entities=12, num_relations=3, model="complex", dim=4, loss="full-softmax")
    out = model({"triples": x["triples"]})
    every = np.arange(12)
    for i, (h, r, t) in enumerate(x["triples"]):
        tails = np.stack([np.full(12, h), np.full(12, r), every], 1)
        heads = np.stack([every, np.full(12, r), np.full(12, t)], 1)
        np.testing.assert_allclose(out["triple_tail"][i], model.score_triples(tails), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(out["triple_head"][i], model.score_triples(heads), rtol=1e-5, atol=1e-6)


def test_gradients_of_the_entity_table_are_sparse():
    """Only looked-up rows get gradients: the table's gradient arrives as IndexedSlices."""
    x = sampled_batch(np.random.default_rng(4))
    model = JoBiModel(num_entities=12, num_relations=3, model="distmult", dim=4, joint=True)
    with tf.GradientTape() as tape:
        loss = model.compute_loss(x=x, y_pred=model(x))
    grad = tape.gradient(loss, model.entity_embeddings)
    assert isinstance(grad, tf.IndexedSlices)


def test_training_reads_table_rows_not_whole_tables():
    """The traced step gathers rows from the variables (ResourceGather) and never reads a whole
    table: a whole read held while the optimizer scatters rows makes TensorFlow copy the table
    (without XLA, seconds per step at 2M rows)."""
    x = sampled_batch(np.random.default_rng(5))
    model = JoBiModel(num_entities=12, num_relations=3, model="complex", dim=4, joint=True)
    model(x)

    @tf.function
    def loss_and_grads(x):
        with tf.GradientTape() as tape:
            loss = model.compute_loss(x=x, y_pred=model(x, training=True))
        return tape.gradient(loss, model.trainable_variables)

    graph = loss_and_grads.get_concrete_function(x).graph
    tables = [model.entity_embeddings, model.triple_relations, model.pair_relations]
    handles = {id(t.value.handle) for t in tables}
    inside = {internal.name for external, internal in graph.captures if id(external) in handles}
    assert len(inside) == 3
    reads = {op.type: 0 for op in graph.get_operations()}
    for op in graph.get_operations():
        if any(i.name in inside for i in op.inputs):
            reads[op.type] += 1
    assert reads["ResourceGather"] >= 5  # heads, tails, candidates, two relation tables
    assert reads.get("ReadVariableOp", 0) == 0  # (the loss trackers' own reads are not tables)


def test_config_round_trip():
    model = JoBiModel(num_entities=7, num_relations=2, model="simple", dim=3, joint=True, alpha=0.25)
    clone = JoBiModel.from_config(model.get_config())
    assert clone.get_config() == model.get_config()
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(model))
    assert isinstance(restored, JoBiModel) and restored.alpha == 0.25


@pytest.mark.parametrize("name", ["complex", "simple"])
def test_init_scales(name):
    """table-glorot: std sqrt(2 / (rows + width)); row-glorot: std sqrt(2 / width)."""
    keras.utils.set_random_seed(0)
    rows = 3000
    for init in ("table-glorot", "row-glorot"):
        model = JoBiModel(num_entities=rows, num_relations=400, model=name, dim=50, joint=True, init=init)
        for table in (model.entity_embeddings, model.triple_relations, model.pair_relations):
            n, width = table.shape
            values = table.numpy()
            want = np.sqrt(2.0 / (n + width)) if init == "table-glorot" else np.sqrt(2.0 / width)
            assert values.std() == pytest.approx(want, rel=0.05), (init, table.path)
            assert abs(values.mean()) < 0.05 * want
    assert JoBiModel.from_config(model.get_config()).init == "row-glorot"
    with pytest.raises(ConfigError, match="--init"):
        ModelConfig(init="zeros")


def test_bad_arguments_name_themselves():
    with pytest.raises(ValueError, match="num_entities"):
        JoBiModel(num_entities=0, num_relations=1)
    with pytest.raises(ValueError, match="loss="):
        JoBiModel(num_entities=3, num_relations=1, loss="margin")


def test_regularization_adds_the_mean_normalised_norm_of_the_rows_used():
    x = sampled_batch(np.random.default_rng(5))
    plain = JoBiModel(num_entities=12, num_relations=3, model="distmult", dim=6)
    reg = JoBiModel(num_entities=12, num_relations=3, model="distmult", dim=6, regularization=0.3)
    for a, b in zip(reg.weights, plain.weights, strict=True):
        a.assign(b)
    ent, rel = plain.entity_embeddings.numpy(), plain.triple_relations.numpy()
    rows = [
        ent[x["triples"][:, 0]][:, None],
        ent[x["triples"][:, 2]][:, None],
        rel[x["triples"][:, 1]][:, None],
        ent[x["candidates"]],
    ]
    per_example = np.mean(np.concatenate([np.linalg.norm(r, axis=-1) for r in rows], 1), 1) / np.sqrt(6)
    expected = float(plain.compute_loss(x=x, y_pred=plain(x))) + 0.3 * per_example.mean()
    np.testing.assert_allclose(float(reg.compute_loss(x=x, y_pred=reg(x))), expected, rtol=1e-5)


def _numpy_cubed_norm(model: str, x: np.ndarray) -> np.ndarray:
    """N3's per-row term: ComplEx takes the modulus of each (real, imaginary) pair."""
    if model == "complex":
        re, im = np.split(x, 2, axis=-1)
        return np.sum(np.hypot(re, im) ** 3, axis=-1)
    return np.sum(np.abs(x) ** 3, axis=-1)


@pytest.mark.parametrize("model", ["distmult", "complex", "simple"])
@pytest.mark.parametrize("joint", [False, True])
def test_n3_adds_the_cubed_moduli_of_the_positive_rows_only(model, joint):
    x = sampled_batch(np.random.default_rng(6))
    plain = JoBiModel(num_entities=12, num_relations=3, model=model, dim=6, joint=joint)
    reg = JoBiModel(
        num_entities=12, num_relations=3, model=model, dim=6, joint=joint, regularization=0.05, regularizer="n3"
    )
    for a, b in zip(reg.weights, plain.weights, strict=True):
        a.assign(np.random.default_rng(7).normal(size=b.shape).astype("float32"))
        b.assign(a)
    ent, rel = plain.entity_embeddings.numpy(), plain.triple_relations.numpy()
    t = x["triples"]
    per_example = sum(_numpy_cubed_norm(model, rows) for rows in (ent[t[:, 0]], rel[t[:, 1]], ent[t[:, 2]]))
    expected = float(plain.compute_loss(x=x, y_pred=plain(x))) + 0.05 * per_example.mean()
    np.testing.assert_allclose(float(reg.compute_loss(x=x, y_pred=reg(x))), expected, rtol=1e-5)
    assert JoBiModel.from_config(reg.get_config()).regularizer == "n3"


def test_unknown_regularizer_is_refused():
    with pytest.raises(ValueError, match="regularizer="):
        JoBiModel(num_entities=3, num_relations=1, regularizer="l1")
    with pytest.raises(ConfigError, match="--regularizer"):
        TrainConfig(regularizer="l1")


def _numpy_score(model: str, a: np.ndarray, rel: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``s(a, rel, b)`` over the last axis, from the papers' formulas (broadcasting)."""
    if model == "distmult":
        return np.sum(a * rel * b, -1)
    d = a.shape[-1] // 2
    if model == "complex":  # Re(<a, rel, conj(b)>)
        a_c, r_c, b_c = (x[..., :d] + 1j * x[..., d:] for x in (a, rel, b))
        return np.real(np.sum(a_c * r_c * np.conj(b_c), -1))
    # SimplE: (<a_head, r, b_tail> + <b_head, r_inv, a_tail>) / 2
    return 0.5 * (
        np.sum(a[..., :d] * rel[..., :d] * b[..., d:], -1) + np.sum(b[..., :d] * rel[..., d:] * a[..., d:], -1)
    )


def _reciprocalsampled_batch(rng, b=6, k=5):
    x = sampled_batch(rng, b=b, k=k)
    side = rng.random(b) < 0.5
    side[:2] = [True, False]  # both sides present
    x["corrupt_tail"] = np.repeat(side[:, None], k, 1)
    x["positive_corrupt_tail"] = side
    replaced = np.where(x["corrupt_tail"], x["triples"][:, 2:3], x["triples"][:, 0:1])
    x["valid_negative"] = x["candidates"] != replaced
    return x


@pytest.mark.parametrize("model", ["distmult", "complex", "simple"])
def test_reciprocal_ranks_a_head_corruption_with_the_inverse_relation(model):
    """Tail side: ``s(h, r, ·)``; head side: ``s(t, r⁻¹, ·)`` for the positive and every candidate,
    in both heads, with the inverse of ``r`` at row ``r + R`` of each relation table."""
    rng = np.random.default_rng(8)
    x = _reciprocalsampled_batch(rng)
    m = JoBiModel(num_entities=12, num_relations=3, model=model, dim=4, joint=True, reciprocal=True)
    assert m.triple_relations.shape[0] == m.pair_relations.shape[0] == 6
    out = m(x)
    ent = m.entity_embeddings.numpy()
    h, r, t = (x["triples"][:, i] for i in range(3))
    tail_side = x["positive_corrupt_tail"][:, None, None]
    for key, table in (("triple", m.triple_relations), ("pair", m.pair_relations)):
        rel = table.numpy()
        known = np.where(tail_side, ent[h][:, None], ent[t][:, None])  # [B, 1, W]
        relation = np.where(tail_side, rel[r][:, None], rel[r + 3][:, None])
        answer = np.where(tail_side[:, 0], ent[t], ent[h])[:, None]
        expected = np.concatenate(
            [_numpy_score(model, known, relation, answer), _numpy_score(model, known, relation, ent[x["candidates"]])],
            axis=1,
        )
        valid = np.concatenate([np.ones((len(h), 1), bool), x["valid_negative"]], 1)
        np.testing.assert_allclose(out[key].numpy()[valid], expected[valid], rtol=1e-5, atol=1e-5)
    # Evaluation's head queries are the inverse relation's tail queries.
    every = np.arange(12)
    scores = m.head_queries(tf.constant(r), tf.constant(t)).numpy() @ ent.T
    want = _numpy_score(model, ent[t][:, None], m.triple_relations.numpy()[r + 3][:, None], ent[every][None])
    np.testing.assert_allclose(scores, want, rtol=1e-5, atol=1e-5)
    assert JoBiModel.from_config(m.get_config()).reciprocal


def test_reciprocal_sampled_softmax_needs_one_side_per_positive():
    x = _reciprocalsampled_batch(np.random.default_rng(9))
    del x["positive_corrupt_tail"]
    m = JoBiModel(num_entities=12, num_relations=3, model="complex", dim=4, reciprocal=True)
    with pytest.raises(ValueError, match="positive_corrupt_tail"):
        m(x)
    from jobi_tf import regimes
    from jobi_tf.config import RunConfig, SamplerConfig

    with pytest.raises(ConfigError, match="--reciprocal.*per-positive"):
        regimes.check(RunConfig(sampler=SamplerConfig(corrupt_side="per-negative"), model=ModelConfig(reciprocal=True)))
    regimes.check(
        RunConfig(  # the full softmax scores both queries separately: any side setting is fine
            sampler=SamplerConfig(corrupt_side="per-negative"),
            model=ModelConfig(reciprocal=True),
            train=TrainConfig(loss="full-softmax"),
        )
    )


def test_reciprocal_full_softmax_scores_heads_with_the_inverse_relation():
    x = sampled_batch(np.random.default_rng(10))
    m = JoBiModel(num_entities=12, num_relations=3, model="complex", dim=4, loss="full-softmax", reciprocal=True)
    out = m({"triples": x["triples"]})
    ent, rel = m.entity_embeddings.numpy(), m.triple_relations.numpy()
    h, r, t = (x["triples"][:, i] for i in range(3))
    np.testing.assert_allclose(
        out["triple_tail"].numpy(), _numpy_score("complex", ent[h][:, None], rel[r][:, None], ent[None]), atol=1e-5
    )
    np.testing.assert_allclose(
        out["triple_head"].numpy(), _numpy_score("complex", ent[t][:, None], rel[r + 3][:, None], ent[None]), atol=1e-5
    )


@pytest.mark.parametrize("relation_penalty", [1.0, 0.5, 0.0])
@pytest.mark.parametrize("loss", ["sampled-softmax", "full-softmax"])
def test_reciprocal_n3_penalises_the_relation_rows_the_positive_was_scored_with(loss, relation_penalty):
    """Sampled: the forward row for a tail corruption, the inverse for a head one; full
    softmax scores both queries, so both rows; ``relation_penalty`` scales their terms only."""
    x = _reciprocalsampled_batch(np.random.default_rng(11))
    if loss == "full-softmax":
        x = {"triples": x["triples"], "positive_corrupt_tail": x["positive_corrupt_tail"]}
    kw = dict(num_entities=12, num_relations=3, model="complex", dim=4, reciprocal=True, loss=loss)
    plain = JoBiModel(**kw)
    reg = JoBiModel(**kw, regularization=0.05, regularizer="n3", relation_penalty=relation_penalty)
    for a, b in zip(reg.weights, plain.weights, strict=True):
        a.assign(b)
    ent, rel = plain.entity_embeddings.numpy(), plain.triple_relations.numpy()
    h, r, t = (x["triples"][:, i] for i in range(3))
    side = x["positive_corrupt_tail"][:, None]
    if loss == "full-softmax":
        relation_terms = _numpy_cubed_norm("complex", rel[r]) + _numpy_cubed_norm("complex", rel[r + 3])
    else:
        relation_terms = _numpy_cubed_norm("complex", np.where(side, rel[r], rel[r + 3]))
    entity_terms = _numpy_cubed_norm("complex", ent[h]) + _numpy_cubed_norm("complex", ent[t])
    per_example = entity_terms + relation_penalty * relation_terms
    expected = float(plain.compute_loss(x=x, y_pred=plain(x))) + 0.05 * per_example.mean()
    np.testing.assert_allclose(float(reg.compute_loss(x=x, y_pred=reg(x))), expected, rtol=1e-5)
    assert JoBiModel.from_config(reg.get_config()).relation_penalty == relation_penalty


@pytest.mark.parametrize("side", ["per-positive", "per-negative"])
def test_a_batch_with_shared_biased_negatives_trains_the_numpy_loss_and_the_per_triple_gradients(
    small_typed_index, side
):
    """``--biased-chunk`` batches: the loss is JoBi's (NumPy reference), and the gradients equal
    those of the same negatives given per triple."""
    from jobi_tf.config import SamplerConfig
    from jobi_tf.sampling.pipelines import NegativeSampler

    index = small_typed_index
    b, c, c_b, k = 32, 16, 4, 10
    cfg = SamplerConfig(batch_size=b, neg=k, p=0.3, shared_negatives=c, biased_chunk=c_b, corrupt_side=side)
    triples = index.train[np.random.default_rng(5).choice(len(index.train), b, replace=False)]
    x = {
        n: v.numpy()
        for n, v in NegativeSampler.from_settings(index, cfg, seed=1)(tf.constant(triples), tf.constant(2)).items()
    }
    model = JoBiModel(index.num_entities, index.num_relations, model="distmult", dim=6, joint=True, alpha=0.5)
    own = {
        "triples": x["triples"],
        "candidates": np.concatenate(
            [np.repeat(x["chunk_candidates"], c_b, axis=0), np.repeat(x["shared_candidates"], c, axis=0)], axis=1
        ),
        "corrupt_tail": np.concatenate([x["chunk_corrupt_tail"], x["shared_corrupt_tail"]], axis=1),
        "valid_negative": x["valid_negative"],
        "pair_labels": x["pair_labels"],
    }
    ent, rel, pair_rel = (t.numpy() for t in (model.entity_embeddings, model.triple_relations, model.pair_relations))
    valid = np.concatenate([np.ones((b, 1), bool), x["valid_negative"]], 1)
    tri = _numpy_distmult_logits(ent, rel, own)
    l_tri = np.mean([np.log(np.sum(np.exp(row[v]))) - row[0] for row, v in zip(tri, valid, strict=True)])
    pair = _numpy_distmult_logits(ent, pair_rel, own)
    labels = np.concatenate([np.ones((b, 1)), x["pair_labels"]], 1)
    prob = 1 / (1 + np.exp(-pair))
    l_bi = np.mean(-(labels * np.log(prob) + (1 - labels) * np.log(1 - prob)))

    def loss_and_grads(features):
        with tf.GradientTape() as tape:
            loss = model.compute_loss(x=features, y_pred=model(features))
        grads = tape.gradient(loss, model.trainable_variables)
        return float(loss), [tf.convert_to_tensor(g).numpy() for g in grads]

    shared_loss, shared_grads = loss_and_grads(x)
    own_loss, own_grads = loss_and_grads(own)
    np.testing.assert_allclose(shared_loss, l_tri + 0.5 * l_bi, rtol=1e-5)
    np.testing.assert_allclose(own_loss, shared_loss, rtol=1e-6)
    for got, want in zip(shared_grads, own_grads, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
