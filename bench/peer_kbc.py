"""kbc's own 1-vs-all training epoch on CPU, timed: the anchor of the 1-vs-all speed table.

Runs in the peer's virtualenv (PyTorch, tqdm), never in jobi-tf's, with the code of
facebookresearch/kbc unchanged (``--kbc-src``: the folder holding its ``kbc/`` package). kbc
moves every batch to the GPU with ``.cuda()``; this script makes ``Tensor.cuda`` return the
tensor itself, so the same code runs on the CPU, and changes nothing else.

The training examples are built as kbc's ``Dataset.get_train`` does (every triple of
``train.txt``, then its reciprocal; ids by first appearance); kbc's ``ComplEx``, ``N3``,
``torch.optim.Adagrad`` and ``KBCOptimizer`` (its batch is rows: a triple gives two) train
``--warmup-rows`` rows (first-call costs), then ``--epochs`` timed epochs. One JSON line.

Run (from jobi-tf's ``bench/kbc_anchor.py``, or by hand):
    PEER/bin/python bench/peer_kbc.py --kbc-src /path/to/kbc --data-dir ../shared/datasets/fb15k-237 --rank 200
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path


def read_examples(folder: Path):
    """kbc's training examples: triples then reciprocals, ids by first appearance."""
    import numpy as np

    entities: dict[str, int] = {}
    relations: dict[str, int] = {}
    rows = []
    for n, line in enumerate((folder / "train.txt").read_text(encoding="utf-8").splitlines(), 1):
        parts = line.split("\t")
        if len(parts) != 3:
            sys.exit(f"{folder / 'train.txt'}:{n}: expected head<TAB>relation<TAB>tail")
        h, r, t = parts
        head = entities.setdefault(h, len(entities))
        rows.append((head, relations.setdefault(r, len(relations)), entities.setdefault(t, len(entities))))
    train = np.asarray(rows, dtype=np.int64)
    inverse = train[:, [2, 1, 0]].copy()
    inverse[:, 1] += len(relations)
    return np.vstack([train, inverse]), len(entities), len(relations)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kbc-src", type=Path, required=True, help="folder holding kbc's kbc/ package")
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--rank", type=int, default=200)
    parser.add_argument("--rows", type=int, default=1000, help="kbc's batch_size (rows; a triple gives two)")
    parser.add_argument("--reg", type=float, default=0.05, help="N3 weight")
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--init", type=float, default=1e-3)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--warmup-rows", type=int, default=3000)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    import torch

    torch.Tensor.cuda = lambda self, *a, **k: self  # kbc's code, on the CPU
    sys.path.insert(0, str(args.kbc_src))
    from kbc.models import ComplEx
    from kbc.optimizers import KBCOptimizer
    from kbc.regularizers import N3

    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(args.threads)
    torch.manual_seed(args.seed)
    examples, n_entities, n_relations = read_examples(args.data_dir)
    examples = torch.from_numpy(examples)
    model = ComplEx((n_entities, 2 * n_relations, n_entities), args.rank, args.init)
    optimizer = KBCOptimizer(
        model, N3(args.reg), torch.optim.Adagrad(model.parameters(), lr=args.lr), batch_size=args.rows, verbose=False
    )
    optimizer.epoch(examples[: args.warmup_rows])
    seconds = []
    for _ in range(args.epochs):
        start = time.perf_counter()
        optimizer.epoch(examples)
        seconds.append(time.perf_counter() - start)
    print(
        json.dumps(
            {
                "peer": "kbc",
                "epoch_seconds": [round(s, 2) for s in seconds],
                "rows_per_epoch": int(examples.shape[0]),
                "rows_per_s": [round(examples.shape[0] / s, 1) for s in seconds],
                "settings": {
                    "model": f"kbc.models.ComplEx(sizes=({n_entities}, {2 * n_relations}, {n_entities}), "
                    f"rank={args.rank}, init_size={args.init})",
                    "regularizer": f"kbc.regularizers.N3(weight={args.reg})",
                    "optimizer": f"torch.optim.Adagrad(lr={args.lr})",
                    "loss": "kbc.optimizers.KBCOptimizer: nn.CrossEntropyLoss over all entities, reciprocal rows",
                    "batch_rows": args.rows,
                    "warmup_rows": args.warmup_rows,
                    "device": "cpu (Tensor.cuda returns the tensor)",
                    "threads": {"intra": torch.get_num_threads(), "interop": torch.get_num_interop_threads()},
                },
                "versions": {"torch": torch.__version__, "python": platform.python_version()},
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
