"""``jobi-tf advise``: the rule's bands, the budget, the FLOP counts, the rate measurement and the command.

No test depends on this machine's speed: the decisions are taken with a given rate, and the
measured rate is only checked to be a positive finite number.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from doc_blocks import DOCS, ROOT
from jobi_tf.cli.main import main

import jobi_tf
from jobi_tf.data.index import KGIndex
from jobi_tf.runtime.errors import ConfigError
from jobi_tf.training.advice import (
    MEASUREMENTS,
    ONE_VS_ALL,
    RULE,
    SAMPLED_JOBI,
    advise,
    epoch_flops,
    measure_rate,
    product_flops,
    rule_row,
)

WIDTH = 400  # ComplEx rank 200: 200 real + 200 imaginary floats per row


def _index(num_entities: int, num_triples: int, seed: int = 0) -> KGIndex:
    """A graph of exactly ``num_triples`` training triples over ``num_entities`` entities."""
    rng = np.random.default_rng(seed)
    ids = np.stack(
        [
            rng.integers(0, num_entities, num_triples),
            rng.integers(0, 3, num_triples),
            rng.integers(0, num_entities, num_triples),
        ],
        axis=1,
    )
    return KGIndex.from_ids({"train": ids, "valid": ids[:2], "test": ids[:2]}, num_entities, 3)


@pytest.mark.parametrize(
    ("per_entity", "epochs"), [(18.7, 2), (10.0, 2), (9.999, 4), (2.0, 4), (1.999, None), (1.3, None), (0.0, None)]
)
def test_the_rules_bands(per_entity, epochs):
    assert rule_row(per_entity).epochs == epochs


def test_the_rule_is_what_its_measurements_say():
    """Each band holds its measurements, every measurement is in one band, a band's epochs
    cover the epochs measured in it, and the sparse band is the one where 1-vs-all never passed."""
    assert [row.min_triples_per_entity for row in RULE] == sorted(
        (r.min_triples_per_entity for r in RULE), reverse=True
    )
    assert RULE[-1].min_triples_per_entity == 0
    assert sorted(m.graph for row in RULE for m in row.measured_on) == sorted(m.graph for m in MEASUREMENTS)
    for row in RULE:
        assert row.measured_on, row
        for m in row.measured_on:
            assert rule_row(m.triples_per_entity) is row
            if row.epochs is None:
                assert m.epochs is None
            else:
                assert m.epochs is not None and m.epochs <= row.epochs


@pytest.mark.parametrize("measurement", [m for m in MEASUREMENTS if "docs/results/" in m.source], ids=lambda m: m.graph)
def test_a_measurements_epochs_are_its_raw_files(measurement):
    """The first 1-vs-all epoch whose validation MRR passed sampled JoBi's best, read from the
    raw files the measurement names."""
    folder, one_vs_all, jobi = re.search(
        r"docs/results/(\S+)/(\S+\.json) against (\S+\.json)", measurement.source
    ).groups()
    paths = [ROOT / "docs" / "results" / folder / name for name in (one_vs_all, jobi)]
    if not all(p.is_file() for p in paths):
        pytest.skip(f"{[str(p.relative_to(ROOT)) for p in paths if not p.is_file()]} not in this checkout")
    curve, jobi_curve = (json.loads(p.read_text(encoding="utf-8"))["curve"] for p in paths)
    best = max(point["mrr"] for point in jobi_curve)
    passed = next(point["epoch"] for point in curve if point["mrr"] > best)
    assert passed == measurement.epochs


def test_the_docs_table_is_the_measurements():
    text = (DOCS / "getting-started.md").read_text(encoding="utf-8")
    header = "| graph | training triples per entity | 1-vs-all epochs to pass sampled JoBi | raw |"
    rows = text.split(header, 1)[1].split("\n\n", 1)[0].strip().splitlines()[1:]
    cells = [[c.strip() for c in row.strip("|").split("|")] for row in rows]
    assert [(c[0], float(c[1])) for c in cells] == [(m.graph, m.triples_per_entity) for m in MEASUREMENTS]
    for c, m in zip(cells, MEASUREMENTS, strict=True):
        assert c[2].split()[0] == (str(m.epochs) if m.epochs else "not"), c


def test_one_vs_all_when_its_epochs_fit_and_sampled_jobi_when_not():
    index = _index(100, 1000)  # 10 triples per entity: 2 epochs
    rate = epoch_flops(1000, 100, WIDTH) / 30.0  # an epoch takes 30 s, so 2 take 60 s
    fits = advise(index, 60 / 3600 * 1.001, rate=rate)
    assert (fits.rule.epochs, fits.epoch_seconds) == (2, pytest.approx(30.0))
    assert fits.regime == ONE_VS_ALL
    assert fits.command == "jobi-tf train --data-dir GRAPH --preset kbc-fast --matmul-dtype auto"
    over = advise(index, 60 / 3600 * 0.999, rate=rate)
    assert over.regime == SAMPLED_JOBI and over.command == "jobi-tf train --data-dir GRAPH --joint --p 0.3"
    assert "exceed the budget" in over.reason and "fit in the budget" in fits.reason
    assert dataclasses.replace(over, rate=rate * 1.01).regime == ONE_VS_ALL  # decided from the fields


def test_the_band_from_two_and_below_it():
    rate = epoch_flops(200, 100, WIDTH) / 30.0
    at_two = advise(_index(100, 200), 121 / 3600, rate=rate)  # 4 epochs of 30 s fit in 121 s
    assert at_two.rule.epochs == 4 and at_two.regime == ONE_VS_ALL
    assert advise(_index(100, 200), 119 / 3600, rate=rate).regime == SAMPLED_JOBI
    below = advise(_index(100, 199), 1000.0, rate=rate)  # any budget
    assert below.rule.epochs is None and below.regime == SAMPLED_JOBI
    assert "does not recommend 1-vs-all" in below.reason and "\n" not in below.reason


def test_another_rank_is_in_the_command_and_the_width():
    advice = advise(_index(100, 1000), 1.0, rank=50, rate=1e12)
    assert advice.width == 100 and advice.command.endswith("--matmul-dtype auto --dim 50")


def _matmul_flops(left: tuple[int, int], right: tuple[int, int]) -> int:
    (rows, inner), (inner_right, columns) = left, right
    assert inner == inner_right
    return 2 * rows * inner * columns


def test_the_epoch_count_is_its_products_batch_by_batch():
    """12·T·N·W against the products of every batch of an epoch, counted by shape: both
    queries of each triple (reciprocal relations) scored against every entity, then the
    gradients of the queries and of the entity table."""
    triples, entities, width, batch = 1234, 57, 16, 100
    queries = 2 * triples
    total = 0
    for start in range(0, queries, batch):
        b = min(batch, queries - start)
        total += _matmul_flops((b, width), (width, entities))  # scores q @ E^T
        total += _matmul_flops((b, entities), (entities, width))  # d/dq = g @ E
        total += _matmul_flops((width, b), (b, entities))  # d/dE^T = q^T @ g
    assert epoch_flops(triples, entities, width) == total
    assert product_flops(500, 14541, 400) == 6 * 500 * 14541 * 400


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_rate_is_measured_on_its_shapes(dtype):
    measured = measure_rate(8, 16, batch_size=4, dtype=dtype, calls=3)
    assert math.isfinite(measured.flops_per_second) and measured.flops_per_second > 0
    assert measured.flops_per_call == 6 * 4 * 16 * 8
    assert measured.flops_per_second == pytest.approx(measured.flops_per_call / measured.seconds_per_call)
    assert (measured.dtype, measured.calls, measured.candidates) == (dtype, 3, 16)


def test_python_api_names_the_argument(tiny_splits):
    with pytest.raises(ConfigError, match=r"^hours: must be a finite number > 0"):
        jobi_tf.advise(tiny_splits, hours=0)
    advice = jobi_tf.advise(tiny_splits, hours=1, rate=1e12)
    assert advice.regime == ONE_VS_ALL and advice.rule.epochs == 4  # 3 triples per entity; epochs of microseconds
    assert json.loads(json.dumps(advice.to_dict()))["measurement"] is None


def _folder(tmp_path: Path) -> Path:
    """10 entities, 2 relations, 120 distinct training triples: 12 per entity."""
    every = [(f"e{h}", f"r{r}", f"e{t}") for h in range(10) for r in range(2) for t in range(10) if h != t]
    folder = tmp_path / "graph"
    folder.mkdir()
    for name, rows in (("train", every[:120]), ("valid", every[120:125]), ("test", every[125:130])):
        (folder / f"{name}.txt").write_text("".join("\t".join(row) + "\n" for row in rows))
    return folder


def test_cli_prints_the_advice(tmp_path):
    folder = _folder(tmp_path)
    result = CliRunner().invoke(main, ["-q", "advise", "--data-dir", str(folder), "--hours", "1"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.strip().splitlines()
    assert lines[0] == "graph: graph: 10 entities, 2 relations, 120 training triples (12.0 per entity)"
    assert "recommendation: 1-vs-all" in lines
    assert f"command: jobi-tf train --data-dir {folder} --preset kbc-fast --matmul-dtype auto" in lines
    assert any(line.startswith("floor: ") and f"popularity_ranking.py --data-dir {folder}" in line for line in lines)


def test_cli_json(tmp_path):
    folder = _folder(tmp_path)
    result = CliRunner().invoke(main, ["-q", "advise", "--data-dir", str(folder), "--hours", "1", "--json"])
    assert result.exit_code == 0, result.output
    (line,) = result.stdout.strip().splitlines()
    advice = json.loads(line)
    assert advice["regime"] == ONE_VS_ALL and advice["rule"]["epochs"] == 2 and advice["epochs"] == 2
    assert advice["rate"] > 0 and advice["measurement"]["candidates"] == 10
    assert advice["matmul_dtype"] in ("float32", "bfloat16") and advice["num_triples"] == 120


@pytest.mark.parametrize("hours", ["0", "-1", "nan"])
def test_cli_refuses_a_budget_that_is_not_positive(tmp_path, hours):
    result = CliRunner().invoke(main, ["advise", "--data-dir", str(_folder(tmp_path)), "--hours", hours])
    assert result.exit_code == 2
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "--hours" in errors[0]


def test_cli_missing_folder_is_the_loaders_error(tmp_path):
    result = CliRunner().invoke(main, ["advise", "--data-dir", str(tmp_path / "nowhere"), "--hours", "1"])
    assert result.exit_code == 1
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert errors == [f"Error: {tmp_path / 'nowhere'}: data folder not found (expected train.txt, valid.txt, test.txt)"]
