"""``pair_every``: JoBi's pair head trained on every n-th positive of a sampled batch.

The triple head's logits and loss must not move; the pair head's logits must be a NumPy
reference's on rows 0, n, 2n, ... (each with its own and its chunks' candidates), its loss the
binary cross-entropy over those rows, and the gradients those of L_tri + α·L_bi so defined.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from random_batches import sampled_batch

from jobi_tf.config import RunConfig, with_settings
from jobi_tf.contracts.scored_batch import ScoredBatch
from jobi_tf.models import JoBiModel
from jobi_tf.regimes import check
from jobi_tf.runtime.errors import ConfigError
from jobi_tf.runtime.types import PAIR_HEAD

E, R = 12, 3


def _chunked_batch(rng: np.random.Generator, b: int = 24, c: int = 12, c_b: int = 6) -> dict[str, np.ndarray]:
    """A batch as the sampler gives it with ``--shared-negatives c --biased-chunk c_b`` and one
    corrupted side per positive: 2 biased candidates per run of c_b, 3 uniform per chunk of c."""
    triples = np.stack([rng.integers(E, size=b), rng.integers(R, size=b), rng.integers(E, size=b)], 1)
    side = rng.random(b) < 0.5
    return {
        "triples": triples.astype(np.int32),
        "chunk_candidates": rng.integers(E, size=(b // c_b, 2)).astype(np.int32),
        "chunk_corrupt_tail": np.repeat(side[:, None], 2, 1),
        "shared_candidates": rng.integers(E, size=(b // c, 3)).astype(np.int32),
        "shared_corrupt_tail": np.repeat(side[:, None], 3, 1),
        "positive_corrupt_tail": side,
        "valid_negative": np.ones((b, 5), bool),
        "pair_labels": (rng.random((b, 5)) < 0.5).astype(np.float32),
    }


def _chunked_batch_side_per_negative(rng: np.random.Generator, b: int = 24, c: int = 12, c_b: int = 6):
    """`_chunked_batch` with the sampler's default sides: a coin per candidate, the same for
    every positive of its chunk (no ``positive_corrupt_tail``), so both queries are scored."""
    x = _chunked_batch(rng, b, c, c_b)
    del x["positive_corrupt_tail"]
    x["chunk_corrupt_tail"] = np.repeat(rng.random((b // c_b, 2)) < 0.5, c_b, 0)
    x["shared_corrupt_tail"] = np.repeat(rng.random((b // c, 3)) < 0.5, c, 0)
    return x


def _numpy_pair_logits(model: JoBiModel, x: dict[str, np.ndarray], rows: np.ndarray) -> np.ndarray:
    """DistMult pair-head logits ``[len(rows), 1 + K]`` of the given rows, from the tables."""
    ent, rel = model.entity_embeddings.numpy(), model.pair_relations.numpy()
    out = []
    for i in rows:
        h, r, t = x["triples"][i]
        if "candidates" in x:  # per triple, a side per candidate
            cand, tail = x["candidates"][i], x["corrupt_tail"][i]
        else:  # this row's run of biased candidates, then its chunk's uniform ones
            c_b = len(x["triples"]) // len(x["chunk_candidates"])
            c = len(x["triples"]) // len(x["shared_candidates"])
            cand = np.concatenate([x["chunk_candidates"][i // c_b], x["shared_candidates"][i // c]])
            tail = np.concatenate([x["chunk_corrupt_tail"][i], x["shared_corrupt_tail"][i]])
        inverse = r + R if model.reciprocal else r
        as_tail, as_head = ent[h] * rel[r], ent[t] * rel[inverse]
        positive = as_tail @ ent[t] if not model.reciprocal or tail[0] else as_head @ ent[h]
        scores = np.where(tail, ent[cand] @ as_tail, ent[cand] @ as_head)
        out.append(np.concatenate([[positive], scores]))
    return np.array(out)


def _bce(labels: np.ndarray, logits: np.ndarray) -> float:
    prob = 1 / (1 + np.exp(-logits))
    return float(np.mean(-(labels * np.log(prob) + (1 - labels) * np.log(1 - prob))))


LAYOUTS = {
    "per-triple": (lambda rng: sampled_batch(rng, e=E, r=R, b=24, k=5), False),
    "shared and biased chunks": (_chunked_batch, False),
    "shared and biased chunks, a side per negative": (_chunked_batch_side_per_negative, False),
    "shared and biased chunks, reciprocal": (_chunked_batch, True),
}


@pytest.mark.parametrize("every", [2, 3])
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_the_pair_head_of_every_nth_positive_matches_numpy(layout, every):
    make, reciprocal = LAYOUTS[layout]
    x = make(np.random.default_rng(every))
    kw = dict(model="distmult", dim=4, joint=True, alpha=0.7, reciprocal=reciprocal)
    full = JoBiModel(E, R, **kw)
    thin = JoBiModel(E, R, pair_every=every, **kw)
    thin.set_weights(full.get_weights())
    rows = np.arange(0, 24, every)
    thinned = {**x, "pair_labels": x["pair_labels"][rows]}  # as the sampler draws them
    out_full, out_thin = full(x), thin(thinned)
    assert out_thin["pair"].shape == (len(rows), 6)
    np.testing.assert_allclose(out_thin["pair"].numpy(), _numpy_pair_logits(thin, x, rows), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(out_thin["triple"].numpy(), out_full["triple"].numpy())  # untouched
    labels = np.concatenate([np.ones((len(rows), 1)), x["pair_labels"][rows]], 1)
    l_bi = _bce(labels, out_thin["pair"].numpy())
    terms = thin.loss_terms(thinned, out_thin)
    np.testing.assert_allclose(float(terms["pair_loss"]), l_bi, rtol=1e-5)
    np.testing.assert_allclose(float(terms["triple_loss"]), float(full.loss_terms(x, out_full)["triple_loss"]))


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_gradients_are_those_of_the_pair_loss_on_every_nth_positive(layout):
    """The thinned model's gradients equal autodiff of L_tri + α·BCE over rows 0, 3, 6, ... of
    the full model's pair logits: scoring those rows apart changes no gradient."""
    make, reciprocal = LAYOUTS[layout]
    x = make(np.random.default_rng(7))
    kw = dict(model="complex", dim=3, joint=True, alpha=0.7, reciprocal=reciprocal)
    full, thin = JoBiModel(E, R, **kw), JoBiModel(E, R, pair_every=3, **kw)
    thin.set_weights(full.get_weights())
    bce = tf.keras.losses.BinaryCrossentropy(from_logits=True)
    with tf.GradientTape() as tape:
        out = full(x)
        labels = tf.pad(x["pair_labels"][::3], [[0, 0], [1, 0]], constant_values=1.0)
        reference = full.loss_terms(x, out)["triple_loss"] + 0.7 * bce(labels, out["pair"][::3])
    want = tape.gradient(reference, full.trainable_variables)
    thinned = {**x, "pair_labels": x["pair_labels"][::3]}  # as the sampler draws them
    with tf.GradientTape() as tape:
        loss = thin.compute_loss(x=thinned, y_pred=thin(thinned))
    got = tape.gradient(loss, thin.trainable_variables)
    np.testing.assert_allclose(float(loss), float(reference), rtol=1e-6)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(tf.convert_to_tensor(g).numpy(), tf.convert_to_tensor(w).numpy(), atol=1e-6)


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_a_rider_scores_what_a_batch_of_its_own_rows_scores(layout):
    """The model scores the pair head's rows in the triple head's chunk products (a rider of
    its `ScoredBatch`); a `ScoredBatch` of those rows alone must give the same logits."""
    make, reciprocal = LAYOUTS[layout]
    x = make(np.random.default_rng(11))
    model = JoBiModel(E, R, model="complex", dim=3, joint=True, reciprocal=reciprocal, pair_every=3)
    rider = ScoredBatch(model, x, riders=((PAIR_HEAD, 3),))
    apart = ScoredBatch(model, x)
    np.testing.assert_allclose(
        rider.sampled_rows(PAIR_HEAD, 3).numpy(), apart.sampled_rows(PAIR_HEAD, 3).numpy(), rtol=1e-6, atol=1e-7
    )
    np.testing.assert_allclose(rider.sampled().numpy(), apart.sampled().numpy(), rtol=1e-6, atol=1e-7)
    assert rider.sampled_rows(PAIR_HEAD, 3).shape == (8, 6)


def test_riders_need_one_stacked_head():
    model = JoBiModel(E, R, model="distmult", dim=4, joint=True)  # both heads stacked
    with pytest.raises(ValueError, match="riders need one stacked head"):
        ScoredBatch(model, _chunked_batch(np.random.default_rng(0)), riders=((PAIR_HEAD, 2),))


def test_pair_every_round_trips_through_the_config():
    model = JoBiModel(E, R, model="distmult", dim=4, joint=True, pair_every=4)
    assert JoBiModel.from_config(model.get_config()).pair_every == 4


def test_the_pair_head_refuses_pair_every_outside_sampled_training():
    with pytest.raises(ValueError, match="every must be 1, or > 1 with sampled training only"):
        JoBiModel(E, R, dim=4, joint=True, pair_every=2, loss="full-softmax")
    with pytest.raises(ValueError, match="every must be 1"):
        JoBiModel(E, R, dim=4, joint=True, pair_every=0)


@pytest.mark.parametrize(
    ("settings", "says"),
    [
        ({"pair_every": 2}, "needs --joint"),
        ({"joint": True, "pair_every": 3, "batch_size": 100}, "must divide --batch-size 100"),
        (
            {"joint": True, "pair_every": 4, "batch_size": 120, "shared_negatives": 60, "biased_chunk": 6},
            "must divide --biased-chunk 6",
        ),  # fmt: skip
        ({"joint": True, "pair_every": 4, "batch_size": 120, "shared_negatives": 30}, "must divide --shared-negatives"),
        ({"joint": True, "pair_every": 2, "loss": "full-softmax"}, "needs --loss"),
        ({"joint": True, "pair_every": 0}, "must be an integer >= 1"),
    ],
)
def test_bad_pair_every_is_refused_naming_the_flag(settings, says):
    with pytest.raises(ConfigError, match="pair.every") as caught:
        check(with_settings(RunConfig(), settings))
    assert says in str(caught.value) and "\n" not in str(caught.value)


def test_a_good_pair_every_passes_the_checks():
    settings = {"joint": True, "pair_every": 5, "batch_size": 1000, "shared_negatives": 50, "biased_chunk": 10}
    check(with_settings(RunConfig(), settings))


def test_labels_of_every_positive_are_refused_in_one_line_naming_the_fix():
    x = sampled_batch(np.random.default_rng(0), e=E, r=R, b=24, k=5)  # labels of all 24 rows
    model = JoBiModel(E, R, model="distmult", dim=4, joint=True, pair_every=3)
    with pytest.raises(ValueError, match=r"pair_labels has 24 rows .* make_train_dataset\(\.\.\., pair_every=3\)"):
        model.compute_loss(x=x, y_pred=model(x))
