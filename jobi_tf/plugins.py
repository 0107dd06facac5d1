"""Folders of plug-ins: a loss or a regularizer is one module, named by its file.

``jobi_tf/losses/sampled_bce.py`` is the loss ``sampled-bce``; dropping a module into the
folder adds the name to ``--loss``, ``config.json`` and `jobi_tf.api` at once, with no
registry to edit. The module binds its class to ``LOSS`` (``REGULARIZER`` for a
regularizer); the class lists in ``options`` the settings it takes as constructor keywords.

Why names come from file names: the config layer and ``jobi-tf train --help`` need the
choices without importing TensorFlow, which every plug-in imports; listing a folder costs
nothing, and a plug-in is imported only when a run asks for it.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import pkgutil
from pathlib import Path
from typing import Any

from jobi_tf.errors import ConfigError

__all__ = ["KINDS", "names", "load", "misplaced", "check", "about"]

_ROOT = Path(__file__).resolve().parent

#: kind → (folder under jobi_tf/, the attribute each module binds its class to)
KINDS = {"loss": ("losses", "LOSS"), "regularizer": ("regularizers", "REGULARIZER"), "regime": ("regimes", "REGIME")}


def names(kind: str) -> tuple[str, ...]:
    """The plug-ins of a kind, sorted: module names with ``-`` for ``_`` (modules whose name
    starts with ``_`` are helpers, not plug-ins)."""
    found = pkgutil.iter_modules([str(_ROOT / KINDS[kind][0])])
    return tuple(sorted(m.name.replace("_", "-") for m in found if not m.name.startswith("_")))


def load(kind: str, name: str) -> type:
    """The class of plug-in ``name`` (its module is imported now).

    Raises:
        ValueError: ``name`` is not one of `names` (the message lists them).
    """
    if name not in names(kind):
        raise ValueError(f"{kind} must be one of {list(names(kind))}. Received: {kind}={name!r}")
    folder, attribute = KINDS[kind]
    return getattr(importlib.import_module(f"jobi_tf.{folder}.{name.replace('-', '_')}"), attribute)


def misplaced(kind: str, name: str, settings: dict[str, Any]) -> tuple[str, list[str]] | None:
    """The first of ``settings`` that plug-in ``name`` does not take although it is moved
    from its off value, with the plug-ins that take it; None when all is well.

    A setting's off value is the default of the constructor keyword of the plug-ins that
    take it (``label_smoothing=0.0``), so "set but unused" needs no table of its own.
    """
    chosen = load(kind, name)
    for option, (takers, off) in _options(kind).items():
        if option not in chosen.options and option in settings and settings[option] != off:
            return option, takers
    return None


def check(kind: str, cfg: Any) -> None:
    """The choice of a kind in a `jobi_tf.config.RunConfig` (``cfg.train.<kind>``; not
    imported here: the config imports this module): refuse a setting moved from its off
    value that the choice does not take (``--label-smoothing`` with sampled negatives), then
    what the chosen plug-in refuses itself (its ``check``)."""
    name = getattr(cfg.train, kind)
    wrong = misplaced(kind, name, dataclasses.asdict(cfg.train))
    if wrong:
        option, takers = wrong
        raise ConfigError(option, f"needs --{kind} {' or '.join(takers)}")
    load(kind, name).check(cfg)


def _options(kind: str) -> dict[str, tuple[list[str], Any]]:
    found: dict[str, tuple[list[str], Any]] = {}
    for name in names(kind):
        cls = load(kind, name)
        for option in cls.options:
            off = inspect.signature(cls).parameters[option].default
            found.setdefault(option, ([], off))[0].append(name)
    return found


def about(kind: str) -> str:
    """``"name: summary; ..."`` of every plug-in of a kind, from the first line of each
    module's docstring (read from the file, without importing it), for ``--help``."""
    folder = _ROOT / KINDS[kind][0]
    parts = []
    for name in names(kind):
        source = (folder / f"{name.replace('-', '_')}.py").read_text(encoding="utf-8")
        doc = ast.get_docstring(ast.parse(source)) or ""
        line = doc.splitlines()[0].rstrip(".") if doc else name
        parts.append(f"{name}: {line[:1].lower()}{line[1:]}")
    return "; ".join(parts) + "."
