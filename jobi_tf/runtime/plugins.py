"""Folders of plug-ins: a scorer, optimizer, loss, regularizer or negative draw is one module, named by its file.

``jobi_tf/losses/sampled_bce.py`` is the loss ``sampled-bce``; dropping a module into the
folder adds the name to its flag (``--loss``), ``config.json`` and `jobi_tf.api` at once, with
no registry to edit. A module is a plug-in when it binds its class to the kind's attribute
(``LOSS``, ``REGULARIZER``, ``SCORER``, ``OPTIMIZER``, ``DISTRIBUTION``: `KINDS`); other modules of the folder
(``_sparse.py``) are helpers. The class may list in ``options`` the settings it
takes as constructor keywords, and may refuse a run in a ``check(cfg)`` classmethod.

Why names come from file names: the config layer and ``jobi-tf train --help`` need the
choices without importing TensorFlow, which every plug-in imports; reading a folder's
sources costs a few milliseconds, and a plug-in is imported only when a run asks for it.

A new kind is one `Kind` entry in `KINDS` and a folder (the regimes may become one).
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import importlib
import inspect
import pkgutil
from pathlib import Path
from typing import Any

from jobi_tf.runtime.errors import ConfigError

__all__ = ["Kind", "KINDS", "Front", "names", "load", "classes", "misplaced", "check", "check_all", "about"]

_ROOT = Path(__file__).resolve().parents[1]  # jobi_tf/


@dataclasses.dataclass(frozen=True)
class Kind:
    """Where the plug-ins of a kind live and how a run chooses one.

    Args:
        folder: the package under ``jobi_tf/``, as a path (``"models/scorers"``).
        attribute: the name each plug-in module binds its class to (``"SCORER"``).
        field: the `jobi_tf.config.RunConfig` field holding a run's choice, as
            ``"section.field"`` (``"model.model"``); None for a kind no flag chooses.
    """

    folder: str
    attribute: str
    field: str | None = None

    @property
    def package(self) -> str:
        return "jobi_tf." + self.folder.replace("/", ".")


#: Every kind of plug-in, in the order `check_all` checks a run's choices.
KINDS: dict[str, Kind] = {
    "loss": Kind("losses", "LOSS", "train.loss"),
    "regularizer": Kind("regularizers", "REGULARIZER", "train.regularizer"),
    "scorer": Kind("models/scorers", "SCORER", "model.model"),
    "optimizer": Kind("optimizers", "OPTIMIZER", "train.optimizer"),
    "negatives": Kind("sampling/distributions", "DISTRIBUTION", "sampler.negative_distribution"),
    "regime": Kind("regimes", "REGIME"),  # no flag: the loss names its regime
}


def names(kind: str) -> tuple[str, ...]:
    """The plug-ins of a kind, sorted: module names with ``-`` for ``_``, of the modules that
    bind the kind's attribute (those whose name starts with ``_`` are never read)."""
    folder = _ROOT / KINDS[kind].folder
    found = [m.name for m in pkgutil.iter_modules([str(folder)]) if not (m.ispkg or m.name.startswith("_"))]
    return tuple(sorted(n.replace("_", "-") for n in found if _binds(folder / f"{n}.py", KINDS[kind].attribute)))


@functools.cache
def _binds(path: Path, attribute: str) -> bool:
    """Whether the module at ``path`` assigns ``attribute`` at its top level (read, not imported)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    targets = [t for node in tree.body if isinstance(node, (ast.Assign, ast.AnnAssign)) for t in _targets(node)]
    return any(isinstance(t, ast.Name) and t.id == attribute for t in targets)


def _targets(node: ast.Assign | ast.AnnAssign) -> list[ast.expr]:
    return node.targets if isinstance(node, ast.Assign) else [node.target]


def load(kind: str, name: str) -> type:
    """The class of plug-in ``name`` (its module is imported now).

    Raises:
        ValueError: ``name`` is not one of `names` (the message lists them).
    """
    if name not in names(kind):
        raise ValueError(f"{kind} must be one of {list(names(kind))}. Received: {kind}={name!r}")
    module = importlib.import_module(f"{KINDS[kind].package}.{name.replace('-', '_')}")
    return getattr(module, KINDS[kind].attribute)


def classes(kind: str) -> dict[str, type]:
    """Every plug-in of a kind by name (each module is imported now)."""
    return {name: load(kind, name) for name in names(kind)}


def misplaced(kind: str, name: str, settings: dict[str, Any]) -> tuple[str, list[str]] | None:
    """The first of ``settings`` that plug-in ``name`` does not take although it is moved
    from its off value, with the plug-ins that take it; None when all is well.

    A setting's off value is the default of the constructor keyword of the plug-ins that
    take it (``label_smoothing=0.0``), so "set but unused" needs no table of its own.
    """
    chosen = load(kind, name)
    for option, (takers, off) in _options(kind).items():
        if option not in _options_of(chosen) and option in settings and settings[option] != off:
            return option, takers
    return None


def check(kind: str, cfg: Any) -> None:
    """The choice of a kind in a `jobi_tf.config.RunConfig` (its `Kind.field`; not imported
    here: the config imports this module): refuse a setting of the same config section moved
    from its off value that the choice does not take (``--label-smoothing`` with sampled
    negatives), then what the chosen plug-in refuses itself (its ``check``, if any)."""
    section, field = KINDS[kind].field.split(".")
    name = getattr(getattr(cfg, section), field)
    if name not in names(kind):  # a choice the run resolves when it starts (``--optimizer auto``)
        return
    wrong = misplaced(kind, name, dataclasses.asdict(getattr(cfg, section)))
    if wrong:
        option, takers = wrong
        raise ConfigError(option, f"needs --{field} {' or '.join(takers)}")
    own = getattr(load(kind, name), "check", None)
    if own is not None:
        own(cfg)


def check_all(cfg: Any) -> None:
    """`check` of every kind a run chooses by a flag, in the order of `KINDS`."""
    for kind, spec in KINDS.items():
        if spec.field is not None:
            check(kind, cfg)


def _options_of(cls: type) -> tuple[str, ...]:
    return tuple(getattr(cls, "options", ()))


def _options(kind: str) -> dict[str, tuple[list[str], Any]]:
    found: dict[str, tuple[list[str], Any]] = {}
    for name, cls in classes(kind).items():
        for option in _options_of(cls):
            off = inspect.signature(cls).parameters[option].default
            found.setdefault(option, ([], off))[0].append(name)
    return found


def about(kind: str) -> str:
    """``"name: summary; ..."`` of every plug-in of a kind, from the first line of each
    module's docstring (read from the file, without importing it), for ``--help``."""
    folder = _ROOT / KINDS[kind].folder
    parts = []
    for name in names(kind):
        source = (folder / f"{name.replace('-', '_')}.py").read_text(encoding="utf-8")
        doc = ast.get_docstring(ast.parse(source)) or ""
        line = doc.splitlines()[0].rstrip(".") if doc else name
        parts.append(f"{name}: {line[:1].lower()}{line[1:]}")
    return "; ".join(parts) + "."


@dataclasses.dataclass(frozen=True)
class Front:
    """What a plug-in folder's ``__init__`` offers its callers, for one kind: the choices, a
    class by name, every class, a run's choice checked, and a plug-in built from settings.
    Each folder binds these (``names = FRONT.names``) instead of writing them out again."""

    kind: str

    def names(self) -> tuple[str, ...]:
        """The choices of the kind's flag: the folder's plug-in modules (`names`)."""
        return names(self.kind)

    def load(self, name: str) -> type:
        """The class of plug-in ``name`` (`load`)."""
        return load(self.kind, name)

    def classes(self) -> dict[str, type]:
        """Every plug-in class by name (`classes`)."""
        return classes(self.kind)

    def check(self, cfg: Any) -> None:
        """The run's choice of this kind, checked (`check`)."""
        check(self.kind, cfg)

    def build(self, name: str, **settings: Any) -> Any:
        """Plug-in ``name`` made with the ``settings`` its class lists in ``options`` (the
        others dropped)."""
        cls = load(self.kind, name)
        return cls(**{k: v for k, v in settings.items() if k in _options_of(cls)})
