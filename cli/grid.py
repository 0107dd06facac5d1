"""``jobi-tf grid SPEC --out DIR``: run a hyper-parameter grid, then report the best cell per group."""

from __future__ import annotations

import json
from pathlib import Path

import click
from jobi_tf.cli._errors import progress_to_stderr, reports_errors, start_tensorflow

from jobi_tf.runtime.atomic import write_text_atomic
from jobi_tf.runtime.errors import JobiError

__all__ = ["grid"]


@click.command()
@click.argument("spec_path", metavar="SPEC", type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--out",
    type=click.Path(file_okay=False),
    required=True,
    help="Grid folder: one run folder per cell, summary.json and summary.md.",
)
@click.option("--dry-run", is_flag=True, help="List the cells and their status; train nothing.")
@click.option("--summary-only", is_flag=True, help="Summarize the finished cells; train nothing.")
@click.pass_context
@reports_errors
def grid(ctx: click.Context, spec_path: str, out: str, dry_run: bool, summary_only: bool) -> None:
    """Train every cell of SPEC (JSON, or YAML with PyYAML), skipping finished ones.

    Rerun the same command to resume. Prints the best cell per group (picked by the
    spec's validation metric, Hits@10 by default, as the paper) with its test metrics.
    """
    from jobi_tf.planning.grid import load_spec, markdown_table, run_grid, summarize, write_hparams_config

    spec = load_spec(spec_path)
    out_dir = Path(out)
    if dry_run or summary_only:
        summary = summarize(spec, out_dir)
        if dry_run:
            for row in summary["cells"]:
                click.echo(f"{row['status']:>8}  {row['cell']}", err=True)
    else:
        write_hparams_config(spec, out_dir)
        quiet = ctx.obj["quiet"]

        def train_cell(config, run_dir):
            start_tensorflow()
            from jobi_tf.api import train_from_config  # imports TensorFlow

            with progress_to_stderr():
                return train_from_config(config, run_dir, verbose=0 if quiet else None)

        def log(message: str) -> None:
            if not quiet:
                click.echo(message, err=True)

        summary = run_grid(spec, out_dir, train_cell, log=log)
    if not dry_run:
        if not out_dir.is_dir():
            raise JobiError(f"{out_dir}: no such grid folder")
        write_text_atomic(out_dir / "summary.json", json.dumps(summary, indent=2) + "\n")
        write_text_atomic(out_dir / "summary.md", markdown_table(summary) + "\n")
        click.echo(markdown_table(summary), err=True)
    click.echo(json.dumps({"grid": str(out_dir), "select": summary["select"], "best": summary["best"]}))
