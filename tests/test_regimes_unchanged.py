"""Every training regime still produces the numbers it produced at commit 6625776.

Why this exists: a refactor of the package's top layers (training regimes, objectives,
regularizers, model tables) and a speed change to the JoBi training step must not move any
regime's numbers. Each case below trains 3 epochs on Kinship, UMLS or the built-in synthetic
graph with a fixed seed through the public API (`jobi_tf.train`) and must reproduce what
``tests/data/regime_metrics.json`` recorded: the whole test-metrics dict (MRR, Hits@1/3/10,
mean rank, count, per direction, per relation, type-inconsistency), the overall validation
metrics, the epoch and best epoch, the losses of the history and, with relation prediction,
`Run.evaluate_relations`. (The JoBi step's speed change, the sampler's single membership
lookup and the per-head matrix-vector scoring, passed it unchanged.) A change that moves
numbers on purpose re-records them, deliberately and said so in its commit (all cases, or
the named ones)::

    JOBI_TF_DATA_DIR=../shared/datasets python tests/test_regimes_unchanged.py --record [CASE ...]

The Kinship and UMLS cases (recorded at 6625776) need the local benchmark copies
(``$JOBI_TF_DATA_DIR``) and skip without them; the synthetic-graph cases (recorded at
4a05fd7, the last commit before the regimes, losses and regularizers got their own modules)
need no files, so CI runs them.

Determinism. Run twice in fresh processes, every case gives bit-identical numbers; but the
float rounding of training depends on the process's setup, and after 3 epochs one rounding
difference can move a rank. Measured with these 26 cases on the 2-core AVX-512 machine
(TensorFlow 2.21), each setting against the pinned setup below:

* ``TF_ENABLE_ONEDNN_OPTS=1`` (TensorFlow's default): 17 cases differ, 3 in their ranks
  (Kinship k-vs-all on test and validation, UMLS k-vs-all with and without the pair head on
  validation).
* Matrix products run oneDNN's sgemm even with ``TF_ENABLE_ONEDNN_OPTS=0`` (inside Eigen's
  contraction), which picks its kernel by the CPU's instruction set at run time: its AVX-512
  kernels instead of the AVX2 ones changed the losses of 7 cases in the last bits (in a draft
  of these cases with other learning rates, also the ranks of one).
* Intra-op threads 1, 2 or 4, and 2 threads on 1 core or on 2: identical. Not so in drafts
  whose every-entity products summed over 500 queries (see `EVERY_ENTITY_BATCH`): 4 threads
  moved the ranks of one case, 1 thread the last bits of the losses of 3 to 5.
* XLA (``jit_compile``) compiles for the host CPU's features: off, as in the other tests.

CPUs. All of that pinned, another CPU model can still round differently: an Intel Xeon with
AVX-512 and AMX moved 6 of the 39 cases from the AMD EPYC's recording, all synthetic-graph
ones (one rank of 2,000, or the losses in their 5th digit after 3 epochs of k-vs-all), the
same code on both. So the main recording is one CPU's (each case's ``recorded_on``), and
``--record`` on another CPU keeps under ``on_other_cpus`` only the cases whose numbers differ
there; a case compares with its CPU's entry when there is one, else with the main recording.
A change that re-records the main recording on purpose re-records (or drops) the other
CPUs' entries of those cases.

So the cases train in a child process with all of that pinned (`CHILD_ENVIRONMENT`,
`THREADS`): oneDNN's graph rewrites off, its kernels capped at AVX2 (so that AVX2 and
AVX-512 machines run the same kernels), 2 intra-op and 2 inter-op threads whatever the
machine's cores, no GPU, no XLA; and no product over the batch sums more than 250 terms
(`EVERY_ENTITY_BATCH`). Not covered: a CPU without AVX2, another TensorFlow or oneDNN build
(re-record then). The comparison allows 1e-6, absolute or relative: last-bit differences of a
float32 loss pass, a single moved rank does not (it moves a mean rank by at least
1 / (2 * queries), over 1e-4).

The parameter-server cases run their in-process cluster (as bench/ps_in_process.py does) in
a child of their own, with one worker: its steps then run in order and repeat bit for bit.
With two workers the steps interleave asynchronously and the numbers differ from run to run
(tests/test_ps_training.py bounds that difference instead).
"""

from __future__ import annotations

import json
import math
import os
import platform
import subprocess
import sys
import time
import traceback
from pathlib import Path

import pytest

RECORDED = Path(__file__).resolve().parent / "data" / "regime_metrics.json"
#: Benchmark copies under ``$JOBI_TF_DATA_DIR`` (skipped without them).
LOCAL_DATASETS = ("kinship", "umls")
#: Graphs jobi_tf builds itself (`jobi_tf.load_dataset`): no files, so they run everywhere.
OFFLINE_DATASETS = ("synthetic",)
DATASETS = LOCAL_DATASETS + OFFLINE_DATASETS
DATA_DIR_ENV = "JOBI_TF_DATA_DIR"

#: Environment of the child processes that train (see the module docstring).
CHILD_ENVIRONMENT = {
    "TF_ENABLE_ONEDNN_OPTS": "0",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "CUDA_VISIBLE_DEVICES": "",
    "TF_CPP_MIN_LOG_LEVEL": "2",
    "PYTHONHASHSEED": "0",
}
#: Removed from the children's environment: they would change the devices or the strategy.
CHILD_UNSET = ("TF_CONFIG", "JOBI_TF_LOGICAL_CPUS", "XLA_FLAGS", "TF_XLA_FLAGS", "TF_DETERMINISTIC_OPS")
#: Intra-op and inter-op threads of every TensorFlow thread pool that trains.
THREADS = 2
#: Comparison: a float passes when within 1e-6 absolute or relative of the recorded one.
ABS_TOL = REL_TOL = 1e-6
#: Timing fields of ``metrics.json``: not compared.
TIMING = frozenset({"train_seconds", "epoch_seconds", "positives_per_second", "positives_per_second_median"})

#: Settings every case shares; a case's own settings win.
COMMON = dict(
    model="complex",
    dim=16,
    batch_size=500,
    neg=16,
    optimizer="adam",
    lr=0.05,
    epochs=3,
    eval_every=3,
    patience=10,
    jit_compile=False,
    seed=0,
)
#: Batches of 125 where every entity is scored: the entity table's gradient then sums over at
#: most 250 queries (125 positives x 2 heads with ``joint``), fewer than Eigen's block of the
#: summed dimension on any CPU with an L1 cache of 32 KB or more (Eigen sizes that block from
#: the cache sizes it reads at run time, capped at 320), so no CPU splits those sums differently.
EVERY_ENTITY_BATCH = 125
ONE_VS_ALL = dict(
    loss="full-softmax",
    reciprocal=True,
    regularizer="n3",
    regularization=0.05,
    optimizer="adagrad",
    lr=0.1,
    batch_size=EVERY_ENTITY_BATCH,
)
#: The regimes, each trained on every dataset of `DATASETS`.
REGIMES = {
    "baseline": dict(loss="sampled-softmax", joint=False, p=0.0),
    "jobi": dict(joint=True, p=0.3),
    "jobi-per-negative": dict(joint=True, p=0.3, corrupt_side="per-negative"),
    "shared-negatives": dict(joint=True, p=0.3, shared_negatives=50),
    "1-vs-all": dict(ONE_VS_ALL),
    "1-vs-all-joint": dict(ONE_VS_ALL, joint=True),
    "k-vs-all": dict(loss="k-vs-all", joint=False, batch_size=EVERY_ENTITY_BATCH, lr=0.2),
    "k-vs-all-joint": dict(loss="k-vs-all", joint=True, batch_size=EVERY_ENTITY_BATCH, lr=0.2),
    "relation-prediction": dict(
        loss="full-softmax",
        reciprocal=True,
        relation_prediction=0.5,
        optimizer="adagrad",
        lr=0.1,
        batch_size=EVERY_ENTITY_BATCH,
    ),
    "l2": dict(joint=True, p=0.3, regularizer="l2", regularization=0.01),
    "simple-jobi": dict(model="simple", joint=True, p=0.3),
    "distmult-jobi": dict(model="distmult", joint=True, p=0.3),
}
#: ``{"kinship/jobi": {"dataset": "kinship", "settings": {...}}}``: single-device cases.
CASES = {
    f"{data}/{name}": {"dataset": data, "settings": {**COMMON, **regime}}
    for data in DATASETS
    for name, regime in REGIMES.items()
}
#: The in-process cluster of the parameter-server cases: one worker (steps in order), two servers.
CLUSTER = {"workers": 1, "ps": 2}
PS_CASES = {
    f"{data}/parameter-server": {
        "dataset": data,
        "settings": {**COMMON, "joint": True, "p": 0.3, "optimizer": "lazy-adam", "strategy": "parameter-server"},
        "cluster": CLUSTER,
    }
    for data in DATASETS
}
ALL_CASES = {**CASES, **PS_CASES}


# -- the child processes that train --------------------------------------------------------
def _child_environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in CHILD_UNSET}
    env.update(CHILD_ENVIRONMENT)
    return env


#: Seconds a child may take (here: about 40 for the single-device cases, 15 for the cluster).
TIMEOUTS = {"single": 300, "ps": 180}


def _run_children(names: list[str], work: Path) -> dict[str, dict]:
    """Train the named cases in child processes (single-device ones in one child, the
    parameter-server ones in another); ``{name: result}``, a child's failure as ``error``."""
    results: dict[str, dict] = {}
    groups = [("single", [n for n in names if n in CASES]), ("ps", [n for n in names if n in PS_CASES])]
    for kind, group in groups:
        if not group:
            continue
        timeout = TIMEOUTS[kind]
        out = work / f"{kind}-results.json"
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", kind, str(out), str(work), *group]
        try:
            done = subprocess.run(cmd, env=_child_environment(), capture_output=True, text=True, timeout=timeout)
            failure = None if out.is_file() else f"exit code {done.returncode}\n{done.stderr[-4000:]}"
        except subprocess.TimeoutExpired as exc:
            failure = f"timed out after {timeout} s\n{(exc.stderr or b'')[-4000:]!r}"
        got = json.loads(out.read_text()) if out.is_file() else {}
        for name in group:
            results[name] = got.get(name) or {"error": f"the {kind} child wrote no result: {failure}"}
    return results


def _comparable(metrics: dict) -> dict:
    """``metrics.json`` without its timing fields, and of the validation metrics only the
    overall figures (test keeps its per-direction and per-relation breakdown; the
    validation one would double the file)."""
    out = {k: v for k, v in metrics.items() if k not in TIMING}
    out["valid"] = {k: v for k, v in metrics["valid"].items() if not isinstance(v, dict)}
    out["history"] = [{k: v for k, v in h.items() if k not in TIMING} for h in metrics.get("history", [])]
    return out


def _train_case(jobi_tf, name: str, case: dict, data, work: Path) -> dict:
    started = time.perf_counter()
    run = jobi_tf.train(data, run_dir=work / name.replace("/", "-"), verbose=0, **case["settings"])
    result = {"metrics": _comparable(run.metrics)}
    if case["settings"].get("relation_prediction"):
        result["relation_metrics"] = run.evaluate_relations("test")
    config = run.config.to_dict()
    config.pop("data")  # a machine's path
    result["config"] = config
    result["seconds"] = round(time.perf_counter() - started, 2)
    return result


def _in_process_cluster(workers: int, ps: int) -> list:
    """Servers for ``workers`` workers and ``ps`` parameter servers in this process, on free
    loopback ports, and ``$TF_CONFIG`` naming this process the chief (as bench/ps_in_process.py)."""
    import socket

    import tensorflow as tf

    from jobi_tf.ps_training import server_config

    socks = [socket.socket() for _ in range(1 + workers + ps)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    spec = {
        "chief": [f"127.0.0.1:{ports[0]}"],
        "worker": [f"127.0.0.1:{p}" for p in ports[1 : 1 + workers]],
        "ps": [f"127.0.0.1:{p}" for p in ports[1 + workers :]],
    }
    config = server_config(workers)
    config.intra_op_parallelism_threads = THREADS  # the worker's products: pinned as the chief's
    cluster = tf.train.ClusterSpec(spec)
    servers = [
        tf.distribute.Server(cluster, job_name=job, task_index=i, protocol="grpc", config=config)
        for job in ("worker", "ps")
        for i in range(len(spec[job]))
    ]
    os.environ["TF_CONFIG"] = json.dumps({"cluster": spec, "task": {"type": "chief", "index": 0}})
    return servers


def _child(kind: str, out: Path, work: Path, names: list[str]) -> None:
    """Train ``names`` in this process and write ``{name: result}`` to ``out``."""
    import tensorflow as tf  # imported, not started: jobi_tf sets its allocator before the first op

    import jobi_tf

    tf.config.threading.set_intra_op_parallelism_threads(THREADS)
    tf.config.threading.set_inter_op_parallelism_threads(THREADS)
    root = Path(os.environ.get(DATA_DIR_ENV, "."))
    cases = PS_CASES if kind == "ps" else CASES
    servers = _in_process_cluster(**CLUSTER) if kind == "ps" else []
    datasets: dict[str, object] = {}
    results: dict[str, dict] = {}
    for name in names:
        case = cases[name]
        try:
            if case["dataset"] not in datasets:
                name_or_folder = case["dataset"] if case["dataset"] in OFFLINE_DATASETS else root / case["dataset"]
                datasets[case["dataset"]] = jobi_tf.load_dataset(name_or_folder)
            results[name] = _train_case(jobi_tf, name, case, datasets[case["dataset"]], work)
        except Exception:  # noqa: BLE001  (reported as that case's failure)
            results[name] = {"error": traceback.format_exc()}
        print(f"{name}: {results[name].get('seconds', 'failed')} s", file=sys.stderr, flush=True)
    out.write_text(json.dumps(results))
    if servers:
        sys.stderr.flush()
        os._exit(0)  # in-process servers cannot be shut down cleanly


# -- comparison ------------------------------------------------------------------------------
def differences(recorded, got, path: str = "") -> list[str]:
    """Where ``got`` differs from ``recorded``: every recorded value must be there, floats
    within `ABS_TOL` or `REL_TOL`, everything else equal (keys ``got`` adds are allowed)."""
    if isinstance(recorded, dict):
        if not isinstance(got, dict):
            return [f"{path}: recorded a dict, got {got!r}"]
        out = []
        for key, value in recorded.items():
            if key not in got:
                out.append(f"{path}/{key}: missing (recorded {value!r})")
            else:
                out.extend(differences(value, got[key], f"{path}/{key}"))
        return out
    if isinstance(recorded, list):
        if not isinstance(got, list) or len(got) != len(recorded):
            return [f"{path}: recorded {len(recorded)} entries, got {got!r}"]
        pairs = enumerate(zip(recorded, got, strict=True))
        return [d for i, (a, b) in pairs for d in differences(a, b, f"{path}[{i}]")]
    if isinstance(recorded, float) and isinstance(got, (int, float)) and not isinstance(got, bool):
        if math.isnan(recorded) and math.isnan(got):
            return []
        if math.isclose(got, recorded, rel_tol=REL_TOL, abs_tol=ABS_TOL):
            return []
        return [f"{path}: recorded {recorded!r}, got {got!r} (difference {got - recorded:.3g})"]
    return [] if got == recorded and type(got) is type(recorded) else [f"{path}: recorded {recorded!r}, got {got!r}"]


# -- the tests ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def recorded() -> dict:
    """The main recording's cases, each case's result replaced by this CPU's where it has one."""
    doc = json.loads(RECORDED.read_text())
    here = doc.get("on_other_cpus", {}).get(this_cpu(), {})
    return {name: {**case, **here.get(name, {})} for name, case in doc["cases"].items()}


def _missing(dataset: str) -> str | None:
    """Why ``dataset``'s cases cannot run here (None: they can)."""
    if dataset in OFFLINE_DATASETS:
        return None
    root = os.environ.get(DATA_DIR_ENV)
    if not root:
        return f"{DATA_DIR_ENV} not set"
    if not (Path(root) / dataset / "train.txt").is_file():
        return f"{DATA_DIR_ENV}={root} lacks {dataset}"
    return None


def _runnable(cases: dict) -> list[str]:
    return [name for name, case in cases.items() if _missing(case["dataset"]) is None]


@pytest.fixture(scope="module")
def single_device_results(tmp_path_factory) -> dict[str, dict]:
    return _run_children(_runnable(CASES), tmp_path_factory.mktemp("regimes"))


@pytest.fixture(scope="module")
def ps_results(tmp_path_factory) -> dict[str, dict]:
    return _run_children(_runnable(PS_CASES), tmp_path_factory.mktemp("regimes-ps"))


def _check(name: str, result: dict | None, recorded: dict) -> None:
    if result is None:
        pytest.skip(_missing(ALL_CASES[name]["dataset"]))
    assert "error" not in result, f"{name} failed to train:\n{result['error']}"
    assert name in recorded, f"{name} is not in {RECORDED.name}: record it (see the module docstring)"
    want = recorded[name]
    now = ALL_CASES[name]["settings"]
    changed = {k: (want["settings"].get(k), now.get(k)) for k in {*want["settings"], *now}}
    changed = {k: v for k, v in changed.items() if v[0] != v[1]}
    assert not changed, f"{name}: settings differ from the recorded ones (recorded, now): {changed}"
    found = differences(want["result"]["metrics"], result["metrics"], "metrics")
    if "relation_metrics" in want["result"]:
        found += differences(want["result"]["relation_metrics"], result.get("relation_metrics"), "relation_metrics")
    shown = "\n".join(found[:25]) + (f"\n... and {len(found) - 25} more" if len(found) > 25 else "")
    assert not found, f"{name}: {len(found)} numbers moved since {want['recorded_at']}:\n{shown}"


@pytest.mark.parametrize("name", list(CASES))
def test_regime_metrics_unchanged(name, single_device_results, recorded):
    _check(name, single_device_results.get(name), recorded)


@pytest.mark.parametrize("name", list(PS_CASES))
def test_parameter_server_metrics_unchanged(name, ps_results, recorded):
    _check(name, ps_results.get(name), recorded)


def test_every_recorded_case_is_still_a_case(recorded):
    assert sorted(recorded) == sorted(ALL_CASES)
    other_cpus = json.loads(RECORDED.read_text()).get("on_other_cpus", {})
    assert {n for cases in other_cpus.values() for n in cases} <= set(ALL_CASES)


# -- recording ---------------------------------------------------------------------------------
def this_cpu() -> str:
    """``"<model name> (<ISA>), <n> cores"`` of this machine, as the recordings name CPUs."""
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else ""
    pairs = (line.split(":", 1) for line in info.splitlines()[:40] if ":" in line)
    fields = {k.strip(): v.strip() for k, v in pairs}  # the first processor's
    flags = fields.get("flags", "").split()
    isa = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "neither AVX2 nor AVX-512"
    return f"{fields.get('model name', '?')} ({isa}), {os.cpu_count()} cores"


def _record_other_cpu(doc: dict, cpu: str, commit: str, results: dict[str, dict]) -> None:
    """On a CPU other than the main recording's: keep, under ``on_other_cpus[cpu]``, the cases
    whose numbers differ here from the main recording (the rest compare with it as they are)."""
    mine = doc.setdefault("on_other_cpus", {}).setdefault(cpu, {})
    for name, result in results.items():
        result.pop("seconds")
        main = doc["cases"][name]["result"]
        found = differences(main["metrics"], result["metrics"], "metrics")
        if "relation_metrics" in main:
            found += differences(main["relation_metrics"], result.get("relation_metrics"), "relation_metrics")
        if found:
            mine[name] = {"recorded_at": commit, "result": result}
        else:
            mine.pop(name, None)
        print(f"{name:32s} {'differs here: recorded for ' + cpu if found else 'as the main recording'}")
    if not mine:
        doc["on_other_cpus"].pop(cpu)
    RECORDED.write_text(json.dumps(doc, indent=1, sort_keys=False) + "\n")
    print(f"wrote {RECORDED} ({len(mine)} cases of {cpu} recorded at {commit})")


def _source_commit() -> str:
    """The commit of the jobi_tf that the children import, ``+dirty`` if its files differ from it."""
    import importlib.util

    package = Path(importlib.util.find_spec("jobi_tf").origin).parent
    git = ["git", "-C", str(package)]
    commit = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    dirty = subprocess.run([*git, "status", "--porcelain", "--", "."], capture_output=True, text=True).stdout.strip()
    return commit[:7] + ("+dirty" if dirty else "")


def record(names: list[str]) -> None:
    """Train the cases and (re)write their entries in `RECORDED`; other entries are kept."""
    import tempfile
    from importlib import metadata

    missing = sorted({m for n in names if (m := _missing(ALL_CASES[n]["dataset"]))})
    if missing:
        sys.exit(f"cannot record every named case: {'; '.join(missing)}")
    commit = _source_commit()
    with tempfile.TemporaryDirectory(prefix="regimes-") as work:
        results = _run_children(names, Path(work))
    failed = {n: r["error"] for n, r in results.items() if "error" in r}
    if failed:
        sys.exit("\n".join(f"{n}:\n{e}" for n, e in failed.items()))
    old = json.loads(RECORDED.read_text()) if RECORDED.is_file() else {"cases": {}}
    cpu = this_cpu()
    main_cpus = {c["recorded_on"]["cpu"] for c in old["cases"].values()}
    if main_cpus and cpu not in main_cpus:
        _record_other_cpu(old, cpu, commit, {n: results[n] for n in names})
        return
    doc = {
        "about": "Metrics of short fixed-seed runs of every training regime; tests/test_regimes_unchanged.py "
        "asserts them (its docstring: why, determinism, tolerance). Re-record deliberately: "
        "JOBI_TF_DATA_DIR=../shared/datasets python tests/test_regimes_unchanged.py --record [CASE ...]",
        "tolerance": {"abs": ABS_TOL, "rel": REL_TOL, "not_compared": sorted(TIMING)},
        "environment": {**CHILD_ENVIRONMENT, "intra_op_threads": THREADS, "inter_op_threads": THREADS},
        "cases": old["cases"],
        "on_other_cpus": old.get("on_other_cpus", {}),
    }
    for name in names:
        result = results[name]
        doc["cases"][name] = {
            **ALL_CASES[name],
            "recorded_at": commit,
            "recorded_on": {
                "cpu": cpu,
                "python": platform.python_version(),
                **{p: metadata.version(p) for p in ("tensorflow", "keras", "numpy")},
            },
            "seconds": result.pop("seconds"),
            "result": result,
        }
    doc["cases"] = {n: doc["cases"][n] for n in ALL_CASES if n in doc["cases"]}  # the order of ALL_CASES
    commits = sorted({c["recorded_at"] for c in doc["cases"].values()})
    doc = {"recorded_at": commits[0] if len(commits) == 1 else commits, **doc}
    RECORDED.parent.mkdir(parents=True, exist_ok=True)
    RECORDED.write_text(json.dumps(doc, indent=1, sort_keys=False) + "\n")
    for name in names:
        mrr = results[name]["metrics"]["test"]["mrr"]
        print(f"{name:32s} {doc['cases'][name]['seconds']:6.1f} s  test mrr {mrr:.6f}")
    print(f"wrote {RECORDED} ({len(names)} cases recorded at {commit})")


def main(argv: list[str]) -> None:
    import argparse

    ap = argparse.ArgumentParser(description="Re-record tests/data/regime_metrics.json (all cases, or those named).")
    ap.add_argument("--record", action="store_true", help="train the cases and write their metrics")
    ap.add_argument("--child", nargs=3, metavar=("KIND", "OUT", "WORK"), help=argparse.SUPPRESS)
    ap.add_argument("cases", nargs="*", help=f"case names (default: all): {', '.join(ALL_CASES)}")
    a = ap.parse_args(argv)
    if a.child:
        kind, out, work = a.child
        _child(kind, Path(out), Path(work), a.cases)
        return
    if not a.record:
        ap.error("nothing to do: pass --record (the tests run under pytest)")
    unknown = [n for n in a.cases if n not in ALL_CASES]
    if unknown:
        ap.error(f"unknown case(s) {', '.join(unknown)}; known: {', '.join(ALL_CASES)}")
    record(a.cases or list(ALL_CASES))


if __name__ == "__main__":
    main(sys.argv[1:])
