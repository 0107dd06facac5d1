"""bench/ stays small: under 5,500 lines in all and no function over 80.

Why: the scripts grew back from 5,049 to 7,026 lines in a few months, probe by probe, each
repeating its neighbours' set-up. A script that answered one question once is retired with its
commit (bench/README.md, "Retired"); this bound makes that the default rather than a clean-up.
"""

from __future__ import annotations

import ast
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench"
MAX_LINES = 5_500
MAX_FUNCTION_LINES = 80


def long_functions(source: str) -> list[str]:
    """``name: N lines`` for each function of ``source`` over `MAX_FUNCTION_LINES`."""
    return [
        f"{node.name}: {node.end_lineno - node.lineno + 1} lines"
        for node in ast.walk(ast.parse(source))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]


def test_bench_stays_under_its_line_bound():
    lines = sum(path.read_text(encoding="utf-8").count("\n") for path in BENCH.rglob("*.py"))
    assert lines < MAX_LINES, f"bench/ holds {lines} lines; retire or fold scripts (bench/README.md)"


def test_no_bench_function_is_over_80_lines():
    wrong = [
        f"{path.name}: {w}" for path in sorted(BENCH.rglob("*.py")) for w in long_functions(path.read_text("utf-8"))
    ]
    assert wrong == []


def test_the_length_check_finds_a_long_function():
    body = "".join(f"    x{i} = {i}\n" for i in range(85))
    assert long_functions(f"def short():\n    return 1\n\n\ndef long():\n{body}") == ["long: 86 lines"]
