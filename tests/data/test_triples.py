"""read_triples / read_split_folder: good files parse, bad files give one-line errors naming file:line."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

from jobi_tf.data.triples import read_split_folder, read_triples, write_triples
from jobi_tf.runtime.errors import DatasetFormatError, JobiError


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _assert_one_line_error(exc: DatasetFormatError, path: Path, line: int | None) -> str:
    msg = str(exc)
    assert "\n" not in msg and "\r" not in msg, msg
    assert isinstance(exc, JobiError)
    if line is None:
        assert msg.startswith(f"{path}: "), msg
    else:
        assert f"{path}:{line}:" in msg, msg
        assert exc.line == line
    assert exc.path == str(path)
    return msg


def test_good_file_parses_in_order(tmp_path):
    rng = np.random.default_rng(0)
    labels = np.array(["a", "b c", "Zürich", "/m/0x", "ent_9", "日本"])
    rows = labels[rng.integers(len(labels), size=(25, 3))]
    text = "".join("\t".join(r) + "\n" for r in rows)
    got = read_triples(_write(tmp_path / "train.txt", text.encode("utf-8")))
    assert got.shape == (25, 3)
    assert got.dtype.kind == "U"
    np.testing.assert_array_equal(got, rows)


def test_file_without_final_newline(tmp_path):
    got = read_triples(_write(tmp_path / "t.txt", b"a\tr\tb\nc\tr\td"))
    np.testing.assert_array_equal(got, [["a", "r", "b"], ["c", "r", "d"]])


@pytest.mark.parametrize(
    "data, line, needle",
    [
        (b"a\tr\tb\nc\tr\n", 2, "got 2"),
        (b"a\tr\tb\nx\ty\tz\nc\tr\td\te\n", 3, "got 4"),
        (b"a\tr\tb\na\t\tb\n", 2, "empty field"),
        (b"\tr\tb\n", 1, "empty field"),
        (b"\xef\xbb\xbfa\tr\tb\n", 1, "byte-order mark"),
        (b"a\tr\tb\r\nc\tr\td\r\n", 1, "CRLF"),
        (b"a\tr\tb\nc\tr\td\r\n", 2, "CRLF"),
        (b"a\tr\tb\nc\tr\td\ne\tr\t\xff\xfe\n", 3, "UTF-8"),
        (b"a\tr\tb\nc\tr\td\ne\tr\tf\x00\n", 3, "NUL"),
    ],
)
def test_malformed_lines_name_file_and_line(tmp_path, data, line, needle):
    path = _write(tmp_path / "valid.txt", data)
    with pytest.raises(DatasetFormatError) as info:
        read_triples(path)
    msg = _assert_one_line_error(info.value, path, line)
    assert needle.lower() in msg.lower()


@pytest.mark.parametrize("data", [b"", b"\n\n", b"  \n"])
def test_empty_file(tmp_path, data):
    path = _write(tmp_path / "test.txt", data)
    with pytest.raises(DatasetFormatError) as info:
        read_triples(path)
    msg = _assert_one_line_error(info.value, path, None)
    assert "empty" in msg


def test_missing_file(tmp_path):
    path = tmp_path / "nope.txt"
    with pytest.raises(DatasetFormatError) as info:
        read_triples(path)
    assert "not found" in _assert_one_line_error(info.value, path, None)


def test_directory(tmp_path):
    path = tmp_path / "train.txt"
    path.mkdir()
    with pytest.raises(DatasetFormatError) as info:
        read_triples(path)
    assert "directory" in _assert_one_line_error(info.value, path, None)


def test_invalid_utf8_line_number_counts_lines_before_the_bad_byte(tmp_path):
    rng = np.random.default_rng(1)
    for _ in range(5):
        n = int(rng.integers(1, 30))
        bad = int(rng.integers(n))
        lines = [f"h{i}\tr\tt{i}".encode() for i in range(n)]
        lines[bad] = lines[bad][:-1] + b"\xc3\x28"  # invalid continuation byte
        path = _write(tmp_path / "x.txt", b"\n".join(lines) + b"\n")
        with pytest.raises(DatasetFormatError) as info:
            read_triples(path)
        _assert_one_line_error(info.value, path, bad + 1)


def test_duplicates_are_kept_with_a_warning(tmp_path, caplog):
    data = b"a\tr\tb\nc\tr\td\na\tr\tb\ne\tr\tf\nc\tr\td\na\tr\tb\n"
    path = _write(tmp_path / "train.txt", data)
    with caplog.at_level(logging.WARNING, logger="jobi_tf.data.triples"):
        got = read_triples(path)
    assert got.shape == (6, 3)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    msg = warnings[0].getMessage()
    assert f"{path}:3:" in msg  # first repeated line
    assert "3 duplicate" in msg


def test_no_warning_without_duplicates(tmp_path, caplog):
    path = _write(tmp_path / "train.txt", b"a\tr\tb\nb\tr\ta\na\ts\tb\n")
    with caplog.at_level(logging.WARNING):
        read_triples(path)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_read_split_folder(tmp_path, tiny_splits):
    for split, rows in tiny_splits.items():
        (tmp_path / f"{split}.txt").write_text("".join("\t".join(r) + "\n" for r in rows), encoding="utf-8")
    got = read_split_folder(tmp_path)
    assert set(got) == {"train", "valid", "test"}
    for split in got:
        np.testing.assert_array_equal(got[split], tiny_splits[split])


def test_read_split_folder_missing_folder(tmp_path):
    folder = tmp_path / "missing"
    with pytest.raises(DatasetFormatError) as info:
        read_split_folder(folder)
    assert "not found" in _assert_one_line_error(info.value, folder, None)


def test_read_split_folder_missing_split_names_the_file(tmp_path):
    (tmp_path / "train.txt").write_bytes(b"a\tr\tb\n")
    (tmp_path / "valid.txt").write_bytes(b"a\tr\tb\n")
    with pytest.raises(DatasetFormatError) as info:
        read_split_folder(tmp_path)
    _assert_one_line_error(info.value, tmp_path / "test.txt", None)


def _python_reference(data: bytes) -> list[list[str]]:
    """The plain reading the vectorised parser must reproduce: split lines, then tabs."""
    lines = data.decode("utf-8").split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line.split("\t") for line in lines]


@pytest.mark.parametrize("seed", range(5))
def test_vectorised_parse_matches_splitting_lines_in_python(tmp_path, seed):
    rng = np.random.default_rng(seed)
    alphabet = list("abcxyz_/.0123456789") + ["ü", "日", " ", "é"]
    labels = ["".join(rng.choice(alphabet, size=int(rng.integers(1, 25)))) for _ in range(40)]
    rows = [[labels[i] for i in rng.integers(len(labels), size=3)] for _ in range(int(rng.integers(1, 300)))]
    data = "".join("\t".join(r) + "\n" for r in rows).encode("utf-8")
    if seed % 2:
        data = data[:-1]  # no final newline
    path = _write(tmp_path / "train.txt", data)
    expected = _python_reference(data)
    assert read_triples(path).tolist() == expected


def test_first_bad_line_wins_whatever_the_problem(tmp_path):
    path = _write(tmp_path / "t.txt", b"a\tr\tb\na\t\tb\nc\td\n")  # line 2 empty field, line 3 two fields
    with pytest.raises(DatasetFormatError, match=r"t.txt:2: empty field"):
        read_triples(path)
    path = _write(tmp_path / "u.txt", b"a\tr\tb\nc\td\na\t\tb\n")
    with pytest.raises(DatasetFormatError, match=r"u.txt:2: expected 3 tab-separated fields, got 2"):
        read_triples(path)
    path = _write(tmp_path / "v.txt", b"a\tr\tb\n\n")  # a blank line is a line with one field
    with pytest.raises(DatasetFormatError, match=r"v.txt:2: expected 3 tab-separated fields, got 1"):
        read_triples(path)


def test_write_triples_round_trip(tmp_path):
    rng = np.random.default_rng(3)
    entities, relations = np.array(["a", "Zürich", "b c", "日本"]), np.array(["r0", "is/a"])
    ids = np.stack([rng.integers(4, size=50), rng.integers(2, size=50), rng.integers(4, size=50)], axis=1)
    write_triples(tmp_path / "train.txt", ids, entities, relations, chunk=7)
    got = read_triples(tmp_path / "train.txt")
    np.testing.assert_array_equal(got, np.stack([entities[ids[:, 0]], relations[ids[:, 1]], entities[ids[:, 2]]], 1))
    assert not (tmp_path / "train.txt.tmp").exists()
