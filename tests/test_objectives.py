"""Objectives as objects, the scoring hook, and what the model accepts as input."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from random_batches import sampled_batch

from jobi_tf.contracts.objectives import Objective, PairBCE, RelationPrediction, ScoredBatch
from jobi_tf.losses import get as get_objective
from jobi_tf.losses.full_softmax import FullSoftmax
from jobi_tf.losses.sampled_softmax import SampledSoftmax
from jobi_tf.models import JoBiModel, get_scorer
from jobi_tf.models.scorers import heads_against_own_rows
from jobi_tf.runtime.tf_settings import cpu_has_native_bfloat16


class MarginRanking(Objective):
    """A user's own objective, defined outside the library: mean hinge ``max(0, 1 - s+ + s-)``."""

    features = ("valid_negative",)

    def logits(self, batch: ScoredBatch) -> dict[str, tf.Tensor]:
        return {self.name: batch.sampled()[:, self.head]}

    def loss(self, features, logits):
        scores = logits[self.name]
        hinge = tf.nn.relu(1.0 - scores[:, :1] + scores[:, 1:])
        valid = tf.cast(features["valid_negative"], scores.dtype)
        return tf.reduce_sum(hinge * valid) / tf.reduce_sum(valid)


def test_a_users_objective_needs_no_change_to_the_library():
    rng = np.random.default_rng(0)
    x = sampled_batch(rng)
    model = JoBiModel(num_entities=12, num_relations=3, model="distmult", dim=6, loss=MarginRanking())
    out = model(x)
    ent, rel = model.entity_embeddings.numpy(), model.triple_relations.numpy()
    h, r, t = (x["triples"][:, i] for i in range(3))
    pos = np.sum(ent[h] * rel[r] * ent[t], 1)
    c = ent[x["candidates"]]
    as_tail, as_head = np.einsum("bd,bkd->bk", ent[h] * rel[r], c), np.einsum("bd,bkd->bk", rel[r] * ent[t], c)
    neg = np.where(x["corrupt_tail"], as_tail, as_head)
    hinge = np.maximum(0, 1 - pos[:, None] + neg)[x["valid_negative"]]
    np.testing.assert_allclose(float(model.compute_loss(x=x, y_pred=out)), hinge.mean(), rtol=1e-5)
    assert model.get_config()["loss"] is None  # not a registered name: passed again when loading

    model.compile(optimizer="sgd")
    before = model.entity_embeddings.numpy().copy()
    model.fit(tf.data.Dataset.from_tensors(x), epochs=1, verbose=0, shuffle=False)
    assert not np.allclose(model.entity_embeddings.numpy(), before)


def test_heads_hold_one_objective_each_scoring_the_same_candidates():
    sampled = JoBiModel(num_entities=5, num_relations=2, dim=2, joint=True)
    assert [type(o) for o in sampled.objectives] == [SampledSoftmax, PairBCE]
    assert [o.head for o in sampled.objectives] == [0, 1]
    full = JoBiModel(num_entities=5, num_relations=2, dim=2, joint=True, loss="full-softmax")
    assert [type(o) for o in full.objectives] == [FullSoftmax, PairBCE]
    assert full.pair_objective.regime == "1-vs-all"
    assert full.pair_objective.features == ("pair_labels_tail", "pair_labels_head")
    with pytest.raises(ValueError, match="loss="):
        get_objective("margin")
    with pytest.raises(ValueError, match="regime="):
        PairBCE(regime="some")


def test_both_heads_share_one_gather_of_the_candidates():
    """The pair head reads the candidate rows the triple head gathered: JoBi adds one gather,
    of its own relation rows, to the baseline's graph."""
    x = {k: tf.constant(v) for k, v in sampled_batch(np.random.default_rng(1)).items()}

    def gathers(joint: bool) -> int:
        model = JoBiModel(num_entities=12, num_relations=3, model="complex", dim=4, joint=joint)
        graph = tf.function(lambda x: model(x)).get_concrete_function(x).graph
        return sum(op.type in ("ResourceGather", "GatherV2") for op in graph.get_operations())

    assert gathers(True) == gathers(False) + 1


@pytest.mark.parametrize("heads", [2, 3])
def test_heads_against_own_rows_gives_the_einsum_values_and_gradients(heads):
    """The per-triple scoring of several heads, with its written-out gradient, against NumPy."""
    rng = np.random.default_rng(6)
    q = tf.constant(rng.normal(size=(5, heads, 8)).astype(np.float32))
    rows = tf.constant(rng.normal(size=(5, 7, 8)).astype(np.float32))
    upstream = rng.normal(size=(5, heads, 7)).astype(np.float32)
    with tf.GradientTape() as tape:
        tape.watch([q, rows])
        scores = heads_against_own_rows(q, rows)
        loss = tf.reduce_sum(scores * upstream)
    d_q, d_rows = tape.gradient(loss, [q, rows])
    np.testing.assert_allclose(scores.numpy(), np.einsum("bsw,bkw->bsk", q.numpy(), rows.numpy()), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(d_q.numpy(), np.einsum("bsk,bkw->bsw", upstream, rows.numpy()), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(d_rows.numpy(), np.einsum("bsk,bsw->bkw", upstream, q.numpy()), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    ("q_shape", "rows_shape", "spec"),
    [
        ((4, 6), (9, 6), "bw,nw->bn"),  # evaluation, export: every entity
        ((4, 2, 6), (9, 6), "bsw,nw->bsn"),  # 1-vs-all training, both heads
        ((4, 2, 6), (4, 5, 6), "bsw,bkw->bsk"),  # per-triple candidates
        ((3, 4, 2, 6), (3, 5, 6), "gcsw,gkw->gcsk"),  # shared candidates, groups of 4
    ],
)
def test_score_candidates_is_the_dot_product_for_every_shape(q_shape, rows_shape, spec):
    rng = np.random.default_rng(2)
    q, rows = rng.normal(size=q_shape).astype(np.float32), rng.normal(size=rows_shape).astype(np.float32)
    got = get_scorer("complex").score_candidates(tf.constant(q), tf.constant(rows)).numpy()
    np.testing.assert_allclose(got, np.einsum(spec, q, rows), rtol=1e-5, atol=1e-5)


def test_penalties_reach_the_loss_through_add_loss():
    x = sampled_batch(np.random.default_rng(3))
    model = JoBiModel(num_entities=12, num_relations=3, model="complex", dim=4, regularization=0.1, regularizer="n3")
    plain = float(SampledSoftmax().loss(x, model(x)))
    assert len(model.losses) == 1
    total = float(model.compute_loss(x=x, y_pred=model(x)))
    np.testing.assert_allclose(total, plain + float(model.losses[0]), rtol=1e-6)
    unregularized = JoBiModel(num_entities=12, num_relations=3, model="complex", dim=4)
    unregularized(x)
    assert unregularized.losses == []


def test_the_model_scores_id_triples_and_names_the_sampler_for_training():
    x = sampled_batch(np.random.default_rng(4))
    model = JoBiModel(num_entities=12, num_relations=3, model="simple", dim=4, joint=True)
    triples = x["triples"]
    np.testing.assert_allclose(model(triples).numpy(), model.score_triples(triples).numpy(), rtol=1e-6)
    np.testing.assert_allclose(model.predict(triples, verbose=0), model.score_triples(triples).numpy(), rtol=1e-6)
    with pytest.raises(ValueError, match=r"int \[B, 3\].*make_train_dataset"):
        model(np.zeros((2, 3), np.float32))
    with pytest.raises(ValueError, match=r"\['pair_labels', 'valid_negative'\].*make_train_dataset"):
        model({"triples": triples})


def _log_softmax(x: np.ndarray) -> np.ndarray:
    shifted = x - x.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def test_full_softmax_label_smoothing_matches_numpy():
    x = {"triples": sampled_batch(np.random.default_rng(5))["triples"]}
    eps = 0.1
    kw = dict(num_entities=12, num_relations=3, model="complex", dim=4)
    model = JoBiModel(**kw, loss="full-softmax", label_smoothing=eps)
    out = model(x)
    h, t = x["triples"][:, 0], x["triples"][:, 2]
    expected = 0.0
    for logits, target in ((out["triple_tail"].numpy(), t), (out["triple_head"].numpy(), h)):
        smooth = np.full(logits.shape, eps / logits.shape[1])
        smooth[np.arange(len(target)), target] += 1 - eps
        expected += np.mean(-(smooth * _log_softmax(logits.astype(np.float64))).sum(1))
    np.testing.assert_allclose(float(model.compute_loss(x=x, y_pred=out)), expected, rtol=1e-5)
    with pytest.raises(ValueError, match="label_smoothing needs loss='full-softmax'"):
        JoBiModel(**kw, label_smoothing=eps)
    assert JoBiModel.from_config(model.get_config()).objective.label_smoothing == eps


@pytest.mark.parametrize("reciprocal", [False, True])
def test_relation_prediction_is_a_softmax_over_the_relation_table(reciprocal):
    rng = np.random.default_rng(6)
    x = sampled_batch(rng)
    x["positive_corrupt_tail"] = rng.random(4) < 0.5
    kw = dict(num_entities=12, num_relations=3, model="complex", dim=4, reciprocal=reciprocal)
    plain, aux = JoBiModel(**kw), JoBiModel(**kw, relation_prediction=4.0)
    for a, b in zip(aux.weights, plain.weights, strict=True):
        a.assign(b)
    out = aux(x)
    ent, rel = aux.entity_embeddings.numpy(), aux.triple_relations.numpy()
    h, r, t = (x["triples"][:, i] for i in range(3))
    hc, tc = ent[h][:, :4] + 1j * ent[h][:, 4:], ent[t][:, :4] + 1j * ent[t][:, 4:]
    relc = rel[:, :4] + 1j * rel[:, 4:]
    logits = np.real(np.einsum("bd,rd,bd->br", hc, relc, np.conj(tc)))  # Re(<h, r, conj(t)>) for every row r
    assert logits.shape == (4, 6 if reciprocal else 3)
    np.testing.assert_allclose(out["relation"].numpy(), logits, rtol=1e-4, atol=1e-5)
    l_rel = np.mean(-_log_softmax(logits)[np.arange(4), r])
    if reciprocal:  # the inverse copy (t, ?, h), answered by the row of r^-1 (r + 3)
        inverse = np.real(np.einsum("bd,rd,bd->br", tc, relc, np.conj(hc)))
        np.testing.assert_allclose(out["relation_inverse"].numpy(), inverse, rtol=1e-4, atol=1e-5)
        l_rel += np.mean(-_log_softmax(inverse)[np.arange(4), r + 3])
    else:
        assert "relation_inverse" not in out
    expected = float(plain.compute_loss(x=x, y_pred=plain(x))) + 4.0 * l_rel
    np.testing.assert_allclose(float(aux.compute_loss(x=x, y_pred=out)), expected, rtol=1e-5)
    np.testing.assert_allclose(float(aux.relation_loss_tracker.result()), l_rel, rtol=1e-5)


def test_relation_prediction_without_the_inverse_copy_asks_only_h_to_t():
    rng = np.random.default_rng(7)
    x = sampled_batch(rng)
    x["positive_corrupt_tail"] = rng.random(4) < 0.5
    model = JoBiModel(num_entities=12, num_relations=3, model="distmult", dim=4, reciprocal=True)
    batch = ScoredBatch(model, x)
    both, forward = RelationPrediction(), RelationPrediction(inverse_copy=False)
    logits = both.logits(batch)
    assert set(forward.logits(batch)) == {"relation"}
    r = x["triples"][:, 1]
    only_forward = np.mean(-_log_softmax(logits["relation"].numpy())[np.arange(4), r])
    with_inverse = only_forward + np.mean(-_log_softmax(logits["relation_inverse"].numpy())[np.arange(4), r + 3])
    np.testing.assert_allclose(float(forward.loss(x, logits)), only_forward, rtol=1e-5)
    np.testing.assert_allclose(float(both.loss(x, logits)), with_inverse, rtol=1e-5)


def test_slot_weight_counts_slot_entities_more_in_the_training_softmax():
    rng = np.random.default_rng(4)
    tail_logits, head_logits = rng.normal(size=(2, 3, 7)).astype(np.float32)
    slot_tail = (rng.random((3, 7)) < 0.4).astype(np.float32)
    slot_head = (rng.random((3, 7)) < 0.4).astype(np.float32)
    triples = np.array([[1, 0, 2], [3, 1, 4], [5, 0, 6]], np.int32)
    objective = FullSoftmax(slot_weight=2.0)
    assert set(objective.features) == {"pair_labels_tail", "pair_labels_head"}
    features = {
        "triples": tf.constant(triples),
        "pair_labels_tail": tf.constant(slot_tail),
        "pair_labels_head": tf.constant(slot_head),
    }
    got = objective.loss(features, {"triple_tail": tf.constant(tail_logits), "triple_head": tf.constant(head_logits)})

    def nll(logits, slots, targets):  # the softmax with each slot entity counted 1 + w = 3 times
        weights = 1.0 + 2.0 * slots
        z = np.sum(weights * np.exp(logits.astype(np.float64)), axis=1)
        rows = np.arange(len(targets))
        return np.mean(-np.log(weights[rows, targets] * np.exp(logits[rows, targets]) / z))

    expected = nll(tail_logits, slot_tail, triples[:, 2]) + nll(head_logits, slot_head, triples[:, 0])
    assert float(got) == pytest.approx(expected, rel=1e-5)
    plain = FullSoftmax().loss(
        features, {"triple_tail": tf.constant(tail_logits), "triple_head": tf.constant(head_logits)}
    )
    assert float(plain) != pytest.approx(expected, rel=1e-3)
    with pytest.raises(ValueError, match="slot_weight needs loss='full-softmax'"):
        get_objective("sampled-softmax", slot_weight=1.0)


def _bfloat16(x: np.ndarray) -> np.ndarray:
    """float32 → the nearest bfloat16 (ties to even), returned as float32."""
    bits = np.asarray(x, np.float32).view(np.uint32)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return rounded.astype(np.uint32).view(np.float32)


@pytest.mark.parametrize("loss", ["full-softmax", "k-vs-all"])
def test_bfloat16_matmuls_score_every_entity_from_bfloat16_inputs(loss):
    rng = np.random.default_rng(7)
    triples = sampled_batch(rng)["triples"]
    x = {"triples": triples, "query_is_tail": np.array([True, False, True, False])}
    x["answer_labels"] = np.zeros((4, 12), np.float32)
    kw = dict(num_entities=12, num_relations=3, model="distmult", dim=16, loss=loss)
    model = JoBiModel(**kw, matmul_dtype="bfloat16")
    exact = JoBiModel(**kw)
    for a, b in zip(exact.weights, model.weights, strict=True):
        a.assign(b)
    ent, rel = model.entity_embeddings.numpy(), model.triple_relations.numpy()
    h, r, t = (triples[:, i] for i in range(3))
    tail_q, head_q = ent[h] * rel[r], rel[r] * ent[t]  # DistMult's queries, float32
    table = _bfloat16(ent).astype(np.float64)
    by_tail = _bfloat16(tail_q).astype(np.float64) @ table.T
    by_head = _bfloat16(head_q).astype(np.float64) @ table.T
    if loss == "full-softmax":
        got, want = [model(x)["triple_tail"], model(x)["triple_head"]], [by_tail, by_head]
        plain = exact(x)["triple_tail"].numpy()
    else:
        got, want = [model(x)["triple"]], [np.where(x["query_is_tail"][:, None], by_tail, by_head)]
        plain = exact(x)["triple"].numpy()
    # With bfloat16 dot products (AVX512-BF16, AMX) the sums are float32 and only the result is
    # rounded; without them the errors seen (several bfloat16 steps on an AVX2 CPU) are those
    # of summing in bfloat16, bounded relative to the terms' magnitudes (dim roundings of 2**-8).
    exact_sums = cpu_has_native_bfloat16() is True
    abs_tail = np.abs(_bfloat16(tail_q)).astype(np.float64) @ np.abs(table).T
    abs_head = np.abs(_bfloat16(head_q)).astype(np.float64) @ np.abs(table).T
    magnitudes = (
        [abs_tail, abs_head] if loss == "full-softmax" else [np.where(x["query_is_tail"][:, None], abs_tail, abs_head)]
    )
    for g, w, m in zip(got, want, magnitudes, strict=True):
        g = g.numpy()
        assert g.dtype == np.float32
        np.testing.assert_array_equal(g, _bfloat16(g))  # the product itself came out in bfloat16
        if exact_sums:
            np.testing.assert_allclose(g, w, rtol=2**-7, atol=1e-6)
        else:
            assert np.all(np.abs(g - w) <= (kw["dim"] + 1) * 2**-8 * m + 1e-6), np.max(np.abs(g - w) / m)
    assert not np.array_equal(_bfloat16(plain), plain)  # float32 products are not bfloat16 numbers


def test_bfloat16_matmuls_train_float32_tables():
    rng = np.random.default_rng(8)
    x = {"triples": sampled_batch(rng)["triples"]}
    model = JoBiModel(
        num_entities=12, num_relations=3, model="complex", dim=8, loss="full-softmax", matmul_dtype="bfloat16"
    )
    before = model.entity_embeddings.numpy()
    model.compile(optimizer="sgd")
    model.train_on_batch(x)
    assert model.entity_embeddings.dtype == "float32"
    assert np.abs(model.entity_embeddings.numpy() - before).max() > 0
    assert JoBiModel.from_config(model.get_config()).matmul_dtype == "bfloat16"
    with pytest.raises(ValueError, match="matmul_dtype must be one of"):
        JoBiModel(num_entities=12, num_relations=3, matmul_dtype="float16")
