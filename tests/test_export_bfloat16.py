"""``--table-dtype bfloat16`` exports: answers against NumPy on bfloat16-rounded rows, size, metadata."""

from __future__ import annotations

import json

import numpy as np
import pytest
import tensorflow as tf
from click.testing import CliRunner
from jobi_tf.cli.main import main
from references import all_scores, bfloat16_rounded

from jobi_tf.config import ExportConfig
from jobi_tf.export.savedmodel import METADATA_FILE, export_saved_model
from jobi_tf.runtime.errors import ConfigError


def _export(random_export, tmp_path, model="complex", filter_known=False, reciprocal=False, **settings):
    source = random_export(model, filter_known=filter_known, reciprocal=reciprocal)
    cfg = ExportConfig(filter_known=filter_known, table_dtype="bfloat16", **settings)
    result = export_saved_model(
        source.model, source.entities, source.relations, tmp_path, cfg, train_triples=source.train
    )
    return source, result, tf.saved_model.load(str(result.path))


def _ask(loaded, signature: str, **inputs):
    tensors = {
        key: tf.constant(value, tf.int32 if key in ("k", "probe") else tf.string) for key, value in inputs.items()
    }
    return {key: value.numpy() for key, value in loaded.signatures[signature](**tensors).items()}


def _rounded_scores(source, model: str) -> np.ndarray:
    """NumPy's ``[E, R, E]`` scores of the entity rows rounded to bfloat16 (relations kept float32)."""
    rows = bfloat16_rounded(source.model.entity_embeddings.numpy())
    return all_scores(model, rows, source.model.triple_relations.numpy())


def test_bfloat16_rounding_reference_keeps_the_top_16_bits_to_nearest_even():
    x = np.array([1.0, 1.0 + 2**-8, 1.0 + 2**-8 + 2**-12, 1.0 + 3 * 2**-8, -2.5], np.float32)
    assert bfloat16_rounded(x).tolist() == [1.0, 1.0, 1.0 + 2**-7, 1.0 + 2**-6, -2.5]


def _text(names: np.ndarray) -> np.ndarray:
    return np.char.decode(names.astype(bytes), "utf-8")


def _known_last(scores: np.ndarray, train: np.ndarray, keys: np.ndarray, key_cols, answer_col) -> np.ndarray:
    """``scores`` with each row's training answers (its key's ``answer_col``) at ``-inf``."""
    scores = scores.copy()
    for row, key in enumerate(keys):
        hit = (train[:, key_cols[0]] == key[0]) & (train[:, key_cols[1]] == key[1])
        scores[row, train[hit, answer_col]] = -np.inf
    return scores


@pytest.mark.parametrize("model", ["distmult", "complex", "simple"])
@pytest.mark.parametrize("filter_known", [False, True])
def test_answers_are_numpys_on_the_rounded_rows(random_export, tmp_path, model, filter_known):
    source, _, loaded = _export(random_export, tmp_path, model, filter_known)
    everything = _rounded_scores(source, model)
    heads, relations, tails = np.array([0, 3, 7, 29]), np.array([0, 1, 2, 3]), np.array([29, 7, 3, 0])
    h_names, r_names, t_names = (
        source.entities.decode(heads),
        source.relations.decode(relations),
        source.entities.decode(tails),
    )
    by_tail, by_head = everything[heads, relations, :], everything[:, relations, tails].T
    if filter_known:
        by_tail = _known_last(by_tail, source.train, np.stack([heads, relations], 1), (0, 1), 2)
        by_head = _known_last(by_head, source.train, np.stack([relations, tails], 1), (1, 2), 0)
    for signature, inputs, scores, answers in (
        ("predict_tail", {"head": h_names, "relation": r_names}, by_tail, "tails"),
        ("predict_head", {"relation": r_names, "tail": t_names}, by_head, "heads"),
    ):
        out = _ask(loaded, signature, **inputs, k=6)
        expected = np.argsort(-scores, axis=1, kind="stable")[:, :6]
        np.testing.assert_array_equal(_text(out[answers]), source.entities.decode(expected))
        np.testing.assert_allclose(out["scores"], np.take_along_axis(scores, expected, 1), rtol=1e-5, atol=1e-5)
    out = _ask(loaded, "score", head=h_names, relation=r_names, tail=t_names)
    np.testing.assert_allclose(out["score"], everything[heads, relations, tails], rtol=1e-5, atol=1e-5)


def test_the_table_is_stored_as_bfloat16_in_half_the_bytes(random_export, tmp_path):
    source, result, loaded = _export(random_export, tmp_path)
    assert loaded.entities.values.dtype == tf.bfloat16
    rows = source.model.entity_embeddings.numpy()
    relations = source.model.triple_relations.numpy()
    assert result.table_bytes == rows.size * 2 + relations.nbytes
    metadata = json.loads((result.path / METADATA_FILE).read_text())
    assert metadata["table_dtype"] == "bfloat16"
    np.testing.assert_array_equal(tf.cast(loaded.entities.values, tf.float32).numpy(), bfloat16_rounded(rows))


def test_probing_every_cell_of_a_bfloat16_export_gives_its_exact_answers(random_export, tmp_path):
    source, _, loaded = _export(random_export, tmp_path, "complex", True, cells=4)
    names = {
        "head": source.entities.decode(source.train[:6, 0]),
        "relation": source.relations.decode(source.train[:6, 1]),
    }
    exact = _ask(loaded, "predict_tail", **names, k=8)
    approximate = _ask(loaded, "predict_tail_approximate", **names, k=8, probe=4)
    np.testing.assert_array_equal(approximate["tails"], exact["tails"])
    np.testing.assert_allclose(approximate["scores"], exact["scores"], rtol=1e-5, atol=1e-5)


def test_other_table_dtypes_are_refused_in_one_line():
    with pytest.raises(ConfigError, match="--table-dtype"):
        ExportConfig(table_dtype="int8")
    result = CliRunner().invoke(main, ["export", ".", "--out", "x", "--table-dtype", "float16"])
    assert result.exit_code == 2 and "--table-dtype" in result.output
