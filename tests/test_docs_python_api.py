"""docs/python.md's "Python API" block runs as written (load, train, evaluate, top-k, reload, embeddings, export)."""

from __future__ import annotations

import shutil
from pathlib import Path

from doc_blocks import DOCS, run_python_block


def test_python_api_guide_block_runs(capsys):
    namespace = run_python_block("Python API", DOCS / "python.md")
    lines = capsys.readouterr().out.strip().splitlines()
    run = namespace["run"]
    try:
        assert 0.05 < float(lines[0]) <= 1.0  # learned: a random ranking of 2,000 entities gives about 0.004
        assert lines[2].startswith("[(") and len(eval(lines[2])) == 3  # noqa: S307 (our own printed list)
        assert lines[4] == f"{len(run.entities)} {(len(run.entities), 64)}"  # ComplEx 32: 32 real + 32 imaginary
        assert (Path(lines[5]) / "saved_model.pb").is_file()
    finally:
        shutil.rmtree(run.path, ignore_errors=True)  # the temporary run folder the block made


def test_readme_python_block_runs(capsys):
    namespace = run_python_block("Python")
    lines = capsys.readouterr().out.strip().splitlines()
    try:
        assert 0.01 < float(lines[0]) <= 1.0  # learned: a random ranking of 2,000 entities gives about 0.004
        top = eval(lines[1])  # noqa: S307 (our own printed list)
        assert len(top) == 3 and all(name in namespace["run"].entities for name, _ in top)
    finally:
        shutil.rmtree(namespace["run"].path, ignore_errors=True)
