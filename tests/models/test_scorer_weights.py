"""A scorer of your own that owns weights trains, ranks, checkpoints and exports with the model."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from jobi_tf.config import SamplerConfig
from jobi_tf.data.vocab import Vocab
from jobi_tf.evaluation.ranking import FilteredEvaluator
from jobi_tf.export.savedmodel import export_saved_model
from jobi_tf.models import JoBiModel
from jobi_tf.models.scorers import DistMult
from jobi_tf.optimizers import FusedAdam
from jobi_tf.sampling.pipelines import make_train_dataset
from jobi_tf.training.checkpoints import load_weights, save_weights


class ScaledDistMult(DistMult):
    """DistMult times a learned per-component weight: ``s = sum_i w_i h_i r_i t_i``."""

    kind = None  # not a --model name

    def __init__(self, dim: int, **kwargs) -> None:
        super().__init__(**kwargs)
        self.component_weight = self.add_weight(shape=(dim,), initializer="ones", name="component_weight")

    def tail_query(self, h, r):
        return h * r * self.component_weight

    def head_query(self, r, t):
        return r * t * self.component_weight

    def relation_query(self, h, t):
        return h * t * self.component_weight


def _model(index, dim=8):
    return JoBiModel(index.num_entities, index.num_relations, model=ScaledDistMult(dim), dim=dim, name="jobi")


def test_a_scorer_with_weights_trains_ranks_and_checkpoints(small_typed_index, tmp_path):
    index = small_typed_index
    model = _model(index)
    assert any("component_weight" in v.path for v in model.trainable_variables)
    model.compile(optimizer=FusedAdam(0.01))
    batches = make_train_dataset(index, SamplerConfig(batch_size=100, neg=8))
    model.fit(batches, epochs=1, steps_per_epoch=20, verbose=0)
    weight = model.scorer.component_weight.numpy()
    assert not np.allclose(weight, 1.0)  # it learned

    # Ranking uses the scorer's weights: the model's scores are the reference formula's.
    ids = index.test[:20]
    ent, rel = model.entity_embeddings.numpy(), model.triple_relations.numpy()
    expected = np.sum(ent[ids[:, 0]] * rel[ids[:, 1]] * weight * ent[ids[:, 2]], axis=1)
    np.testing.assert_allclose(model.score_triples(tf.constant(ids)).numpy(), expected, rtol=1e-5, atol=1e-6)
    assert 0 < FilteredEvaluator(index).evaluate(model, "test")["mrr"] <= 1

    save_weights(tmp_path / "w.npz", model)
    again = _model(index)
    load_weights(tmp_path / "w.npz", again)
    np.testing.assert_array_equal(again.scorer.component_weight.numpy(), weight)


def test_the_export_serves_a_scorer_with_weights(small_typed_index, tmp_path):
    index = small_typed_index
    model = _model(index)
    model.scorer.component_weight.assign(np.linspace(0.5, 2.0, 8).astype(np.float32))
    entities = Vocab(np.array([f"e{i:05d}" for i in range(index.num_entities)]))
    relations = Vocab(np.array([f"r{i:03d}" for i in range(index.num_relations)]))
    result = export_saved_model(model, entities, relations, tmp_path / "export")
    loaded = tf.saved_model.load(str(result.path))
    h, r, t = index.test[:5].T
    names = {"head": entities.labels[h], "relation": relations.labels[r], "tail": entities.labels[t]}
    got = loaded.signatures["score"](**{k: tf.constant(v) for k, v in names.items()})["score"].numpy()
    np.testing.assert_allclose(got, model.score_triples(tf.constant(index.test[:5])).numpy(), rtol=1e-5)
