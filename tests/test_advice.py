"""``jobi-tf advise``: the rule's bands, the budget, the step probe, the epoch's scaling, the FLOPs, the command.

No test depends on this machine's speed: the decisions are taken with a given epoch time, and
a probed step time is only checked to be a positive finite number.
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
from jobi_tf.config import with_settings
from jobi_tf.data.index import KGIndex
from jobi_tf.planning.advice import (
    MEASUREMENTS,
    ONE_VS_ALL,
    PRESET_FROM_ENTITIES,
    RULE,
    SAMPLED_JOBI,
    advise,
    epoch_flops,
    one_vs_all_config,
    rule_row,
)
from jobi_tf.planning.regime_rule import MEASURED
from jobi_tf.planning.step_probe import probe_steps, scale_to_epoch, stand_in_graph
from jobi_tf.runtime.errors import ConfigError

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


@pytest.mark.parametrize(("per_entity", "epochs"), [(18.7, 2), (10.0, 2), (9.999, 4), (2.0, 4), (1.3, 4), (0.0, 4)])
def test_the_rules_bands(per_entity, epochs):
    assert rule_row(per_entity).epochs == epochs


def test_the_rule_is_what_its_measurements_say():
    """Each band holds its measurements, every measurement is in one band, and a band budgets
    the most epochs any graph measured in it needed."""
    assert [row.min_triples_per_entity for row in RULE] == sorted(
        (r.min_triples_per_entity for r in RULE), reverse=True
    )
    assert RULE[-1].min_triples_per_entity == 0
    assert sorted(m.graph for row in RULE for m in row.measured_on) == sorted(m.graph for m in MEASUREMENTS)
    for row in RULE:
        assert row.measured_on, row
        assert all(rule_row(m.triples_per_entity) is row for m in row.measured_on)
        assert row.epochs == max(m.epochs for m in row.measured_on), row


@pytest.mark.parametrize("measurement", MEASUREMENTS, ids=lambda m: m.graph)
def test_a_measurements_epochs_are_its_raw_files(measurement):
    """The first 1-vs-all epoch whose validation MRR passed sampled JoBi's best, read from the
    raw files the measurement names."""
    folder, one_vs_all, jobi = re.fullmatch(r"(\S+)/(\S+\.json) against (\S+\.json)", measurement.raw).groups()
    paths = [ROOT / MEASURED["raw_folder"] / folder / name for name in (one_vs_all, jobi)]
    if not all(p.is_file() for p in paths):
        pytest.skip(f"{[str(p.relative_to(ROOT)) for p in paths if not p.is_file()]} not in this checkout")
    curve, jobi_curve = (json.loads(p.read_text(encoding="utf-8"))["curve"] for p in paths)
    best = max(point["mrr"] for point in jobi_curve)
    passed = next(point["epoch"] for point in curve if point["mrr"] > best)
    assert passed == measurement.epochs


def test_the_docs_table_is_the_measurements():
    text = (DOCS / "decision-guide.md").read_text(encoding="utf-8")
    header = "| graph | training triples per entity | 1-vs-all epochs to pass sampled JoBi |"
    rows = text.split(header, 1)[1].split("\n\n", 1)[0].splitlines()[2:]  # the header's rest, the separator
    cells = [[c.strip() for c in row.strip("|").split("|")] for row in rows]
    assert [(c[0], float(c[1])) for c in cells] == [(m.graph, m.triples_per_entity) for m in MEASUREMENTS]
    for c, m in zip(cells, MEASUREMENTS, strict=True):
        assert c[2].split()[0] == str(m.epochs), c


def test_one_vs_all_when_its_epochs_fit_and_sampled_jobi_when_not():
    index = _index(100, 1000)  # 10 triples per entity: 2 epochs
    fits = advise(index, 60 / 3600 * 1.001, epoch_seconds=30.0)  # 2 epochs of 30 s in 60.06 s
    assert (fits.rule.epochs, fits.epoch_seconds, fits.probe) == (2, 30.0, None)
    assert fits.regime == ONE_VS_ALL
    assert fits.command == "jobi-tf train --data-dir GRAPH --preset kbc-fast --matmul-dtype auto"
    over = advise(index, 60 / 3600 * 0.999, epoch_seconds=30.0)
    assert over.regime == SAMPLED_JOBI
    assert over.command == "jobi-tf train --data-dir GRAPH --preset large-graph --joint --p 0.3"
    assert "exceed the budget" in over.reason and "fit in the budget" in fits.reason
    assert dataclasses.replace(over, epoch_seconds=29.9).regime == ONE_VS_ALL  # decided from the fields


def test_a_dense_graph_of_a_hundred_thousand_entities_gets_the_preset_whatever_the_budget():
    small = advise(_index(100, 1000), 1000.0, epoch_seconds=30.0)  # 10 per entity, epochs that fit easily
    assert small.regime == ONE_VS_ALL and not small.preset_wins
    big = dataclasses.replace(small, num_entities=PRESET_FROM_ENTITIES, num_triples=10 * PRESET_FROM_ENTITIES)
    below = dataclasses.replace(big, num_entities=PRESET_FROM_ENTITIES - 1)
    assert big.preset_wins and big.regime == SAMPLED_JOBI and "--preset large-graph --joint --p 0.3" in big.command
    assert "108,943 entities" in big.reason and "fit in the budget of 1000 h" in big.reason
    assert not below.preset_wins and below.regime == ONE_VS_ALL
    sparse = dataclasses.replace(big, num_triples=9 * PRESET_FROM_ENTITIES)  # 9 per entity: the rule's other row
    assert not sparse.preset_wins and sparse.regime == ONE_VS_ALL and "rule's row below 10" in sparse.reason
    assert big.to_dict()["preset_wins"] is True


def test_a_long_sampled_epoch_validates_a_sample_four_times_an_epoch():
    """19.3M triples (1.85M entities): 19,312 steps of 1,000; the command validates 1,000
    triples every 5,000 steps. Below 8,000 steps an epoch: once an epoch, the whole set."""
    big = dataclasses.replace(advise(_index(100, 1000), 1e-3, epoch_seconds=30.0), num_triples=19_311_521)
    assert big.regime == SAMPLED_JOBI
    assert big.command.endswith("--joint --p 0.3 --valid-sample 1000 --eval-every-steps 5000 --valid-dtype auto")
    assert "--valid-sample" not in dataclasses.replace(big, num_triples=7_999_000).command


def test_the_sparse_band_budgets_four_epochs_and_names_its_graphs():
    sparse = advise(_index(100, 130), 121 / 3600, epoch_seconds=30.0)  # 1.3 per entity: 4 epochs of 30 s in 121 s
    assert sparse.rule.epochs == 4 and sparse.regime == ONE_VS_ALL
    assert advise(_index(100, 130), 119 / 3600, epoch_seconds=30.0).regime == SAMPLED_JOBI
    assert "is in the rule's row below 10 (measured on WN18RR (2.1), " in sparse.reason
    assert "WN18RR thinned to 50% (1.3)" in sparse.reason and "\n" not in sparse.reason
    dense = advise(_index(100, 1000), 1.0, epoch_seconds=30.0)
    assert "is in the rule's row from 10 (measured on FB15k-237 (18.7), " in dense.reason


def test_another_rank_is_in_the_command_and_the_width():
    advice = advise(_index(100, 1000), 1.0, rank=50, epoch_seconds=1.0)
    assert advice.width == 100 and advice.command.endswith("--matmul-dtype auto --dim 50")


def test_the_effective_rate_is_the_epochs_products_over_its_seconds():
    advice = advise(_index(100, 1000), 1.0, epoch_seconds=2.0)
    # 12 x 1000 triples x 100 entities x 400 floats = 4.8e8 FLOPs, over 2 s
    assert advice.flops_per_epoch == 480_000_000 and advice.effective_rate == pytest.approx(2.4e8)
    assert advice.steps_per_epoch == 2  # 1000 triples in batches of kbc-fast's 500


def test_an_epoch_is_its_steps_times_a_step_scaled_to_the_entities():
    """FB15k-237's sizes with a step of 0.3 s timed against 14,541 entities, then against a
    stand-in of 10,000: 544 full batches of 500 (the remainder dropped, as training drops it)."""
    assert scale_to_epoch(0.3, 500, 14_541, 272_115, 14_541) == pytest.approx(544 * 0.3)  # 163.2 s
    # 544 steps x 0.3 s x 14,541 / 10,000 = 237.31 s
    assert scale_to_epoch(0.3, 500, 10_000, 272_115, 14_541) == pytest.approx(237.30912)
    # a graph of 2M entities probed on 20,000: 100x the stand-in's step
    assert scale_to_epoch(0.5, 500, 20_000, 1_000_000, 2_000_000) == pytest.approx(2000 * 0.5 * 100)
    assert scale_to_epoch(0.1, 500, 10, 120, 10) == pytest.approx(0.1)  # fewer triples than a batch: one step


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


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_probe_times_real_training_steps_on_a_stand_in_graph(dtype):
    cfg = with_settings(one_vs_all_config(rank=4, matmul_dtype=dtype), {"batch_size": 8})
    timing = probe_steps(cfg, 12, 3, warmup=1, steps=3)
    assert math.isfinite(timing.seconds_per_step) and timing.seconds_per_step > 0
    assert len(timing.step_seconds) == 3 and timing.seconds_per_step == sorted(timing.step_seconds)[1]
    assert (timing.num_entities, timing.num_relations, timing.batch_size) == (12, 3, 8)
    assert (timing.matmul_dtype, timing.jit_compile) == (dtype, False)
    assert timing.epoch_seconds(80, 24) == pytest.approx(10 * timing.seconds_per_step * 2)


def test_the_stand_in_graph_has_the_sizes_asked():
    index = stand_in_graph(50, 7, 400)
    assert (index.num_entities, index.num_relations, len(index.train)) == (50, 7, 400)
    assert index.train.dtype == np.int32 and index.train[:, [0, 2]].max() < 50 and index.train[:, 1].max() < 7


def test_the_probe_trains_what_the_recommended_command_trains():
    """`one_vs_all_config` is ``jobi-tf train --preset kbc-fast --matmul-dtype auto``'s config
    (``auto`` resolved), for the dataset's own preset settings too."""
    from jobi_tf.cli.train import config_from_command

    for dataset in ("fb15k-237", "wn18rr"):
        given = config_from_command(["--dataset", dataset, "--preset", "kbc-fast", "--matmul-dtype", "auto"])
        probed = one_vs_all_config(200, "auto", dataset)
        assert probed.train.matmul_dtype in ("float32", "bfloat16")
        assert dataclasses.replace(probed.train, matmul_dtype="auto") == given.train
        assert (probed.model, probed.sampler, probed.seed) == (given.model, given.sampler, given.seed)
    assert one_vs_all_config(50, "float32").model.dim == 50


def test_python_api_names_the_argument(tiny_splits):
    with pytest.raises(ConfigError, match=r"^hours: must be a finite number > 0"):
        jobi_tf.advise(tiny_splits, hours=0)
    with pytest.raises(ConfigError, match=r"^epoch_seconds: must be a finite number > 0"):
        jobi_tf.advise(tiny_splits, hours=1, epoch_seconds=float("inf"))
    advice = jobi_tf.advise(tiny_splits, hours=1, epoch_seconds=1e-3)
    assert advice.regime == ONE_VS_ALL and advice.rule.epochs == 4  # 3 triples per entity
    assert json.loads(json.dumps(advice.to_dict()))["probe"] is None


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
    assert lines[1].startswith("this CPU: a kbc-fast training step takes ")
    assert lines[1].endswith("on a stand-in graph of 10 entities and 2 relations")
    assert lines[2].startswith("one 1-vs-all epoch ≈ ") and "(1 step x " in lines[2]
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
    probe = advice["probe"]
    assert advice["epoch_seconds"] > 0 and probe["seconds_per_step"] > 0 and probe["num_entities"] == 10
    assert probe["num_relations"] == 2 and probe["batch_size"] == 500 and len(probe["step_seconds"]) == 5
    assert advice["effective_rate"] == pytest.approx(advice["flops_per_epoch"] / advice["epoch_seconds"])
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
