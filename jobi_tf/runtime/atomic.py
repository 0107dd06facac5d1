"""Replace a file whole or not at all: the one way jobi-tf writes a file a reader may see.

A run can be killed at any moment (Ctrl-C twice, SIGKILL, a full disk); a checkpoint, a
vocabulary or a summary must then be either the previous version or the new one, never
half of one, and a failed write must leave no stray temporary file and say so in one line.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
from collections.abc import Iterator
from pathlib import Path

from jobi_tf.runtime.errors import JobiError

__all__ = ["replacing", "write_text_atomic", "write_json_atomic", "disk_errors"]

#: What a full or read-only disk is called in the messages of writers that raise their own errors.
_DISK_ERRORS = tuple(os.strerror(code) for code in (errno.ENOSPC, errno.EROFS, errno.EDQUOT))


@contextlib.contextmanager
def replacing(path: str | os.PathLike[str], *, fsync: bool = False) -> Iterator[Path]:
    """Yield a temporary sibling of ``path`` to write; it replaces ``path`` when the block ends.

    Any exception removes the temporary file; an ``OSError`` (disk full, read-only folder)
    becomes a one-line `JobiError` naming ``path``. ``fsync`` flushes the file to disk
    before the rename (checkpoints: a power loss keeps the old or the new one).
    """
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        yield tmp
        if fsync:
            with open(tmp, "rb+") as f:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise JobiError(f"{path}: cannot write ({exc.strerror or exc}); the previous version is kept") from None
        raise


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    """``path`` holds ``text`` (UTF-8), replaced whole."""
    with replacing(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json_atomic(path: str | os.PathLike[str], data: dict) -> None:
    """``path`` holds ``data`` as indented, key-sorted JSON, replaced whole."""
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


@contextlib.contextmanager
def disk_errors(path: str | os.PathLike[str], what: str, kept: str) -> Iterator[None]:
    """A full or read-only disk met inside the block is a one-line `JobiError` naming ``path``.

    Why: TensorFlow's writers (TensorBoard events, SavedModel) raise their own error types,
    whose messages run over many lines, for what `replacing` reports as ``cannot write``. An
    `OSError`, or an exception whose message names such an error, becomes
    ``PATH: cannot write WHAT (No space left on device); KEPT``; any other exception passes.
    """
    try:
        yield
    except Exception as exc:
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EROFS, errno.EDQUOT):
            reason = exc.strerror
        else:
            reason = next((name for name in _DISK_ERRORS if name in str(exc)), None)
        if reason is None:
            raise
        raise JobiError(f"{path}: cannot write {what} ({reason}); {kept}") from None
