"""What README.md and docs/extending.md name exists, and every page of docs/ can be found.

Why: README's old code map named eleven files that a move into stage folders had removed,
and no test read it. Here every path (``jobi_tf/regimes/checks.py``, ``bench/x.py``, a folder
``cli/``), every file a layout table row names in its folder (``runs.py`` in ``config/``'s row)
and every dotted module (``jobi_tf.contracts.objectives.Objective``) of those pages must exist;
every page under docs/ must be in README's documentation table or the site's navigation; a
link whose text is a page's file name must lead to that page; and a run folder a page exports
or evaluates must be one that a command on the same page trains into.
"""

from __future__ import annotations

import ast
import re
import shlex
from pathlib import Path

import click
import pytest
from doc_blocks import DOCS, README, ROOT

#: The pages whose every named path and module must exist.
PAGES = (README, DOCS / "extending.md")
#: Source folder of each installed package (pyproject.toml's package-dir).
PACKAGES = {"jobi_tf.cli": ROOT / "cli", "jobi_tf.serving": ROOT / "serving", "jobi_tf": ROOT / "jobi_tf"}

#: ``jobi_tf/models/scorers/``, ``bench/popularity_ranking.py``, ``docs/results/x.json``, ``cli/``.
PATH = re.compile(r"(?<![\w./-])((?:jobi_tf|cli|serving|bench|tests|docs)/[\w./-]*)")
#: ``jobi_tf.contracts.objectives.Objective`` (a module, then perhaps a name it defines).
MODULE = re.compile(r"(?<![\w./-])(jobi_tf(?:\.\w+)+)")
#: A file name a layout table's row names within its folder (``runs.py``).
FILE_IN_ROW = re.compile(r"(?<![\w/.-])(\w+\.py)\b")
LINK = re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)")


def _prose(text: str) -> str:
    """The page without its URLs (``https://...`` may hold ``docs/``)."""
    return re.sub(r"https?://\S+", "", text)


def missing_paths(page: Path, root: Path = ROOT) -> list[str]:
    """Paths ``page`` names that do not exist (relative to the repository's root)."""
    found = []
    for name in sorted(set(PATH.findall(_prose(page.read_text(encoding="utf-8"))))):
        path = name.split("#")[0].rstrip(".,;:)")
        if "*" in path or "<" in path or re.search(r"/[A-Z_]+(?:\.\w+)?/?$", path):  # a pattern or NAME.py
            continue
        if not (root / path).exists():
            found.append(path)
    return found


def missing_files_in_rows(page: Path, root: Path = ROOT) -> list[str]:
    """``NAME.py`` a table row names beside its folder (```config/` `` ... ``runs.py``) that
    is not in that folder (or a folder below it) under ``jobi_tf/``."""
    found = []
    for row in page.read_text(encoding="utf-8").splitlines():
        folders = re.findall(r"\|\s*`(\w+)/`", row)
        if not row.startswith("|") or not folders:
            continue
        homes = [root / "jobi_tf" / folder for folder in folders]
        for name in FILE_IN_ROW.findall(row):
            if not any(list(home.rglob(name)) for home in homes):
                found.append(f"{'/'.join(folders)}: {name}")
    return found


def _module_file(dotted: str) -> tuple[Path, list[str]] | None:
    """The source file of the longest module prefix of ``dotted`` and the names after it."""
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        name = ".".join(parts[:end])
        package = next((p for p in PACKAGES if name == p or name.startswith(p + ".")), None)
        if package is None:
            continue
        base = PACKAGES[package].joinpath(*name[len(package) :].split(".")[1:])
        for path in (base / "__init__.py", base.with_suffix(".py")):
            if path.is_file():
                return path, parts[end:]
    return None


def _defines(path: Path, name: str) -> bool:
    """Whether the module at ``path`` binds ``name`` at its top level or lists it in ``__all__``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return True
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            if any((alias.asname or alias.name.split(".")[0]) == name for alias in node.names):
                return True
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                return True
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
                if name in ast.literal_eval(node.value):
                    return True
    return False


def missing_modules(page: Path) -> list[str]:
    """Dotted ``jobi_tf`` names of ``page`` that name no module, or no name its module defines."""
    found = []
    for dotted in sorted(set(MODULE.findall(page.read_text(encoding="utf-8")))):
        dotted = dotted.rstrip(".")
        home = _module_file(dotted)
        if home is None or (home[1] and not _defines(home[0], home[1][0])):
            found.append(dotted)
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_path_and_module_a_page_names_exists(page):
    assert missing_paths(page) == []
    assert missing_files_in_rows(page) == []
    assert missing_modules(page) == []


def test_the_checks_find_a_stale_name(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "The sampler is `jobi_tf/sampling/negatives.py`, once `jobi_tf/negatives.py` and "
        "`jobi_tf.sampling.features` (`jobi_tf.contracts.features.TRIPLES`, `jobi_tf.contracts.features.NOPE`).\n"
        "| 7 | `sampling/` | pipelines.py, sampling.py |\n"
    )
    assert missing_paths(page) == ["jobi_tf/negatives.py"]
    assert missing_files_in_rows(page) == ["sampling: sampling.py"]
    assert missing_modules(page) == ["jobi_tf.contracts.features.NOPE", "jobi_tf.sampling.features"]


def _nav_pages() -> set[Path]:
    """The pages of mkdocs.yml's ``nav`` (``- Title: page.md`` entries)."""
    text = (ROOT / "mkdocs.yml").read_text(encoding="utf-8").split("\nnav:\n", 1)[1]
    nav = text.split("\n\n", 1)[0] if "\n\n" in text else text
    nav = re.split(r"\n(?=\S)", nav, maxsplit=1)[0]  # up to the next top-level key
    return {(DOCS / m).resolve() for m in re.findall(r":\s*([\w./-]+\.md)\s*$", nav, re.M)}


def _readme_table_pages() -> set[Path]:
    section = README.read_text(encoding="utf-8").split("## Documentation\n", 1)[1].split("\n## ", 1)[0]
    table = "\n".join(row for row in section.splitlines() if row.startswith("|"))
    return {(ROOT / target.split("#")[0]).resolve() for _, target in LINK.findall(table)}


def test_every_docs_page_can_be_found():
    """A page under docs/ is in the site's navigation or README's documentation table; each
    top-level page is in README's table (the studies and grid summaries: the navigation), and
    every page either names exists."""
    pages = {p.resolve() for p in DOCS.rglob("*.md")}
    nav, table = _nav_pages(), _readme_table_pages()
    assert len(nav) > 30 and len(table) > 15  # both were read
    assert sorted(str(p.relative_to(ROOT)) for p in (nav | table) - pages) == []
    assert sorted(str(p.relative_to(ROOT)) for p in pages - nav - table) == []
    top = {p.resolve() for p in DOCS.glob("*.md")} - {(DOCS / "index.md").resolve()}  # index.md is README
    assert sorted(str(p.relative_to(ROOT)) for p in top - table) == []


def mislabelled_links(page: Path) -> list[str]:
    """Links whose text is a file name (``docs/performance.md``) but whose target is another file."""
    found = []
    for text, target in LINK.findall(page.read_text(encoding="utf-8")):
        named = text.strip("`")
        if re.fullmatch(r"[\w./-]+\.\w+/?", named) and "://" not in target:
            if Path(named.rstrip("/")).name != Path(target.split("#")[0].rstrip("/")).name:
                found.append(f"[{text}]({target})")
    return found


def test_a_link_that_shows_a_file_name_leads_to_that_file(tmp_path):
    pages = [README, *sorted(DOCS.rglob("*.md"))]
    assert [f"{p.relative_to(ROOT)}: {m}" for p in pages for m in mislabelled_links(p)] == []
    page = tmp_path / "page.md"
    page.write_text("[docs/performance.md](studies/performance-notebook.md#x) [results.md](results.md#y)\n")
    assert mislabelled_links(page) == ["[docs/performance.md](studies/performance-notebook.md#x)"]


#: ``jobi-tf export runs/NAME`` (or ``evaluate``, ``calibrate``) of a default run folder's name
#: (``...-seed0``, perhaps with its digest): a folder a page reads as a command would name it.
READS_RUN = re.compile(
    r"jobi-tf\s+(?:-q\s+)?(?:export|evaluate|calibrate)\s+(runs/[\w.=-]+-seed\d+(?:-[0-9a-f]{6})?)\b"
)
TRAIN = re.compile(r"jobi-tf\s+train\s[^`\n]*")


def unknown_run_folders(page: Path) -> list[str]:
    """Default-named run folders ``page`` reads that no ``jobi-tf train`` command on it trains
    into (its ``--out``, or its default folder, `jobi_tf.cli.train.default_run_folder`)."""
    from jobi_tf.cli.train import config_from_command, default_run_folder

    text = page.read_text(encoding="utf-8")
    written = set()
    for command in TRAIN.findall(text):
        try:
            argv = shlex.split(command.split("#")[0].replace("\\", " "))[2:]
        except ValueError:  # quoted inside another command (a bench's --command "jobi-tf train ..."): not run
            continue
        argv = argv[: next((i for i, a in enumerate(argv) if a in ("&&", ";", "|", "&")), len(argv))]
        if "--out" in argv[:-1]:
            written.add(argv[argv.index("--out") + 1])
            continue
        try:  # a command with placeholders (GRAPH, default|mirrored, --...) trains nothing
            cfg = config_from_command(argv)
        except (click.ClickException, click.exceptions.Exit, ValueError):
            continue
        preset = argv[argv.index("--preset") + 1] if "--preset" in argv[:-1] else None
        written.add(str(default_run_folder(cfg, preset)))
    return sorted(set(READS_RUN.findall(text)) - written)


@pytest.mark.parametrize("page", [README, *sorted(DOCS.glob("*.md"))], ids=lambda p: p.name)
def test_a_run_folder_a_page_reads_is_one_its_commands_train(page):
    assert unknown_run_folders(page) == []


def test_the_run_folder_check_finds_a_folder_without_its_digest(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "```bash\njobi-tf train --joint --p 0.3 --dim 64\n"
        "jobi-tf export runs/synthetic-complex-jobi-p0.3-seed0 --out exports/a\n"
        "jobi-tf export runs/synthetic-complex-jobi-p0.3-seed0-aa1d7a --out exports/b\n```\n"
    )
    assert unknown_run_folders(page) == ["runs/synthetic-complex-jobi-p0.3-seed0"]
