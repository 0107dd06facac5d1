"""Grow a real graph (FB15k-237) to any size by copying it: a large graph made of real facts.

How it is made, from a source folder (``train/valid/test.txt``):

1. **Hubs.** Entities with at least ``--hub-degree`` D training triple ends (a self-loop counts
   twice) stay single and keep their label: with D = 100 on FB15k-237, 702 entities.
2. **Copies.** Every other entity gets ``--copies`` K copies, labelled ``LABEL#k`` (k = 0..K-1;
   even at K = 1). A hub is every label without ``#``.
3. **Training facts.** Each training triple goes into each copy k with probability ``--keep``
   S, drawn independently per copy: ``(h#k, r, t#k)``, or ``(h#k, r, hub)`` / ``(hub, r, t#k)``
   when one end is a hub. A triple between two hubs is written once, if it was drawn in any
   copy (probability 1 - (1 - S)^K), so K = 1 is FB15k-237 with every fact kept with
   probability S. The draws for copy k come before those of copy k + 1 from one seeded
   generator, so a graph's training copies are the first K copies of any larger graph of the
   same seed and S (held-out triples are drawn afterwards and differ).
4. **Held-out facts.** Validation and test each take ``--heldout`` triples (5,000) from the
   copies of the source's own validation (test) triples, every (triple, copy) pair equally
   likely, without repeats: kept only if both entities and the relation occur in the grown
   training set and the triple is not in it (test: nor in the chosen validation triples).

What the graph is and is not (real patterns inside each copy; copies that never interact but
through hubs; FB15k-237's 237 relations): docs/replicated-graph.md.

Writes ``train.txt``, ``valid.txt``, ``test.txt`` (TSV labels) and ``replicate.json`` (settings,
source files' sha256 and sizes, the hub labels) into ``--out``; prints one JSON line: sizes,
seconds, peak memory, the share of held-out queries answered by a hub, and the command.

Run:  python bench/replicate_kg.py --source $JOBI_TF_DATA_DIR/fb15k-237 --copies 8 --out /work/data/replicated/K8
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import Usage, emit, peak_rss_gib, provenance  # noqa: E402, I001

import numpy as np  # noqa: E402

from jobi_tf.data.folder import read_folder_index  # noqa: E402
from jobi_tf.data.triples import write_triples  # noqa: E402

SPLITS = ("train", "valid", "test")


def read_source(folder: Path) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """``(entity labels, relation labels, {split: int64 (N, 3) ids})`` of a source folder; labels
    sorted, repeated triples of a split kept once."""
    entities, relations, index = read_folder_index(folder)
    if np.any(np.strings.find(entities.labels, "#") >= 0):
        sys.exit(f"{folder}: an entity label contains '#', which marks copies here")
    ids = {split: np.unique(index.split(split).astype(np.int64), axis=0) for split in SPLITS}
    return entities.labels, relations.labels, ids


def hubs_of(train: np.ndarray, num_entities: int, degree: int) -> np.ndarray:
    """bool ``(E,)``: entities with at least ``degree`` training triple ends."""
    return np.bincount(train[:, [0, 2]].ravel(), minlength=num_entities) >= degree


def in_copy(triples: np.ndarray, copy: np.ndarray | int, hub: np.ndarray) -> np.ndarray:
    """Source triples mapped into a copy: entity ``e`` becomes ``copy * E + e`` unless a hub
    (a hub keeps its id ``e``). int64 ``(N, 3)`` in a space of ``K * E`` entity ids."""
    e = len(hub)
    heads = np.where(hub[triples[:, 0]], triples[:, 0], copy * e + triples[:, 0])
    tails = np.where(hub[triples[:, 2]], triples[:, 2], copy * e + triples[:, 2])
    return np.stack([heads, triples[:, 1], tails], axis=1)


def grow_train(train: np.ndarray, hub: np.ndarray, copies: int, keep: float, rng: np.random.Generator) -> np.ndarray:
    """The grown training triples: hub-to-hub facts drawn in any copy, then copy 0, 1, ..."""
    both_hubs = hub[train[:, 0]] & hub[train[:, 2]]
    once = np.zeros(len(train), bool)
    parts = []
    for k in range(copies):
        kept = rng.random(len(train)) < keep
        once |= kept & both_hubs
        parts.append(in_copy(train[kept & ~both_hubs], k, hub))
    return np.concatenate([train[once], *parts])


def triple_keys(triples: np.ndarray, num_relations: int, num_ids: int) -> np.ndarray:
    """int64 ``(h * R + r) * N + t`` of each triple (``N`` entity ids)."""
    assert num_ids * num_relations * num_ids < 2**63, "too many copies for int64 keys"
    return (triples[:, 0] * num_relations + triples[:, 1]) * num_ids + triples[:, 2]


def draw_heldout(
    source: np.ndarray,
    hub: np.ndarray,
    copies: int,
    count: int,
    rng: np.random.Generator,
    *,
    occurs: np.ndarray,
    relations_seen: np.ndarray,
    taken: list[np.ndarray],
) -> np.ndarray:
    """Up to ``count`` copies of ``source`` triples, each (triple, copy) pair equally likely,
    without repeats: both entities in ``occurs`` and the relation in ``relations_seen`` (the
    grown training set's), and the key in none of the sorted arrays ``taken``."""
    pick = rng.permutation(len(source) * copies)
    triples = in_copy(source[pick % len(source)], pick // len(source), hub)
    keys = triple_keys(triples, len(relations_seen), len(occurs))
    ok = occurs[triples[:, 0]] & occurs[triples[:, 2]] & relations_seen[triples[:, 1]]
    for sorted_keys in taken:
        at = np.minimum(np.searchsorted(sorted_keys, keys), len(sorted_keys) - 1)
        ok &= sorted_keys[at] != keys
    first = np.zeros(len(keys), bool)
    first[np.unique(keys, return_index=True)[1]] = True  # a hub-to-hub triple has one copy
    return triples[np.flatnonzero(ok & first)[:count]]


def replicate(
    entities: np.ndarray,
    relations: np.ndarray,
    source: dict[str, np.ndarray],
    *,
    copies: int,
    keep: float,
    hub_degree: int,
    seed: int,
    heldout: int,
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """``(hub mask over source entities, {split: int64 (N, 3) grown ids})``."""
    rng = np.random.default_rng(seed)
    hub = hubs_of(source["train"], len(entities), hub_degree)
    train = grow_train(source["train"], hub, copies, keep, rng)
    num_ids = copies * len(entities)
    occurs = np.zeros(num_ids, bool)
    occurs[train[:, 0]] = occurs[train[:, 2]] = True
    relations_seen = np.zeros(len(relations), bool)
    relations_seen[train[:, 1]] = True
    taken = [np.sort(triple_keys(train, len(relations), num_ids))]
    grown = {"train": train}
    for split in ("valid", "test"):
        grown[split] = draw_heldout(
            source[split], hub, copies, heldout, rng, occurs=occurs, relations_seen=relations_seen, taken=taken
        )
        taken.append(np.sort(triple_keys(grown[split], len(relations), num_ids)))
    return hub, grown


def grown_labels(entities: np.ndarray, hub: np.ndarray, copies: int) -> np.ndarray:
    """str ``(K * E,)``: the label of every grown id (``LABEL#k``; a hub's own label at its id)."""
    copy = np.repeat(np.arange(copies), len(entities)).astype(str)
    labels = np.strings.add(np.strings.add(np.tile(entities, copies), "#"), copy)
    labels[: len(entities)][hub] = entities[hub]
    return labels


def is_hub(ids: np.ndarray, hub: np.ndarray) -> np.ndarray:
    """bool: which grown ids are hubs (a hub keeps its source id, below ``E``)."""
    return (ids < len(hub)) & hub[np.minimum(ids, len(hub) - 1)]


def hub_answer_share(triples: np.ndarray, hub: np.ndarray) -> dict[str, float]:
    """Share of tail queries ``(h, r, ?)`` and head queries ``(?, r, t)`` whose answer is a hub."""
    return {
        "tail queries": round(float(is_hub(triples[:, 2], hub).mean()), 4),
        "head queries": round(float(is_hub(triples[:, 0], hub).mean()), 4),
    }


def sizes_of(grown: dict[str, np.ndarray], hub: np.ndarray) -> dict[str, int]:
    """Triples per split; entities and relations that occur (held-out ones occur in train)."""
    train = grown["train"]
    seen = np.zeros(int(train[:, [0, 2]].max()) + 1, bool)
    seen[train[:, 0]] = seen[train[:, 2]] = True
    return {
        **{split: len(grown[split]) for split in SPLITS},
        "entities": int(seen.sum()),
        "relations": len(np.unique(train[:, 1])),
        "hubs": int(hub.sum()),
        "hubs_occurring": int(np.sum(seen[: len(hub)] & hub)),
    }


def describe_source(folder: Path) -> dict:
    files = {}
    for split in SPLITS:
        data = (folder / f"{split}.txt").read_bytes()
        files[split] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data), "lines": data.count(b"\n")}
    return {"folder": str(folder.resolve()), "files": files}


def write_graph(out: Path, entities, relations, hub, grown, settings: dict, sizes: dict, source: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    labels = grown_labels(entities, hub, settings["copies"])
    for split in SPLITS:
        write_triples(out / f"{split}.txt", grown[split], labels, relations)
    meta = {
        "settings": settings,
        "source": describe_source(source),
        "sizes": sizes,
        "hubs": {
            "rule": "a hub is every entity label without '#'; a copied entity is LABEL#k, k = 0..copies-1",
            "hub_degree": settings["hub_degree"],
            "labels": entities[hub].tolist(),
        },
        "hub_to_hub_triples": "written once, if drawn in any copy",
    }
    (out / "replicate.json").write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", required=True, type=Path, help="folder with train/valid/test.txt")
    parser.add_argument("--copies", type=int, required=True, help="K: copies of every non-hub entity")
    parser.add_argument("--keep", type=float, default=0.55, help="S: chance a training triple enters a copy")
    parser.add_argument("--hub-degree", type=int, default=100, help="D: training degree that makes a hub")
    parser.add_argument("--heldout", type=int, default=5000, help="validation and test triples each")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True, type=Path, help="folder to write (created)")
    return parser.parse_args()


def run(args: argparse.Namespace) -> dict:
    """Build and write the graph; the JSON record (without provenance)."""
    settings = {k: getattr(args, k) for k in ("copies", "keep", "hub_degree", "heldout", "seed")}
    with Usage() as used:
        start = time.perf_counter()
        entities, relations, source = read_source(args.source)
        hub, grown = replicate(entities, relations, source, **settings)
        built = time.perf_counter() - start
        sizes = sizes_of(grown, hub)
        write_graph(args.out, entities, relations, hub, grown, settings, sizes, args.source)
        seconds = time.perf_counter() - start
    return {
        "bench": "replicate_kg",
        "metric": "seconds to grow and write the graph",
        "value": round(seconds, 1),
        "build_seconds": round(built, 1),
        "peak_rss_gib": round(peak_rss_gib(), 2),
        "cpu": used.record(),
        "sizes": sizes,
        "hub_answer_share": {split: hub_answer_share(grown[split], hub) for split in ("test", "valid")},
        "bytes_on_disk": int(sum((args.out / f"{s}.txt").stat().st_size for s in SPLITS)),
        "source": str(args.source),
        "out": str(args.out),
        "config": settings,
        "numpy": np.__version__,
    }


def main() -> None:
    record = run(parse())
    emit({**record, **provenance(__file__)})


if __name__ == "__main__":
    main()
