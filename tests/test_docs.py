"""The documentation site builds without a warning, and every link of the docs and README
points at something that exists (a page, a raw result file or folder, a script)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

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
    home = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    # The home page is README, its links made the site's (docs/hooks/readme_home.py).
    assert "Which recipe" in home and 'href="results/newcomer/readme-row1.json"' in home


#: A script named in the docs: ``bench/NAME.py`` (or a deeper path under bench/).
BENCH_SCRIPT = re.compile(r"\bbench/[\w/]+\.py\b")
#: How a page cites a retired script: the commit that still has it, as a reader would fetch it.
RETIRED = re.compile(r"git show ([0-9a-f]{7,40}):(bench/[\w/]+\.py)")
BLOCK = re.compile(r"```.*?```", re.S)


def _script_citations(page: Path, root: Path = ROOT) -> list[str]:
    """What is wrong with the bench scripts ``page`` names: each must exist, or be retired with
    its commit named on the page (``git show COMMIT:bench/X.py``), and a code block that runs a
    retired script must name that commit itself, beside the command."""
    text = page.read_text(encoding="utf-8")
    cited = {path for _, path in RETIRED.findall(text)}
    wrong = []
    for path in sorted(set(BENCH_SCRIPT.findall(text))):
        if (root / path).exists():
            if path in cited:
                wrong.append(f"{path} is cited as retired but exists")
        elif path not in cited:
            wrong.append(f"{path} does not exist; cite the commit that has it: `git show COMMIT:{path}`")
    for block in BLOCK.findall(text):
        for path in sorted(set(BENCH_SCRIPT.findall(block)) - {p for _, p in RETIRED.findall(block)}):
            if not (root / path).exists():
                wrong.append(f"a code block runs {path} without the commit that has it")
    return wrong


def _pages_naming_scripts() -> list[Path]:
    pages = [ROOT / "README.md", ROOT / "bench" / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    return [page for page in pages if page.exists()]


def test_every_bench_script_the_docs_name_exists_or_is_cited_with_its_commit():
    wrong = [f"{page.relative_to(ROOT)}: {w}" for page in _pages_naming_scripts() for w in _script_citations(page)]
    assert wrong == []


def test_a_retired_scripts_commit_really_holds_it():
    """``git show COMMIT:bench/X.py`` works for every citation (a full git checkout only)."""
    git = ["git", "-C", str(ROOT)]
    shallow = subprocess.run([*git, "rev-parse", "--is-shallow-repository"], capture_output=True, text=True)
    if shallow.returncode or shallow.stdout.strip() != "false":
        pytest.skip("not a full git checkout")
    cited = {c for page in _pages_naming_scripts() for c in RETIRED.findall(page.read_text(encoding="utf-8"))}
    assert len(cited) >= 10  # the walk sees the retired scripts' citations
    held = {(c, p): subprocess.run([*git, "cat-file", "-e", f"{c}:{p}"], capture_output=True) for c, p in cited}
    missing = sorted(f"{c}:{p}" for (c, p), done in held.items() if done.returncode)
    assert missing == []


def test_the_citation_check_finds_a_retired_script_without_its_commit(tmp_path):
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "live.py").write_text("")
    page = tmp_path / "page.md"
    page.write_text(
        "Made by `bench/gone.py` (retired; `git show abc1234:bench/gone.py`) and `bench/live.py`.\n"
        "```bash\npython bench/gone.py --x\n```\n"
        "`bench/other.py`, and `git show abc1234:bench/live.py`.\n"
    )
    assert _script_citations(page, tmp_path) == [
        "bench/live.py is cited as retired but exists",
        "bench/other.py does not exist; cite the commit that has it: `git show COMMIT:bench/other.py`",
        "a code block runs bench/gone.py without the commit that has it",
    ]
