"""Helpers shared by the benchmark scripts (not part of the library).

Importing this module imports ``jobi_tf`` first, so every benchmark runs TensorFlow with the
library's default pooled CPU allocator (`jobi_tf.runtime.tf_settings`), as ``jobi-tf`` does; a benchmark
script run as a program also restarts itself under glibc's huge pages, as ``jobi-tf`` does.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import sys
from pathlib import Path

from _steady import Usage, summary, window_rates  # noqa: F401  (re-exported for the scripts)

import jobi_tf  # (sets the allocator default before TensorFlow starts)
from jobi_tf.runtime.tf_settings import (
    ALLOCATOR_VARIABLE,
    huge_pages_requested,
    pooled_cpu_allocator_requested,
    restart_with_huge_pages,
)

_main = sys.modules.get("__main__")
if getattr(_main, "__file__", None) and Path(_main.__file__).resolve().parent == Path(__file__).resolve().parent:
    restart_with_huge_pages([sys.executable, *sys.orig_argv[1:]])  # a bench script run as a program

#: A measured part fails its check when the kernel took more than this share of user CPU time.
MAX_SYSTEM_SHARE = 0.10
#: ... unless it used less user CPU time than this (seconds): too short to judge.
MIN_JUDGED_USER_S = 1.0


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


def kernel_check(usages: dict[str, Usage]) -> dict:
    """``{"ok", "max_system_share", "worst"}``: every measured part within `MAX_SYSTEM_SHARE`.

    Parts under `MIN_JUDGED_USER_S` of user CPU time are reported by their scripts but not
    judged here: over a fraction of a second the kernel's share is noise.
    """
    judged = {k: u for k, u in usages.items() if u.user >= MIN_JUDGED_USER_S} or usages
    worst = max(judged, key=lambda k: judged[k].system_share)
    share = judged[worst].system_share
    return {
        "ok": share <= MAX_SYSTEM_SHARE,
        "limit": MAX_SYSTEM_SHARE,
        "max_system_share": round(share, 3),
        "worst": worst,
        "allocator": "bfc" if pooled_cpu_allocator_requested() else f"default ({ALLOCATOR_VARIABLE} off)",
        "huge_pages": huge_pages_requested(),
    }


def emit(record: dict) -> None:
    """The one JSON line a benchmark prints on stdout; exits 1 if its kernel-time check failed."""
    print(json.dumps(record), flush=True)
    if not record.get("kernel_check", {}).get("ok", True):
        sys.exit(1)


def percentiles(ms: list[float]) -> dict:
    """p50 and p99 of a list of milliseconds, as the serving figures quote them."""
    import numpy as np

    return {"p50_ms": round(float(np.percentile(ms, 50)), 2), "p99_ms": round(float(np.percentile(ms, 99)), 2)}


def ratio_entry(per_round: list[float]) -> dict:
    """How a raw file stores a ratio taken within each round: the rounds' ratios and their median."""
    return {"per_round": [round(x, 3) for x in per_round], "median": round(statistics.median(per_round), 3)}


def provenance(script: str) -> dict:
    """Where and when a figure was measured: the command, the machine and the cores this process
    may use, TensorFlow's version, the date and the commit (every raw file carries these)."""
    import datetime

    import tensorflow as tf

    limits = "".join(f"{name}={value} " for name, value in isa_limits().items())
    return {
        "command": f"{limits}python bench/{Path(script).name} " + " ".join(sys.argv[1:]),
        "machine": machine(),
        "cpus_allowed": len(os.sched_getaffinity(0)),
        "tf": tf.__version__,
        "date": datetime.date.today().isoformat(),
        "commit": commit(),
    }


def commit() -> str:
    """The checkout's short commit hash ("unknown" outside a git checkout)."""
    import subprocess

    command = ["git", "rev-parse", "--short", "HEAD"]
    done = subprocess.run(command, capture_output=True, text=True, cwd=Path(__file__).parent, check=False)
    return done.stdout.strip() or "unknown"


def machine() -> dict:
    """The CPU a figure was measured on: model name, core count and the vector flags that
    change TensorFlow's speed (AVX2, AVX-512, bfloat16 dot products)."""
    model, flags = "unknown", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and model == "unknown":
                model = value.strip()
            elif key.strip() == "flags" and not flags:
                flags = set(value.split())
    except OSError:
        pass
    wanted = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16")
    found = {"cpu": model, "cpus": os.cpu_count(), "flags": [f for f in wanted if f in flags]}
    return {**found, "isa_limits": isa_limits()} if isa_limits() else found


def isa_limits() -> dict[str, str]:
    """The variables that cap the instructions XLA and oneDNN emit, where set: an AVX-512 CPU run
    as an AVX2 one (``XLA_FLAGS=--xla_cpu_max_isa=AVX2 ONEDNN_MAX_CPU_ISA=AVX2``). Why recorded:
    such a figure is a capped ISA on that CPU's memory and caches, not an AVX2-only machine."""
    limits = {}
    if "xla_cpu_max_isa" in os.environ.get("XLA_FLAGS", ""):
        limits["XLA_FLAGS"] = os.environ["XLA_FLAGS"]
    if "ONEDNN_MAX_CPU_ISA" in os.environ:
        limits["ONEDNN_MAX_CPU_ISA"] = os.environ["ONEDNN_MAX_CPU_ISA"]
    return limits


def versions() -> dict:
    """jobi-tf's, TensorFlow's, Keras's, NumPy's and Python's versions (every raw file carries them)."""
    import platform

    import keras
    import numpy as np
    import tensorflow as tf

    return {
        "jobi_tf": jobi_tf.__version__,
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
    }


def numpy_blas() -> dict:
    """The BLAS behind NumPy's products: its name and version, and for OpenBLAS the kernel family
    it chose for this CPU at run time and its thread count (a figure "against NumPy" names it)."""
    import ctypes
    import glob

    import numpy as np

    blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
    found = {"name": blas.get("name"), "version": blas.get("version")}
    for library in glob.glob(str(Path(np.__file__).parent.parent / "numpy.libs" / "*openblas*")):
        lib = ctypes.CDLL(library)
        for suffix in ("64_", ""):
            core = getattr(lib, f"scipy_openblas_get_corename{suffix}", None)
            if core is not None:
                core.restype = ctypes.c_char_p
                found["core"] = core().decode()
                found["threads"] = getattr(lib, f"scipy_openblas_get_num_threads{suffix}")()
                break
    return found
