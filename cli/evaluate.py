"""``jobi-tf evaluate RUN_DIR``: recompute filtered metrics from a run folder."""

from __future__ import annotations

import json

import click
from jobi_tf.cli._errors import progress_to_stderr, reports_errors, start_tensorflow
from jobi_tf.cli.options import chosen_prior_weight, eval_options, prior_weight_option

from jobi_tf.config import EvalConfig

__all__ = ["evaluate"]


@click.command()
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--split", type=click.Choice(["test", "valid", "train"]), default="test", show_default=True)
@click.option("--tails-only", is_flag=True, help="Rank tails only (the paper's comparison with TypeComplex).")
@click.option(
    "--per-relation/--no-per-relation", default=False, show_default=True, help="Include the per-relation breakdown."
)
@click.option(
    "--relations",
    is_flag=True,
    help="Also rank the true relation of each (h, ?, t) among all relations (filtered): 'relation_prediction'.",
)
@prior_weight_option("rank")
@eval_options
@click.pass_context
@reports_errors
def evaluate(
    ctx: click.Context,
    run_dir: str,
    split: str,
    tails_only: bool,
    per_relation: bool,
    relations: bool,
    prior_weight: float | None,
    older_prior_weight: float | None,
    neighbourhood: float | None,
    hub_weight: float | None,
    **flags,
) -> None:
    """Print MRR and Hits@1/3/10 (overall, head, tail) of RUN_DIR's best weights as JSON."""
    eval_cfg = EvalConfig(**flags)
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
        metrics = run.evaluate(split, eval_config=eval_cfg, tails_only=tails_only, progress=not ctx.obj["quiet"])
        if relations:
            metrics["relation_prediction"] = run.evaluate_relations(split, eval_config=eval_cfg)
    if not per_relation:
        metrics.pop("per_relation")
    click.echo(json.dumps({"split": split, **run.prior_weights, "neighbourhood": run.neighbourhood_weight, **metrics}))
