"""``jobi-tf export RUN_DIR --out EXPORT_BASE``: the run's triple scorer as a versioned SavedModel."""

from __future__ import annotations

import dataclasses
import json

import click
from jobi_tf.cli._errors import progress_to_stderr, reports_errors, start_tensorflow
from jobi_tf.cli.options import chosen_prior_weight, prior_weight_option

from jobi_tf.config import TABLE_DTYPES, ExportConfig
from jobi_tf.config.runs import RunFolder

__all__ = ["export"]


def _whole(param: click.Parameter, value: str) -> int:
    """``value`` as a whole number >= 0, or a one-line error naming the flag."""
    if not value.isdigit():
        raise click.BadParameter(f"'auto' or a whole number >= 0, got {value!r}", param=param)
    return int(value)


@click.command()
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False))
@click.option(
    "--out",
    "export_base",
    type=click.Path(file_okay=False),
    required=True,
    help="The model's base folder (TensorFlow Serving's --model_base_path); the export goes to OUT/<version>/.",
)
@click.option(
    "--version",
    type=int,
    default=None,
    help="Version number. Default: one more than the highest version in OUT (1 if none).",
)
@click.option("--force", is_flag=True, help="Replace an existing version.")
@click.option(
    "--filter-known/--no-filter-known",
    default=False,
    show_default=True,
    help="Rank training facts last in predict_tail/predict_head, so the top-k holds only new facts.",
)
@click.option(
    "--typed",
    is_flag=True,
    help="Add predict_tail_typed/predict_head_typed: top-k among the entities seen in that slot of the relation.",
)
@click.option(
    "--pair-head",
    is_flag=True,
    help="With --typed, for a --joint run: also export the pair head's relation table and "
    "predict_tail_soft_typed/predict_head_soft_typed, which also admit the entities the pair head places "
    "in the slot (input min_pair_probability).",
)
@click.option(
    "--cells",
    default="0",
    show_default=True,
    callback=lambda ctx, param, value: value if value == "auto" else _whole(param, value),
    help="Add predict_tail_approximate/predict_head_approximate: top-k among the rows of the PROBE cells (an input) "
    "whose k-means centroids score highest against the query, and, for a run that ranks with slot counts, the "
    "slot's 64 most frequent entities, every candidate scored exactly with the counts. auto: about "
    "4*sqrt(entities) cells; 0: none. "
    "For graphs of millions of entities, where an exact query streams the whole table. The export then numbers "
    "its entities cell by cell (names unchanged), and the approximate signatures use XLA: TensorFlow Serving "
    "needs --xla_cpu_compilation_enabled=true for them (docs/serving.md).",
)
@click.option(
    "--table-dtype",
    type=click.Choice(TABLE_DTYPES),
    default="float32",
    show_default=True,
    help="The stored entity table's dtype. bfloat16: half the bytes to hold and to stream per query, scores "
    "from the rounded rows (a few exact top-10 answers change: docs/serving.md); its top-k uses XLA, so "
    "TensorFlow Serving needs --xla_cpu_compilation_enabled=true.",
)
@prior_weight_option("serve")
@click.pass_context
@reports_errors
def export(
    ctx: click.Context,
    run_dir: str,
    export_base: str,
    prior_weight: float | None,
    older_prior_weight: float | None,
    neighbourhood: float | None,
    hub_weight: float | None,
    **flags,
) -> None:
    """Export RUN_DIR's best weights (triple head only) to OUT/<version>/; print what was written as JSON.

    The SavedModel takes and returns names: signatures score, predict_tail (the default),
    predict_head and predict_relation (with --typed also predict_tail_typed and
    predict_head_typed). It is written to OUT/<version>.incomplete-* and renamed when complete.

    Example: jobi-tf export runs/fb15k-237-complex-jobi-p0.3-seed0 --out exports/jobi
    """
    cfg = ExportConfig(**flags)  # --version, --force, --filter-known, --typed, --pair-head, --cells, --table-dtype
    start_tensorflow()
    from jobi_tf.api import load_run  # imports TensorFlow

    with progress_to_stderr():
        run = load_run(run_dir)
        weight = chosen_prior_weight(prior_weight, older_prior_weight)
        if weight is not None:
            run.use_slot_prior(weight)
        if neighbourhood is not None:
            run.use_neighbourhood(neighbourhood)
        if hub_weight is not None:
            run.use_hub_weight(hub_weight)
        result = run.export(export_base, **dataclasses.asdict(cfg))
    checkpoint = RunFolder(run_dir).checkpoint
    summary = {
        "export_dir": str(result.path),
        "version": result.version,
        "export_bytes": result.export_bytes,
        "table_bytes": result.table_bytes,
        "checkpoint_bytes": checkpoint.stat().st_size if checkpoint.exists() else None,
        "filter_known": cfg.filter_known,
        "typed": cfg.typed,
        "pair_head": cfg.pair_head,
        "cells": cfg.cells,
        "table_dtype": cfg.table_dtype,
        **run.prior_weights,
        "neighbourhood": run.neighbourhood_weight,
    }
    click.echo(json.dumps(summary))
