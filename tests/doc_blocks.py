"""Run a documentation section's first ``python`` code block, as a reader would paste it."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"


def run_python_block(heading: str, page: Path = README) -> dict:
    """Execute the first ```python block under ``## heading`` of ``page``; return its namespace."""
    section = page.read_text(encoding="utf-8").split(f"## {heading}\n", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    namespace: dict = {"__name__": "doc_block"}
    exec(compile(code, str(page), "exec"), namespace)
    return namespace
