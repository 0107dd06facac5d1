"""``jobi-tf train --help`` lists its options section by section with the ranges the config checks,
and each range is the one its section's check enforces (one declaration, `Bounds`)."""

from __future__ import annotations

import dataclasses
import math
import re

import pytest
from click.testing import CliRunner
from jobi_tf.cli.main import main as cli
from jobi_tf.cli.options import SECTION_TITLES, TRAIN_SECTIONS

from jobi_tf.config import SECTIONS
from jobi_tf.config.fields import flag_name
from jobi_tf.runtime.errors import ConfigError


def _bounded() -> list[tuple[str, dataclasses.Field]]:
    return [
        (name, f) for name in TRAIN_SECTIONS for f in dataclasses.fields(SECTIONS[name]) if f.metadata.get("bounds")
    ]


def test_train_help_lists_the_options_by_section_with_their_ranges():
    text = CliRunner().invoke(cli, ["train", "--help"], terminal_width=200).output
    headings = [line for line in text.splitlines() if line.endswith(" options:")]
    assert headings == [f"{SECTION_TITLES[s]} options:" for s in (None, *TRAIN_SECTIONS)]
    sampler = text.split("Negatives and batches options:")[1].split("Model options:")[0]
    assert "--neg INTEGER" in sampler and "--lr" not in sampler
    assert "Range: a number in [0, 1]." in sampler.split("  --p FLOAT")[1].split("\n  --")[0]
    assert len(_bounded()) >= 25
    options = text.split("Run options:", 1)[1]
    for section, field in _bounded():
        entry = re.search(rf"^  {flag_name(SECTIONS[section], field.name)}\b.*?(?=^  -|\Z)", options, re.M | re.S)
        assert f"Range: {field.metadata['bounds'].words()}." in " ".join(entry.group(0).split()), field.name


@pytest.mark.parametrize("section, field", _bounded(), ids=lambda x: getattr(x, "name", x))
def test_each_range_is_what_the_section_refuses(section, field):
    bounds = field.metadata["bounds"]
    below = bounds.low if bounds.open_low else (bounds.low - 1 if bounds.integer else math.nextafter(bounds.low, -1))
    with pytest.raises(ConfigError, match=flag_name(SECTIONS[section], field.name)):
        SECTIONS[section](**{field.name: below})
    if bounds.high is not None:
        with pytest.raises(ConfigError, match=flag_name(SECTIONS[section], field.name)):
            SECTIONS[section](**{field.name: math.nextafter(bounds.high, 2)})
