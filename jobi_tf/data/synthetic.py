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

import numpy as np

__all__ = ["SyntheticSpec", "make_typed_kg", "make_typed_kg_ids"]


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


def make_typed_kg_ids(spec: SyntheticSpec) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Integer splits ``{"train", "valid", "test"}`` of shape ``(N, 3)`` and entity types ``(E,)``."""
    rng = np.random.default_rng(spec.seed)
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

    n_draw = 2 * spec.num_triples + 100
    rel = rng.choice(r, size=n_draw, p=rel_weight / rel_weight.sum())
    head = by_type(domain[rel], rng.random(n_draw))
    tail_group = range_[rel] * c + comm_map[rel, ent_comm[head]]
    use_comm = (rng.random(n_draw) < spec.affinity) & (group_sizes[tail_group] > 0)
    tail = np.where(
        use_comm,
        by_type_comm(np.where(use_comm, tail_group, 0), rng.random(n_draw)),
        by_type(range_[rel], rng.random(n_draw)),
    )
    triples = np.stack([head, rel, tail], axis=1)
    triples = triples[head != tail]
    _, first = np.unique(triples, axis=0, return_index=True)
    triples = triples[np.sort(first)][: spec.num_triples]
    triples = triples[rng.permutation(len(triples))]

    n_valid = int(len(triples) * spec.valid_fraction)
    n_test = int(len(triples) * spec.test_fraction)
    held = triples[: n_valid + n_test]
    train = triples[n_valid + n_test :]
    # Held-out triples whose entity or relation never occurs in train go back to train.
    seen_e = np.zeros(e, bool)
    seen_e[train[:, [0, 2]].ravel()] = True
    seen_r = np.zeros(r, bool)
    seen_r[train[:, 1]] = True
    ok = seen_e[held[:, 0]] & seen_e[held[:, 2]] & seen_r[held[:, 1]]
    train = np.concatenate([train, held[~ok]])
    held_ok = np.flatnonzero(ok)
    valid_rows = held_ok[held_ok < n_valid]
    test_rows = held_ok[held_ok >= n_valid]
    splits = {"train": train, "valid": held[valid_rows], "test": held[test_rows]}
    return {s: a.astype(np.int64) for s, a in splits.items()}, ent_type


def make_typed_kg(spec: SyntheticSpec) -> dict[str, np.ndarray]:
    """String splits in the same form as `read_split_folder` (labels ``t{type}_e{id}``, ``r{id}``)."""
    ids, ent_type = make_typed_kg_ids(spec)
    ent_labels = np.char.add(
        np.char.add(np.char.add("t", ent_type.astype(str)), "_e"), np.arange(spec.num_entities).astype(str)
    )
    rel_labels = np.char.add("r", np.arange(spec.num_relations).astype(str))
    return {
        s: np.stack([ent_labels[a[:, 0]], rel_labels[a[:, 1]], ent_labels[a[:, 2]]], axis=1) for s, a in ids.items()
    }
