"""The flag table of docs/training-options.md names real ``jobi-tf train`` flags with their real defaults."""

from __future__ import annotations

import re

import click
from doc_blocks import DOCS
from jobi_tf.cli.train import train

PAGE = DOCS / "training-options.md"


def _table() -> list[tuple[list[str], list[str]]]:
    text = PAGE.read_text(encoding="utf-8")
    rows = re.search(r"\| flag \| default \| meaning \|\n\|[-|]+\|\n((?:\|.*\|\n)+)", text).group(1)
    table = []
    for row in rows.splitlines():
        flags, defaults = (cell.strip() for cell in row.strip("|").split("|")[:2])
        names = [f.strip("`").split()[0] for f in flags.split(", ")]
        table.append((names, [d.strip().strip("`") for d in defaults.split(", ")]))
    return table


def _shown(option: click.Option) -> str:
    """The default as the table writes it: off/on, a number, a string, or the name ``--help``
    shows for a default chosen when the run starts (``auto``)."""
    if option.is_flag:
        return "on" if option.default else "off"
    if isinstance(option.show_default, str):
        return option.show_default
    return str(option.default)


def test_flag_table_matches_train_help():
    options = {decl: p for p in train.params if isinstance(p, click.Option) for decl in p.opts}
    table = _table()
    assert len(table) >= 15  # the table was found
    for names, defaults in table:
        assert len(names) == len(defaults), names
        for name, default in zip(names, defaults, strict=True):
            name = name.split("/")[0]
            assert name in options, f"{PAGE.name} names {name}, which jobi-tf train does not have"
            if name == "--out":
                continue  # its default is computed from the run's settings
            shown = _shown(options[name])
            same = shown == default or (_number(shown) is not None and _number(shown) == _number(default))
            assert same, f"{PAGE.name}: {name} defaults to {default}; jobi-tf train --help: {shown}"


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None
