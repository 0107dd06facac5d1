"""SHA-256 digests of files, kept in ``sha256sum``'s format (``<hex>  <name>`` a line).

Why one format for all: a checkpoint's ``.sha256`` and a run's ``data.sha256`` can then be
checked by hand with ``sha256sum -c`` from the folder they describe.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

from jobi_tf.runtime.atomic import write_text_atomic

__all__ = ["sha256_file", "read_sha256sums", "write_sha256sums"]

_LINE = re.compile(r"([0-9a-f]{64}) [ *](.+)")


def sha256_file(path: str | os.PathLike[str]) -> str:
    """The hex SHA-256 of the file at ``path``, read a few MB at a time."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def read_sha256sums(path: str | os.PathLike[str]) -> dict[str, str]:
    """``{file name: hex digest}`` of a ``sha256sum`` file; empty when it is missing or unreadable
    (lines that are not a digest and a name are skipped)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return {}
    return {m.group(2): m.group(1) for m in map(_LINE.fullmatch, text.splitlines()) if m}


def write_sha256sums(path: str | os.PathLike[str], digests: dict[str, str]) -> None:
    """``path`` lists ``digests`` (file name → hex digest), replaced whole."""
    write_text_atomic(path, "".join(f"{digest}  {name}\n" for name, digest in digests.items()))
