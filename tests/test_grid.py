"""Grid specs, resumable grid runs and best-cell selection (`jobi_tf.planning.grid`, `jobi-tf grid`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from jobi_tf.cli.main import main

from jobi_tf.planning.grid import GridSpec, Search, load_spec, markdown_table, run_grid, summarize, variant_name
from jobi_tf.runtime.errors import GridSpecError


def _write(tmp_path, spec: dict | str, name: str = "spec.json"):
    path = tmp_path / name
    path.write_text(spec if isinstance(spec, str) else json.dumps(spec))
    return path


def test_cells_are_the_product_and_land_in_the_right_config_sections(tmp_path):
    spec = load_spec(
        _write(
            tmp_path,
            {
                "fixed": {"dataset": "synthetic", "dim": 16, "epochs": 7, "eval_batch_size": 64, "seed": 4},
                "grid": {"model": ["distmult", "complex"], "joint": [False, True], "p": [0, 0.3], "batch_size": [50]},
            },
        )
    )
    cells = spec.cells()
    assert len(cells) == 8
    assert len({c.name for c in cells}) == 8
    cell = cells[-1]
    assert cell.name == "model-complex_joint-1_p-0.3_batch_size-50"
    cfg = cell.config
    assert (cfg.model.model, cfg.model.joint, cfg.model.dim) == ("complex", True, 16)
    assert (cfg.sampler.p, cfg.sampler.batch_size) == (0.3, 50)
    assert (cfg.train.epochs, cfg.eval.eval_batch_size, cfg.seed) == (7, 64, 4)
    assert [c.variant for c in cells[:4]] == ["baseline", "biasedneg", "joint", "jobi"]


def test_a_preset_expands_per_cell_dataset_and_the_specs_settings_win(tmp_path):
    spec = load_spec(
        _write(
            tmp_path,
            {
                "fixed": {"preset": "kbc-rp", "epochs": 12},
                "grid": {"dataset": ["fb15k-237", "wn18rr"], "variant": ["baseline", "joint"], "seed": [0, 1]},
            },
        )
    )
    cells = spec.cells()
    assert len(cells) == 8
    for cell in cells:
        cfg = cell.config
        recipe = (cfg.train.loss, cfg.model.dim, cfg.model.reciprocal, cfg.train.epochs)
        assert recipe == ("full-softmax", 1000, True, 12)
        wn = cfg.data.dataset == "wn18rr"
        assert cfg.sampler.batch_size == (50 if wn else 500)
        assert cfg.train.relation_prediction == (0.05 if wn else 4.0)
        assert cfg.model.joint == (cell.variant == "joint") and cfg.sampler.p == 0.0


def test_variant_names_follow_the_paper_ablation():
    assert variant_name(False, 0.0) == "baseline"
    assert variant_name(False, 0.3) == "biasedneg"
    assert variant_name(True, 0.0) == "joint"
    assert variant_name(True, 0.5) == "jobi"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ('{"grid": {"model": ["complex"],}}', "spec.json:1: not valid JSON"),
        ({"grid": {"modle": ["complex"]}}, "unknown setting 'modle'"),
        ({"grid": {"neg": 5}}, "'neg' must be a non-empty list"),
        ({"grid": {"neg": [5, 0]}}, "cell {'neg': 0}: --neg: must be an integer >= 1"),
        ({"fixed": {"neg": 5}, "grid": {"neg": [5]}}, "'neg' is both fixed and varied"),
        ({"grid": {"neg": [5]}, "select": "auc"}, "select must be one of"),
        ({"grid": {"neg": [5, 5]}}, "'neg' lists a value twice: [5, 5]"),
        ({"fixed": {}}, "a spec is an object with a 'grid'"),
        ({"grid": {"neg": [5]}, "extra": 1}, "unknown top-level key(s) ['extra']"),
        ({"fixed": {"preset": "fast"}, "grid": {"seed": [0]}}, "cell {'seed': 0}: --preset: must be one of"),
    ],
)
def test_bad_specs_are_one_line_errors_naming_the_file(tmp_path, spec, message):
    path = _write(tmp_path, spec)
    with pytest.raises(GridSpecError) as err:
        load_spec(path)
    assert str(path) in str(err.value) and message in str(err.value)
    assert "\n" not in str(err.value)


def _fake_metrics(valid: dict, test_mrr: float) -> dict:
    test = {"mrr": test_mrr, "hits@1": 0.1, "hits@3": 0.2, "hits@10": 0.3, "type_inconsistent": 0.05}
    return {"valid": valid, "test": test, "epochs": 10, "best_epoch": 5, "train_seconds": 60.0}


def test_run_grid_resumes_and_picks_the_best_cell_per_group_by_validation(tmp_path):
    spec = GridSpec(
        fixed={"dataset": "synthetic"},
        grid={"model": ["distmult", "complex"], "alpha": [0.5, 1.0], "joint": [True]},
        select="hits@10",
    )
    # Validation Hits@10 per (model, alpha): the higher one must win within each model,
    # whatever its test metrics (selection never looks at test).
    valid_h10 = {("distmult", 0.5): 0.40, ("distmult", 1.0): 0.45, ("complex", 0.5): 0.50, ("complex", 1.0): 0.48}
    calls = []

    def fake_train(config, run_dir):
        calls.append(run_dir.name)
        key = (config.model.model, config.train.alpha)
        if key == ("complex", 1.0) and len(calls) == 4 and not (run_dir / "checkpoint.npz").exists():
            run_dir.mkdir(parents=True)
            (run_dir / "checkpoint.npz").write_bytes(b"")
            raise KeyboardInterrupt  # the grid is stopped during its last cell
        run_dir.mkdir(parents=True, exist_ok=True)
        valid = {"mrr": 0.3, "hits@1": 0.2, "hits@3": 0.3, "hits@10": valid_h10[key]}
        (run_dir / "metrics.json").write_text(json.dumps(_fake_metrics(valid, test_mrr=1 - valid_h10[key])))

    with pytest.raises(KeyboardInterrupt):
        run_grid(spec, tmp_path, fake_train, log=lambda _: None)
    partial = summarize(spec, tmp_path)
    assert [row["status"] for row in partial["cells"]] == ["finished", "finished", "finished", "running"]
    summary = run_grid(spec, tmp_path, fake_train, log=lambda _: None)
    assert len(calls) == 5 and calls[-1] == calls[-2]  # only the interrupted cell ran again
    assert run_grid(spec, tmp_path, fake_train, log=lambda _: None) == summary
    assert len(calls) == 5  # everything finished: nothing runs
    best = {row["group"]["model"]: row for row in summary["best"]}
    assert best["distmult"]["cell"] == "model-distmult_alpha-1_joint-1"
    assert best["complex"]["cell"] == "model-complex_alpha-0.5_joint-1"
    assert best["complex"]["test"]["mrr"] == pytest.approx(0.5)
    assert {row["group"]["variant"] for row in summary["best"]} == {"joint"}  # p defaults to 0
    table = markdown_table(summary)
    assert table.count("\n") == 3 and "model-complex_alpha-0.5_joint-1" in table and "0.050" in table


def test_grid_command_trains_each_cell_once_and_reports(tmp_path):
    spec = _write(
        tmp_path,
        {
            "fixed": {
                "synthetic_entities": 60,
                "synthetic_relations": 3,
                "synthetic_triples": 600,
                "dim": 8,
                "batch_size": 100,
                "neg": 8,
                "epochs": 1,
                "eval_every": 1,
                "jit_compile": False,
            },
            "grid": [{"variant": ["biasedneg"]}, {"variant": ["jobi"], "alpha": [0.5]}],
            "select": "mrr",
        },
    )
    out = tmp_path / "grid"
    runner = CliRunner()
    result = runner.invoke(main, ["-q", "grid", str(spec), "--out", str(out)])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert {row["group"]["variant"] for row in report["best"]} == {"biasedneg", "jobi"}
    for row in report["best"]:
        metrics = json.loads((out / row["cell"] / "metrics.json").read_text())
        assert row["test"]["mrr"] == metrics["test"]["mrr"]
        assert 0 <= row["test"]["type_inconsistent"] <= 1 and 0 <= row["test"]["type_inconsistent_answers"] <= 1
    assert json.loads((out / "summary.json").read_text())["best"] == report["best"]
    assert list((out / "hparams").glob("events.out.tfevents.*")) and (out / "summary.md").exists()
    mtimes = {p: p.stat().st_mtime_ns for p in out.glob("*/metrics.json")}
    again = runner.invoke(main, ["grid", str(spec), "--out", str(out)])
    assert again.exit_code == 0, again.output
    assert again.stderr.count("finished, skipped") == 2
    assert {p: p.stat().st_mtime_ns for p in out.glob("*/metrics.json")} == mtimes
    dry = runner.invoke(main, ["grid", str(spec), "--out", str(tmp_path / "other"), "--dry-run"])
    assert dry.exit_code == 0 and dry.stderr.count("pending") == 2


def test_grid_command_bad_spec_exits_1_with_one_line(tmp_path):
    spec = _write(tmp_path, {"grid": {"neg": [0]}})
    result = CliRunner().invoke(main, ["grid", str(spec), "--out", str(tmp_path / "g")])
    assert result.exit_code == 1
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "--neg" in errors[0] and "spec.json" in errors[0]
    assert not (tmp_path / "g").exists()


def test_variant_axis_and_a_list_of_sub_grids():
    spec = GridSpec(
        fixed={"dataset": "synthetic", "p": 0.5},
        grid=[
            {"model": ["complex", "distmult"], "variant": ["baseline", "jobi"]},
            {"model": ["complex"], "variant": ["biasedneg", "joint", "jobi"]},  # complex/jobi again: runs once
        ],
    )
    cells = spec.cells()
    got = [(c.name, c.config.model.joint, c.config.sampler.p, c.variant) for c in cells]
    assert got == [
        ("model-complex_variant-baseline", False, 0.0, "baseline"),
        ("model-complex_variant-jobi", True, 0.5, "jobi"),
        ("model-distmult_variant-baseline", False, 0.0, "baseline"),
        ("model-distmult_variant-jobi", True, 0.5, "jobi"),
        ("model-complex_variant-biasedneg", False, 0.5, "biasedneg"),
        ("model-complex_variant-joint", True, 0.0, "joint"),
    ]
    assert GridSpec(fixed={}, grid={"variant": ["jobi"]}).cells()[0].config.sampler.p == 0.3  # the paper's p
    with pytest.raises(GridSpecError, match="variant must be one of"):
        GridSpec(fixed={}, grid={"variant": ["jobi", "typecomplex"]})
    with pytest.raises(GridSpecError, match="share the folder"):  # folder names replace '/' by '_'
        GridSpec(fixed={}, grid={"data_dir": ["graphs/a", "graphs_a"]})


GRIDS = sorted((Path(__file__).resolve().parents[1] / "bench" / "grids").glob("*.json"))


@pytest.mark.parametrize("path", GRIDS, ids=lambda p: p.stem)
def test_every_committed_grid_spec_loads_into_distinct_cells(path):
    cells = load_spec(path).cells()
    assert cells and len({c.name for c in cells}) == len(cells)


def test_the_two_curves_meet_at_batch_200_and_25_negatives():
    """Figure 1's batch-200 cells are Figure 2's 25-negative cells: one run serves both."""
    grids = {p.stem: load_spec(p).cells() for p in GRIDS if p.stem.startswith("curves-")}
    by_batch = {c.variant: c.config for c in grids["curves-batch-fb15k-237"] if c.config.sampler.batch_size == 200}
    by_neg = {c.variant: c.config for c in grids["curves-neg-fb15k-237"] if c.config.sampler.neg == 25}
    assert by_batch == by_neg and len(by_batch) == 4


# -- search: random subset and successive halving ------------------------------------------


def _halving_spec(**search) -> GridSpec:
    return GridSpec(
        fixed={"dataset": "synthetic", "epochs": 16, "eval_every": 2},
        grid={"lr": [0.001, 0.003, 0.01, 0.03], "dim": [8, 16]},
        select="mrr",
        group_by=("model",),
        search=Search(**search),
    )


def _fake_curve_trainer(calls: list, stop: tuple | None = None):
    """Validation MRR grows with the epochs and depends on the settings; the best cell at
    16 epochs (lr 0.01, dim 16) is not the best after 4 (lr 0.03, dim 16), as in real curves."""

    def score(config, epochs):
        lr, dim = config.train.lr, config.model.dim
        late = {0.001: 0.1, 0.003: 0.2, 0.01: 0.4, 0.03: 0.3}[lr] + dim / 100
        early = {0.001: 0.05, 0.003: 0.1, 0.01: 0.2, 0.03: 0.25}[lr] + dim / 200
        return early + (late - early) * min(epochs, 16) / 16

    def train(config, run_dir):
        epochs = config.train.epochs
        folder = Path(run_dir)
        assert not (folder / "metrics.json").exists()  # a finished rung is continued, not re-finished
        calls.append((folder.name, epochs))
        if stop is not None and (folder.name, epochs) == stop:
            raise KeyboardInterrupt
        folder.mkdir(parents=True, exist_ok=True)
        mrr = score(config, epochs)
        valid = {"mrr": mrr, "hits@1": mrr / 2, "hits@3": mrr, "hits@10": mrr * 1.5}
        (folder / "metrics.json").write_text(json.dumps({**_fake_metrics(valid, test_mrr=mrr), "epochs": epochs}))

    return train


def test_rungs_grow_by_eta_up_to_the_epochs():
    assert Search(min_epochs=2, eta=2).rungs(16) == [2, 4, 8, 16]
    assert Search(min_epochs=3, eta=3).rungs(20) == [3, 9, 20]
    assert Search().rungs(16) == [16]


def test_successive_halving_keeps_the_best_half_of_each_rung_and_resumes(tmp_path):
    spec = _halving_spec(min_epochs=4, eta=2)
    calls: list = []
    with pytest.raises(KeyboardInterrupt):  # stopped in the middle of the second rung
        run_grid(spec, tmp_path, _fake_curve_trainer(calls, stop=("lr-0.01_dim-16", 8)), log=lambda _: None)
    summary = run_grid(spec, tmp_path, _fake_curve_trainer(calls), log=lambda _: None)
    budgets = {}
    for name, epochs in calls:
        budgets.setdefault(epochs, set()).add(name)
    assert len(budgets[4]) == 8  # every cell's first rung
    assert budgets[8] == {"lr-0.03_dim-16", "lr-0.01_dim-16", "lr-0.03_dim-8", "lr-0.01_dim-8"}  # best 4 at epoch 4
    assert budgets[16] == {"lr-0.03_dim-16", "lr-0.01_dim-16"}
    assert [n for n, e in calls].count("lr-0.01_dim-16") == 4  # rungs 4, 8 (stopped), 8 again, 16: nothing else redone
    assert summary["best"][0]["cell"] == "lr-0.01_dim-16" and summary["best"][0]["epochs"] == 16
    assert (tmp_path / "lr-0.001_dim-8" / "rung-4.json").is_file()
    assert not (tmp_path / "lr-0.001_dim-8" / "rung-8.json").exists()
    n = len(calls)
    assert run_grid(spec, tmp_path, _fake_curve_trainer(calls), log=lambda _: None) == summary
    assert len(calls) == n  # a finished search trains nothing


def test_trials_draw_a_seeded_subset_of_each_group_in_grid_order():
    cells = [c.name for c in _halving_spec(trials=3, seed=1).cells()]
    assert len(cells) == 3 and cells == [c.name for c in _halving_spec(trials=3, seed=1).cells()]
    by_dim = GridSpec(
        fixed={"dataset": "synthetic"}, grid={"lr": [0.001, 0.003, 0.01, 0.03], "dim": [8, 16]},
        group_by=("dim",), search=Search(trials=2),
    )  # fmt: skip
    assert sorted(c.config.model.dim for c in by_dim.cells()) == [8, 8, 16, 16]  # the same budget per group
    everything = [c.name for c in _halving_spec().cells()]
    assert cells == [c for c in everything if c in cells]  # grid order
    assert [c.name for c in _halving_spec(trials=50).cells()] == everything


@pytest.mark.parametrize(
    ("search", "message"),
    [
        ({"trials": 0}, "search trials must be an integer >= 1"),
        ({"halving": {"min_epochs": 3}}, "must be multiples of eval_every"),
        ({"halving": {"min_epochs": 2, "eta": 1}}, "search eta must be an integer >= 2"),
        ({"halving": {"rungs": 2}}, "'search.halving' is an object"),
        ({"budget": 5}, "'search' is an object"),
    ],
)
def test_bad_search_specs_are_one_line_errors(tmp_path, search, message):
    spec = {"fixed": {"epochs": 16, "eval_every": 2}, "grid": {"lr": [0.01, 0.1]}, "search": search}
    with pytest.raises(GridSpecError, match=message):
        load_spec(_write(tmp_path, spec))


def test_grid_command_halving_continues_the_survivors_own_runs(tmp_path):
    fixed = {"synthetic_entities": 60, "synthetic_relations": 3, "synthetic_triples": 600, "dim": 8}
    fixed |= {"batch_size": 100, "neg": 8, "epochs": 2, "eval_every": 1, "jit_compile": False, "patience": 5}
    spec = _write(
        tmp_path,
        {"fixed": fixed, "grid": {"lr": [0.0001, 0.05]}, "select": "mrr", "search": {"halving": {"min_epochs": 1}}},
    )
    out = tmp_path / "grid"
    result = CliRunner().invoke(main, ["-q", "grid", str(spec), "--out", str(out)])
    assert result.exit_code == 0, result.output
    rung1 = {p.parent.name: json.loads(p.read_text())["valid"]["mrr"] for p in out.glob("*/rung-1.json")}
    assert len(rung1) == 2
    survivor = max(rung1, key=rung1.get)
    assert [p.parent.name for p in out.glob("*/rung-2.json")] == [survivor]
    metrics = json.loads((out / survivor / "metrics.json").read_text())
    assert metrics["epochs"] == 2 and [h["epoch"] for h in metrics["history"]] == [1, 2]  # continued, not restarted
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["best"][0]["cell"] == survivor
