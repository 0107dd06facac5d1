"""Helpers shared by the benchmark scripts (not part of the library)."""

from __future__ import annotations

import json
import os
import resource
import sys
from pathlib import Path


def data_dir(name: str, given: str | None) -> Path:
    """The dataset folder: ``--data-dir``, else ``$JOBI_TF_DATA_DIR/<name>``."""
    if given:
        return Path(given)
    root = os.environ.get("JOBI_TF_DATA_DIR")
    if not root:
        sys.exit(f"give --data-dir or set JOBI_TF_DATA_DIR to a folder holding {name}/")
    return Path(root) / name


def peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def emit(record: dict) -> None:
    """The one JSON line a benchmark prints on stdout."""
    print(json.dumps(record), flush=True)
