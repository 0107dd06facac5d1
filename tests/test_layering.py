"""The library's modules import each other without cycles, and its stage folders only downwards,
function-local and type-only imports included."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: Source folder of each installed package (pyproject.toml's package-dir).
PACKAGES = {"jobi_tf": ROOT / "jobi_tf", "jobi_tf.cli": ROOT / "cli", "jobi_tf.serving": ROOT / "serving"}
#: `jobi_tf/`'s stage folders, floor by floor from the ground up (docs/extending.md, "Stages"):
#: a folder imports only folders on the floors below its own.
STAGES = (
    ("runtime",),
    ("data",),
    ("config",),
    ("datasets", "contracts"),
    ("optimizers", "regularizers", "losses", "growth"),
    ("models",),
    ("sampling", "evaluation"),
    ("regimes",),
    ("distributed", "export"),
    ("training",),
    ("planning",),
    ("api",),
)


def _modules() -> dict[str, Path]:
    found = {}
    for package, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join([package, *parts])] = path
    return found


def _imports(path: Path, modules: dict[str, Path], name: str | None = None) -> set[str]:
    """Library modules ``path`` (module ``name``) imports anywhere, ``if TYPE_CHECKING:`` blocks
    included (a cycle through type hints is still two modules that need each other): absolute and
    relative imports, and ``importlib.import_module`` / ``__import__`` of a literal name."""
    if name is None:
        name = next(m for m, p in modules.items() if p == path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # `from ..training import x` in jobi_tf.models.y: jobi_tf.training
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            for alias in node.names:  # `from pkg import module` imports the module, else pkg itself
                submodule = f"{base}.{alias.name}"
                targets.add(submodule if submodule in modules else base)
        elif isinstance(node, ast.Call) and _call_name(node) in ("import_module", "__import__") and node.args:
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                targets.add(first.value)
    return {t for t in targets if t in modules}


def _call_name(node: ast.Call) -> str | None:
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(path, modules, name) - {name} for name, path in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return found


def test_no_import_cycle_among_the_library_modules():
    graph = _graph()
    assert len(graph) > 30 and "jobi_tf.training.trainer" in graph["jobi_tf.api"]  # the walk sees the library
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_cycles():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_data_sits_below_datasets():
    """`jobi_tf.datasets` (TFDS builders) reads files through `jobi_tf.data`, never the reverse."""
    graph = _graph()
    upward = {(m, t) for m, ts in graph.items() if m.startswith("jobi_tf.data.") for t in ts if "datasets" in t}
    assert upward == set()


#: Above the library's stages: the serving clients (they talk to servers, the CLI calls them),
#: then the CLI. The serving contract, the signatures' names an export writes and the clients
#: read, depends on nothing and sits on the ground floor (docs/extending.md).
TOP = ("jobi_tf.serving", "jobi_tf.cli")
GROUND = ("jobi_tf.serving.contract",)


def _floors() -> dict[str, int]:
    return {folder: floor for floor, folders in enumerate(STAGES) for folder in folders}


def _floor(module: str) -> tuple[str, int] | None:
    """``(place, floor)`` of a library module: its stage folder's (``jobi_tf.models.scorers.complex``
    → ``models``), the serving clients' and the CLI's above them, the package itself
    (``from jobi_tf import train``) just above the stages; None for a stage folder's own
    ``__init__``-less top (``jobi_tf.models`` is the models stage)."""
    floors = _floors()
    if module in GROUND:
        return module, -1
    for floor, place in enumerate(TOP, start=len(STAGES) + 1):
        if module == place or module.startswith(place + "."):
            return place, floor
    if module == "jobi_tf":
        return module, len(STAGES)
    parts = module.split(".")
    return (parts[1], floors[parts[1]]) if len(parts) >= 2 and parts[1] in floors else None


def _upward(graph: dict[str, set[str]]) -> list[str]:
    """Every import of a place on the same floor or above the importer's, as ``a (floor) -> b (floor)``
    (imports inside one stage folder, or inside the CLI or the clients, are that place's own)."""
    found = []
    for module, targets in sorted(graph.items()):
        mine = _floor(module)
        if mine is None or module == "jobi_tf":
            continue
        for target in sorted(targets):
            other = _floor(target)
            if other is None or other[0] == mine[0]:
                continue
            if other[1] >= mine[1]:
                found.append(f"{module} ({mine[0]}, floor {mine[1] + 1}) -> {target} (floor {other[1] + 1})")
    return found


def test_every_stage_folder_has_its_floor():
    """`STAGES` lists each sub-package of `jobi_tf` once: a new folder has to say where it stands."""
    listed = [folder for folders in STAGES for folder in folders]
    found = {p.name for p in (ROOT / "jobi_tf").iterdir() if (p / "__init__.py").exists()}
    assert len(listed) == len(set(listed)) and set(listed) == found


def test_stages_only_look_down():
    """A stage folder imports only folders below it (function-local and type-only imports too),
    so each stage can be read, tested and replaced knowing only what is under it."""
    graph = _graph()
    assert "jobi_tf.contracts.objectives" in graph["jobi_tf.models.jobi"]  # the walk sees the library
    assert _upward(graph) == []


def test_the_stage_check_finds_an_upward_import():
    graph = {
        "jobi_tf.models.jobi": {"jobi_tf.runtime.errors", "jobi_tf.training.checkpoints"},
        "jobi_tf.data.x": {"jobi_tf"},
    }
    assert _upward(graph) == [
        "jobi_tf.data.x (data, floor 2) -> jobi_tf (floor 13)",
        "jobi_tf.models.jobi (models, floor 6) -> jobi_tf.training.checkpoints (floor 10)",
    ]


#: Each way a module could import upward, as a line of source in ``module`` (issue 81's list).
UPWARD_IMPORTS = {
    "a relative import": ("jobi_tf.models.fake", "from ..training import checkpoints"),
    "import_module": ("jobi_tf.models.fake", 'importlib.import_module("jobi_tf.training.checkpoints")'),
    "the CLI from a stage": ("jobi_tf.models.fake", "from jobi_tf.cli import options"),
    "a serving client from a stage": ("jobi_tf.data.fake", "from jobi_tf.serving import client"),
    "a stage's __init__ relative import": ("jobi_tf.models", "from ..training import checkpoints"),
}


@pytest.mark.parametrize("kind", UPWARD_IMPORTS)
def test_each_kind_of_upward_import_is_found(tmp_path, kind):
    module, line = UPWARD_IMPORTS[kind]
    path = tmp_path / ("__init__.py" if module == "jobi_tf.models" else "fake.py")
    path.write_text(f"import importlib\n\n\ndef later():\n    {line}\n", encoding="utf-8")
    modules = {**_modules(), module: path}
    imports = _imports(path, modules, module)
    assert imports and _upward({module: imports}), imports


def test_the_serving_contract_is_below_export_and_the_clients_above_the_library():
    assert _upward({"jobi_tf.export.savedmodel": {"jobi_tf.serving.contract"}}) == []
    assert _upward({"jobi_tf.cli.predict": {"jobi_tf.serving.client", "jobi_tf.api"}}) == []
    assert _upward({"jobi_tf.serving.contract": {"jobi_tf.runtime.errors"}}) != []  # the ground floor stays bare


def test_the_cli_goes_through_the_public_api():
    """Commands train, evaluate and export through `jobi_tf.api`, as a Python user would, so
    the two cannot drift; they read the config, presets and grid specs, and talk to servers."""
    allowed = {
        "jobi_tf.api", "jobi_tf.config", "jobi_tf.evaluation.calibration", "jobi_tf.planning.grid",
        "jobi_tf.planning.presets", "jobi_tf.runtime.atomic", "jobi_tf.runtime.errors", "jobi_tf.config.runs",
        "jobi_tf.runtime.tf_settings", "jobi_tf.runtime.types", "jobi_tf.serving.batch", "jobi_tf.serving.client",
    }  # fmt: skip
    graph = _graph()
    used = {t for m, ts in graph.items() if m.startswith("jobi_tf.cli") for t in ts if not t.startswith("jobi_tf.cli")}
    assert "jobi_tf.api" in used and used <= allowed, sorted(used - allowed)


def test_run_folder_names_are_written_once():
    """The run folder's file names live in `jobi_tf.config.runs` only."""
    names = ('"config.json"', '"checkpoint.npz"', '"best.weights.npz"', '"metrics.json"')
    offenders = [
        f"{path.relative_to(ROOT)}: {name}"
        for module, path in _modules().items()
        if module != "jobi_tf.config.runs"
        for name in names
        if name in path.read_text(encoding="utf-8")
    ]
    assert offenders == []


def test_choice_lists_agree_with_their_registries():
    """The config's names (what the CLI and config.json accept) are the registries' keys."""
    from jobi_tf import losses, regularizers
    from jobi_tf.config import LOSSES, MODELS, REGULARIZERS
    from jobi_tf.contracts.objectives import Objective
    from jobi_tf.models.scorers import SCORERS
    from jobi_tf.regularizers import Regularizer

    assert set(MODELS) == set(SCORERS)
    assert LOSSES == losses.names() and {"sampled-softmax", "full-softmax", "k-vs-all"} <= set(LOSSES)
    assert REGULARIZERS == regularizers.names() and {"l2", "n3"} <= set(REGULARIZERS)
    assert all(issubclass(losses.loss_class(n), Objective) for n in LOSSES)
    assert all(issubclass(type(regularizers.get(n)), Regularizer) for n in REGULARIZERS)


def test_every_package_of_the_library_is_installed():
    """pyproject.toml lists the packages a wheel holds: a folder missing there works in an
    editable install and is absent from ``pip install .`` (a plug-in folder was, once)."""
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["packages"])
    found = {m for m, path in _modules().items() if path.name == "__init__.py"}
    assert found == listed


def test_modules_and_functions_stay_short():
    """One concept per module: none of the library's modules over 350 lines, no function over 50
    (a longer one is two concepts or two steps; split it)."""
    long_modules, long_functions = [], []
    for module, path in _modules().items():
        if not module.startswith("jobi_tf.") or module.startswith(("jobi_tf.cli", "jobi_tf.serving")):
            continue
        text = path.read_text(encoding="utf-8")
        if text.count("\n") > 350:
            long_modules.append(f"{module}: {text.count(chr(10))} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= 50:
                long_functions.append(f"{module}.{node.name}: {node.end_lineno - node.lineno + 1} lines")
    assert long_modules == [] and long_functions == []


def test_the_top_of_the_library_shows_its_stages():
    """`ls jobi_tf` is the architecture: one sub-package per stage (data, sampling, models,
    training, evaluation, export, runtime, ...) and no loose module beside them, so a new
    module has to say which stage it belongs to."""
    top = ROOT / "jobi_tf"
    loose = sorted(p.name for p in top.glob("*.py") if p.name != "__init__.py")
    stages = {p.name for p in top.iterdir() if (p / "__init__.py").exists()}
    assert loose == []
    assert {"data", "sampling", "models", "training", "evaluation", "export", "runtime"} <= stages


def test_no_library_module_names_a_raw_results_file():
    """Measured constants live in data files beside their modules (the regime rule's
    ``regime_measurements.json``), not as raw-file paths in code: a path to docs/results/ in a
    module would pin the library to a checkout's benchmark files."""
    named = [name for name, path in _modules().items() if "docs/results/" in path.read_text(encoding="utf-8")]
    assert named == []
