"""read_folder_index: the vocabularies, ids and warnings of read_split_folder + build_index."""

from __future__ import annotations

import logging

import numpy as np
import pytest

import jobi_tf.data.folder as folder_module
from jobi_tf.data.folder import read_folder_index
from jobi_tf.data.index import build_index
from jobi_tf.data.triples import read_split_folder
from jobi_tf.runtime.errors import DatasetFormatError
from jobi_tf.runtime.types import SPLITS


def _write_folder(path, seed: int = 0):
    rng = np.random.default_rng(seed)
    entities = [f"/m/0{i:x}" for i in range(30)] + ["Zürich", "日本", "a b"]
    relations = ["r", "/film/film/release_date_s./film/film_regional_release_date/film_release_distribution_medium"]
    for split, n in (("train", 200), ("valid", 20), ("test", 20)):
        rows = [(entities[h], relations[r], entities[t]) for h, r, t in rng.integers(0, [33, 2, 33], size=(n, 3))]
        text = "".join("\t".join(row) + "\n" for row in rows)
        (path / f"{split}.txt").write_bytes(text.encode("utf-8")[: -1 if split == "test" else None])


def _same(a, b):
    assert a[0] == b[0] and a[1] == b[1]
    for split in SPLITS:
        np.testing.assert_array_equal(a[2].split(split), b[2].split(split))
    np.testing.assert_array_equal(a[2].known_tails.values, b[2].known_tails.values)


@pytest.mark.parametrize("block", [1 << 20, 7], ids=["one-block", "many-blocks"])
def test_same_vocabularies_ids_and_index_as_reading_labels(tmp_path, monkeypatch, block):
    monkeypatch.setattr(folder_module, "_BLOCK", block)
    monkeypatch.setattr(folder_module, "_number_by_sorting", None)  # the fingerprint path must do it alone
    _write_folder(tmp_path)
    _same(read_folder_index(tmp_path), build_index(read_split_folder(tmp_path)))


def test_a_fingerprint_collision_cannot_merge_labels(tmp_path, monkeypatch):
    _write_folder(tmp_path, seed=1)
    monkeypatch.setattr(folder_module, "fingerprint", lambda values: np.zeros(len(values), np.uint64))
    _same(read_folder_index(tmp_path), build_index(read_split_folder(tmp_path)))


def test_repeated_triples_warn_like_read_triples(tmp_path, caplog):
    (tmp_path / "train.txt").write_bytes(b"a\tr\tb\nc\tr\td\na\tr\tb\ne\tr\tf\nc\tr\td\na\tr\tb\n")
    (tmp_path / "valid.txt").write_bytes(b"a\tr\tb\n")
    (tmp_path / "test.txt").write_bytes(b"c\tr\td\n")
    with caplog.at_level(logging.WARNING):
        read_folder_index(tmp_path)
    messages = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(f"{tmp_path / 'train.txt'}:3: 3 duplicate" in m for m in messages), messages


def test_bad_files_give_the_same_one_line_errors(tmp_path):
    _write_folder(tmp_path)
    (tmp_path / "valid.txt").write_bytes(b"a\tr\tb\nc\tr\n")
    with pytest.raises(DatasetFormatError, match=r"valid.txt:2: expected 3 tab-separated fields, got 2"):
        read_folder_index(tmp_path)
    with pytest.raises(DatasetFormatError, match="data folder not found"):
        read_folder_index(tmp_path / "missing")
