"""Map library errors to click's one-line errors and exit codes.

``ConfigError`` (a bad flag value) becomes a usage error, exit 2, naming the flag; every
other ``JobiError``, and the serving client's ``ServingError`` (server unreachable, not an
export), becomes ``Error: <one line>``, exit 1. With ``--debug`` the original
exception propagates with its traceback.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import sys
import traceback
from collections.abc import Callable

import click
from jobi_tf.serving.client import ServingError

from jobi_tf.runtime.errors import ConfigError, JobiError

__all__ = ["reports_errors", "progress_to_stderr"]


def reports_errors(fn: Callable) -> Callable:
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        ctx = click.get_current_context()
        try:
            return fn(*args, **kwargs)
        except ConfigError as exc:
            if ctx.obj and ctx.obj.get("debug"):
                raise
            raise click.UsageError(str(exc), ctx=ctx) from None
        except (JobiError, ServingError) as exc:
            if ctx.obj and ctx.obj.get("debug"):
                raise
            error = click.ClickException(str(exc))
            error.exit_code = getattr(exc, "exit_code", 1)
            _release(exc)
            raise error from None

    return wrapper


def _release(exc: BaseException) -> None:
    """Free what the failed call's frames hold (a stopped run's tf.data iterator) now.

    Left to interpreter shutdown, destroying a tf.data iterator can wait forever for its
    threads (seen when SIGINT stopped a cell of ``jobi-tf grid``: the error was printed and
    the process never exited).
    """
    traceback.clear_frames(exc.__traceback__)
    exc.__traceback__ = None
    gc.collect()


@contextlib.contextmanager
def progress_to_stderr():
    """Keras writes progress bars to stdout; keep stdout for results only."""
    with contextlib.redirect_stdout(sys.stderr):
        yield


def start_tensorflow() -> None:
    """Start TensorFlow before a command imports it, hiding a CPU machine's GPU-probe lines unless ``-v``."""
    from jobi_tf.runtime.tf_settings import start_tensorflow as start

    ctx = click.get_current_context(silent=True)
    start(show_startup_logs=bool(ctx and ctx.obj and ctx.obj.get("verbose")))
