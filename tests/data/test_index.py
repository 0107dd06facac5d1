"""Vocab, CSR and KGIndex against brute-force Python sets and dicts."""

from __future__ import annotations

import logging
from collections import defaultdict

import numpy as np
import pytest

from jobi_tf.data.index import CSR, KGIndex, build_index
from jobi_tf.data.vocab import Vocab
from jobi_tf.runtime.errors import DatasetFormatError
from jobi_tf.runtime.types import SPLITS

# -- Vocab ---------------------------------------------------------------------------------


def test_vocab_is_sorted_and_unique():
    rng = np.random.default_rng(0)
    labels = np.array([f"x{i}" for i in rng.integers(0, 50, size=200)])
    v = Vocab.from_labels(labels)
    assert list(v.labels) == sorted(set(labels.tolist()))
    assert len(v) == len(set(labels.tolist()))


def test_vocab_ids_do_not_depend_on_input_order():
    rng = np.random.default_rng(1)
    labels = np.array([f"l{i}" for i in range(30)])
    assert Vocab.from_labels(labels) == Vocab.from_labels(labels[rng.permutation(30)])


def test_vocab_encode_decode_round_trip():
    rng = np.random.default_rng(2)
    v = Vocab.from_labels(np.array([f"e{i}" for i in range(40)] + ["Zürich", "日本", "a b"]))
    ids = rng.integers(len(v), size=(7, 3))
    labels = v.decode(ids)
    assert labels.shape == (7, 3)
    enc = v.encode(labels)
    assert enc.dtype == np.int32
    np.testing.assert_array_equal(enc, ids)
    expected = {label: i for i, label in enumerate(sorted(v.labels.tolist()))}
    np.testing.assert_array_equal(enc, np.vectorize(expected.__getitem__)(labels))


@pytest.mark.parametrize("unknown", ["zzz", "0", "e5x", ""])
def test_vocab_unknown_label_is_a_key_error_naming_it(unknown):
    v = Vocab.from_labels(np.array(["a", "e5", "m"]))
    with pytest.raises(KeyError) as info:
        v.encode(np.array(["a", unknown, "m"]))
    assert repr(unknown) in str(info.value) or unknown in str(info.value)


def test_vocab_rejects_unsorted():
    with pytest.raises(ValueError):
        Vocab(np.array(["b", "a"]))
    with pytest.raises(ValueError):
        Vocab(np.array(["a", "a"]))


def test_vocab_save_load_round_trip(tmp_path):
    v = Vocab.from_labels(np.array(["b", "a", "Zürich", "/m/0x", "c d"]))
    v.save(tmp_path / "entities.txt")
    assert (tmp_path / "entities.txt").read_text(encoding="utf-8").splitlines() == v.labels.tolist()
    assert Vocab.load(tmp_path / "entities.txt") == v


def test_vocab_load_missing_and_unsorted(tmp_path):
    with pytest.raises(DatasetFormatError):
        Vocab.load(tmp_path / "missing.txt")
    (tmp_path / "bad.txt").write_text("b\na\n", encoding="utf-8")
    with pytest.raises(DatasetFormatError) as info:
        Vocab.load(tmp_path / "bad.txt")
    assert str(tmp_path / "bad.txt") in str(info.value)


# -- CSR -----------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(4))
def test_csr_lookup_matches_a_dict_of_sets(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 300))
    keys = rng.integers(0, 1000, size=n) * 37  # sparse, non-contiguous keys
    values = rng.integers(0, 50, size=n)
    csr = CSR.from_pairs(keys, values)
    brute = defaultdict(set)
    for k, v in zip(keys.tolist(), values.tolist(), strict=True):
        brute[k].add(v)
    assert csr.keys.tolist() == sorted(brute)
    assert csr.sizes().tolist() == [len(brute[k]) for k in sorted(brute)]

    queries = np.concatenate([keys[rng.integers(n, size=20)], rng.integers(-5, 40000, size=20)])
    rows, got = csr.lookup(queries)
    assert rows.shape == got.shape
    for q, key in enumerate(queries.tolist()):
        vals = got[rows == q].tolist()
        assert vals == sorted(brute.get(key, set())), (q, key)
    assert len(got) == sum(len(brute.get(k, ())) for k in queries.tolist())

    member = set(csr.membership_keys(50).tolist())
    assert member == {k * 50 + v for k, s in brute.items() for v in s}


def test_csr_dense_groups_keep_empty_groups():
    keys = np.array([3, 0, 3, 3])
    values = np.array([5, 1, 5, 2])
    csr = CSR.from_pairs(keys, values, dense_groups=5)
    assert csr.keys.tolist() == [0, 1, 2, 3, 4]
    assert csr.offsets.tolist() == [0, 1, 1, 1, 3, 3]
    assert csr.values.tolist() == [1, 2, 5]


def test_csr_lookup_with_no_queries():
    csr = CSR.from_pairs(np.array([1, 2]), np.array([3, 4]))
    rows, values = csr.lookup(np.array([], dtype=np.int64))
    assert rows.shape == (0,) and values.shape == (0,)


# -- KGIndex -------------------------------------------------------------------------------


def _random_id_splits(seed, e=25, r=4, n=(60, 15, 15)):
    rng = np.random.default_rng(seed)
    total = sum(n)
    every = np.stack(np.meshgrid(np.arange(e), np.arange(r), np.arange(e), indexing="ij"), -1).reshape(-1, 3)
    chosen = every[rng.choice(len(every), size=total, replace=False)]
    return {"train": chosen[: n[0]], "valid": chosen[n[0] : n[0] + n[1]], "test": chosen[n[0] + n[1] :]}, e, r


def _pool(csr: CSR, r: int) -> set[int]:
    return set(csr.values[csr.offsets[r] : csr.offsets[r + 1]].tolist())


@pytest.mark.parametrize("seed", range(3))
def test_pools_are_training_heads_and_tails_per_relation(seed):
    splits, e, r = _random_id_splits(seed)
    index = KGIndex.from_ids(splits, e, r)
    for rel in range(r):
        heads = {h for h, rr, _ in splits["train"].tolist() if rr == rel}
        tails = {t for _, rr, t in splits["train"].tolist() if rr == rel}
        assert _pool(index.train_heads, rel) == heads
        assert _pool(index.train_tails, rel) == tails
        # Sorted within the group.
        vals = index.train_tails.values[index.train_tails.offsets[rel] : index.train_tails.offsets[rel + 1]]
        assert np.all(np.diff(vals) > 0)
    assert index.train.dtype == np.int32 and index.test.dtype == np.int32


@pytest.mark.parametrize("seed", range(3))
def test_known_filters_hold_every_fact_of_every_split(seed):
    splits, e, r = _random_id_splits(seed)
    index = KGIndex.from_ids(splits, e, r)
    facts = {tuple(x) for s in SPLITS for x in splits[s].tolist()}
    brute_tails, brute_heads = defaultdict(set), defaultdict(set)
    for h, rel, t in facts:
        brute_tails[h * r + rel].add(t)
        brute_heads[t * r + rel].add(h)
    all_keys = np.arange(e * r)
    rows, vals = index.known_tails.lookup(all_keys)
    assert {(int(k), int(v)) for k, v in zip(all_keys[rows], vals, strict=True)} == {
        (k, v) for k, s in brute_tails.items() for v in s
    }
    rows, vals = index.known_heads.lookup(all_keys)
    assert {(int(k), int(v)) for k, v in zip(all_keys[rows], vals, strict=True)} == {
        (k, v) for k, s in brute_heads.items() for v in s
    }


def test_split_accessor():
    splits, e, r = _random_id_splits(0)
    index = KGIndex.from_ids(splits, e, r)
    for s in SPLITS:
        np.testing.assert_array_equal(index.split(s), splits[s])
    with pytest.raises(ValueError):
        index.split("dev")


# -- build_index ---------------------------------------------------------------------------


def test_build_index_encodes_labels_in_sorted_order(tiny_splits, tiny_index):
    ents, rels, index = tiny_index
    all_e = sorted({x for s in SPLITS for row in tiny_splits[s].tolist() for x in (row[0], row[2])})
    all_r = sorted({row[1] for s in SPLITS for row in tiny_splits[s].tolist()})
    assert ents.labels.tolist() == all_e
    assert rels.labels.tolist() == all_r
    assert index.num_entities == len(all_e) and index.num_relations == len(all_r)
    for s in SPLITS:
        ids = index.split(s)
        decoded = np.stack([ents.decode(ids[:, 0]), rels.decode(ids[:, 1]), ents.decode(ids[:, 2])], 1)
        np.testing.assert_array_equal(decoded, tiny_splits[s])


def test_tiny_splits_fixture_is_as_advertised(tiny_splits):
    assert [len(tiny_splits[s]) for s in SPLITS] == [30, 5, 5]
    train_e = set(tiny_splits["train"][:, [0, 2]].ravel().tolist())
    for s in ("valid", "test"):
        assert set(tiny_splits[s][:, [0, 2]].ravel().tolist()) <= train_e
    rows = [tuple(x) for s in SPLITS for x in tiny_splits[s].tolist()]
    assert len(rows) == len(set(rows))


@pytest.mark.parametrize("empty", SPLITS)
def test_build_index_empty_split_is_an_error(tiny_splits, empty):
    splits = dict(tiny_splits)
    splits[empty] = np.empty((0, 3), dtype=str)
    with pytest.raises(DatasetFormatError) as info:
        build_index(splits, source="mydata")
    assert f"mydata/{empty}" in str(info.value)
    assert "\n" not in str(info.value)


def test_build_index_warns_about_unseen_entities(tiny_splits, caplog):
    splits = dict(tiny_splits)
    # Two new entities in valid (3 triples affected), one in test (1 triple), one unseen relation in test.
    splits["valid"] = np.concatenate(
        [splits["valid"], [["new1", "r0", "e0"], ["e1", "r1", "new2"], ["new1", "r2", "new2"]]]
    )
    splits["test"] = np.concatenate([splits["test"], [["e2", "r0", "new3"], ["e2", "rNEW", "e3"]]])
    with caplog.at_level(logging.WARNING, logger="jobi_tf.data.index"):
        build_index(splits, source="mydata")
    msgs = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    valid = [m for m in msgs if m.startswith("mydata/valid") and "entities" in m]
    test = [m for m in msgs if m.startswith("mydata/test") and "entities" in m]
    assert len(valid) == 1 and "2 entities" in valid[0] and "3 triples" in valid[0]
    assert len(test) == 1 and "1 entities" in test[0] and "1 triples" in test[0]
    assert any(m.startswith("mydata/test") and "relation" in m and "1 triples" in m for m in msgs)


def test_build_index_no_warning_when_everything_is_seen(tiny_splits, caplog):
    with caplog.at_level(logging.WARNING, logger="jobi_tf.data.index"):
        build_index(tiny_splits)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_bytes_labels_give_the_same_vocab_and_ids_as_str(tiny_splits):
    tiny_splits = dict(tiny_splits)
    tiny_splits["train"] = tiny_splits["train"].copy()
    tiny_splits["train"][0, 0] = "Zürich"  # non-ASCII: sorted by code point either way
    as_bytes = {s: np.char.encode(a, "utf-8") for s, a in tiny_splits.items()}
    ent_s, rel_s, idx_s = build_index(tiny_splits)
    ent_b, rel_b, idx_b = build_index(as_bytes)
    assert ent_s == ent_b and rel_s == rel_b and ent_b.labels.dtype.kind == "U"
    for s in SPLITS:
        np.testing.assert_array_equal(idx_s.split(s), idx_b.split(s))
        np.testing.assert_array_equal(ent_s.decode(idx_s.split(s)[:, [0, 2]]), tiny_splits[s][:, [0, 2]])


@pytest.mark.parametrize("huge", [False, True], ids=["packed", "row-sort"])
def test_csr_from_pairs_dedups_like_a_set(huge):
    rng = np.random.default_rng(5)
    keys = rng.integers(0, 20, size=300) + (2**40 if huge else 0)  # huge keys cannot be packed with values
    values = rng.integers(0, 2**30 if huge else 9, size=300)
    csr = CSR.from_pairs(keys, values)
    got = {(int(k), int(v)) for k, n in zip(csr.keys, csr.sizes(), strict=True) for v in csr.lookup([k])[1][:n]}
    assert got == set(zip(keys.tolist(), values.tolist(), strict=True))
    assert len(csr.values) == len(got)
