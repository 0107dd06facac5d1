"""The pooled CPU allocator is the default, an explicit choice is kept, and it removes the page faults.

That TensorFlow really runs on the pool is checked through the pool's bound: with
``TF_CPU_BFC_MEM_LIMIT_IN_MB`` set low, a block larger than the bound is refused under the
library's default and allocated with ``TF_CPU_ALLOCATOR_USE_BFC=false`` (TensorFlow's default
allocator ignores the bound). The page-fault tests train the same JoBi step in fresh processes
and count minor page faults per step: with the pool, a step's large temporaries (here the
``[500, 50, 400]`` block of candidate rows, 40 MB, ~10,000 faults of 4 KiB pages if mapped
afresh) are reused. Whether TensorFlow's default allocator faults them in again every step
depends on the machine (it did on the machines of docs/performance.md, not on every kernel),
so the comparison with it runs only where it does.

The huge-page tests restart a probe script as the ``jobi-tf`` command restarts itself and
read from ``/proc/self/smaps_rollup`` how much of a large block the kernel backs with 2 MiB pages.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jobi_tf.runtime.tf_settings import (
    ALLOCATOR_VARIABLE,
    HUGE_PAGES_TUNABLE,
    HUGE_PAGES_VARIABLE,
    LIMIT_VARIABLE,
    huge_pages_environment,
    huge_pages_requested,
    use_pooled_cpu_allocator,
)

_STEP_PROBE = """
import json, resource, sys
import jobi_tf  # before TensorFlow, as the CLI does
import keras
from jobi_tf.config import SamplerConfig
from jobi_tf.data.index import build_index
from jobi_tf.data.synthetic import SyntheticSpec, make_typed_kg
from jobi_tf.models import JoBiModel
from jobi_tf.sampling.pipelines import make_train_dataset

spec = SyntheticSpec(num_entities=15000, num_relations=20, num_triples=30000, num_types=6, seed=1)
_, _, index = build_index(make_typed_kg(spec), "synthetic")
ds = make_train_dataset(index, SamplerConfig(batch_size=500, neg=50, p=0.3), seed=0)
model = JoBiModel(index.num_entities, index.num_relations, model="complex", dim=200, joint=True)
model.compile(optimizer="sgd", jit_compile=True)
model.fit(ds, epochs=1, steps_per_epoch=5, verbose=0)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
model.fit(ds, epochs=1, steps_per_epoch=20, verbose=0)
after = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
print(json.dumps({"faults_per_step": (after - before) / 20}))
"""


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in (ALLOCATOR_VARIABLE, LIMIT_VARIABLE)}
    env.update(TF_CPP_MIN_LOG_LEVEL="3", **extra)
    return env


def _run(code: str, env: dict[str, str]) -> str:
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip().splitlines()[-1]


def test_import_sets_the_pool_and_bounds_it_by_physical_memory():
    code = f"import os, jobi_tf; print(os.environ['{ALLOCATOR_VARIABLE}'], os.environ['{LIMIT_VARIABLE}'])"
    value, limit = _run(code, _clean_env()).split()
    assert value == "true"
    memory_mb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20
    assert int(limit) == memory_mb


@pytest.mark.parametrize("given", ["false", "0", "FALSE"])
def test_an_explicit_choice_is_kept(given):
    env = {ALLOCATOR_VARIABLE: given}
    assert use_pooled_cpu_allocator(env) is False
    assert env == {ALLOCATOR_VARIABLE: given}  # no limit added either


def test_a_user_limit_is_kept():
    env = {LIMIT_VARIABLE: "1234"}
    assert use_pooled_cpu_allocator(env) is True
    assert env == {ALLOCATOR_VARIABLE: "true", LIMIT_VARIABLE: "1234"}


_BOUND_PROBE = """
import jobi_tf  # before TensorFlow, as the CLI does
import tensorflow as tf
try:
    tf.fill([64 * 2**20], 1.0)  # 256 MiB
    print("allocated")
except tf.errors.ResourceExhaustedError:
    print("refused")
"""


@pytest.mark.parametrize(("given", "expected"), [(None, "refused"), ("false", "allocated")])
def test_tensorflow_allocates_from_the_pool_by_default(given, expected):
    extra = {LIMIT_VARIABLE: "64"} | ({ALLOCATOR_VARIABLE: given} if given else {})
    assert _run(_BOUND_PROBE, _clean_env(**extra)) == expected


def _faults_per_step(**extra: str) -> float:
    return json.loads(_run(_STEP_PROBE, _clean_env(**extra)))["faults_per_step"]


def test_a_pooled_training_step_takes_few_page_faults():
    # One 40 MB temporary mapped afresh would alone be ~10,000 faults of 4 KiB pages.
    assert _faults_per_step() < 1_000


def test_the_pool_removes_the_faults_of_the_default_allocator():
    system = _faults_per_step(**{ALLOCATOR_VARIABLE: "false"})
    if system < 10_000:
        pytest.skip(f"TensorFlow's default allocator reuses its blocks on this machine ({system:.0f} faults/step)")
    assert _faults_per_step() < 0.1 * system


def test_startup_filter_drops_only_the_gpu_probe_lines(capfd):
    from jobi_tf.runtime.tf_settings import _startup_lines_filtered

    noise = (
        "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
        "I0000 00:00:1.0 1 cudart_stub.cc:31] Could not find cuda drivers on your machine, GPU will not be used.\n"
        "E0000 00:00:1.0 1 cuda_platform.cc:52] failed call to cuInit: INTERNAL: CUDA error\n"
    )
    with _startup_lines_filtered():
        os.write(2, (noise + "a real warning\n").encode())
    assert capfd.readouterr().err == "a real warning\n"


def test_a_plain_train_prints_no_gpu_probe_lines(tmp_path):
    """What a newcomer sees on a machine without a GPU: no cuInit/cudart/absl lines unless -v."""
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    args = [sys.executable, "-m", "jobi_tf.cli", "train", "--epochs", "1", "--dim", "4", "--out", str(tmp_path / "r")]
    done = subprocess.run(args, capture_output=True, text=True, env=env, timeout=600, check=True)
    assert json.loads(done.stdout.splitlines()[-1])["run_dir"] == str(tmp_path / "r")
    for probe in ("cuInit", "cudart_stub", "absl::InitializeLog", "cpu_feature_guard"):
        assert probe not in done.stderr


# -- huge pages -----------------------------------------------------------------------------

_HUGE_PAGE_PROBE = """
import json, os, sys
from jobi_tf.runtime.tf_settings import restart_with_huge_pages
restart_with_huge_pages([sys.executable, *sys.orig_argv[1:]])
import ctypes
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
size = 64 * 2**20  # glibc maps a block this large on its own, as it does the pool's regions
block = libc.malloc(size)
ctypes.memset(block, 1, size)  # (not NumPy: it asks for huge pages for its own arrays)
with open("/proc/self/smaps_rollup") as f:
    huge_kb = next(int(line.split()[1]) for line in f if line.startswith("AnonHugePages:"))
print(json.dumps({"pid": os.getpid(), "tunables": os.environ.get("GLIBC_TUNABLES"), "huge_kb": huge_kb}))
"""


def _probe(tmp_path, **extra: str) -> dict:
    script = tmp_path / "probe.py"
    script.write_text(_HUGE_PAGE_PROBE)
    env = {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES", HUGE_PAGES_VARIABLE)}
    env.update(extra)
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(huge_pages_environment({}) is None, reason="no transparent huge pages through glibc here")
def test_restart_backs_large_blocks_with_huge_pages(tmp_path):
    default = _probe(tmp_path)
    assert default["tunables"] == HUGE_PAGES_TUNABLE
    assert default["huge_kb"] >= 32 * 1024, default  # most of the 64 MiB block sits in 2 MiB pages
    off = _probe(tmp_path, **{HUGE_PAGES_VARIABLE: "0"})
    assert off["tunables"] is None and off["huge_kb"] < 32 * 1024, off


def test_huge_pages_environment_keeps_the_users_choices():
    assert huge_pages_environment({}, usable=True) == {"GLIBC_TUNABLES": HUGE_PAGES_TUNABLE, HUGE_PAGES_VARIABLE: "1"}
    added = huge_pages_environment({"GLIBC_TUNABLES": "glibc.pthread.rseq=0"}, usable=True)
    assert added["GLIBC_TUNABLES"] == f"glibc.pthread.rseq=0:{HUGE_PAGES_TUNABLE}"
    own_choices = [{"GLIBC_TUNABLES": "glibc.malloc.hugetlb=0"}, {HUGE_PAGES_VARIABLE: "0"}]
    own_choices.append({HUGE_PAGES_VARIABLE: "false"})
    for kept in own_choices:
        assert huge_pages_environment(kept, usable=True) is None  # the user's own setting wins
    assert huge_pages_environment({HUGE_PAGES_VARIABLE: "1"}, usable=True) is None  # already restarted: no loop
    assert huge_pages_environment({}, usable=False) is None  # no THP or an old glibc: run as is
    assert huge_pages_requested({"GLIBC_TUNABLES": f"a=1:{HUGE_PAGES_TUNABLE}"})
    assert not huge_pages_requested({"GLIBC_TUNABLES": "glibc.malloc.hugetlb=0"})


def test_the_console_script_restarts_with_its_own_arguments(monkeypatch):
    import jobi_tf.cli.main as cli_main

    import jobi_tf.runtime.tf_settings as runtime

    seen = {}
    monkeypatch.setattr(runtime, "restart_with_huge_pages", lambda argv: seen.setdefault("argv", argv))
    monkeypatch.setattr(sys, "orig_argv", ["python3", "/somewhere/bin/jobi-tf", "train", "--epochs", "1"])
    monkeypatch.setattr(cli_main, "main", lambda prog_name: seen.setdefault("prog_name", prog_name))
    cli_main.entry_point()
    # The script itself again, not `-m jobi_tf.cli`, which would import a `jobi_tf` folder of the working directory.
    expected = [sys.executable, "/somewhere/bin/jobi-tf", "train", "--epochs", "1"]
    assert seen == {"argv": expected, "prog_name": "jobi-tf"}


def test_the_console_script_runs_from_a_folder_holding_a_jobi_tf_folder(tmp_path):
    """A checkout's root holds `jobi_tf/` without `cli/`: the restarted command must still find its CLI."""
    (tmp_path / "jobi_tf").mkdir()
    (tmp_path / "jobi_tf" / "__init__.py").write_text("")
    script = Path(sys.executable).parent / "jobi-tf"
    if not script.exists():
        pytest.skip("the jobi-tf console script is not installed beside this interpreter")
    env = {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES", HUGE_PAGES_VARIABLE)}
    args = [str(script), "--version"]
    done = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("jobi-tf, version")


# --- bfloat16 products on a CPU without bfloat16 arithmetic -----------------------------------

_CPUINFO = "processor\t: {n}\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu sse sse2 avx avx2 fma{extra}\n\n"


def _cpuinfo(tmp_path: Path, extra: str) -> str:
    path = tmp_path / "cpuinfo"
    path.write_text("".join(_CPUINFO.format(n=n, extra=extra) for n in range(2)))
    return str(path)


@pytest.mark.parametrize(
    "extra, expected",
    [("", False), (" avx512f avx512_bf16", True), (" amx_bf16 amx_tile", True), (" avx512f avx512bw", False)],
)
def test_native_bfloat16_is_read_from_the_cpu_flags(tmp_path, extra, expected):
    from jobi_tf.runtime.tf_settings import cpu_has_native_bfloat16

    assert cpu_has_native_bfloat16(_cpuinfo(tmp_path, extra)) is expected


def test_native_bfloat16_is_unknown_without_cpuinfo(tmp_path):
    from jobi_tf.runtime.tf_settings import cpu_has_native_bfloat16

    assert cpu_has_native_bfloat16(str(tmp_path / "missing")) is None
    (tmp_path / "no-flags").write_text("processor\t: 0\n")
    assert cpu_has_native_bfloat16(str(tmp_path / "no-flags")) is None


@pytest.mark.parametrize(
    "dtype, extra, warns",
    [("bfloat16", "", True), ("bfloat16", " avx512_bf16", False), ("float32", "", False)],
)
def test_bfloat16_products_on_a_cpu_without_them_warn_in_one_line(tmp_path, caplog, dtype, extra, warns):
    from jobi_tf.config import RunConfig, with_settings
    from jobi_tf.training.products import check_matmul_dtype as _check_matmul_dtype

    cfg = with_settings(RunConfig(), {"loss": "full-softmax", "matmul_dtype": dtype})
    with caplog.at_level("WARNING", logger="jobi_tf.training.trainer"):
        assert _check_matmul_dtype(cfg.train, cfg.eval, _cpuinfo(tmp_path, extra)) is warns
    lines = [r.getMessage() for r in caplog.records]
    if warns:
        assert len(lines) == 1 and "\n" not in lines[0]
        assert "--matmul-dtype float32" in lines[0] and "20x slower" in lines[0] and "auto" in lines[0]
    else:
        assert lines == []


@pytest.mark.parametrize(
    "extra, jit, chosen",
    [
        (" avx512f avx512_bf16", False, "bfloat16"),
        (" amx_bf16 amx_tile", False, "bfloat16"),
        ("", False, "float32"),  # AVX2 only: emulated, about 20x slower
        (" avx512f avx512_bf16", True, "float32"),  # XLA's CPU dot does not use them
    ],
)
def test_matmul_dtype_auto_follows_the_cpu_flags(tmp_path, caplog, extra, jit, chosen):
    from jobi_tf.config import RunConfig, with_settings
    from jobi_tf.runtime.tf_settings import choose_matmul_dtype
    from jobi_tf.training.products import (
        check_matmul_dtype as _check_matmul_dtype,
    )
    from jobi_tf.training.products import (
        resolve_dtypes as _resolve_matmul_dtype,
    )

    cfg = with_settings(RunConfig(), {"loss": "full-softmax", "matmul_dtype": "auto", "jit_compile": jit})
    cpuinfo = _cpuinfo(tmp_path, extra)
    assert choose_matmul_dtype("auto", jit, False, cpuinfo) == chosen
    assert choose_matmul_dtype("auto", jit, True, cpuinfo) == "float32"  # not measured on a GPU
    train, evaluation = _resolve_matmul_dtype(cfg.train, cfg.eval, cpuinfo)
    assert train.matmul_dtype == chosen  # what config.json records
    with caplog.at_level("WARNING", logger="jobi_tf.training.trainer"):
        assert _check_matmul_dtype(train, evaluation, cpuinfo) is False  # auto never picks the slow product


def test_matmul_dtype_given_is_kept_whatever_the_cpu(tmp_path):
    from jobi_tf.runtime.tf_settings import choose_matmul_dtype

    for dtype in ("float32", "bfloat16"):
        assert choose_matmul_dtype(dtype, False, False, _cpuinfo(tmp_path, "")) == dtype
        assert choose_matmul_dtype(dtype, False, False, _cpuinfo(tmp_path, " avx512_bf16")) == dtype
