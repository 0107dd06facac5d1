"""``jobi-tf``: the click group.

Subcommands are imported only when run, so ``jobi-tf --help`` answers without importing
TensorFlow (seconds). This module is not ``__main__`` so that the console script and the
tests import the same object: ``python -m jobi_tf.cli`` is offered by ``__main__.py``.
"""

from __future__ import annotations

import importlib
import logging
import os

import click

__all__ = ["main", "entry_point"]

_SUBCOMMANDS = {
    "train": ("jobi_tf.cli.train", "train", "Train JoBi or a baseline; write a run folder."),
    "evaluate": ("jobi_tf.cli.evaluate", "evaluate", "Recompute filtered metrics of a run folder."),
    "export": ("jobi_tf.cli.export", "export", "Export a run's triple scorer as a SavedModel for TF Serving."),
    "grid": ("jobi_tf.cli.grid", "grid", "Run a hyper-parameter grid (resumable); report the best cell per group."),
    "predict": ("jobi_tf.cli.predict", "predict", "Ask an export (in-process or via TF Serving) for top-k or a score."),
    "calibrate": ("jobi_tf.cli.calibrate", "calibrate", "Fit per-relation probabilities of a run on validation."),
    "advise": ("jobi_tf.cli.advise", "advise", "1-vs-all or sampled JoBi for a graph and a budget, timed on this CPU."),
}


class LazyGroup(click.Group):
    """A group whose subcommands' modules load on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(_SUBCOMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in _SUBCOMMANDS:
            return None
        module, attr, _ = _SUBCOMMANDS[name]
        return getattr(importlib.import_module(module), attr)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, _SUBCOMMANDS[name][2]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-v", "--verbose", count=True, help="More log output (-vv for TensorFlow's own).")
@click.option("-q", "--quiet", is_flag=True, help="Only errors; no progress bars.")
@click.option("--debug", is_flag=True, help="Show tracebacks of errors.")
@click.version_option(package_name="jobi-tf")
@click.pass_context
def main(ctx: click.Context, verbose: int, quiet: bool, debug: bool) -> None:
    """JoBi knowledge-graph completion: train, evaluate, export.

    Results (metrics as JSON) go to stdout; logs and progress bars go to stderr.
    """
    level = logging.ERROR if quiet else (logging.INFO if verbose else logging.WARNING)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    if verbose < 2:  # must be set before TensorFlow is imported
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    ctx.obj = {"quiet": quiet, "debug": debug, "verbose": verbose}


def entry_point() -> None:
    """The ``jobi-tf`` console script: restart under huge pages if needed, then run `main`.

    Why a separate function: the restart replaces the process (`jobi_tf.runtime.tf_settings`), which
    only the command's own process may do; tests and other callers invoke `main` directly.
    """
    import sys

    from jobi_tf.runtime.tf_settings import restart_with_huge_pages

    # The same interpreter arguments as this start (the script, or -m jobi_tf.cli), so that
    # the import path is the same: `-m` would put the working directory first.
    restart_with_huge_pages([sys.executable, *sys.orig_argv[1:]])
    main(prog_name="jobi-tf")
