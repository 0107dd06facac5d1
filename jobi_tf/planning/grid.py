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
(`jobi_tf.planning.presets`); the spec's own settings win over it.

``variant`` names the paper's ablation points (its Table 4): ``baseline`` (no pair head,
p = 0), ``biasedneg`` (biased negatives only), ``joint`` (pair head only) and ``jobi``
(both). It can be a grid axis of its own, which sets ``joint`` and ``p`` (the biased ones
take the spec's ``p``, 0.3 when it has none), or it is derived from them. ``grid`` may also
be a list of such objects: the cells are the union of their products (Table 2 needs
baseline and JoBi for every model, the ablation all four variants of one model).

Cells run one after another (a cell already uses every core), each in
``OUT/<cell name>`` through `jobi_tf.training.trainer.train`, so a stopped grid resumes where it
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
import json
import math
from collections.abc import Callable
from pathlib import Path

from jobi_tf.config import VARIANTS, RunConfig, variant_name
from jobi_tf.config.runs import RunFolder
from jobi_tf.planning.grid_spec import SELECT_METRICS, Cell, GridSpec, Search, load_spec
from jobi_tf.runtime.atomic import write_text_atomic

__all__ = ["GridSpec", "Cell", "Search", "load_spec", "run_grid", "summarize", "variant_name", "VARIANTS"]


def run_grid(
    spec: GridSpec,
    out: str | Path,
    train_cell: Callable[[RunConfig, Path], dict],
    *,
    log: Callable[[str], None] = print,
) -> dict:
    """Run every unfinished cell with ``train_cell(config, run_dir)``, then summarize.

    ``train_cell`` is `jobi_tf.training.trainer.train` in the CLI (it resumes an interrupted cell);
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

    Each run already logs its own hyper-parameters (`jobi_tf.training.summaries`); the
    experiment config adds the domains and the validation/test metrics as columns.
    """
    try:
        import tensorflow as tf
        from tensorboard.plugins.hparams import api as hp
    except ImportError:
        return
    from jobi_tf import regimes

    domains: dict[str, set] = {}
    for cell in spec.cells():
        # The sampler's settings left to the run, as a single-device run chooses them (what it logs).
        for name, value in regimes.resolve(cell.config).hparams().items():
            domains.setdefault(name, set()).add(value)
    axes = [hp.HParam(name, hp.Discrete(sorted(values, key=str))) for name, values in domains.items()]
    from jobi_tf.training.summaries import HPARAM_METRICS  # a run's best validation and its test metrics

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
