"""Each stage takes its own config section, or the plan built from it, not the whole run's.

Why: when every stage took `jobi_tf.config.RunConfig`, what a stage read could only be found by
following it (``--p`` crossed 11 files), and a stage could not be built without a whole run's
settings. Now only the places that compose a run hold a `RunConfig`: the config package
itself, the API, planning (which makes configs), the regimes (which resolve settings that span
sections), growth (which compares this run with the run it grows from) and the trainer. Every
other stage takes a section (`TrainConfig`, `EvalConfig`, ...) or a plan (`BatchPlan`). A
plug-in's ``check`` is the one exception: it judges a choice against the rest of the run.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = ROOT / "jobi_tf"
#: Where a whole run's settings may be held (paths under jobi_tf/; a folder holds all below it).
COMPOSERS = ("config/", "api/", "planning/", "regimes/", "growth/", "training/trainer.py")
#: A run's sections, as `RunConfig` names them (a `BatchPlan`'s ``sampler`` is that section).
SECTIONS = {"data", "model", "train", "eval", "distribute", "export"}


def _composer(relative: str) -> bool:
    return any(relative == c or (c.endswith("/") and relative.startswith(c)) for c in COMPOSERS)


def _is_plugin_check(fn: ast.AST) -> bool:
    return (
        isinstance(fn, ast.FunctionDef)
        and fn.name == "check"
        and any(isinstance(d, ast.Name) and d.id == "classmethod" for d in fn.decorator_list)
    )


def whole_run_inputs(source: str) -> list[str]:
    """Where ``source`` takes a whole run's settings: a `RunConfig` named outside a plug-in's
    ``check``, or a function reading two or more sections off one parameter (``cfg.train.lr``
    and ``cfg.model.dim``), however the parameter is annotated."""
    tree = ast.parse(source)
    found = []
    checks = {id(node) for fn in ast.walk(tree) if _is_plugin_check(fn) for node in ast.walk(fn)}
    for node in ast.walk(tree):
        if id(node) in checks:
            continue
        named = (isinstance(node, ast.Name) and node.id == "RunConfig") or (
            isinstance(node, ast.Constant) and node.value == "RunConfig"
        )
        if named:
            found.append(f"line {node.lineno}: RunConfig")
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and id(node) not in checks:
            params = {a.arg for a in node.args.posonlyargs + node.args.args + node.args.kwonlyargs} - {"self", "cls"}
            read: dict[str, set[str]] = {}
            for inner in ast.walk(node):
                chain = inner.value if isinstance(inner, ast.Attribute) else None
                if (
                    isinstance(chain, ast.Attribute)
                    and isinstance(chain.value, ast.Name)
                    and chain.value.id in params
                    and chain.attr in SECTIONS
                ):
                    read.setdefault(chain.value.id, set()).add(chain.attr)
            found += [f"{node.name}: {p} read as {sorted(s)}" for p, s in read.items() if len(s) > 1]
    return found


def test_only_the_composers_hold_a_whole_runs_settings():
    wrong = []
    for path in sorted(LIBRARY.rglob("*.py")):
        relative = path.relative_to(LIBRARY).as_posix()
        if not _composer(relative):
            wrong += [f"jobi_tf/{relative}: {w}" for w in whole_run_inputs(path.read_text(encoding="utf-8"))]
    assert wrong == []


def test_the_check_finds_a_stage_that_takes_the_whole_run():
    annotated = "from jobi_tf.config import RunConfig\ndef build(cfg: RunConfig):\n    return cfg.train.lr\n"
    untyped = "def build(cfg):\n    return cfg.train.lr * cfg.model.dim\n"
    assert whole_run_inputs(annotated) == ["line 2: RunConfig"]  # used, not imported (type-only imports)
    assert whole_run_inputs(untyped) == ["build: cfg read as ['model', 'train']"]


def test_a_section_a_plan_and_a_plugins_check_pass():
    section = "def build(train):\n    return train.lr, train.epochs\n"
    plan = "def steps(plan):\n    return plan.sampler.batch_size\n"
    plugin = (
        "class Rotate:\n    @classmethod\n    def check(cls, cfg: 'RunConfig'):\n"
        "        return cfg.train.regularizer, cfg.model.dim\n"
    )
    assert whole_run_inputs(section) == whole_run_inputs(plan) == whole_run_inputs(plugin) == []
