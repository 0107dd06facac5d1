"""README's "Your own objective" code block runs as written and trains the model."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_objective_block_runs(capsys):
    section = README.read_text(encoding="utf-8").split("## Your own objective", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    namespace: dict = {"__name__": "readme"}
    exec(compile(code, str(README), "exec"), namespace)
    mrr = float(capsys.readouterr().out.strip().splitlines()[-1])
    assert 0.05 < mrr <= 1.0  # learned: a random ranking of 2,000 entities gives about 0.004
    model = namespace["model"]
    assert type(model.objective).__name__ == "MarginRanking"
    assert model.optimizer.iterations.numpy() == 100  # 2 epochs x 50 steps
