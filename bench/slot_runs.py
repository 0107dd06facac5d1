"""How often ``--biased-chunk C_b`` draws a positive's biased negatives from its own slot.

Steps:
1. Load the dataset; draw ``--batches`` random batches of ``--batch-size`` training triples,
   each positive with a fair head-or-tail coin (the sampler's ``per-positive`` side).
2. Sort each batch by relation and side, as the sampler does, and cut it into runs of C_b.
3. Per C_b: the share of runs that hold one slot (relation and side), and the mean share of a
   positive's biased negatives that come from its own slot (the share of its run that shares
   its slot: each negative's source positive is picked uniformly from the run).
4. One JSON line.

Run:  JOBI_TF_DATA_DIR=../shared/datasets python bench/slot_runs.py --dataset fb15k-237
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import data_dir, emit  # noqa: E402, I001

import numpy as np  # noqa: E402

from jobi_tf.data.index import build_index  # noqa: E402
from jobi_tf.data.triples import read_split_folder  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="fb15k-237")
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--chunks", type=int, nargs="+", default=[5, 10, 20, 50])
    parser.add_argument("--batches", type=int, default=50)
    args = parser.parse_args()
    _, _, index = build_index(read_split_folder(data_dir(args.dataset, None)), args.dataset)
    rng = np.random.default_rng(0)
    keys = []
    for _ in range(args.batches):
        batch = index.train[rng.choice(len(index.train), args.batch_size, replace=False)]
        keys.append(np.sort(batch[:, 1] * 2 + (rng.random(args.batch_size) < 0.5)))
    out = {}
    for c_b in args.chunks:
        runs = np.concatenate([k.reshape(-1, c_b) for k in keys])
        own = (runs[:, :, None] == runs[:, None, :]).mean(axis=2)  # [runs, C_b]: share of the run in my slot
        out[str(c_b)] = {
            "single_slot_runs": round(float((runs == runs[:, :1]).all(axis=1).mean()), 3),
            "own_slot_share": round(float(own.mean()), 3),
        }
    emit({"bench": "slot_runs", "dataset": args.dataset, "batch_size": args.batch_size, "batches": args.batches,
          "value": out, "command": " ".join(["python", *sys.argv])})  # fmt: skip


if __name__ == "__main__":
    main()
