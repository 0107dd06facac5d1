"""k-vs-all training: distinct queries with their answers, dense labels, the BCE loss, a run."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from jobi_tf import regimes
from jobi_tf.config import DataConfig, ModelConfig, RunConfig, SamplerConfig, TrainConfig
from jobi_tf.losses import get as get_objective
from jobi_tf.losses.k_vs_all import KvsAll
from jobi_tf.runtime.errors import ConfigError
from jobi_tf.sampling.pipelines import TrainingQueries, make_query_dataset
from jobi_tf.training.trainer import train


def _reference_queries(train: np.ndarray) -> dict[tuple[int, int, bool], set[int]]:
    """``{(entity, relation, is_tail): answers}`` of every distinct training query."""
    out: dict[tuple[int, int, bool], set[int]] = {}
    for h, r, t in train.tolist():
        out.setdefault((h, r, True), set()).add(t)
        out.setdefault((t, r, False), set()).add(h)
    return out


def _key(triple: np.ndarray, is_tail: bool) -> tuple[int, int, bool]:
    h, r, t = (int(x) for x in triple)
    return (h, r, True) if is_tail else (t, r, False)


def test_training_queries_are_the_distinct_queries_with_all_their_answers(small_typed_index):
    queries = TrainingQueries.from_index(small_typed_index)
    expected = _reference_queries(small_typed_index.train)
    got = {}
    for q in range(len(queries)):
        answers = queries.answers[queries.offsets[q] : queries.offsets[q + 1]]
        triple = queries.triples[q]
        assert int(triple[2] if queries.is_tail[q] else triple[0]) in answers  # a real training triple
        got[_key(triple, queries.is_tail[q])] = set(answers.tolist())
    assert got == expected and len(queries) == len(expected)


def test_query_batches_carry_dense_labels_and_visit_each_query_once_per_epoch(small_typed_index):
    index = small_typed_index
    expected = _reference_queries(index.train)
    cfg = SamplerConfig(batch_size=64)
    steps = len(expected) // 64
    batches = list(make_query_dataset(index, cfg, seed=3, epochs=2, joint=True))
    assert len(batches) == 2 * steps
    tails = {(r, t) for _, r, t in index.train.tolist()}
    heads = {(r, h) for h, r, _ in index.train.tolist()}
    seen = []
    for b in batches[:steps]:
        labels, side = b["answer_labels"].numpy(), b["query_is_tail"].numpy()
        pair = b["query_pair_labels"].numpy()
        for row, (triple, is_tail) in enumerate(zip(b["triples"].numpy(), side, strict=True)):
            key = _key(triple, is_tail)
            seen.append(key)
            assert set(np.flatnonzero(labels[row]).tolist()) == expected[key]
            slot = tails if is_tail else heads
            assert set(np.flatnonzero(pair[row]).tolist()) == {e for r, e in slot if r == key[1]}
    assert len(set(seen)) == len(seen) == steps * 64  # distinct within an epoch
    resumed = list(make_query_dataset(index, cfg, seed=3, initial_epoch=1, initial_step=2, epochs=2))
    np.testing.assert_array_equal(resumed[0]["triples"].numpy(), batches[steps + 2]["triples"].numpy())


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_k_vs_all_loss_is_the_summed_binary_cross_entropy(smoothing):
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(5, 9)).astype(np.float32)
    labels = (rng.random((5, 9)) < 0.3).astype(np.float32)
    objective = get_objective("k-vs-all", label_smoothing=smoothing)
    assert isinstance(objective, KvsAll)
    got = objective.loss({"answer_labels": tf.constant(labels)}, {"triple": tf.constant(logits)}).numpy()
    y = (1 - smoothing) * labels + smoothing / 9
    p = 1 / (1 + np.exp(-logits.astype(np.float64)))
    expected = np.mean(np.sum(-(y * np.log(p) + (1 - y) * np.log(1 - p)), axis=1))
    assert got == pytest.approx(expected, rel=1e-5)


def test_a_k_vs_all_run_learns_and_resumes(tmp_path):
    def cfg(epochs: int) -> RunConfig:
        return RunConfig(
            data=DataConfig(dataset="synthetic", synthetic_entities=80, synthetic_relations=4, synthetic_triples=800),
            sampler=SamplerConfig(batch_size=50),
            model=ModelConfig(model="complex", dim=8, joint=True, reciprocal=True),
            train=TrainConfig(
                loss="k-vs-all",
                epochs=epochs,
                eval_every=2,
                patience=10,
                lr=0.1,
                optimizer="adagrad",
                jit_compile=False,
            ),
            seed=2,
        )

    straight = train(cfg(4), tmp_path / "straight", verbose=0)
    assert straight.metrics["test"]["mrr"] > 5 / 80  # far above a random ranking's ~0.06
    assert "pair_loss" in straight.metrics["history"][0]
    train(cfg(2), tmp_path / "resumed", verbose=0)
    (tmp_path / "resumed" / "metrics.json").unlink()
    resumed = train(cfg(4), tmp_path / "resumed", verbose=0)
    assert resumed.metrics["test"]["mrr"] == pytest.approx(straight.metrics["test"]["mrr"], abs=1e-4)


def test_k_vs_all_refuses_sampler_only_settings():
    with pytest.raises(ConfigError, match="--shared-negatives: has no meaning with --loss k-vs-all"):
        regimes.check(RunConfig(sampler=SamplerConfig(shared_negatives=10), train=TrainConfig(loss="k-vs-all")))
    with pytest.raises(ConfigError, match="--init-from: is not supported with --loss k-vs-all"):
        regimes.check(RunConfig(train=TrainConfig(loss="k-vs-all", init_from="runs/old")))
