"""Process-wide TensorFlow settings that must be in place before TensorFlow allocates memory.

Why this exists: TensorFlow's default CPU allocator hands every large temporary tensor back
to the system and maps it again on the next step, so a training step spends about as much
CPU time in the kernel (page faults) as in TensorFlow (docs/performance.md). TensorFlow's
pooled BFC allocator keeps freed blocks for reuse instead. It is chosen by the environment
variable ``TF_CPU_ALLOCATOR_USE_BFC``, which TensorFlow reads when it creates its CPU
allocator, i.e. at its first operation, not at ``import tensorflow``.

Importing ``jobi_tf`` calls `use_pooled_cpu_allocator`, so the ``jobi-tf`` command, the
library, the benchmarks and the tests all get the pool. An explicit
``TF_CPU_ALLOCATOR_USE_BFC=false`` (or ``0``) is respected.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from collections.abc import Iterator

__all__ = [
    "ALLOCATOR_VARIABLE",
    "LIMIT_VARIABLE",
    "use_pooled_cpu_allocator",
    "pooled_cpu_allocator_requested",
    "start_tensorflow",
]

ALLOCATOR_VARIABLE = "TF_CPU_ALLOCATOR_USE_BFC"
LIMIT_VARIABLE = "TF_CPU_BFC_MEM_LIMIT_IN_MB"
_TRUE = ("true", "1")


def _physical_memory_mb() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20
    except (ValueError, OSError, AttributeError):
        return None


def use_pooled_cpu_allocator(environ: dict | None = None) -> bool:
    """Ask TensorFlow for its pooled (BFC) CPU allocator unless the user chose otherwise.

    Also bounds the pool by the machine's physical memory (``TF_CPU_BFC_MEM_LIMIT_IN_MB``,
    unless set): TensorFlow's own default bound is 64 GB, which would refuse tables that a
    larger machine can hold. The pool never exceeds what the process actually needed at its
    peak; it does not return freed blocks to the system while the process runs.

    Returns whether the pool is requested. Has no effect once TensorFlow has run an
    operation in this process; set the variable before starting Python in that case.
    """
    env = os.environ if environ is None else environ
    env.setdefault(ALLOCATOR_VARIABLE, "true")
    requested = env[ALLOCATOR_VARIABLE].strip().lower() in _TRUE
    if requested and LIMIT_VARIABLE not in env:
        memory = _physical_memory_mb()
        if memory:
            env[LIMIT_VARIABLE] = str(memory)
    return requested


def pooled_cpu_allocator_requested(environ: dict | None = None) -> bool:
    """Whether this process asked TensorFlow for the pooled CPU allocator."""
    env = os.environ if environ is None else environ
    return env.get(ALLOCATOR_VARIABLE, "").strip().lower() in _TRUE


#: Lines TensorFlow's C++ runtime writes while it starts on a machine without a GPU: the
#: CUDA stub and platform probes, absl's pre-initialisation notice, the CPU-feature banner.
#: They read as errors to a newcomer and are not ("failed call to cuInit" on every CPU run).
STARTUP_NOISE = re.compile(
    r"absl::InitializeLog\(\)|cudart_stub\.cc|cuda_platform\.cc|cuda_executor\.cc|cuInit|cpu_feature_guard\.cc"
    r"|To enable the following instructions|rebuild TensorFlow with the appropriate compiler flags"
    r"|Unable to register cu(DNN|FFT|BLAS) factory|TF-TRT Warning"
)


@contextlib.contextmanager
def _startup_lines_filtered() -> Iterator[None]:
    """Capture file descriptor 2 (where C++ logs go) during the block; replay all but `STARTUP_NOISE`."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            for line in captured.read().decode("utf-8", "replace").splitlines(keepends=True):
                if not STARTUP_NOISE.search(line):
                    sys.stderr.write(line)
            sys.stderr.flush()


def start_tensorflow(show_startup_logs: bool = False) -> None:
    """Import TensorFlow and probe its devices now, without the GPU-probe lines of a CPU machine.

    The CLI calls this before a command's work (``-vv`` shows everything); the devices a run
    finds are still logged by `jobi_tf.distribute`. Other output of those moments is kept.
    """
    with contextlib.nullcontext() if show_startup_logs else _startup_lines_filtered():
        import tensorflow as tf

        tf.config.list_physical_devices()
