"""``jobi-tf calibrate RUN_DIR``: fit per-relation probabilities on validation, measure them on test."""

from __future__ import annotations

import json

import click
from jobi_tf.cli._errors import progress_to_stderr, reports_errors, start_tensorflow

from jobi_tf.config.runs import RunFolder
from jobi_tf.evaluation.calibration import METHODS

__all__ = ["calibrate"]


@click.command()
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--negatives", type=click.IntRange(min=1), default=5, show_default=True, help="Corruptions per positive.")
@click.option(
    "--min-positives",
    type=click.IntRange(min=1),
    default=20,
    show_default=True,
    help="Relations with fewer validation triples use the parameters fitted on all relations.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the corruptions.")
@click.option(
    "--method",
    type=click.Choice(METHODS),
    default="platt",
    show_default=True,
    help="platt: sigmoid(a * score + b) per relation; isotonic: a non-decreasing piecewise-linear map "
    "(no assumed shape, needs more validation triples per relation).",
)
@click.pass_context
@reports_errors
def calibrate(ctx: click.Context, run_dir: str, negatives: int, min_positives: int, seed: int, method: str) -> None:
    """Fit per-relation probabilities on RUN_DIR's validation triples; write RUN_DIR/calibration.json.

    Prints Brier score, expected calibration error and triple-classification accuracy on test,
    before and after, as JSON. `jobi-tf export` then adds probabilities to the signatures.
    """
    start_tensorflow()
    from jobi_tf.api import load_run  # imports TensorFlow
    from jobi_tf.evaluation.calibration import evaluate_calibration, fit_calibration

    with progress_to_stderr():
        run = load_run(run_dir)
        calibration = fit_calibration(
            run.model, run.data.index, negatives=negatives, min_positives=min_positives, seed=seed, method=method
        )
        calibration.save(RunFolder(run_dir).calibration)
        metrics = evaluate_calibration(run.model, run.data.index, calibration, seed=seed)
    summary = {
        "calibration": str(RunFolder(run_dir).calibration),
        "method": calibration.method,
        "rows": calibration.rows,
        "fallback_rows": int(calibration.fallback.sum()),
        "test": metrics,
    }
    click.echo(json.dumps(summary))
