"""README's "Python API" code block runs as written (load, train, evaluate, top-k, reload, embeddings, export)."""

from __future__ import annotations

import shutil
from pathlib import Path

from readme import run_python_block


def test_readme_python_api_block_runs(capsys):
    namespace = run_python_block("Python API")
    lines = capsys.readouterr().out.strip().splitlines()
    run = namespace["run"]
    try:
        assert 0.05 < float(lines[0]) <= 1.0  # learned: a random ranking of 2,000 entities gives about 0.004
        assert lines[2].startswith("[(") and len(eval(lines[2])) == 3  # noqa: S307 (our own printed list)
        assert lines[4] == f"{len(run.entities)} {(len(run.entities), 64)}"  # ComplEx 32: 32 real + 32 imaginary
        assert (Path(lines[5]) / "saved_model.pb").is_file()
    finally:
        shutil.rmtree(run.path, ignore_errors=True)  # the temporary run folder the block made
