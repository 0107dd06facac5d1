"""docs/python.md's "Your own objective" code block runs as written and trains the model."""

from __future__ import annotations

from doc_blocks import DOCS, run_python_block


def test_own_objective_block_runs(capsys):
    namespace = run_python_block("Your own objective", DOCS / "python.md")
    mrr = float(capsys.readouterr().out.strip().splitlines()[-1])
    assert 0.05 < mrr <= 1.0  # learned: a random ranking of 2,000 entities gives about 0.004
    model = namespace["model"]
    assert type(model.objective).__name__ == "MarginRanking"
    assert model.optimizer.iterations.numpy() == 100  # 2 epochs x 50 steps
