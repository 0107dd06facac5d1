"""The jobi-tf command line: help, exit codes, one-line errors, train and evaluate."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from click.testing import CliRunner
from jobi_tf.cli.main import _SUBCOMMANDS, main
from tiny_cli import tiny_flags

SMALL = tiny_flags(2)


@pytest.mark.parametrize("args", [["--help"]] + [[name, "--help"] for name in _SUBCOMMANDS])
def test_help_of_every_command(args):
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output


def test_help_does_not_import_tensorflow():
    code = (
        "import sys\nfrom click.testing import CliRunner\nfrom jobi_tf.cli.main import main\n"
        "CliRunner().invoke(main, ['--help'])\nprint('tensorflow' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--p", "1.5"),
        ("--neg", "0"),
        ("--lr", "nan"),
        ("--batch-size", "-3"),
        ("--dim", "0"),
        ("--label-smoothing", "1.0"),
        ("--relation-prediction", "-1"),
    ],
)
def test_bad_flag_values_exit_2_naming_the_flag(flag, value, tmp_path):
    result = CliRunner().invoke(main, ["train", flag, value, "--out", str(tmp_path / "run")])
    assert result.exit_code == 2
    assert flag in result.output
    assert not (tmp_path / "run").exists()


def test_bad_data_file_is_one_line_error_exit_1(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.txt").write_text("a\tr\tb\n")
    (data / "valid.txt").write_bytes(b"a\tr\tb\r\n")
    (data / "test.txt").write_text("a\tr\tb\n")
    result = CliRunner().invoke(main, ["train", "--data-dir", str(data), "--out", str(tmp_path / "run")])
    assert result.exit_code == 1
    lines = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(lines) == 1 and "valid.txt:1: CR (Windows CRLF) line ending" in lines[0]
    assert "Traceback" not in result.output
    assert not (tmp_path / "run").exists()


def test_train_then_evaluate(tmp_path):
    runner = CliRunner()
    result = runner.invoke(main, ["-q", "train", "--joint", "--p", "0.3", *SMALL, "--out", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["epochs"] == 2 and 0 <= summary["test"]["mrr"] <= 1
    result = runner.invoke(main, ["-q", "evaluate", str(tmp_path / "run"), "--split", "test"])
    assert result.exit_code == 0, result.output
    metrics = json.loads(result.stdout.strip().splitlines()[-1])
    assert metrics["mrr"] == pytest.approx(summary["test"]["mrr"], abs=1e-9)
    assert {"head", "tail"} <= set(metrics)
    tails = json.loads(runner.invoke(main, ["-q", "evaluate", str(tmp_path / "run"), "--tails-only"]).stdout)
    assert "head" not in tails and tails["count"] == metrics["tail"]["count"]


def test_presets_train_into_folders_of_their_own(tmp_path, monkeypatch):
    """``kbc`` and ``kbc-fast`` train the same kind of model; without ``--out`` the second one
    gets its own folder instead of being refused by the first one's."""
    monkeypatch.chdir(tmp_path)
    folders = []
    for preset in ("kbc", "kbc-fast"):
        result = CliRunner().invoke(main, ["-q", "train", "--preset", preset, *tiny_flags(1), "--batch-size", "50"])
        assert result.exit_code == 0, result.output
        folders.append(json.loads(result.stdout.strip().splitlines()[-1])["run_dir"])
    # (The tiny graph's sizes differ from the presets': each name ends in their digest.)
    assert [re.sub(r"-[0-9a-f]{6}$", "", f) for f in folders] == [
        "runs/synthetic-kbc-complex-base-reciprocal-p0-seed0",
        "runs/synthetic-kbc-fast-complex-base-reciprocal-p0-seed0",
    ]
    assert all((tmp_path / folder / "metrics.json").is_file() for folder in folders)


def test_a_changed_setting_trains_into_a_folder_of_its_own_and_the_same_command_resumes(tmp_path, monkeypatch):
    """Without ``--out``, a command that differs only in ``--dim`` gets a folder of its own
    instead of being refused by the first one's; the first command, rerun, finds its folder."""
    monkeypatch.chdir(tmp_path)

    def train(*extra: str) -> dict:
        result = CliRunner().invoke(main, ["-q", "train", *tiny_flags(1), *extra])
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout.strip().splitlines()[-1])

    first, other = train(), train("--dim", "4")
    assert first["run_dir"] != other["run_dir"]
    assert all((tmp_path / run["run_dir"] / "metrics.json").is_file() for run in (first, other))
    assert train() == first  # the same folder, its finished run's metrics returned unchanged


@pytest.mark.parametrize(
    ("extra", "same"),
    [
        ([], True),
        (
            ["--epochs", "5", "--patience", "1", "--checkpoint-steps", "9"],
            True,
        ),  # when to stop or save: not what trains
        (["--dim", "200", "--neg", "100"], True),  # the defaults, given
        (["--dim", "64"], False),
        (["--neg", "50"], False),
        (["--lr", "0.01"], False),
    ],
)
def test_the_default_run_folder_names_what_differs_from_the_defaults(extra, same):
    from jobi_tf.cli.train import config_from_command, default_run_folder

    base = "runs/fb15k-237-complex-jobi-p0.3-seed0"
    folder = str(default_run_folder(config_from_command(["--dataset", "fb15k-237", "--joint", "--p", "0.3", *extra])))
    assert (folder == base) if same else re.fullmatch(re.escape(base) + "-[0-9a-f]{6}", folder), folder
    folders = {str(default_run_folder(config_from_command(["--dim", "64", *flags]))) for flags in ([], ["--neg", "50"])}
    assert len(folders) == 2  # and --neg beside --dim is a third run


def test_reciprocal_train_evaluate_and_export(tmp_path):
    runner = CliRunner()
    run = str(tmp_path / "run")
    result = runner.invoke(main, ["-q", "train", "--joint", "--p", "0.3", "--reciprocal", *SMALL, "--out", run])
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "run" / "config.json").read_text())["model"]["reciprocal"] is True
    metrics = json.loads(runner.invoke(main, ["-q", "evaluate", run, "--split", "test"]).stdout)
    assert {"head", "tail"} <= set(metrics) and 0 < metrics["head"]["mrr"] <= 1
    result = runner.invoke(main, ["-q", "export", run, "--out", str(tmp_path / "export")])
    assert result.exit_code == 0, result.output
    info = json.loads((tmp_path / "export" / "1" / "assets.extra" / "jobi_tf.json").read_text())
    assert info["reciprocal"] is True and info["num_relations"] == 3
    # The same folder without --reciprocal is another run: refused, naming the difference.
    result = runner.invoke(main, ["-q", "train", "--joint", "--p", "0.3", *SMALL, "--out", run])
    assert result.exit_code != 0 and "model.reciprocal was True, now False" in result.output


def test_one_vs_all_with_label_smoothing_and_relation_prediction(tmp_path):
    """kbc's recipe shape: 1-vs-all, reciprocal, N3, Adagrad, plus Chen et al.'s auxiliary loss."""
    run = tmp_path / "run"
    flags = ["--loss", "full-softmax", "--label-smoothing", "0.1", "--relation-prediction", "4", "--reciprocal"]
    flags += ["--regularizer", "n3", "--regularization", "0.05", "--optimizer", "adagrad", "--lr", "0.1"]
    flags += ["--matmul-dtype", "bfloat16"]
    result = CliRunner().invoke(main, ["-q", "train", "--joint", *flags, *SMALL, "--out", str(run)])
    assert result.exit_code == 0, result.output
    train = json.loads((run / "config.json").read_text())["train"]
    assert train["label_smoothing"] == 0.1 and train["relation_prediction"] == 4.0
    assert train["matmul_dtype"] == "bfloat16"
    assert 0 < json.loads(result.stdout.strip().splitlines()[-1])["test"]["mrr"] <= 1
    result = CliRunner().invoke(main, ["-q", "evaluate", str(run), "--relations"])
    assert result.exit_code == 0, result.output
    relations = json.loads(result.stdout.strip().splitlines()[-1])["relation_prediction"]
    assert 0 < relations["mrr"] <= 1 and relations["count"] > 0 and relations["rank_type"] == "realistic"


def test_label_smoothing_needs_the_full_softmax(tmp_path):
    result = CliRunner().invoke(main, ["train", "--label-smoothing", "0.1", "--out", str(tmp_path / "run")])
    assert result.exit_code == 2 and "--label-smoothing: needs --loss full-softmax" in result.output
    assert not (tmp_path / "run").exists()


def test_bfloat16_matmuls_need_every_entity_scored(tmp_path):
    result = CliRunner().invoke(main, ["train", "--matmul-dtype", "bfloat16", "--out", str(tmp_path / "run")])
    assert result.exit_code == 2 and "--matmul-dtype: needs --loss full-softmax or k-vs-all" in result.output
    assert not (tmp_path / "run").exists()


def test_a_relation_penalty_needs_n3(tmp_path):
    result = CliRunner().invoke(main, ["train", "--relation-penalty", "0", "--out", str(tmp_path / "run")])
    assert result.exit_code == 2 and "--relation-penalty: needs --regularizer n3" in result.output
    assert not (tmp_path / "run").exists()


def test_reciprocal_with_a_coin_per_negative_is_refused(tmp_path):
    args = ["train", "--reciprocal", "--corrupt-side", "per-negative", "--out", str(tmp_path / "run")]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2 and "--reciprocal" in result.output and "per-positive" in result.output
    assert not (tmp_path / "run").exists()


def test_evaluate_on_a_folder_that_is_not_a_run(tmp_path):
    result = CliRunner().invoke(main, ["evaluate", str(tmp_path)])
    assert result.exit_code == 1 and "not a run folder" in result.output


def test_train_a_named_benchmark_from_its_local_copy(tmp_path, monkeypatch):
    """--dataset NAME goes through the TFDS builder, offline from $JOBI_TF_DATA_DIR/<name>."""
    if not os.environ.get("JOBI_TF_DATA_DIR"):
        pytest.skip("JOBI_TF_DATA_DIR not set")
    monkeypatch.setenv("JOBI_TF_TFDS_DIR", str(tmp_path / "tfds"))
    args = ["-q", "train", "--dataset", "nations", "--dim", "8", "--batch-size", "200", "--neg", "8"]
    args += ["--epochs", "1", "--eval-every", "1", "--no-jit", "--out", str(tmp_path / "run")]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert (tmp_path / "run" / "entities.txt").read_text().count("\n") == 14  # Nations has 14 entities
