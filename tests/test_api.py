"""The Python API (`jobi_tf.train`, `load_run`, `Run`) as a user calls it, against NumPy references."""

from __future__ import annotations

import random
import shutil

import numpy as np
import pytest

import jobi_tf
from jobi_tf.config import DataConfig
from jobi_tf.runtime.errors import ConfigError, DatasetFormatError, JobiError

FAST = {"dim": 8, "epochs": 1, "eval_every": 1, "batch_size": 500, "neg": 10, "lr": 0.01}


@pytest.fixture(scope="module")
def data():
    return jobi_tf.load_dataset("synthetic")


@pytest.fixture(scope="module")
def run(data, tmp_path_factory):
    return jobi_tf.train(data, joint=True, p=0.3, run_dir=tmp_path_factory.mktemp("api") / "run", **FAST)


def _complex_scores(entities: np.ndarray, relations: np.ndarray, h, r) -> np.ndarray:
    """NumPy ComplEx: Re(<e_h, w_r, conj(e_t)>) of (h, r) against every tail."""
    d = entities.shape[1] // 2
    e = entities[:, :d].astype(np.float64) + 1j * entities[:, d:]
    w = relations[:, :d].astype(np.float64) + 1j * relations[:, d:]
    return np.real((e[h] * w[r]) @ np.conj(e).T)


def test_version_and_namespace():
    assert jobi_tf.__version__ and jobi_tf.__version__ != "0+unknown"
    assert {"train", "load_run", "load_dataset", "Run", "Dataset"} <= set(jobi_tf.__all__)


def test_train_from_config_returns_the_runs_metrics_and_rereads_a_finished_run(run, data, tmp_path):
    """What the CLI calls: a whole config in, metrics out; the same config and folder again
    reads the finished run instead of training it twice."""
    shutil.copytree(run.path, tmp_path / "copy")
    metrics = jobi_tf.train_from_config(run.config, tmp_path / "copy", data=data)
    assert metrics == run.metrics and metrics["test"]["mrr"] > 0
    fresh = jobi_tf.train_from_config(run.config, tmp_path / "fresh", data=data)
    assert fresh["test"]["mrr"] == pytest.approx(run.metrics["test"]["mrr"])  # the same seed, the same model


def test_run_exposes_config_metrics_and_vocabularies(run, data):
    assert run.config.model.joint and run.config.sampler.p == 0.3 and run.config.model.dim == 8
    assert 0 < run.metrics["test"]["mrr"] <= 1
    assert run.entities == data.entities.labels.tolist() and run.relations == data.relations.labels.tolist()
    assert run.evaluate("test")["mrr"] == pytest.approx(run.metrics["test"]["mrr"])


def test_score_and_top_k_match_numpy(run, data):
    ent = run.entity_embeddings().vectors
    rel = run.relation_embeddings().vectors
    test = data.triples("test")[:5]
    ids = data.index.test[:5]
    expected = [_complex_scores(ent, rel, h, r)[t] for h, r, t in ids.tolist()]
    np.testing.assert_allclose(run.score(test), expected, rtol=1e-4, atol=1e-4)

    (h, r, _), (head, relation, _) = ids[0], test[0]
    scores = _complex_scores(ent, rel, h, r)
    top = run.predict_tails(head, relation, k=5, filter_known=False)
    assert [name for name, _ in top] == [data.entities.labels[i] for i in np.argsort(-scores, kind="stable")[:5]]
    np.testing.assert_allclose([s for _, s in top], np.sort(scores)[::-1][:5], rtol=1e-4, atol=1e-4)

    known = set(data.index.train[(data.index.train[:, 0] == h) & (data.index.train[:, 1] == r), 2].tolist())
    filtered = run.predict_tails(head, relation, k=5)
    ranked = [i for i in np.argsort(-scores, kind="stable") if i not in known][:5]
    assert [name for name, _ in filtered] == [data.entities.labels[i] for i in ranked]


def test_predict_relations_match_numpy(run, data):
    ent, rel = run.entity_embeddings().vectors, run.relation_embeddings().vectors
    h, _, t = data.index.test[0]
    head, _, tail = data.triples("test")[0]
    d = ent.shape[1] // 2
    e, w = ent[:, :d] + 1j * ent[:, d:], rel[:, :d] + 1j * rel[:, d:]
    scores = np.real(np.einsum("d,rd,d->r", e[h], w, np.conj(e[t])))
    top = run.predict_relations(head, tail, k=3, filter_known=False)
    assert [name for name, _ in top] == [data.relations.labels[i] for i in np.argsort(-scores, kind="stable")[:3]]
    np.testing.assert_allclose([s for _, s in top], np.sort(scores)[::-1][:3], rtol=1e-4, atol=1e-4)


def test_predict_heads_by_name(run, data):
    _, relation, tail = data.triples("test")[0]
    answers = run.predict_heads(relation, tail, k=4, filter_known=False)
    assert len(answers) == 4 and all(name in run.entities for name, _ in answers)
    assert [s for _, s in answers] == sorted((s for _, s in answers), reverse=True)


def test_evaluate_given_triples_uses_the_filtered_protocol(run, data):
    triples = data.triples("test")[:50]
    from jobi_tf.evaluation.ranking import FilteredEvaluator

    expected = FilteredEvaluator(data.index).metrics_from_ranks(
        FilteredEvaluator(data.index).ranks(run.model, data.index.test[:50])
    )
    assert run.evaluate(triples)["mrr"] == pytest.approx(expected["mrr"])


def test_relation_prediction_of_a_run(run, data):
    from jobi_tf.evaluation.ranking import FilteredEvaluator

    expected = FilteredEvaluator(data.index).relation_metrics(run.model, "valid")
    assert run.evaluate_relations("valid")["mrr"] == pytest.approx(expected["mrr"])


def test_embeddings_have_names(run):
    emb = run.entity_embeddings()
    assert len(emb.names) == emb.vectors.shape[0] == len(run.entities)
    np.testing.assert_array_equal(emb[emb.names[3]], run.model.entity_embeddings.numpy()[3])


def test_load_run_needs_only_the_folder(run, data, tmp_path):
    """A run trained from a folder still scores, predicts and exports after that folder moved."""
    folder = tmp_path / "graph"
    folder.mkdir()
    for split in ("train", "valid", "test"):
        (folder / f"{split}.txt").write_text("".join("\t".join(t) + "\n" for t in data.triples(split)[:3000]))
    trained = jobi_tf.train(str(folder), run_dir=tmp_path / "run", **FAST)
    assert trained.config.data == DataConfig(dataset=None, data_dir=str(folder))
    shutil.move(folder, tmp_path / "moved")
    again = jobi_tf.load_run(tmp_path / "run")
    triple = [tuple(trained.data.triples("test")[0])]
    np.testing.assert_allclose(again.score(triple), trained.score(triple))
    assert again.predict_tails(triple[0][0], triple[0][1], k=2, filter_known=False)
    assert (again.export(tmp_path / "export").path / "saved_model.pb").is_file()
    with pytest.raises(JobiError, match=r"cannot be loaded .*load_run\(path, data=\.\.\.\)"):
        again.evaluate("test")
    moved = jobi_tf.load_dataset(tmp_path / "moved")
    assert jobi_tf.load_run(tmp_path / "run", data=moved).evaluate("test")["mrr"] > 0


def test_a_loaded_run_draws_no_initial_tables(run, monkeypatch):
    """Loading builds the tables at zero, then reads the weights: a random draw would be
    overwritten, and the pooled allocator would keep its temporaries (twice the table)."""
    import keras

    def refuse(*args, **kwargs):
        raise AssertionError("a loaded run drew an initial table")

    monkeypatch.setattr(keras.initializers.GlorotNormal, "__call__", refuse)
    monkeypatch.setattr(keras.initializers.RandomNormal, "__call__", refuse)
    again = jobi_tf.load_run(run.path)
    np.testing.assert_array_equal(again.model.entity_embeddings.numpy(), run.model.entity_embeddings.numpy())
    triple = [tuple(run.data.triples("test")[0])]
    np.testing.assert_allclose(again.score(triple), run.score(triple))


def test_in_memory_triples_make_a_self_contained_run(tmp_path):
    triples = {
        "train": [("ann", "knows", "bob"), ("bob", "knows", "cid"), ("cid", "likes", "ann"), ("ann", "likes", "cid")],
        "valid": [("bob", "likes", "ann")],
        "test": [("cid", "knows", "ann")],
    }
    run = jobi_tf.train(triples, dim=4, epochs=1, eval_every=1, batch_size=2, neg=2, run_dir=tmp_path / "run")
    assert (tmp_path / "run" / "data" / "train.txt").read_text().count("\n") == 4
    again = jobi_tf.load_run(tmp_path / "run")
    assert set(again.entities) == {"ann", "bob", "cid"}
    assert again.evaluate("test")["mrr"] == pytest.approx(run.metrics["test"]["mrr"])


@pytest.mark.parametrize(
    ("triples", "message"),
    [
        ({"train": [("a", "r", "b")], "valid": []}, "lacks the split"),
        ({"train": [("a", "r")], "valid": [], "test": []}, "rows; got shape"),
        ({"train": [("a", "r", "b\tc")], "valid": [], "test": []}, r"triples\['train'\]: row 0"),
        ({"train": [], "valid": [], "test": []}, "is empty"),
    ],
)
def test_bad_in_memory_triples_are_one_line_errors(triples, message):
    with pytest.raises(DatasetFormatError, match=message) as info:
        jobi_tf.load_dataset(triples)
    assert "\n" not in str(info.value)


def test_errors_name_the_config_field_not_the_flag(data, tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match=r"^batch_size: must be an integer >= 1\. Received: 0$"):
        jobi_tf.train(data, batch_size=0, run_dir=tmp_path / "a")
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    with pytest.raises(ConfigError, match="^neg: "):
        jobi_tf.train(data, neg=0)  # no run_dir: no temporary folder is left behind either
    assert list((tmp_path / "tmp").iterdir()) == []
    with pytest.raises(ConfigError, match=r"^epoch: is not a setting of train\(\); known: .*epochs"):
        jobi_tf.train(data, epoch=3, run_dir=tmp_path / "b")
    with pytest.raises(JobiError, match="neither a known dataset"):
        jobi_tf.load_dataset(tmp_path / "no-such-folder")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()  # nothing written


def test_unknown_names_are_one_line_errors(run):
    with pytest.raises(JobiError, match=r"unknown entity 'nobody' \(head\)"):
        run.predict_tails("nobody", run.relations[0])
    with pytest.raises(JobiError, match=r"triples row 1: unknown relation 'nothing'"):
        run.score([(run.entities[0], run.relations[0], run.entities[1]), (run.entities[0], "nothing", run.entities[1])])
    with pytest.raises(JobiError, match="k must be an integer >= 1"):
        run.predict_heads(run.relations[0], run.entities[0], k=0)


def test_training_keeps_the_callers_random_state(data, tmp_path):
    jobi_tf.train(data, run_dir=tmp_path / "warm", **FAST)  # imports done: only training itself is measured
    random.seed(7)
    np.random.seed(7)
    expected = (random.random(), np.random.rand())
    random.seed(7)
    np.random.seed(7)
    run = jobi_tf.train(data, run_dir=tmp_path / "run", seed=3, **FAST)
    jobi_tf.load_run(run.path)
    assert (random.random(), np.random.rand()) == expected


def test_data_config_folder_alone_is_that_folder(tmp_path):
    assert DataConfig().dataset == "synthetic"
    assert DataConfig(data_dir=str(tmp_path)).dataset is None  # not the synthetic graph
    with pytest.raises(ConfigError, match="--data-dir: has no meaning with the synthetic dataset"):
        DataConfig(dataset="synthetic", data_dir=str(tmp_path))


def test_keras_model_predicts_and_exports_id_triples(run, tmp_path):
    import tensorflow as tf

    ids = np.array([[0, 1, 2], [5, 0, 7]], np.int32)
    expected = run.model.predict(ids, verbose=0)
    run.model.export(str(tmp_path / "keras-export"), verbose=False)
    loaded = tf.saved_model.load(str(tmp_path / "keras-export"))  # kept: its functions need its variables
    served = loaded.serve(tf.constant(ids))
    np.testing.assert_allclose(served.numpy(), expected, rtol=1e-5)
    with pytest.raises(ValueError, match="make_train_dataset"):
        run.model.predict(np.zeros((2, 3), np.float32), verbose=0)
