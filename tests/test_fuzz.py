"""Hostile input, property-based: the triples reader, ``jobi-tf train``'s numeric flags and the
exported signatures each give a clear error or a documented result, never a traceback.

Example counts come from ``$JOBI_TF_FUZZ_EXAMPLES`` (default 60 per property, a few seconds
each); ``bench/fuzz.py`` runs the same properties with a larger budget and counts the cases
from Hypothesis's statistics.
"""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
import tensorflow as tf
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jobi_tf.cli.main import main

from jobi_tf.data.folder import read_folder_index
from jobi_tf.data.triples import read_split_folder
from jobi_tf.runtime.errors import JobiError

EXAMPLES = int(os.environ.get("JOBI_TF_FUZZ_EXAMPLES", "60"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)

# -- the triples reader ----------------------------------------------------------------------

_FIELD = st.one_of(
    st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12),
    st.sampled_from(["e1", "e2", "r1", "", " ", "\x00", "é", "\ufeffe1"]),
)
_LINE = st.lists(_FIELD, min_size=0, max_size=5).map(lambda fields: "\t".join(fields))
_TEXT_FILE = st.lists(_LINE, max_size=8).map(lambda lines: "\n".join(lines).encode("utf-8"))
_FILE = st.one_of(
    st.binary(max_size=200),  # random bytes, invalid UTF-8, NULs
    _TEXT_FILE,
    _TEXT_FILE.map(lambda b: b.replace(b"\n", b"\r\n")),
    _TEXT_FILE.map(lambda b: b"\xef\xbb\xbf" + b),
    st.just(b"e1\tr1\te2\n" + b"x" * 200_000 + b"\n"),  # a huge line
    st.just(b""),
    st.sampled_from(["<dir>", "<missing>"]),
)
_GOOD = b"e1\tr1\te2\ne2\tr1\te3\n"


def _write(folder, name: str, content) -> None:
    path = folder / name
    if content == "<dir>":
        path.mkdir()
    elif content != "<missing>":
        path.write_bytes(content)


def _check_reader_outcome(folder, reader) -> str:
    """``ok`` or ``error``; any other exception, or a multi-line message, fails the property."""
    try:
        reader(folder)
    except JobiError as exc:
        message = str(exc)
        assert "\n" not in message, message
        assert any(name in message for name in ("train.txt", "valid.txt", "test.txt", str(folder))), message
        return "error"
    return "ok"


@FUZZ
@given(train=_FILE, valid=_FILE, test=st.sampled_from([_GOOD, b"", "<missing>"]))
def test_reader_gives_triples_or_a_one_line_error_naming_the_file(tmp_path_factory, train, valid, test):
    folder = tmp_path_factory.mktemp("kg")
    for name, content in (("train.txt", train), ("valid.txt", valid), ("test.txt", test)):
        _write(folder, name, content)
    outcomes = {_check_reader_outcome(folder, read_split_folder), _check_reader_outcome(folder, read_folder_index)}
    assert len(outcomes) == 1, "the two readers must agree on what is valid"


# -- the CLI's numeric flags ------------------------------------------------------------------

_NUMERIC_FLAGS = [
    "--batch-size", "--neg", "--p", "--alpha", "--lr", "--dim", "--epochs", "--eval-every", "--patience",
    "--shared-negatives", "--regularization", "--seed", "--eval-batch-size", "--chunk-size",
    "--synthetic-entities", "--synthetic-relations", "--synthetic-triples", "--logical-cpus",
]  # fmt: skip
_VALUES = st.one_of(
    st.sampled_from(["-1", "0", "nan", "inf", "-inf", "1e30", str(2**63), str(2**31), "1.5", "abc", "", "0x10"]),
    st.integers(-(2**70), 2**70).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
)


@pytest.fixture
def no_training(monkeypatch):
    """The CLI with training replaced by a stub (for one test function, all its examples):
    accepted flags must not start a run here."""
    import jobi_tf.training.trainer as training

    seen = []

    def stub(cfg, run_dir, **kwargs):
        seen.append(cfg)
        raise JobiError("stub: flags accepted")

    monkeypatch.setattr(training, "train", stub)
    return seen


@FUZZ
@given(flag=st.sampled_from(_NUMERIC_FLAGS), value=_VALUES)
def test_numeric_flags_are_accepted_or_refused_in_one_line_naming_the_flag(no_training, flag, value):
    result = CliRunner().invoke(main, ["train", flag, value, "--out", os.devnull + "-unused"])
    output = result.output
    assert "Traceback" not in output, output
    if result.exit_code == 2:  # refused: a usage error naming the flag
        error = [line for line in output.splitlines() if line.startswith("Error:")]
        assert len(error) == 1 and flag in error[0], output
    else:  # accepted: validation passed and reached the (stub) trainer
        assert result.exit_code == 1 and "stub: flags accepted" in output, output
        cfg = no_training[-1]
        for number in (cfg.sampler.p, cfg.train.alpha, cfg.train.lr, cfg.train.regularization):
            assert math.isfinite(number)


def test_a_model_larger_than_memory_is_refused_before_anything_is_allocated(tmp_path):
    """The real trainer (no stub): ``--dim 2**40`` must not reach an allocation."""
    args = ["train", "--synthetic-entities", "50", "--synthetic-triples", "300", "--dim", str(2**40)]
    result = CliRunner().invoke(main, args + ["--out", str(tmp_path / "run")])
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert "--dim: the tables and optimizer slots of" in result.output and "GiB" in result.output
    assert not (tmp_path / "run").exists()


# -- the exported signatures ------------------------------------------------------------------

_NAMES = st.one_of(
    st.sampled_from(["Berlin", "Brazil", "São Paulo", "is a city", "", "\x00", "borders", "is-capital-of"]),
    st.text(max_size=20),
    st.just("x" * 100_000),
)


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    from jobi_tf.config import ExportConfig
    from jobi_tf.data.vocab import Vocab
    from jobi_tf.export.savedmodel import export_saved_model
    from jobi_tf.models import JoBiModel

    entities = Vocab.from_labels(["Berlin", "Brazil", "São Paulo", "is a city", "Germany"])
    relations = Vocab.from_labels(["borders", "is-capital-of"])
    model = JoBiModel(num_entities=len(entities), num_relations=len(relations), model="complex", dim=4)
    base = tmp_path_factory.mktemp("fuzz-export")
    result = export_saved_model(model, entities, relations, base, ExportConfig())
    return tf.saved_model.load(str(result.path)), len(entities)


@FUZZ
@given(
    signature=st.sampled_from(["score", "predict_tail", "predict_head"]),
    first=st.lists(_NAMES, max_size=4),
    second=st.lists(_NAMES, max_size=4),
    third=st.lists(_NAMES, max_size=4),
    k=st.integers(-5, 2**31 - 1),
)
def test_signatures_return_documented_shapes_or_a_clear_error(loaded, signature, first, second, third, k):
    module, num_entities = loaded
    fn = module.signatures[signature]
    names = {
        "score": ("head", "relation", "tail"),
        "predict_tail": ("head", "relation"),
        "predict_head": ("relation", "tail"),
    }[signature]
    batches = [first, second, third][: len(names)]
    inputs = {n: tf.constant(b, tf.string, shape=[len(b)]) for n, b in zip(names, batches, strict=True)}
    if signature != "score":
        inputs["k"] = tf.constant(k, tf.int32)
    try:
        out = {key: value.numpy() for key, value in fn(**inputs).items()}
    except tf.errors.InvalidArgumentError as exc:
        # Documented: batches of different lengths are refused, naming the inputs.
        assert len({len(b) for b in batches}) > 1 and "must have the same length" in exc.message, exc.message
        return
    rows = len(batches[0])
    assert out["found"].shape == (rows,)
    if signature == "score":
        assert out["score"].shape == (rows,)
        assert np.isnan(out["score"][~out["found"]]).all()
    else:
        width = min(max(k, 0), num_entities)
        key = "tails" if signature == "predict_tail" else "heads"
        assert out[key].shape == out["scores"].shape == (rows, width)
        assert (out[key][~out["found"]] == b"").all()
