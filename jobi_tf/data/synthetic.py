"""A deterministic synthetic *typed* knowledge graph, for a quickstart with no download.

How a graph is made:

1. Every entity gets a type, a community inside its type, and a popularity drawn from a
   Zipf law (so degrees are skewed, as in real KGs).
2. Every relation gets a domain type, a range type, and a map from head communities to tail
   communities; relations are Zipf-frequent too.
3. A fact ``(h, r, t)`` draws ``h`` from the domain type by popularity, then ``t`` from the
   range type: with probability ``affinity`` from the community ``r`` maps ``h``'s
   community to, otherwise from the whole type, again by popularity.

So the type constraints (which entities can be heads/tails of a relation) are exactly the
signal JoBi's pair head and biased negatives exploit, and the community structure is what
the triple head must still learn. Everything is vectorised NumPy: sizes of millions of
entities and tens of millions of triples take seconds and bounded memory.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import numpy as np

from jobi_tf.data.triples import write_triples

__all__ = ["SyntheticSpec", "make_typed_kg", "make_typed_kg_ids", "write_typed_kg"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class SyntheticSpec:
    """Size and shape of a synthetic graph (see module docstring)."""

    num_entities: int = 2000
    num_relations: int = 24
    num_triples: int = 40000
    num_types: int = 6
    communities: int = 8
    affinity: float = 0.85
    zipf: float = 0.8
    valid_fraction: float = 0.05
    test_fraction: float = 0.05
    num_valid: int | None = None  # exact held-out sizes (before unseen entities go back to train);
    num_test: int | None = None  # None: the fractions above
    seed: int = 0


def _grouped_sampler(group_of: np.ndarray, weight: np.ndarray, num_groups: int):
    """Return ``sample(groups, u) -> entity ids`` drawing by weight inside each group."""
    order = np.argsort(group_of, kind="stable")
    cum = np.cumsum(weight[order])
    ends = np.searchsorted(group_of[order], np.arange(num_groups), side="right")
    starts = np.concatenate([[0], ends[:-1]])
    low = np.where(starts > 0, cum[np.maximum(starts - 1, 0)], 0.0)
    high = np.where(ends > 0, cum[np.maximum(ends - 1, 0)], 0.0)

    def sample(groups: np.ndarray, u: np.ndarray) -> np.ndarray:
        x = low[groups] + u * (high[groups] - low[groups])
        pos = np.searchsorted(cum, x, side="right")
        pos = np.clip(pos, starts[groups], np.maximum(ends[groups] - 1, starts[groups]))
        return order[pos]

    return sample, ends - starts


#: Triples drawn per chunk: bounds the float temporaries (about 100 MB each) whatever the size.
_CHUNK = 4_000_000


def _world(spec: SyntheticSpec, rng: np.random.Generator):
    """Entity types, communities and popularity, relation domains/ranges: ``draw(n) -> (h, r, t)``."""
    e, r, k, c = spec.num_entities, spec.num_relations, spec.num_types, spec.communities
    ent_type = rng.integers(k, size=e)
    ent_type[:k] = np.arange(k)  # every type has at least one entity
    ent_comm = rng.integers(c, size=e)
    popularity = rng.permutation(1.0 / np.arange(1, e + 1) ** spec.zipf)
    by_type, _ = _grouped_sampler(ent_type, popularity, k)
    by_type_comm, group_sizes = _grouped_sampler(ent_type * c + ent_comm, popularity, k * c)

    domain = rng.integers(k, size=r)
    range_ = rng.integers(k, size=r)
    comm_map = np.argsort(rng.random((r, c)), axis=1)  # a random permutation per relation
    rel_weight = rng.permutation(1.0 / np.arange(1, r + 1) ** spec.zipf)

    def draw(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        rel = rng.choice(r, size=n, p=rel_weight / rel_weight.sum())
        head = by_type(domain[rel], rng.random(n))
        tail_group = range_[rel] * c + comm_map[rel, ent_comm[head]]
        use_comm = (rng.random(n) < spec.affinity) & (group_sizes[tail_group] > 0)
        tail = np.where(
            use_comm,
            by_type_comm(np.where(use_comm, tail_group, 0), rng.random(n)),
            by_type(range_[rel], rng.random(n)),
        )
        return head, rel, tail

    return ent_type, draw


def make_typed_kg_ids(spec: SyntheticSpec) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Integer splits ``{"train", "valid", "test"}`` of shape ``(N, 3)`` and entity types ``(E,)``.

    Facts are drawn in chunks and kept as one int64 key each (``(h * R + r) * E + t``), so
    removing repeats is a 1-D ``np.unique``: peak memory is a few bytes per drawn fact.
    """
    e, r = spec.num_entities, spec.num_relations
    if e * e * r >= 2**63:
        raise ValueError(f"num_entities**2 * num_relations must fit in int64. Received: {e=}, {r=}")
    rng = np.random.default_rng(spec.seed)
    ent_type, draw = _world(spec, rng)
    n_draw = 2 * spec.num_triples + 100
    keys = []
    for start in range(0, n_draw, _CHUNK):
        head, rel, tail = draw(min(_CHUNK, n_draw - start))
        keep = head != tail
        keys.append((head[keep] * r + rel[keep]) * e + tail[keep])
    keys = np.concatenate(keys)
    _, first = np.unique(keys, return_index=True)  # first occurrence of every distinct fact
    keys = keys[np.sort(first)][: spec.num_triples]
    keys = keys[rng.permutation(len(keys))]
    head_rel, tail = np.divmod(keys, e)
    triples = np.stack([head_rel // r, head_rel % r, tail], axis=1)
    del keys, head_rel, tail

    n_valid = spec.num_valid if spec.num_valid is not None else int(len(triples) * spec.valid_fraction)
    n_test = spec.num_test if spec.num_test is not None else int(len(triples) * spec.test_fraction)
    held = triples[: n_valid + n_test]
    train = triples[n_valid + n_test :]
    # Held-out triples whose entity or relation never occurs in train go back to train.
    seen_e = np.zeros(e, bool)
    seen_e[train[:, 0]] = True
    seen_e[train[:, 2]] = True
    seen_r = np.zeros(r, bool)
    seen_r[train[:, 1]] = True
    ok = seen_e[held[:, 0]] & seen_e[held[:, 2]] & seen_r[held[:, 1]]
    train = np.concatenate([train, held[~ok]])
    held_ok = np.flatnonzero(ok)
    valid_rows = held_ok[held_ok < n_valid]
    test_rows = held_ok[held_ok >= n_valid]
    splits = {"train": train, "valid": held[valid_rows], "test": held[test_rows]}
    return {s: a.astype(np.int64, copy=False) for s, a in splits.items()}, ent_type


def entity_labels(ent_type: np.ndarray) -> np.ndarray:
    """``t{type}_e{id}`` for every entity id (str ``(E,)``)."""
    ids = np.arange(len(ent_type)).astype(str)
    return np.strings.add(np.strings.add(np.strings.add("t", ent_type.astype(str)), "_e"), ids)


def relation_labels(num_relations: int) -> np.ndarray:
    return np.strings.add("r", np.arange(num_relations).astype(str))


def make_typed_kg(spec: SyntheticSpec) -> dict[str, np.ndarray]:
    """String splits in the same form as `read_split_folder` (labels ``t{type}_e{id}``, ``r{id}``)."""
    ids, ent_type = make_typed_kg_ids(spec)
    ent_labels, rel_labels = entity_labels(ent_type), relation_labels(spec.num_relations)
    return {
        s: np.stack([ent_labels[a[:, 0]], rel_labels[a[:, 1]], ent_labels[a[:, 2]]], axis=1) for s, a in ids.items()
    }


def write_typed_kg(spec: SyntheticSpec, folder: str | os.PathLike[str]) -> dict[str, int]:
    """Generate a graph and write it as ``train.txt``, ``valid.txt``, ``test.txt`` (TSV).

    The text format is the one every benchmark ships, so the graph loads like any other
    ``--data-dir`` folder. ``synthetic.json`` beside them records the spec.

    Returns:
        Triples per split (``train``, ``valid``, ``test``), and how many ``entities`` and
        ``relations`` occur (an entity the Zipf draws never picked does not exist in the files).
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    ids, ent_type = make_typed_kg_ids(spec)
    ents, rels = entity_labels(ent_type), relation_labels(spec.num_relations)
    sizes = {}
    used_e = np.zeros(spec.num_entities, bool)
    used_r = np.zeros(spec.num_relations, bool)
    for split, triples in ids.items():
        write_triples(folder / f"{split}.txt", triples, ents, rels)
        sizes[split] = len(triples)
        used_e[triples[:, 0]] = used_e[triples[:, 2]] = used_r[triples[:, 1]] = True
    sizes.update(entities=int(used_e.sum()), relations=int(used_r.sum()))
    (folder / "synthetic.json").write_text(json.dumps(dataclasses.asdict(spec), indent=2) + "\n", encoding="utf-8")
    return sizes
