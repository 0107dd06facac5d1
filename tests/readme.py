"""Run a README section's first ``python`` code block, as a reader would paste it."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def run_python_block(heading: str) -> dict:
    """Execute the first ```python block under ``## heading``; return its namespace."""
    section = README.read_text(encoding="utf-8").split(f"## {heading}\n", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    namespace: dict = {"__name__": "readme"}
    exec(compile(code, str(README), "exec"), namespace)
    return namespace
