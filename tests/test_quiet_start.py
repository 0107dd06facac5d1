"""Quiet by default: neither ``jobi-tf`` nor the Python API prints TensorFlow's start-up INFO
lines or a CPU machine's CUDA probes; ``TF_CPP_MIN_LOG_LEVEL=0`` shows them. And fail fast: a
data folder that is missing or malformed is reported before TensorFlow loads."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from tiny_cli import tiny_flags

#: What TensorFlow's start prints on a CPU machine when nothing hides it.
NOISE = re.compile(r"^I\d{4} |cuInit|cudart|absl::InitializeLog|cpu_feature_guard", re.MULTILINE)


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    return {**env, "JOBI_TF_LOGICAL_CPUS": "", **extra}


def test_train_and_load_run_print_no_tensorflow_start_up_lines(tmp_path):
    run = tmp_path / "run"
    command = [sys.executable, "-m", "jobi_tf.cli", "-q", "train", *tiny_flags(1), "--out", str(run)]
    trained = subprocess.run(command, capture_output=True, text=True, env=_env(), timeout=300)
    assert trained.returncode == 0, trained.stderr[-2000:]
    assert not NOISE.search(trained.stderr), trained.stderr[-2000:]
    code = f"import jobi_tf\nrun = jobi_tf.load_run({str(run)!r})\nprint(run.config.train.epochs)"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), timeout=300)
    assert loaded.returncode == 0 and loaded.stdout.strip() == "1", loaded.stderr[-2000:]
    assert not NOISE.search(loaded.stderr), loaded.stderr[-2000:]
    shown = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=_env(TF_CPP_MIN_LOG_LEVEL="0"), timeout=300
    )
    assert shown.returncode == 0 and NOISE.search(shown.stderr), shown.stderr[-2000:]


@pytest.mark.parametrize("case", ["missing", "malformed"])
def test_a_bad_data_folder_is_reported_before_tensorflow_loads(tmp_path, case):
    data = tmp_path / "data"
    if case == "malformed":
        data.mkdir()
        for split in ("train", "valid", "test"):
            (data / f"{split}.txt").write_text("a\tr\tb\n" if split != "valid" else "a\tr\n")
    args = ["train", "--data-dir", str(data), "--out", str(tmp_path / "run")]
    code = (
        "import sys\nfrom click.testing import CliRunner\nfrom jobi_tf.cli.main import main\n"
        f"result = CliRunner().invoke(main, {args!r})\n"
        "print(result.exit_code)\nprint(result.output.strip().splitlines()[-1])\nprint('tensorflow' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), timeout=120)
    expected = {
        "missing": f"Error: {data}: data folder not found (expected train.txt, valid.txt, test.txt)",
        "malformed": f"Error: {data / 'valid.txt'}:1: expected 3 tab-separated fields, got 2",
    }[case]
    assert out.stdout.splitlines() == ["1", expected, "False"], out.stderr[-2000:]
    assert not (tmp_path / "run").exists()
