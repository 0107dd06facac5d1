"""A sparse copy of a graph: a random share of its training triples, and the validation and
test triples whose entities and relation all still occur in them.

Why: a 1-vs-all run on a user's sparse graph (78k entities, 1.3 training triples per entity)
stalled at a uniform softmax; a thinned FB15k-237 reproduces that regime in under a minute an
epoch (docs/studies/one-vs-all-stall.md).

    python bench/thin_graph.py /work/shared/datasets/fb15k-237 /work/data/fb15k-237-thin --keep 0.13 --seed 0
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np


def read(path: Path) -> list[tuple[str, str, str]]:
    return [tuple(line.rstrip("\n").split("\t")) for line in path.read_text().splitlines() if line.strip()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", type=Path, help="folder with train.txt, valid.txt, test.txt")
    parser.add_argument("out", type=Path)
    parser.add_argument("--keep", type=float, default=0.13, help="share of the training triples kept")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    train = read(args.source / "train.txt")
    rng = np.random.default_rng(args.seed)
    kept = [train[i] for i in np.sort(rng.permutation(len(train))[: round(args.keep * len(train))])]
    entities = {e for h, _, t in kept for e in (h, t)}
    relations = {r for _, r, _ in kept}
    args.out.mkdir(parents=True, exist_ok=True)
    stats = {"source": str(args.source), "keep": args.keep, "seed": args.seed, "train": len(kept)}
    for split, triples in [("train", kept)] + [(s, read(args.source / f"{s}.txt")) for s in ("valid", "test")]:
        if split != "train":
            triples = [x for x in triples if x[0] in entities and x[2] in entities and x[1] in relations]
            stats[split] = len(triples)
        (args.out / f"{split}.txt").write_text("".join("\t".join(x) + "\n" for x in triples))
    stats.update(entities=len(entities), relations=len(relations), triples_per_entity=len(kept) / len(entities))
    print(json.dumps(stats))


if __name__ == "__main__":
    main()
