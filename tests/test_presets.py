"""Named recipes: a preset's settings apply, explicit settings win, from the CLI and from Python."""

from __future__ import annotations

import dataclasses
import json

import pytest
from click.testing import CliRunner
from jobi_tf.cli.main import main
from tiny_cli import tiny_flags

import jobi_tf
from jobi_tf.config import RunConfig
from jobi_tf.planning.presets import PRESETS, apply_preset
from jobi_tf.runtime.errors import ConfigError


@pytest.mark.parametrize("name", list(PRESETS))
def test_every_preset_names_real_settings_and_applies_them(name):
    cfg = apply_preset(RunConfig(), name)
    flat = {k: v for section in cfg.to_dict().values() if isinstance(section, dict) for k, v in section.items()}
    for key, value in PRESETS[name].settings.items():
        assert flat[key] == value, key


def test_explicit_settings_win_over_the_preset():
    cfg = apply_preset(RunConfig(), "kbc", explicit={"dim", "lr"})
    assert cfg.model.dim == RunConfig().model.dim and cfg.train.lr == RunConfig().train.lr
    assert cfg.train.loss == "full-softmax" and cfg.model.reciprocal and cfg.train.optimizer == "adagrad"
    with pytest.raises(ConfigError, match="--preset: must be one of paper, kbc, kbc-rp, kbc-fast, large-graph"):
        apply_preset(RunConfig(), "fast")


def test_a_dataset_gets_the_presets_settings_for_it():
    # kbc and Chen et al. tune WN18RR apart from FB15k-237: batch 100 rows (50 triples), a stronger N3.
    wn = apply_preset(RunConfig(), "kbc-rp", dataset="WN18RR")
    fb = apply_preset(RunConfig(), "kbc-rp", dataset="fb15k-237")
    assert (wn.sampler.batch_size, wn.train.regularization, wn.train.relation_prediction) == (50, 0.2, 0.05)
    assert (fb.sampler.batch_size, fb.train.regularization, fb.train.relation_prediction) == (500, 0.1, 4.0)
    assert wn.model.dim == fb.model.dim == 1000 and wn.train.loss == "full-softmax"
    assert (wn.train.relation_penalty, fb.train.relation_penalty) == (0.02, 1.0)  # WN18RR's relation rows collapse
    assert apply_preset(RunConfig(), "kbc", dataset="wn18rr").train.relation_penalty == 0.0  # measured one epoch only
    # kbc-fast starts Adagrad from 0, except on WN18RR, whose damped start measured better.
    starts = {
        d: apply_preset(RunConfig(), "kbc-fast", dataset=d).train.initial_accumulator_value for d in ("wn18rr", "g")
    }
    assert starts == {"wn18rr": 1e-10, "g": 0.0}
    # Explicit settings still win over the dataset's.
    mine = apply_preset(RunConfig(), "kbc", explicit={"batch_size"}, dataset="wn18rr")
    assert mine.sampler.batch_size == RunConfig().sampler.batch_size and mine.train.regularization == 0.2


def test_kbc_fast_is_the_winning_cell_of_the_committed_search():
    """The preset and bench/grids/fb15k-237-rp-search.json must not drift apart: the preset with
    the search's bfloat16 products and Adagrad start (1e-10; the preset's 0 came later,
    docs/studies/adagrad-start.md) is the config of the cell that won it (docs/results.md)."""
    from pathlib import Path

    from jobi_tf.planning.grid import load_spec

    spec = load_spec(Path(__file__).parents[1] / "bench" / "grids" / "fb15k-237-rp-search.json")
    (winner,) = [c for c in spec.cells() if c.name == "relation_prediction-0_regularization-0.05"]
    base = apply_preset(RunConfig(), "kbc-fast", dataset="fb15k-237")
    assert base.train.initial_accumulator_value == 0.0
    bf16 = dataclasses.replace(base.train, matmul_dtype="bfloat16", initial_accumulator_value=1e-10)
    assert dataclasses.replace(base, data=winner.config.data, train=bf16) == winner.config


def test_cli_preset_picks_the_settings_of_the_data_folders_name(tmp_path):
    folder = tmp_path / "wn18rr"
    folder.mkdir()
    triples = [(f"e{i % 40}", f"r{i % 3}", f"e{(i * 7 + 1) % 40}") for i in range(150)]
    for split, rows in {"train": triples, "valid": triples[:3], "test": triples[3:6]}.items():
        (folder / f"{split}.txt").write_text("".join(f"{h}\t{r}\t{t}\n" for h, r, t in rows))
    run = tmp_path / "run"
    args = ["-q", "train", "--preset", "kbc", "--data-dir", str(folder), "--dim", "4", "--epochs", "1"]
    result = CliRunner().invoke(main, [*args, "--eval-every", "1", "--no-jit", "--out", str(run)])
    assert result.exit_code == 0, result.output
    cfg = json.loads((run / "config.json").read_text())
    assert cfg["sampler"]["batch_size"] == 50 and cfg["train"]["regularization"] == 0.2


def test_cli_preset_with_explicit_flags(tmp_path):
    run = tmp_path / "run"
    # Valid only with the preset's 1-vs-all loss: checked against it, not against the defaults.
    needs_the_preset = ["--label-smoothing", "0.1", "--matmul-dtype", "bfloat16"]
    args = ["-q", "train", "--preset", "kbc", *needs_the_preset, *tiny_flags(1), "--out", str(run)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    cfg = json.loads((run / "config.json").read_text())
    assert cfg["train"]["label_smoothing"] == 0.1 and cfg["train"]["matmul_dtype"] == "bfloat16"
    assert cfg["train"]["loss"] == "full-softmax" and cfg["model"]["reciprocal"] is True
    assert cfg["train"]["optimizer"] == "adagrad" and cfg["train"]["regularizer"] == "n3"
    assert cfg["train"]["monitor"] == "mrr" and cfg["train"]["lr"] == 0.1
    # Given on the command line, so not the preset's: dim 8, batch 100, 1 epoch, validation every epoch.
    assert cfg["model"]["dim"] == 8 and cfg["sampler"]["batch_size"] == 100
    assert cfg["train"]["epochs"] == 1 and cfg["train"]["eval_every"] == 1
    unknown = CliRunner().invoke(main, ["train", "--preset", "fast"])
    assert unknown.exit_code == 2 and "--preset" in unknown.output


def test_python_preset(tmp_path):
    data = jobi_tf.load_dataset(
        {
            "train": [(f"e{i}", f"r{i % 2}", f"e{(i * 7 + 1) % 20}") for i in range(60)],
            "valid": [("e1", "r1", "e8")],
            "test": [("e2", "r0", "e15")],
        }
    )
    run = jobi_tf.train(data, preset="kbc", dim=4, batch_size=20, epochs=1, eval_every=1, run_dir=tmp_path / "r")
    assert run.config.train.loss == "full-softmax" and run.config.model.dim == 4
    assert run.config.sampler.batch_size == 20 and run.config.train.optimizer == "adagrad"


def test_large_graph_is_the_recipe_of_its_committed_grid():
    """The preset and bench/grids/large-recipe-seeds.json (its check on FB15k-237 and WN18RR)
    must not drift apart: every cell of the grid is the preset's config for its dataset, but for
    the weight's choice after training, which the grid's cells made with
    bench/slot_prior_weight.py (the same weights and validation ranking)."""
    from pathlib import Path

    from jobi_tf.planning.grid import load_spec

    spec = load_spec(Path(__file__).parents[1] / "bench" / "grids" / "large-recipe-seeds.json")
    for cell in spec.cells():
        preset = apply_preset(dataclasses.replace(RunConfig(), data=cell.config.data), "large-graph")
        model, sampler = cell.config.model, cell.config.sampler
        expected = dataclasses.replace(
            preset,
            model=dataclasses.replace(preset.model, joint=model.joint),
            train=dataclasses.replace(preset.train, choose_slot_prior=False),
            sampler=dataclasses.replace(preset.sampler, p=sampler.p),
            seed=cell.config.seed,
        )
        assert cell.config == expected, cell.name
