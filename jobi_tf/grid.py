"""Hyper-parameter grids: one run folder per cell, resumable, best cell per group.

The paper reports, for each model and variant, the test metrics of the grid cell with the
best validation Hits@10 (its section 4 and appendix B). A grid spec says which settings vary
and which are fixed, with the `RunConfig` field names (the CLI flag names, ``batch_size`` ↔
``--batch-size``)::

    {
      "fixed": {"dataset": "fb15k-237", "epochs": 100, "eval_every": 5},
      "grid": {"model": ["distmult", "complex"], "joint": [false, true], "p": [0, 0.3]},
      "select": "hits@10",
      "group_by": ["model", "variant"]
    }

``preset`` (fixed or varied) expands into a named recipe's settings for the cell's dataset
(`jobi_tf.presets`); the spec's own settings win over it.

``variant`` names the paper's ablation points (its Table 4): ``baseline`` (no pair head,
p = 0), ``biasedneg`` (biased negatives only), ``joint`` (pair head only) and ``jobi``
(both). It can be a grid axis of its own, which sets ``joint`` and ``p`` (the biased ones
take the spec's ``p``, 0.3 when it has none), or it is derived from them. ``grid`` may also
be a list of such objects: the cells are the union of their products (Table 2 needs
baseline and JoBi for every model, the ablation all four variants of one model).

Cells run one after another (a cell already uses every core), each in
``OUT/<cell name>`` through `jobi_tf.training.train`, so a stopped grid resumes where it
stopped: finished cells (with ``metrics.json``) are skipped, an interrupted one continues
from its checkpoint.

A search instead of the whole grid, within a budget::

    "search": {"trials": 12, "seed": 0, "halving": {"min_epochs": 4, "eta": 2}}

``trials`` draws that many cells of each group (``group_by``) at random (seeded; all of
them when a group is smaller), so that every group gets the same budget. ``halving`` is
successive halving (Jamieson and Talwalkar, 2016; LibKGE's GraSH and PyKEEN's Optuna
pruner use it): every cell trains ``min_epochs``, the best ``1/eta`` of each group by
validation ``select`` continue to ``eta`` times as many epochs, and so on up to the cells'
``epochs``. A cell continues from its own checkpoint (the same run, with more epochs), and
the validation of each rung is kept as ``rung-<epochs>.json`` in its folder, so a stopped
search replays its decisions and resumes.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jobi_tf.atomic import write_text_atomic
from jobi_tf.config import SECTIONS, VARIANTS, DataConfig, RunConfig, variant_name
from jobi_tf.errors import ConfigError, GridSpecError
from jobi_tf.presets import preset_settings
from jobi_tf.runs import RunFolder
from jobi_tf.types import RANK_METRICS

__all__ = ["GridSpec", "Cell", "Search", "load_spec", "summarize", "variant_name", "VARIANTS"]

# Every RunConfig field, by its (unique) name: where a flat spec key belongs.
_FIELD_SECTION = {f.name: section for section, cls in SECTIONS.items() for f in dataclasses.fields(cls)}
_FIELD_SECTION["seed"] = None

SELECT_METRICS = RANK_METRICS


@dataclasses.dataclass(frozen=True)
class Cell:
    """One point of the grid: its settings, its config and its folder name."""

    settings: dict[str, Any]
    config: RunConfig
    name: str

    @property
    def variant(self) -> str:
        return variant_name(self.config.model.joint, self.config.sampler.p)

    def key(self, field: str) -> Any:
        """A grouping key: ``variant``, ``dataset`` or any config field."""
        if field == "variant":
            return self.variant
        if field == "dataset":
            return self.config.data.name
        return _get(self.config, field)


@dataclasses.dataclass(frozen=True)
class Search:
    """A budget over the grid: a random subset of ``trials`` cells, and successive halving
    from ``min_epochs`` by ``eta`` when ``min_epochs`` is set (module docstring)."""

    trials: int | None = None
    seed: int = 0
    min_epochs: int | None = None
    eta: int = 2

    @classmethod
    def parse(cls, raw: Any, source: str) -> Search:
        if raw is None:
            return cls()
        if not isinstance(raw, dict) or set(raw) - {"trials", "seed", "halving"}:
            raise GridSpecError(f"{source}: 'search' is an object with 'trials', 'seed' and 'halving'")
        halving = raw.get("halving") or {}
        if not isinstance(halving, dict) or set(halving) - {"min_epochs", "eta"}:
            raise GridSpecError(f"{source}: 'search.halving' is an object with 'min_epochs' and 'eta'")
        search = cls(raw.get("trials"), raw.get("seed", 0), halving.get("min_epochs"), halving.get("eta", 2))
        for name, value, low in (
            ("trials", search.trials, 1),
            ("min_epochs", search.min_epochs, 1),
            ("eta", search.eta, 2),
        ):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < low):
                raise GridSpecError(f"{source}: search {name} must be an integer >= {low}. Received: {value!r}")
        return search

    def rungs(self, epochs: int) -> list[int]:
        """Epoch budgets of the rungs up to ``epochs``: ``min_epochs * eta**k``, then ``epochs``."""
        if self.min_epochs is None:
            return [epochs]
        out, budget = [], self.min_epochs
        while budget < epochs:
            out.append(budget)
            budget *= self.eta
        return [*out, epochs]


@dataclasses.dataclass(frozen=True)
class GridSpec:
    """A parsed, validated grid spec (see the module docstring)."""

    fixed: dict[str, Any]
    grid: dict[str, list[Any]] | list[dict[str, list[Any]]]
    select: str = "hits@10"
    group_by: tuple[str, ...] = ("dataset", "model", "variant")
    source: str = "spec"
    search: Search = Search()

    def __post_init__(self) -> None:
        grids = self._grids()
        if not grids:
            raise GridSpecError(f"{self.source}: 'grid' must be an object, or a non-empty list of objects")
        for key in [*self.fixed, *(k for g in grids for k in g)]:
            if key not in _FIELD_SECTION and key not in ("variant", "preset"):
                raise GridSpecError(
                    f"{self.source}: unknown setting {key!r} (use the flag names: batch_size, neg, p, ...)"
                )
        for grid in grids:
            for key, values in grid.items():
                if not isinstance(values, list) or not values:
                    raise GridSpecError(f"{self.source}: {key!r} must be a non-empty list. Received: {values!r}")
                if key in self.fixed:
                    raise GridSpecError(f"{self.source}: {key!r} is both fixed and varied")
                if len({json.dumps(v) for v in values}) != len(values):
                    raise GridSpecError(f"{self.source}: {key!r} lists a value twice: {values!r}")
            bad = [v for v in grid.get("variant", []) + [self.fixed.get("variant")] if v and v not in VARIANTS]
            if bad:
                choices = ", ".join(VARIANTS)
                raise GridSpecError(f"{self.source}: variant must be one of {choices}. Received: {bad[0]!r}")
        if self.select not in SELECT_METRICS:
            raise GridSpecError(f"{self.source}: select must be one of {', '.join(SELECT_METRICS)}")
        for key in self.group_by:
            if key not in _FIELD_SECTION and key not in ("variant", "dataset"):
                raise GridSpecError(f"{self.source}: cannot group by {key!r}")
        cells = self.cells()  # every cell must be a valid RunConfig before anything runs
        if self.search.min_epochs is not None:
            if len({c.config.train.epochs for c in cells}) > 1:
                raise GridSpecError(f"{self.source}: successive halving needs one 'epochs' for every cell")
            for cell in cells:
                every = cell.config.train.eval_every
                if any(r % every for r in self.search.rungs(cell.config.train.epochs)[:-1]):
                    raise GridSpecError(
                        f"{self.source}: halving rungs {self.search.rungs(cell.config.train.epochs)} must be "
                        f"multiples of eval_every ({every}) so that each rung ends with a validation"
                    )

    def _grids(self) -> list[dict[str, list[Any]]]:
        grids = self.grid if isinstance(self.grid, list) else [self.grid]
        return grids if all(isinstance(g, dict) for g in grids) else []

    def cells(self) -> list[Cell]:
        """Every cell in grid order; a cell listed by two sub-grids runs once."""
        from jobi_tf import regimes  # (imports TensorFlow: the losses' and regimes' own checks)

        out: dict[str, Cell] = {}
        for grid in self._grids():
            keys = list(grid)
            for values in itertools.product(*(grid[k] for k in keys)):
                varied = dict(zip(keys, values, strict=True))
                try:
                    settings = _apply_variant(_apply_preset({**self.fixed, **varied}))
                    config = _config(settings)
                    regimes.check(config)
                except ConfigError as err:
                    raise GridSpecError(f"{self.source}: cell {varied}: {err}") from None
                cell = Cell(settings, config, _cell_name(varied))
                if cell.name in out and out[cell.name].config != config:
                    raise GridSpecError(
                        f"{self.source}: two different cells would share the folder {cell.name!r} "
                        "(vary the same settings in every sub-grid)"
                    )
                out.setdefault(cell.name, cell)
        cells = list(out.values())
        if self.search.trials is None:
            return cells
        groups: dict[str, list[int]] = {}
        for i, cell in enumerate(cells):
            groups.setdefault(json.dumps({k: str(cell.key(k)) for k in self.group_by}, sort_keys=True), []).append(i)
        rng = random.Random(self.search.seed)
        chosen = set()
        for members in groups.values():  # the same budget for every group, so they compare fairly
            chosen.update(rng.sample(members, min(self.search.trials, len(members))))
        return [cells[i] for i in sorted(chosen)]  # grid order kept


def load_spec(path: str | Path) -> GridSpec:
    """Read a JSON (or, with PyYAML installed, YAML) grid spec; errors name the file."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    if path.suffix in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError:
            raise GridSpecError(f"{path}: YAML specs need PyYAML (pip install pyyaml); or write JSON") from None
        try:
            raw = yaml.safe_load(text)
        except yaml.YAMLError as err:
            raise GridSpecError(f"{path}: not valid YAML: {str(err).splitlines()[0]}") from None
    else:
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as err:
            raise GridSpecError(f"{path}:{err.lineno}: not valid JSON: {err.msg}") from None
    if not isinstance(raw, dict) or "grid" not in raw:
        raise GridSpecError(f"{path}: a spec is an object with a 'grid' (and optional 'fixed', 'select')")
    unknown = set(raw) - {"fixed", "grid", "select", "group_by", "description", "search"}
    if unknown:
        raise GridSpecError(f"{path}: unknown top-level key(s) {sorted(unknown)}")
    return GridSpec(
        fixed=dict(raw.get("fixed") or {}),
        grid=raw["grid"],
        select=raw.get("select", "hits@10"),
        group_by=tuple(raw.get("group_by", ("dataset", "model", "variant"))),
        source=str(path),
        search=Search.parse(raw.get("search"), str(path)),
    )


def run_grid(
    spec: GridSpec,
    out: str | Path,
    train_cell: Callable[[RunConfig, Path], dict],
    *,
    log: Callable[[str], None] = print,
) -> dict:
    """Run every unfinished cell with ``train_cell(config, run_dir)``, then summarize.

    ``train_cell`` is `jobi_tf.training.train` in the CLI (it resumes an interrupted cell);
    tests pass a stand-in.
    """
    out = Path(out)
    cells = spec.cells()
    if spec.search.min_epochs is not None:
        _successive_halving(spec, cells, out, train_cell, log)
        return summarize(spec, out)
    for i, cell in enumerate(cells, 1):
        run_dir = out / cell.name
        if RunFolder(run_dir).finished:
            log(f"[{i}/{len(cells)}] {cell.name}: finished, skipped")
            continue
        log(f"[{i}/{len(cells)}] {cell.name}: training")
        train_cell(cell.config, run_dir)
    return summarize(spec, out)


def _successive_halving(spec, cells, out: Path, train_cell, log) -> None:
    """Train every cell to the first rung, keep the best ``1/eta`` of each group, repeat."""
    groups: dict[str, list[Cell]] = {}
    for cell in cells:
        groups.setdefault(json.dumps({k: str(cell.key(k)) for k in spec.group_by}, sort_keys=True), []).append(cell)
    rungs = spec.search.rungs(cells[0].config.train.epochs)
    for level, budget in enumerate(rungs):
        for key, members in groups.items():
            for i, cell in enumerate(members, 1):
                folder = RunFolder(out / cell.name)
                if folder.rung(budget).exists():
                    continue
                log(f"[rung {level + 1}/{len(rungs)}: {budget} epochs, {i}/{len(members)}] {cell.name}: training")
                metrics = folder.read_metrics()
                if metrics is not None and metrics["epochs"] < budget:
                    folder.metrics.unlink()  # finished the last rung: continue the same run
                config = dataclasses.replace(cell.config, train=dataclasses.replace(cell.config.train, epochs=budget))
                train_cell(config, folder.path)
                write_text_atomic(folder.rung(budget), folder.metrics.read_text(encoding="utf-8"))
            if level + 1 < len(rungs):
                groups[key] = _best_of_rung(members, out, budget, spec.select, spec.search.eta)
                log(f"rung {level + 1} kept {', '.join(c.name for c in groups[key])}")


def _best_of_rung(members: list[Cell], out: Path, budget: int, select: str, eta: int) -> list[Cell]:
    """The best ``ceil(n / eta)`` cells by validation ``select`` at this rung (ties: grid order)."""
    scores = [
        json.loads(RunFolder(out / c.name).rung(budget).read_text(encoding="utf-8"))["valid"][select] for c in members
    ]
    keep = max(1, math.ceil(len(members) / eta))
    order = sorted(range(len(members)), key=lambda i: (-scores[i], i))[:keep]
    return [members[i] for i in sorted(order)]


def summarize(spec: GridSpec, out: str | Path) -> dict:
    """Best finished cell per group by validation ``spec.select``, with its test metrics.

    Returns ``{"select", "group_by", "cells": [...], "best": [...]}``; ``cells`` lists every
    cell with its status, ``best`` one row per group (ties: the first cell in grid order).
    """
    out = Path(out)
    rows = []
    for cell in spec.cells():
        metrics_path = RunFolder(out / cell.name).metrics
        row = {"cell": cell.name, "group": {k: cell.key(k) for k in spec.group_by}, "settings": cell.settings}
        if metrics_path.exists():
            metrics = json.loads(metrics_path.read_text(encoding="utf-8"))
            row.update(
                status="finished",
                valid=_headline(metrics["valid"]),
                test=_headline(metrics["test"]),
                best_epoch=metrics.get("best_epoch"),
                epochs=metrics.get("epochs"),
                train_seconds=metrics.get("train_seconds"),
            )
        else:
            row["status"] = "running" if RunFolder(out / cell.name).checkpoint.exists() else "pending"
        rows.append(row)
    best: dict[str, dict] = {}
    for row in rows:
        if row["status"] != "finished":
            continue
        group = json.dumps(row["group"], sort_keys=True)
        if group not in best or row["valid"][spec.select] > best[group]["valid"][spec.select]:
            best[group] = row
    return {"select": spec.select, "group_by": list(spec.group_by), "cells": rows, "best": list(best.values())}


def markdown_table(summary: dict) -> str:
    """The ``best`` rows as a Markdown table (test metrics, picked by validation)."""
    group_by = summary["group_by"]
    head = [*group_by, "cell", f"valid {summary['select']}", "test MRR", "Hits@1", "Hits@3", "Hits@10"]
    head += ["TI top-1", "TI answers", "best epoch / epochs", "train min"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in summary["best"]:
        t = row["test"]
        values = [*(str(row["group"][k]) for k in group_by), row["cell"], f"{row['valid'][summary['select']]:.4f}"]
        values += [f"{t[k]:.4f}" for k in SELECT_METRICS]
        values += [_fmt(t.get("type_inconsistent")), _fmt(t.get("type_inconsistent_answers"))]
        values += [f"{row['best_epoch']} / {row['epochs']}"]
        values += [f"{row['train_seconds'] / 60:.1f}" if row.get("train_seconds") is not None else "–"]
        lines.append("| " + " | ".join(values) + " |")
    return "\n".join(lines)


def write_hparams_config(spec: GridSpec, out: Path) -> None:
    """Declare the grid's axes and metrics at ``OUT`` so TensorBoard's HParams view shows every cell.

    Each run already logs its own hyper-parameters (`jobi_tf.summaries`); the
    experiment config adds the domains and the validation/test metrics as columns.
    """
    try:
        import tensorflow as tf
        from tensorboard.plugins.hparams import api as hp
    except ImportError:
        return
    domains: dict[str, set] = {}
    for cell in spec.cells():
        for name, value in cell.config.hparams().items():
            domains.setdefault(name, set()).add(value)
    axes = [hp.HParam(name, hp.Discrete(sorted(values, key=str))) for name, values in domains.items()]
    from jobi_tf.summaries import HPARAM_METRICS  # a run's best validation and its test metrics

    tags = [(tag, tag.replace("/", " ").replace("_", " ")) for tag in HPARAM_METRICS]
    metrics = [hp.Metric(tag, display_name=name) for tag, name in tags]
    out.mkdir(parents=True, exist_ok=True)
    with tf.summary.create_file_writer(str(out / "hparams")).as_default():
        hp.hparams_config(hparams=axes, metrics=metrics)


def _headline(metrics: dict) -> dict:
    keys = (*SELECT_METRICS, "type_inconsistent", "type_inconsistent_answers")
    out = {k: metrics[k] for k in keys if k in metrics}
    for side in ("head", "tail"):
        if side in metrics:
            out[side] = {k: metrics[side][k] for k in keys if k in metrics[side]}
    return out


def _fmt(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def _apply_preset(settings: dict[str, Any]) -> dict[str, Any]:
    """Expand a ``preset`` setting into its settings for the cell's dataset; the spec's own win."""
    if "preset" not in settings:
        return settings
    settings = dict(settings)
    name = settings.pop("preset")
    dataset = DataConfig(dataset=settings.get("dataset"), data_dir=settings.get("data_dir")).name
    return {**preset_settings(name, explicit=set(settings), dataset=dataset), **settings}


def _apply_variant(settings: dict[str, Any]) -> dict[str, Any]:
    """Turn a ``variant`` setting into its ``joint`` and ``p`` (biased p: the spec's, else 0.3)."""
    if "variant" not in settings:
        return settings
    settings = dict(settings)
    index = VARIANTS.index(settings.pop("variant"))
    biased_p = settings.get("p") or 0.3
    settings["joint"] = index >= 2
    settings["p"] = biased_p if index % 2 else 0.0
    return settings


def _config(settings: dict[str, Any]) -> RunConfig:
    sections: dict[str, dict[str, Any]] = {name: {} for name in SECTIONS}
    seed = 0
    for key, value in settings.items():
        if _FIELD_SECTION[key] is None:
            seed = value
        else:
            sections[_FIELD_SECTION[key]][key] = value
    if sections["data"].get("data_dir") and "dataset" not in sections["data"]:
        sections["data"]["dataset"] = None
    return RunConfig(seed=seed, **{name: SECTIONS[name](**kw) for name, kw in sections.items()})


def _get(config: RunConfig, field: str) -> Any:
    section = _FIELD_SECTION[field]
    return config.seed if section is None else getattr(getattr(config, section), field)


def _cell_name(varied: dict[str, Any]) -> str:
    """``model-complex_joint-1_p-0.3``: the varied settings only, readable and filesystem-safe."""
    if not varied:
        return "cell"
    parts = []
    for key, value in varied.items():
        text = str(int(value)) if isinstance(value, bool) else f"{value:g}" if isinstance(value, float) else str(value)
        parts.append(f"{key}-{text.replace('/', '_')}")
    return "_".join(parts)
