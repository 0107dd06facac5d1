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

Why huge pages too (`restart_with_huge_pages`): on a large graph a training step reads and
writes rows scattered over gigabyte tables (the embeddings and lazy Adam's two moments), and
with 4 KiB pages nearly every row costs a TLB miss. glibc backs its large blocks (the pool's
regions among them) with transparent huge pages when ``GLIBC_TUNABLES`` holds
``glibc.malloc.hugetlb=1``; glibc reads that once, when the process starts, so the ``jobi-tf``
command and the benchmarks start themselves again with it before doing anything else
(docs/performance.md: a FB1.9M-size step 1.16x faster). ``JOBI_TF_HUGE_PAGES=0`` turns it off.
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
    "HUGE_PAGES_TUNABLE",
    "HUGE_PAGES_VARIABLE",
    "huge_pages_environment",
    "huge_pages_requested",
    "restart_with_huge_pages",
    "LIMIT_VARIABLE",
    "use_pooled_cpu_allocator",
    "pooled_cpu_allocator_requested",
    "start_tensorflow",
    "cpu_has_native_bfloat16",
]

ALLOCATOR_VARIABLE = "TF_CPU_ALLOCATOR_USE_BFC"
LIMIT_VARIABLE = "TF_CPU_BFC_MEM_LIMIT_IN_MB"
_TRUE = ("true", "1")
#: The glibc tunable that makes ``malloc`` ask for transparent huge pages on its mmap'd blocks.
HUGE_PAGES_TUNABLE = "glibc.malloc.hugetlb=1"
#: ``0``/``false`` turns the huge-page restart off; the restarted process finds it set to ``1``.
HUGE_PAGES_VARIABLE = "JOBI_TF_HUGE_PAGES"
_THP_MODE = "/sys/kernel/mm/transparent_hugepage/enabled"


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


#: CPU flags (Linux ``/proc/cpuinfo``) of bfloat16 dot-product instructions.
NATIVE_BFLOAT16_FLAGS = ("avx512_bf16", "amx_bf16")


def cpu_has_native_bfloat16(cpuinfo: str = "/proc/cpuinfo") -> bool | None:
    """Whether this CPU has bfloat16 dot products; None where it cannot be read (not Linux).

    Why: without them a bfloat16 product ran about 20x slower than the float32 one, at 4% of
    the float32 matmul limit (docs/performance.md, an AVX2-only EPYC), where with AVX512-BF16
    it is 1.6x faster.
    """
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.partition(":")[2].split())
                    return any(flag in flags for flag in NATIVE_BFLOAT16_FLAGS)
    except OSError:
        return None
    return None


def choose_matmul_dtype(dtype: str, jit_compile: bool, gpus: bool, cpuinfo: str = "/proc/cpuinfo") -> str:
    """The dtype ``--matmul-dtype auto`` picks: ``bfloat16`` when the step runs without XLA
    (``jit_compile``) on a CPU with bfloat16 dot products (``avx512_bf16`` or ``amx_bf16`` in
    ``cpuinfo``), else ``float32``; a ``dtype`` other than ``auto`` is returned as given.

    Why those conditions: with them a bfloat16 product ran 1.44x faster than float32 at rank
    200 and trained level with it (docs/performance.md); without the CPU flags it is emulated
    and about 20x slower, and XLA's CPU dot does not use them. With ``gpus`` (not measured
    here) ``auto`` stays float32.
    """
    if dtype != "auto":
        return dtype
    native = not gpus and not jit_compile and cpu_has_native_bfloat16(cpuinfo) is True
    return "bfloat16" if native else "float32"


def _transparent_huge_pages_usable() -> bool:
    """Linux with glibc >= 2.35 (the tunable's first release) and THP not ``[never]``."""
    import platform

    libc, version = platform.libc_ver()
    if sys.platform != "linux" or libc != "glibc":
        return False
    try:
        if tuple(int(x) for x in version.split(".")[:2]) < (2, 35):
            return False
        with open(_THP_MODE) as f:
            return "[never]" not in f.read()
    except (OSError, ValueError):
        return False


def huge_pages_environment(environ: dict | None = None, usable: bool | None = None) -> dict | None:
    """The environment to restart with so that glibc uses huge pages, or None if there is no need.

    None when the user turned it off (``JOBI_TF_HUGE_PAGES=0``), when ``GLIBC_TUNABLES``
    already sets ``glibc.malloc.hugetlb`` (their choice is kept), when this process is already
    the restarted one, or when the system cannot do it (not Linux with glibc >= 2.35, or THP
    disabled). Otherwise a copy of ``environ`` with the tunable appended to ``GLIBC_TUNABLES``.
    """
    env = os.environ if environ is None else environ
    if env.get(HUGE_PAGES_VARIABLE, "").strip().lower() in ("0", "false", "1"):
        return None
    tunables = env.get("GLIBC_TUNABLES", "")
    if "glibc.malloc.hugetlb" in tunables:
        return None
    if not (_transparent_huge_pages_usable() if usable is None else usable):
        return None
    new = dict(env)
    new["GLIBC_TUNABLES"] = f"{tunables}:{HUGE_PAGES_TUNABLE}" if tunables else HUGE_PAGES_TUNABLE
    new[HUGE_PAGES_VARIABLE] = "1"
    return new


def restart_with_huge_pages(argv: list[str]) -> None:
    """Replace this process with ``argv`` run under `huge_pages_environment`, if it gives one.

    Call it first thing in a program's entry point, before TensorFlow or large arrays exist:
    the process image is replaced (same pid, same standard streams), so nothing done before
    survives. Returns normally when no restart is needed or the restart cannot be done.
    """
    env = huge_pages_environment()
    if env is None:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(argv[0], argv, env)
    except OSError:
        return


def huge_pages_requested(environ: dict | None = None) -> bool:
    """Whether this process started with glibc's huge pages for its large blocks."""
    env = os.environ if environ is None else environ
    return re.search(r"glibc\.malloc\.hugetlb=[12]\b", env.get("GLIBC_TUNABLES", "")) is not None


def pooled_cpu_allocator_requested(environ: dict | None = None) -> bool:
    """Whether this process asked TensorFlow for the pooled CPU allocator."""
    env = os.environ if environ is None else environ
    return env.get(ALLOCATOR_VARIABLE, "").strip().lower() in _TRUE


#: Lines TensorFlow's C++ runtime writes while it starts on a machine without a GPU: the
#: CUDA stub and platform probes, absl's pre-initialisation notice, the CPU-feature banner.
#: They read as errors to a newcomer and are not ("failed call to cuInit" on every CPU run).
#: Also every INFO line of that moment (``I0000 ... port.cc:153] oneDNN custom operations are on``,
#: written before absl's logging starts, so ``TF_CPP_MIN_LOG_LEVEL`` does not hide it).
STARTUP_NOISE = re.compile(
    r"absl::InitializeLog\(\)|cudart_stub\.cc|cuda_platform\.cc|cuda_executor\.cc|cuInit|cpu_feature_guard\.cc"
    r"|To enable the following instructions|rebuild TensorFlow with the appropriate compiler flags"
    r"|Unable to register cu(DNN|FFT|BLAS) factory|TF-TRT Warning|^I\d{4} \S+\s+\d+ \S+:\d+\] "
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
    """Import TensorFlow and probe its devices now, without its start-up INFO lines and the
    GPU-probe lines of a CPU machine.

    The CLI calls this before a command's work (``-vv`` shows everything), and the Python API
    before its first use of TensorFlow; ``TF_CPP_MIN_LOG_LEVEL=0`` in the environment shows them
    too. The devices a run finds are still logged by `jobi_tf.distributed.strategy`. Other
    output of those moments is kept.
    """
    show = show_startup_logs or os.environ.get("TF_CPP_MIN_LOG_LEVEL", "").strip() == "0"
    with contextlib.nullcontext() if show else _startup_lines_filtered():
        import tensorflow as tf

        tf.config.list_physical_devices()
