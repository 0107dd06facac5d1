"""Where a compiled training step's time goes, XLA operation by operation.

Timing parts of a step as separately compiled functions misses what XLA fuses; this script
times one compiled step as it runs in training and reads XLA's own per-operation trace
(``--xla_cpu_enable_xprof_traceme``, which it sets), so it can say which product, gather or
optimizer update costs what inside the fused step.

Steps:
1. Load the dataset and draw ``--steps`` batches from the real tf.data sampler for each variant
   (``baseline``: no pair head, p 0; ``jobi``: pair head, p 0.3, ``--pair-every``).
2. Compile Keras's train step (model forward, loss, gradient, optimizer update) with XLA, run
   every batch twice to warm up, time ``--passes`` passes (wall milliseconds per step, median),
   then run two passes under TensorFlow's profiler.
3. Sum each XLA operation's time over the trace's worker threads, per step. These are thread
   milliseconds: two threads run operations at once, so their sum exceeds the wall time.
   Each operation is labelled with the TensorFlow op it came from (its ``op_name`` in the
   optimized HLO, which the script dumps) and grouped: ``optimizer``, ``forward:<op>``,
   ``backward:<op>``.
4. One JSON line: per variant, the wall ms per step, the thread ms of every group and of the
   ``--top`` most costly operations with their shapes.

Settings (``--setting``): ``pbg``: PyTorch-BigGraph's work per positive, as in the step-cost
runs of docs/performance.md (1000 x 100, uniform shared in chunks of 50, one corrupted side per
positive, reciprocal, ``row-adagrad`` 0.1); ``shared``: 1000 x 100 shared in one chunk of 1000
(dense Adam 0.001), one corrupted side per positive. JoBi with ``--biased-chunk 10`` in both.

Run:  JOBI_TF_DATA_DIR=../shared/datasets python bench/op_profile.py --setting pbg --pair-every 10
      (a larger graph: ``--data-dir /work/data/replicated/K137 --dim 100 --optimizer lazy-adam``)
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import statistics
import sys
import tempfile
from pathlib import Path

DUMP = Path(tempfile.mkdtemp(prefix="op-profile-hlo-"))
TRACE_FLAGS = f"--xla_cpu_enable_xprof_traceme=true --xla_dump_to={DUMP} --xla_dump_hlo_as_text"
os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {TRACE_FLAGS}"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).parent))
from _common import compiled_train_step, data_dir, emit, machine, step_passes  # noqa: E402, I001

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402
from tensorflow.tsl.profiler.protobuf import xplane_pb2  # noqa: E402

from jobi_tf.config import DataConfig, SamplerConfig  # noqa: E402
from jobi_tf.datasets.loading import load_index  # noqa: E402
from jobi_tf.models import JoBiModel  # noqa: E402
from jobi_tf.optimizers import make_optimizer  # noqa: E402
from jobi_tf.sampling.pipelines import make_train_dataset  # noqa: E402

#: ``--setting``: sampler settings, optimizer, learning rate, reciprocal relations.
SETTINGS = {
    "pbg": (dict(shared_negatives=50, corrupt_side="per-positive"), "row-adagrad", 0.1, True),
    "shared": (dict(shared_negatives=1000, corrupt_side="per-positive"), "adam", 0.001, False),
}
#: Trace events that wrap the compiled step rather than run one of its operations.
WRAPPERS = ("ThunkExecutor", "Slinky", "TFE_", "Eager", "CpuExecutable", "BlockUntil", "__inference", "$")


def _package_commit() -> str:
    """The commit of the jobi_tf this process imports (``+dirty`` if its files differ): an
    A/B of two commits runs this script with ``PYTHONPATH`` at each checkout."""
    import subprocess

    import jobi_tf

    git = ["git", "-C", str(Path(jobi_tf.__file__).parent)]
    head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False)
    dirty = subprocess.run([*git, "status", "--porcelain", "--", "."], capture_output=True, text=True, check=False)
    return (head.stdout.strip() or "unknown") + ("+dirty" if dirty.stdout.strip() else "")


def _op_names(dump: Path) -> dict[str, tuple[str, str]]:
    """``{hlo instruction: (TensorFlow op_name, shape)}`` from the newest optimized step module;
    a fusion takes the op_name of its called computation's root."""
    module = max(dump.glob("*step*after_optimizations.txt"), key=lambda p: p.stat().st_mtime)
    names, roots, calls, shapes, computation = {}, {}, {}, {}, None
    for line in module.read_text().splitlines():
        if header := re.match(r"^%?([\w.\-]+) .*\{\s*$", line):
            computation = header.group(1)
            continue
        if not (instr := re.match(r"\s*(ROOT )?%?([\w.\-]+) = (\S+)", line)):
            continue
        op = re.search(r'op_name="([^"]*)"', line)
        if instr.group(1) and op and computation:
            roots[computation] = op.group(1)
        name = instr.group(2)
        shapes.setdefault(name, instr.group(3))
        if op:
            names.setdefault(name, op.group(1))
        if called := re.search(r"calls=%?([\w.\-]+)", line):
            calls[name] = called.group(1)
    return {n: (names.get(n) or roots.get(calls.get(n, ""), ""), shapes[n]) for n in shapes}


def _group(op_name: str) -> str:
    parts = op_name.split("/")
    if not op_name:
        return "unlabelled"
    if any(k in parts[0].lower() for k in ("adam", "adagrad", "optimizer")):
        return "optimizer"
    if parts[0] == "gradient_tape":
        return "backward:" + (parts[2] if len(parts) > 2 else "?")
    return "forward:" + (parts[1] if len(parts) > 1 else parts[0])


def profile(index, variant: str, args: argparse.Namespace) -> dict:
    sampler, optimizer, lr, reciprocal = SETTINGS[args.setting]
    optimizer = args.optimizer or optimizer
    joint = variant == "jobi"
    pair_every = args.pair_every if joint else 1
    cfg = SamplerConfig(batch_size=1000, neg=100, p=0.3 if joint else 0.0, biased_chunk=10 if joint else 0, **sampler)
    batches = iter(make_train_dataset(index, cfg, seed=0, pair_labels=joint, pair_every=pair_every))
    batches = [next(batches) for _ in range(args.steps)]
    keras.utils.set_random_seed(0)
    model = JoBiModel(
        index.num_entities, index.num_relations, dim=args.dim, joint=joint, pair_every=pair_every, reciprocal=reciprocal
    )
    model.compile(optimizer=make_optimizer(optimizer, lr), jit_compile=True)
    step = compiled_train_step(model)
    wall = [1000 * seconds for seconds in step_passes(step, batches, args.passes)]
    trace = Path(tempfile.mkdtemp(prefix="op-profile-trace-"))
    tf.profiler.experimental.start(str(trace))
    for _ in range(2):
        for batch in batches:
            loss = step(batch)
    loss.numpy()
    tf.profiler.experimental.stop()
    space = xplane_pb2.XSpace()
    space.ParseFromString(next(trace.rglob("*.xplane.pb")).read_bytes())
    per_op: collections.Counter = collections.Counter()
    for plane in space.planes:
        names = {k: v.name for k, v in plane.event_metadata.items()}
        for line in plane.lines:
            for event in line.events:
                name = names.get(event.metadata_id, "?")
                if not name.startswith(WRAPPERS) and ":" not in name and name != "step":
                    per_op[name] += event.duration_ps / 1e9 / (2 * len(batches))
    labels = _op_names(DUMP)
    groups: collections.Counter = collections.Counter()
    for name, ms in per_op.items():
        groups[_group(labels.get(name, ("", ""))[0])] += ms
    return {
        "wall_ms_per_step": round(statistics.median(wall), 2),
        "thread_ms_per_step": round(sum(per_op.values()), 2),
        "groups": {k: round(v, 3) for k, v in groups.most_common()},
        "top_operations": [
            {"hlo": n, "op_name": labels.get(n, ("", ""))[0], "shape": labels.get(n, ("", ""))[1], "ms": round(v, 3)}
            for n, v in per_op.most_common(args.top)
        ],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--setting", choices=sorted(SETTINGS), default="pbg")
    parser.add_argument("--pair-every", type=int, default=10)
    parser.add_argument("--variants", nargs="+", default=["baseline", "jobi"], choices=["baseline", "jobi"])
    parser.add_argument("--steps", type=int, default=20, help="distinct batches per pass")
    parser.add_argument("--passes", type=int, default=5, help="timed passes (wall time)")
    parser.add_argument("--top", type=int, default=15, help="operations listed per variant")
    parser.add_argument("--data-dir", help="a graph folder (default: $JOBI_TF_DATA_DIR/fb15k-237)")
    parser.add_argument("--dim", type=int, default=200, help="ComplEx components per part")
    parser.add_argument("--optimizer", help="instead of the setting's optimizer (e.g. lazy-adam)")
    args = parser.parse_args()
    folder = data_dir("fb15k-237", args.data_dir)
    _, _, index = load_index(DataConfig(data_dir=str(folder)))
    results = {}
    for variant in args.variants:
        results[variant] = profile(index, variant, args)
        print(f"{variant}: {results[variant]['wall_ms_per_step']} ms wall", file=sys.stderr)
        keras.backend.clear_session()
    sampler, optimizer, lr, reciprocal = SETTINGS[args.setting]
    emit(
        {
            "bench": "op_profile",
            "metric": "per training step: wall ms (median of passes) and thread ms of each XLA operation",
            "value": results,
            "command": " ".join(["python", *sys.argv]),
            "jobi_tf_commit": _package_commit(),
            "machine": machine(),
            "config": {
                "dataset": str(folder),
                "model": f"complex dim {args.dim}",
                "batch_size": 1000,
                "neg": 100,
                "jobi": {"p": 0.3, "biased_chunk": 10, "pair_every": args.pair_every},
                "baseline": {"p": 0.0},
                "sampler": sampler,
                "optimizer": args.optimizer or optimizer,
                "lr": lr,
                "reciprocal": reciprocal,
                "batches": args.steps,
            },
            "tf": tf.__version__,
            "keras": keras.__version__,
        }
    )


if __name__ == "__main__":
    main()
