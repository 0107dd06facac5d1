"""1-vs-all epoch time of jobi-tf against kbc's own code, same run, same settings.

The 1-vs-all table of docs/performance.md needs an anchor a reader knows: kbc
(facebookresearch/kbc, Lacroix et al.), whose ComplEx + N3 + Adagrad recipe jobi-tf's
``--preset kbc-fast`` follows. Both sides train one full FB15k-237 epoch per measurement:
* kbc: `peer_kbc.py` in ``--peer-python`` (its code unchanged, on the CPU), batches of
  ``2 x --batch-size`` rows (kbc counts a triple and its reciprocal as two rows);
* jobi-tf: the real pipeline (tf.data → `JoBiModel` → Keras ``fit``, `ours_epoch`): ComplEx,
  ``--loss full-softmax``, reciprocal, N3 0.05, Adagrad 0.1, batch ``--batch-size`` triples, no
  XLA (as ``kbc-fast``), float32 and bfloat16 products; one epoch after 3 warm-up steps.
Same threads on both sides (``--threads``; pin the process with ``taskset`` for one core).
The order of the sides rotates each round; ratios are kbc's epoch seconds / ours per round,
and their median (`rederive_ratios.py` recomputes them from the stored seconds).

Run:  JOBI_TF_DATA_DIR=../shared/datasets taskset -c 0 python bench/kbc_anchor.py \\
          --peer-python PEER/bin/python --kbc-src /path/to/kbc --ranks 200 --rounds 2 --threads 1
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).parent))
from _common import Usage, data_dir, emit, kernel_check, machine, ratio_entry  # noqa: E402, I001
from train_speed import BatchClock  # noqa: E402

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from jobi_tf.config import DataConfig, SamplerConfig  # noqa: E402
from jobi_tf.datasets.loading import load_index  # noqa: E402
from jobi_tf.models import JoBiModel  # noqa: E402
from jobi_tf.optimizers import make_optimizer  # noqa: E402
from jobi_tf.sampling.pipelines import make_train_dataset, steps_per_epoch  # noqa: E402

WARMUP = 3


def kbc_epoch(args, rank: int) -> dict:
    command = [
        args.peer_python, str(Path(__file__).with_name("peer_kbc.py")), "--kbc-src", str(args.kbc_src),
        "--data-dir", str(args.folder), "--rank", str(rank), "--rows", str(2 * args.batch_size),
        "--threads", str(args.threads), "--epochs", "1",
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode:
        sys.exit(f"peer_kbc.py failed ({done.returncode}): {done.stderr.strip().splitlines()[-1:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def ours_epoch(index, rank: int, dtype: str, args) -> tuple[float, Usage]:
    """Seconds of one epoch of kbc-fast's shape through Keras ``fit`` (no XLA), timed from the end
    of the last of `WARMUP` steps, and the CPU use of the ``fit``."""
    keras.utils.set_random_seed(0)
    model = JoBiModel(index.num_entities, index.num_relations, model="complex", dim=rank, joint=False,
                      loss="full-softmax", reciprocal=True, regularization=0.05, regularizer="n3",
                      matmul_dtype=dtype, relation_prediction=0.0)  # fmt: skip
    model.compile(optimizer=make_optimizer("adagrad", 0.1), jit_compile=False)
    dataset = make_train_dataset(index, SamplerConfig(batch_size=args.batch_size), full_softmax=True, slot_rows=False)
    clock = BatchClock()
    with Usage() as used:
        steps = WARMUP + steps_per_epoch(index, args.batch_size)
        model.fit(dataset, epochs=1, steps_per_epoch=steps, verbose=0, shuffle=False, callbacks=[clock])
    return clock.ends[-1] - clock.ends[WARMUP - 1], used


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peer-python", required=True, help="python of a virtualenv with torch and tqdm")
    parser.add_argument("--kbc-src", type=Path, required=True, help="folder holding kbc's kbc/ package")
    parser.add_argument("--dataset", default="fb15k-237")
    parser.add_argument("--data-dir", help="its local copy (default: $JOBI_TF_DATA_DIR/<dataset>)")
    parser.add_argument("--ranks", type=int, nargs="+", default=[200])
    parser.add_argument("--batch-size", type=int, default=500, help="triples (kbc's rows: twice this)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--matmul-dtypes", nargs="+", default=["float32", "bfloat16"], choices=["float32", "bfloat16"])
    args = parser.parse_args()
    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    args.folder = data_dir(args.dataset, args.data_dir)
    _, _, index = load_index(DataConfig(dataset=args.dataset, data_dir=str(args.folder)))
    sides = ["kbc", *args.matmul_dtypes]
    results, usages, kbc_settings = {}, {}, None
    for rank in args.ranks:
        seconds = {side: [] for side in sides}
        for r in range(args.rounds):
            for side in sides[r % len(sides) :] + sides[: r % len(sides)]:
                if side == "kbc":
                    peer = kbc_epoch(args, rank)
                    kbc_settings = {**peer["settings"], "versions": peer["versions"]}
                    seconds["kbc"].append(peer["epoch_seconds"][0])
                else:
                    mine, usages[f"rank {rank} {side} round {r + 1}"] = ours_epoch(index, rank, side, args)
                    seconds[side].append(round(mine, 2))
                print(f"rank {rank} round {r + 1} {side}: {seconds[side][-1]} s", file=sys.stderr, flush=True)
        entry = {"epoch_seconds": seconds}
        for side in args.matmul_dtypes:
            entry[f"kbc_over_{side}"] = ratio_entry([k / o for k, o in zip(seconds["kbc"], seconds[side], strict=True)])
        if {"float32", "bfloat16"} <= set(args.matmul_dtypes):
            ratios = [f / b for f, b in zip(seconds["float32"], seconds["bfloat16"], strict=True)]
            entry["float32_over_bfloat16"] = ratio_entry(ratios)
        results[f"rank {rank}"] = entry
    emit(
        {
            "bench": "kbc_anchor",
            "metric": f"seconds per {args.dataset} 1-vs-all epoch (one full epoch per measurement); ratio = kbc / ours",
            "results": results,
            "rounds": args.rounds,
            "settings": {
                "jobi_tf": "ComplEx, --loss full-softmax, reciprocal, N3 0.05, Adagrad lr 0.1, no XLA, "
                f"batch {args.batch_size} triples, {steps_per_epoch(index, args.batch_size)} steps an epoch, "
                f"{WARMUP} warm-up steps before the timed epoch",
                "kbc": kbc_settings,
                "threads": args.threads,
                "affinity": sorted(os.sched_getaffinity(0)),
                "training_triples": len(index.train),
            },
            "machine": machine(),
            "versions": {"tensorflow": tf.__version__},
            "command": " ".join(["python", *sys.argv]),
            "kernel_check": kernel_check(usages),
        }
    )


if __name__ == "__main__":
    main()
