"""Options shared by several subcommands, defined once."""

from __future__ import annotations

import click

__all__ = ["eval_options"]


def eval_options(fn):
    """``--eval-batch-size``, ``--chunk-size`` and ``--rank-type`` (filtered evaluation)."""
    fn = click.option(
        "--rank-type",
        type=click.Choice(["realistic", "optimistic", "pessimistic"]),
        default="realistic",
        show_default=True,
        help="How ties count: realistic is the mean of optimistic and pessimistic.",
    )(fn)
    fn = click.option("--chunk-size", type=int, default=100_000, show_default=True, help="Entities per score block.")(
        fn
    )
    fn = click.option("--eval-batch-size", type=int, default=1000, show_default=True, help="Queries per score block.")(
        fn
    )
    return fn
