"""Offline tests of the TFDS benchmark builders and `load_named`.

Every builder is built from a few-line fixture in its published format (FB15k-237 with the
CRLF line endings of the ConvE copy, YAGO3-10 with accented names) into a fresh TFDS data
folder, with sockets blocked so that any network access by TFDS would fail the test.
"""

from __future__ import annotations

import os
import pickle
import shutil
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from jobi_tf.datasets import NAMES, load_named
from jobi_tf.runtime.errors import DatasetFormatError, JobiError

FIXTURES = Path(__file__).parent / "fixtures"
SPLITS = ("train", "valid", "test")
DATA_DIR_ENV = "JOBI_TF_DATA_DIR"


class NetworkAccessError(OSError):
    """Raised by the socket guard, like a real "no network" error would be."""


@pytest.fixture(autouse=True)
def network_attempts(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Block outgoing connections and fail the test if any was attempted, even if caught.

    So "works offline" is checked, not assumed. A test that expects an attempt clears the
    returned list.
    """
    attempts: list[str] = []

    def refuse(*args: object, **kwargs: object) -> None:
        attempts.append(repr(args))
        raise NetworkAccessError(f"network access attempted: {args!r}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    yield attempts
    assert not attempts, f"unexpected network access: {attempts}"


def expected_triples(folder: Path) -> dict[str, np.ndarray]:
    """Split the fixture files independently of the code under test (CRLF -> LF first)."""
    result = {}
    for split in SPLITS:
        text = (folder / f"{split}.txt").read_bytes().decode("utf-8").replace("\r\n", "\n")
        result[split] = np.array([line.split("\t") for line in text.splitlines()], dtype=str)
    return result


@pytest.mark.parametrize("name", NAMES)
def test_builder_round_trips_fixture(name: str, tmp_path: Path) -> None:
    fixture = FIXTURES / name
    expected = expected_triples(fixture)

    loaded = load_named(name, data_dir=tmp_path, manual_dir=fixture, verify_checksums=False)

    assert set(loaded) == set(SPLITS)
    for split in SPLITS:
        assert loaded[split].shape == expected[split].shape, split
        assert loaded[split].dtype.kind == "U"
        np.testing.assert_array_equal(loaded[split], expected[split], err_msg=split)


@pytest.mark.parametrize("name", ["fb15k-237", "yago3-10"])  # long ASCII labels; non-ASCII labels
def test_bytes_and_small_read_batches_give_the_same_triples(name: str, tmp_path: Path, monkeypatch) -> None:
    import jobi_tf.datasets as datasets

    fixture = FIXTURES / name
    expected = expected_triples(fixture)
    monkeypatch.setattr(datasets, "_READ_BATCH", 3)  # many batches, of different label widths

    as_str = load_named(name, data_dir=tmp_path, manual_dir=fixture, verify_checksums=False)
    as_bytes = load_named(name, data_dir=tmp_path, as_bytes=True)

    for split in SPLITS:
        assert as_bytes[split].dtype.kind == "S" and as_str[split].dtype.kind == "U"
        np.testing.assert_array_equal(as_str[split], expected[split], err_msg=split)
        np.testing.assert_array_equal(np.char.decode(as_bytes[split], "utf-8"), expected[split], err_msg=split)


def test_names_match_builders() -> None:
    from jobi_tf.datasets.builders import BUILDERS

    assert tuple(BUILDERS) == NAMES
    assert len({cls.name for cls in BUILDERS.values()}) == len(NAMES)


def test_fb15k_237_crlf_is_normalised(tmp_path: Path) -> None:
    fixture = FIXTURES / "fb15k-237"
    assert b"\r\n" in (fixture / "train.txt").read_bytes(), "fixture must keep the upstream CRLF endings"

    loaded = load_named("fb15k-237", data_dir=tmp_path, manual_dir=fixture, verify_checksums=False)

    assert not any("\r" in value for value in loaded["train"].ravel())
    assert tuple(loaded["train"][0]) == ("/m/027rn", "/location/country/form_of_government", "/m/06cx9")


def test_non_ascii_labels_round_trip(tmp_path: Path) -> None:
    loaded = load_named("yago3-10", data_dir=tmp_path, manual_dir=FIXTURES / "yago3-10", verify_checksums=False)

    assert tuple(loaded["train"][1]) == ("Antonín_Dvořák", "wasBornIn", "Nelahozeves")
    assert tuple(loaded["test"][0]) == ("Frédéric_Chopin", "wasBornIn", "Żelazowa_Wola")


def test_prepared_data_is_reused_without_manual_dir(tmp_path: Path) -> None:
    first = load_named("kinship", data_dir=tmp_path, manual_dir=FIXTURES / "kinship", verify_checksums=False)

    again = load_named("kinship", data_dir=tmp_path)  # no files, no network: the TFDS copy

    for split in SPLITS:
        np.testing.assert_array_equal(again[split], first[split])


def test_env_var_sets_tfds_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOBI_TF_TFDS_DIR", str(tmp_path / "tfds"))

    load_named("nations", manual_dir=FIXTURES / "nations", verify_checksums=False)

    assert (tmp_path / "tfds" / "jobi_nations").is_dir()


def test_wrong_checksum_raises(tmp_path: Path) -> None:
    with pytest.raises(DatasetFormatError, match="sha256 mismatch") as info:
        load_named("nations", data_dir=tmp_path, manual_dir=FIXTURES / "nations")

    message = str(info.value)
    assert "\n" not in message
    assert info.value.path.endswith("train.txt")
    assert not (tmp_path / "jobi_nations" / "1.0.0").exists(), "nothing is prepared from a rejected file"


def test_malformed_line_reports_file_and_line(tmp_path: Path) -> None:
    manual = tmp_path / "manual"
    shutil.copytree(FIXTURES / "umls", manual)
    lines = (manual / "valid.txt").read_text(encoding="utf-8").splitlines(keepends=True)
    lines[1] = "only\ttwo_fields\n"
    (manual / "valid.txt").write_text("".join(lines), encoding="utf-8")

    with pytest.raises(DatasetFormatError, match=r"valid\.txt:2: expected 3 tab-separated fields"):
        load_named("umls", data_dir=tmp_path / "tfds", manual_dir=manual, verify_checksums=False)


def test_crlf_outside_fb15k_237_is_rejected(tmp_path: Path) -> None:
    manual = tmp_path / "manual"
    shutil.copytree(FIXTURES / "wn18rr", manual)
    data = (manual / "test.txt").read_bytes()
    (manual / "test.txt").write_bytes(data.replace(b"\n", b"\r\n"))

    with pytest.raises(DatasetFormatError, match=r"test\.txt:1: CR"):
        load_named("wn18rr", data_dir=tmp_path / "tfds", manual_dir=manual, verify_checksums=False)


def test_incomplete_manual_folder_raises(tmp_path: Path) -> None:
    manual = tmp_path / "manual"
    manual.mkdir()
    shutil.copy(FIXTURES / "nations" / "train.txt", manual / "train.txt")

    with pytest.raises(DatasetFormatError, match="lacks valid.txt, test.txt"):
        load_named("nations", data_dir=tmp_path / "tfds", manual_dir=manual)
    with pytest.raises(DatasetFormatError, match="not found"):
        load_named("nations", data_dir=tmp_path / "tfds", manual_dir=tmp_path / "missing")


def test_unknown_name_lists_known_names() -> None:
    with pytest.raises(JobiError, match="unknown dataset 'fb15k-23'") as info:
        load_named("fb15k-23")

    message = str(info.value)
    assert "\n" not in message
    assert all(name in message for name in NAMES)


def test_name_is_case_and_underscore_insensitive(tmp_path: Path) -> None:
    loaded = load_named("Nations", data_dir=tmp_path, manual_dir=FIXTURES / "nations", verify_checksums=False)
    assert loaded["test"].shape == (4, 3)


def test_no_network_and_no_manual_folder_says_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, network_attempts: list[str]
) -> None:
    monkeypatch.setattr(urllib.request, "getproxies", dict)  # take the direct-connection path

    with pytest.raises(JobiError, match=r"give a local copy: --data-dir FOLDER .* \$JOBI_TF_DATA_DIR/umls/$") as info:
        load_named("umls", data_dir=tmp_path)

    assert "\n" not in str(info.value) and "manual_dir" not in str(info.value)
    assert isinstance(info.value.__cause__, NetworkAccessError)  # failed at the quick probe
    assert network_attempts == [repr((("raw.githubusercontent.com", 443),))]
    network_attempts.clear()


def test_builder_pickles_with_its_checksum_flag(tmp_path: Path) -> None:
    from jobi_tf.datasets.builders import UMLS

    builder = pickle.loads(pickle.dumps(UMLS(data_dir=tmp_path, verify_checksums=False)))

    assert builder._verify_checksums is False


def test_import_does_not_load_tensorflow_datasets() -> None:
    code = "import sys, jobi_tf.datasets; sys.exit('tensorflow_datasets' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


@pytest.mark.skipif(
    not os.environ.get(DATA_DIR_ENV), reason=f"set {DATA_DIR_ENV} to a folder with the real benchmark copies"
)
@pytest.mark.parametrize(("name", "sizes"), [("nations", (1592, 199, 201)), ("umls", (5216, 652, 661))])
def test_real_copies_with_checksums(name: str, sizes: tuple[int, int, int], tmp_path: Path) -> None:
    from jobi_tf.data.triples import read_split_folder

    folder = Path(os.environ[DATA_DIR_ENV]) / name

    loaded = load_named(name, data_dir=tmp_path, manual_dir=folder, verify_checksums=True)

    assert tuple(len(loaded[split]) for split in SPLITS) == sizes
    reference = read_split_folder(folder)
    for split in SPLITS:
        np.testing.assert_array_equal(loaded[split], reference[split])
