"""Everything derived from integer triples, computed once in NumPy.

`KGIndex` holds the id-encoded splits plus the lookup structures training and evaluation
need, all as flat arrays so they become constant tensors without Python dicts:

* per relation, the sorted distinct *training* heads and tails, in CSR form
  (``offsets[r]:offsets[r + 1]`` slices ``values``): the pools biased negatives are drawn
  from, and the membership test behind pair labels;
* the known-facts filter over train + valid + test, as CSR over the query key
  ``h * R + r`` (tails) and ``t * R + r`` (heads): what filtered ranking removes;
* built on first use, the other lookups of the graph that sampling, evaluation and export
  share: the training slots as sorted keys and as a dense table (`KGIndex.slot_keys`,
  `KGIndex.slot_rows`), the training facts of each query (`KGIndex.train_facts`) and the
  relations of each known pair (`KGIndex.known_relations`).

The functions that build those structures from triples (`slot_sets`, `tails_by_query`,
`heads_by_query`, `relations_by_pair`) are this module's, so an export built from a run's
training triples looks facts up exactly as training and evaluation did.
"""

from __future__ import annotations

import dataclasses
import functools
import logging

import numpy as np

from jobi_tf.data.fingerprints import unique_first
from jobi_tf.data.keys import pack
from jobi_tf.data.vocab import Vocab
from jobi_tf.runtime.errors import DatasetFormatError
from jobi_tf.runtime.types import HEAD, RELATION, SPLITS, TAIL

__all__ = [
    "CSR",
    "KGIndex",
    "build_index",
    "index_from_ids",
    "slot_sets",
    "tails_by_query",
    "heads_by_query",
    "relations_by_pair",
]

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class CSR:
    """Sorted groups of ids: group ``g`` is ``values[offsets[g]:offsets[g + 1]]``.

    Attributes:
        keys: int64 ``(G,)``, sorted group keys (for a relation pool, ``arange(R)``).
        offsets: int64 ``(G + 1,)``.
        values: int32 ``(V,)``, sorted within each group.
    """

    keys: np.ndarray
    offsets: np.ndarray
    values: np.ndarray

    @classmethod
    def from_pairs(cls, keys: np.ndarray, values: np.ndarray, dense_groups: int | None = None) -> CSR:
        """Group distinct ``(key, value)`` pairs by key.

        With ``dense_groups=G`` the keys are ``0..G-1`` and empty groups are kept, so that
        ``offsets`` can be indexed by the key directly.
        """
        pairs = _unique_pairs(keys.astype(np.int64), values.astype(np.int64))
        if dense_groups is not None:
            counts = np.bincount(pairs[:, 0], minlength=dense_groups)
            group_keys = np.arange(dense_groups, dtype=np.int64)
        else:
            group_keys, counts = np.unique(pairs[:, 0], return_counts=True)
        offsets = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        return cls(group_keys.astype(np.int64), offsets, pairs[:, 1].astype(np.int32))

    def sizes(self) -> np.ndarray:
        return np.diff(self.offsets)

    def lookup(self, query_keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """All values of each query key, flattened.

        Returns:
            ``(rows, values)``: int64 ``(M,)`` index of the query each value belongs to, and
            int32 ``(M,)`` the values; queries whose key is absent contribute nothing.
        """
        query_keys = np.asarray(query_keys, dtype=np.int64)
        pos = np.searchsorted(self.keys, query_keys)
        pos_clipped = np.minimum(pos, len(self.keys) - 1)
        hit = self.keys[pos_clipped] == query_keys
        starts = np.where(hit, self.offsets[pos_clipped], 0)
        counts = np.where(hit, self.offsets[pos_clipped + 1] - self.offsets[pos_clipped], 0)
        rows = np.repeat(np.arange(len(query_keys)), counts)
        within = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
        return rows, self.values[np.repeat(starts, counts) + within]

    def membership_keys(self, num_values: int) -> np.ndarray:
        """Sorted int64 ``key * num_values + value`` of every pair, for vectorised ``in`` tests."""
        return pack(np.repeat(self.keys, self.sizes()), self.values, num_values)


def slot_sets(triples: np.ndarray, num_relations: int) -> tuple[CSR, CSR]:
    """The entities seen in each relation's tail slot, then head slot (keyed by relation id)."""
    tails = CSR.from_pairs(triples[:, RELATION], triples[:, TAIL], dense_groups=num_relations)
    heads = CSR.from_pairs(triples[:, RELATION], triples[:, HEAD], dense_groups=num_relations)
    return tails, heads


def tails_by_query(triples: np.ndarray, num_relations: int) -> CSR:
    """The tails of each ``(h, r, ?)``, keyed ``h * R + r``."""
    return CSR.from_pairs(pack(triples[:, HEAD], triples[:, RELATION], num_relations), triples[:, TAIL])


def heads_by_query(triples: np.ndarray, num_relations: int) -> CSR:
    """The heads of each ``(?, r, t)``, keyed ``t * R + r``."""
    return CSR.from_pairs(pack(triples[:, TAIL], triples[:, RELATION], num_relations), triples[:, HEAD])


def relations_by_pair(triples: np.ndarray, num_entities: int) -> CSR:
    """The relations of each ``(h, ?, t)``, keyed ``h * E + t``."""
    return CSR.from_pairs(pack(triples[:, HEAD], triples[:, TAIL], num_entities), triples[:, RELATION])


def _unique_pairs(keys: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Distinct ``(key, value)`` rows, sorted: int64 ``(P, 2)``.

    Packs each pair into one int64 when it fits, because a 1-D ``np.unique`` sorts numbers
    where ``np.unique(axis=0)`` compares rows as raw bytes (minutes at 20M pairs).
    """
    if len(keys) == 0:
        return np.zeros((0, 2), np.int64)
    width = int(values.max()) + 1
    if (int(keys.max()) + 1) * width >= 2**63 or keys.min() < 0 or values.min() < 0:
        return np.unique(np.stack([keys, values], axis=1), axis=0)
    packed = np.sort(keys * width + values)
    packed = packed[np.concatenate([[True], packed[1:] != packed[:-1]])]  # np.unique hashes: 100x slower
    return np.stack(np.divmod(packed, width), axis=1)


@dataclasses.dataclass(frozen=True)
class KGIndex:
    """Id-encoded splits and the lookup structures derived from them.

    Attributes:
        num_entities, num_relations: vocabulary sizes (over all splits).
        train, valid, test: int32 ``(N, 3)`` (head, relation, tail) ids.
        train_heads, train_tails: `CSR` over relation ids of the entities seen as head
            (tail) of each relation in *train*: biased-negative pools and pair labels.
        known_tails: `CSR` keyed by ``h * R + r`` of every true tail in train+valid+test.
        known_heads: `CSR` keyed by ``t * R + r`` of every true head in train+valid+test.

    The lookups built on first use are properties (cached per index).
    """

    num_entities: int
    num_relations: int
    train: np.ndarray
    valid: np.ndarray
    test: np.ndarray
    train_heads: CSR
    train_tails: CSR
    known_tails: CSR
    known_heads: CSR

    @classmethod
    def from_ids(cls, splits: dict[str, np.ndarray], num_entities: int, num_relations: int) -> KGIndex:
        """Build every lookup structure from id-encoded splits."""
        train = splits["train"].astype(np.int32)
        r = num_relations
        everything = np.concatenate([splits[s] for s in SPLITS]).astype(np.int64)
        train_tails, train_heads = slot_sets(train, r)
        return cls(
            num_entities=num_entities,
            num_relations=num_relations,
            train=train,
            valid=splits["valid"].astype(np.int32),
            test=splits["test"].astype(np.int32),
            train_heads=train_heads,
            train_tails=train_tails,
            known_tails=tails_by_query(everything, r),
            known_heads=heads_by_query(everything, r),
        )

    @functools.cached_property
    def slot_keys(self) -> np.ndarray:
        """Sorted int64 keys of the training slots: ``r * E + e`` for each entity ``e`` seen as a
        tail of ``r``, then ``R * E + r * E + e`` for each seen as a head (the layout of `slot_rows`)."""
        e = self.num_entities
        tails, heads = self.train_tails.membership_keys(e), self.train_heads.membership_keys(e)
        return np.concatenate([tails, heads + self.num_relations * e])

    @functools.cached_property
    def slot_counts(self) -> np.ndarray:
        """int32 counts of `slot_keys`, in their order: how many training triples put each
        entity in each slot (what the slot prior and the counts in the loss add, as logs)."""
        train, e = self.train.astype(np.int64), self.num_entities
        tails = train[:, 1] * e + train[:, 2]
        heads = (self.num_relations + train[:, 1]) * e + train[:, 0]
        at = np.searchsorted(self.slot_keys, np.concatenate([tails, heads]))
        return np.bincount(at, minlength=len(self.slot_keys)).astype(np.int32)

    def slot_rows(self) -> np.ndarray:
        """bool ``[2R, E]``: row ``r`` marks the entities seen as tails of ``r`` in training, row
        ``R + r`` those seen as its heads. ``2 R E`` bytes: callers check that it fits first."""
        if "_slot_rows" not in self.__dict__:
            table = np.zeros(2 * self.num_relations * self.num_entities, bool)
            table[self.slot_keys] = True
            self.__dict__["_slot_rows"] = table.reshape(2 * self.num_relations, self.num_entities)
        return self.__dict__["_slot_rows"]

    @functools.cached_property
    def train_facts(self) -> tuple[CSR, CSR]:
        """The training tails of each ``(h, r, ?)`` and heads of each ``(?, r, t)``
        (`tails_by_query`, `heads_by_query` of the training split only)."""
        return tails_by_query(self.train, self.num_relations), heads_by_query(self.train, self.num_relations)

    @functools.cached_property
    def known_relations(self) -> CSR:
        """The relations of each ``(h, ?, t)`` in train + valid + test (`relations_by_pair`)."""
        every = np.concatenate([self.split(s) for s in SPLITS])
        return relations_by_pair(every, self.num_entities)

    def split(self, name: str) -> np.ndarray:
        if name not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}. Received: split={name!r}")
        return getattr(self, name)


def build_index(splits: dict[str, np.ndarray], source: str = "dataset") -> tuple[Vocab, Vocab, KGIndex]:
    """Vocabularies over all splits (as the paper's code does) and the `KGIndex`.

    Args:
        splits: ``{"train", "valid", "test"}`` string (or UTF-8 bytes) arrays of shape ``(N, 3)``.
        source: name used in messages.

    Returns:
        ``(entity_vocab, relation_vocab, index)``.
    """
    for split in SPLITS:
        if len(splits[split]) == 0:
            raise DatasetFormatError(f"{source}/{split}", "split is empty")
    entities, ends = _number([splits[s][:, [HEAD, TAIL]] for s in SPLITS])
    relations, rels = _number([splits[s][:, RELATION] for s in SPLITS])
    ids = {s: np.stack([end[:, 0], rel, end[:, 1]], axis=1) for s, end, rel in zip(SPLITS, ends, rels, strict=True)}
    return entities, relations, index_from_ids(ids, len(entities), len(relations), source)


def index_from_ids(splits: dict[str, np.ndarray], num_entities: int, num_relations: int, source: str) -> KGIndex:
    """`KGIndex.from_ids`, then a warning about entities and relations absent from train."""
    index = KGIndex.from_ids(splits, num_entities, num_relations)
    _warn_unseen(index, source)
    return index


def _number(parts: list[np.ndarray]) -> tuple[Vocab, list[np.ndarray]]:
    """The vocabulary of the labels in ``parts`` and each part's int32 ids, without a dict.

    Labels (``str`` or UTF-8 bytes) are grouped by fingerprint (`jobi_tf.data.fingerprints`,
    exact), so only the distinct ones are sorted as strings.
    """
    flat = np.concatenate([p.ravel() for p in parts])
    if flat.dtype.kind == "U":
        flat = _utf8(flat)
    first, inverse = unique_first(flat)
    vocab, ids = Vocab.from_groups(flat[first], inverse)
    bounds = np.cumsum([p.size for p in parts])[:-1]
    return vocab, [part_ids.reshape(p.shape) for part_ids, p in zip(np.split(ids, bounds), parts, strict=True)]


def _utf8(labels: np.ndarray) -> np.ndarray:
    """str → UTF-8 bytes array (a plain cast when everything is ASCII)."""
    try:
        return labels.astype(f"S{max(labels.dtype.itemsize // 4, 1)}")
    except UnicodeEncodeError:
        return np.char.encode(labels, "utf-8")


def _warn_unseen(index: KGIndex, source: str) -> None:
    """Entities or relations absent from train keep their initial embeddings: say how many."""
    seen = np.zeros(index.num_entities, dtype=bool)
    seen[index.train[:, [HEAD, TAIL]].ravel()] = True
    for split in ("valid", "test"):
        triples = index.split(split)
        ends = triples[:, [HEAD, TAIL]].ravel()
        unseen = np.unique(ends[~seen[ends]])
        if len(unseen):
            affected = int((~seen[triples[:, HEAD]] | ~seen[triples[:, TAIL]]).sum())
            logger.warning(
                "%s/%s: %d entities never seen in train (%d triples affected); ranked with untrained embeddings",
                source,
                split,
                len(unseen),
                affected,
            )
        rel_seen = np.isin(triples[:, RELATION], index.train[:, RELATION])
        if not rel_seen.all():
            logger.warning(
                "%s/%s: %d triples use a relation never seen in train; ranked with its untrained embedding and "
                "counted in the metrics (remove them from the file to leave them out)",
                source,
                split,
                int((~rel_seen).sum()),
            )
