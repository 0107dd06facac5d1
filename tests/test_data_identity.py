"""A data folder is the same folder however its path is spelled; a file changed since the run
started is refused in one line naming it (`jobi_tf.config.runs.RunFolder.check_data`)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from click.testing import CliRunner
from jobi_tf.cli.main import main

FLAGS = ["--dim", "8", "--batch-size", "50", "--neg", "4", "--epochs", "1", "--eval-every", "1", "--no-jit"]


def _write_folder(folder: Path) -> None:
    """40 entities, 3 relations: 300 train triples (every entity in them), 20 valid and 20 test."""
    rng = np.random.default_rng(0)
    triples = {
        (h, r, t)
        for h, r, t in zip(rng.integers(0, 40, 600), rng.integers(0, 3, 600), rng.integers(0, 40, 600), strict=True)
    }
    rows = sorted(triples)
    train = [(i, 0, (i + 1) % 40) for i in range(40)] + [x for x in rows[:300] if x[1] != 0 or x[2] != (x[0] + 1) % 40]
    rest = [x for x in rows[300:] if x not in set(train)]
    folder.mkdir(parents=True)
    for name, part in (("train", train), ("valid", rest[:20]), ("test", rest[20:40])):
        text = "".join(f"e{h}\tr{r}\te{t}\n" for h, r, t in part)
        (folder / f"{name}.txt").write_text(text)


def test_a_data_folder_is_the_same_however_spelled_and_a_changed_file_is_named(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _write_folder(tmp_path / "data" / "good")
    runner = CliRunner()
    first = runner.invoke(main, ["-q", "train", "--data-dir", "data/good", *FLAGS])
    assert first.exit_code == 0, first.output
    run_dir = json.loads(first.stdout.strip().splitlines()[-1])["run_dir"]
    for spelling in ("./data/good/", str(tmp_path / "data" / "good")):
        again = runner.invoke(main, ["-q", "train", "--data-dir", spelling, *FLAGS])
        assert again.exit_code == 0, again.output
        assert json.loads(again.stdout.strip().splitlines()[-1])["run_dir"] == run_dir
    (tmp_path / "data" / "copy").mkdir()
    for name in (
        "train.txt",
        "valid.txt",
        "test.txt",
    ):  # a copy elsewhere, under the same folder name, is the same data
        (tmp_path / "data" / "copy" / name).write_bytes((tmp_path / "data" / "good" / name).read_bytes())
    copied = runner.invoke(main, ["-q", "train", "--data-dir", "data/copy", *FLAGS, "--out", run_dir])
    assert copied.exit_code == 0, copied.output

    test = tmp_path / "data" / "good" / "test.txt"
    test.write_text("".join(reversed(test.read_text().splitlines(keepends=True))))  # the same triples, other bytes
    changed = runner.invoke(main, ["-q", "train", "--data-dir", "./data/good/", *FLAGS])
    assert changed.exit_code == 1
    assert changed.output.strip().splitlines() == [
        f"Error: data/good/test.txt: changed since the run in {run_dir} started (not the file data.sha256 records); "
        "restore it, or train into another --out"
    ]
