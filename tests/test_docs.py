"""The documentation site builds without a warning, and every link of the docs and README
points at something that exists (a page, a raw result file or folder, a script)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: ``[text](target)`` links; images too. Targets with a scheme or only an anchor are skipped.
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _local_targets(page: Path) -> list[tuple[str, Path]]:
    found = []
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)  # code is not linked
    for target in LINK.findall(text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue
        found.append((target, (page.parent / target.split("#", 1)[0]).resolve()))
    return found


def test_every_relative_link_of_the_docs_and_readme_exists():
    pages = [ROOT / "README.md", ROOT / "serving" / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    links = [(page, target, path) for page in pages for target, path in _local_targets(page)]
    assert len(links) > 50  # the walk sees the docs' links
    missing = [f"{page.relative_to(ROOT)}: {target}" for page, target, path in links if not path.exists()]
    assert missing == []


def test_the_link_check_finds_a_missing_target(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("[a](missing.json) [b](page.md#x) [c](https://example.org) ```\n[d](code.md)\n```\n")
    assert [(t, p.exists()) for t, p in _local_targets(page)] == [("missing.json", False), ("page.md#x", True)]


def test_the_site_builds_strictly(tmp_path):
    """``mkdocs build --strict``: a broken page link or anchor, a docstring the API reference
    cannot read, or a CLI reference that fails to generate is an error."""
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    cli = (tmp_path / "site" / "cli" / "index.html").read_text(encoding="utf-8")
    assert "jobi-tf train" in cli and "--biased-chunk" in cli  # generated from the click commands
    api = (tmp_path / "site" / "api" / "index.html").read_text(encoding="utf-8")
    assert "train_from_config" in api and "load_run" in api
