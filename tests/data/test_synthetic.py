"""The synthetic typed KG: deterministic, typed, closed over train, skewed."""

from __future__ import annotations

import re

import numpy as np
import pytest

from jobi_tf.data.synthetic import SyntheticSpec, make_typed_kg, make_typed_kg_ids, write_typed_kg
from jobi_tf.runtime.types import SPLITS

SPEC = SyntheticSpec(num_entities=400, num_relations=10, num_triples=4000, num_types=5, seed=11)


@pytest.fixture(scope="module")
def kg():
    return make_typed_kg(SPEC)


@pytest.fixture(scope="module")
def kg_ids():
    return make_typed_kg_ids(SPEC)


def test_same_seed_same_splits(kg):
    again = make_typed_kg(SPEC)
    for s in SPLITS:
        np.testing.assert_array_equal(again[s], kg[s])


def test_different_seed_different_splits(kg):
    other = make_typed_kg(SyntheticSpec(**{**SPEC.__dict__, "seed": SPEC.seed + 1}))
    assert not np.array_equal(other["train"][: len(kg["train"])], kg["train"][: len(other["train"])])
    rows = {tuple(x) for x in kg["train"].tolist()}
    other_rows = {tuple(x) for x in other["train"].tolist()}
    assert rows != other_rows


def test_sizes_roughly_honoured(kg):
    total = sum(len(kg[s]) for s in SPLITS)
    assert 0.8 * SPEC.num_triples <= total <= SPEC.num_triples
    for s, frac in (("valid", SPEC.valid_fraction), ("test", SPEC.test_fraction)):
        assert 0.5 * frac * total <= len(kg[s]) <= frac * total + 1
    entities = {x for s in SPLITS for x in kg[s][:, [0, 2]].ravel().tolist()}
    relations = {x for s in SPLITS for x in kg[s][:, 1].tolist()}
    assert len(entities) <= SPEC.num_entities and len(entities) >= 0.5 * SPEC.num_entities
    assert len(relations) <= SPEC.num_relations and len(relations) >= 0.5 * SPEC.num_relations


def test_string_and_id_forms_agree(kg, kg_ids):
    ids, ent_type = kg_ids
    assert ent_type.shape == (SPEC.num_entities,)
    for s in SPLITS:
        expected_h = [f"t{ent_type[h]}_e{h}" for h in ids[s][:, 0]]
        expected_r = [f"r{r}" for r in ids[s][:, 1]]
        assert kg[s][:, 0].tolist() == expected_h
        assert kg[s][:, 1].tolist() == expected_r
        assert kg[s][:, 2].tolist() == [f"t{ent_type[t]}_e{t}" for t in ids[s][:, 2]]


def test_every_relation_has_one_domain_type_and_one_range_type(kg):
    pattern = re.compile(r"^t(\d+)_e(\d+)$")
    domain, range_ = {}, {}
    for s in SPLITS:
        for h, r, t in kg[s].tolist():
            th = pattern.match(h).group(1)
            tt = pattern.match(t).group(1)
            domain.setdefault(r, set()).add(th)
            range_.setdefault(r, set()).add(tt)
    assert all(len(v) == 1 for v in domain.values()), domain
    assert all(len(v) == 1 for v in range_.values()), range_
    # The labels' entity id determines the type: no entity carries two types.
    type_of = {}
    for s in SPLITS:
        for label in kg[s][:, [0, 2]].ravel().tolist():
            typ, ident = pattern.match(label).groups()
            assert type_of.setdefault(ident, typ) == typ


def test_held_out_entities_and_relations_occur_in_train(kg):
    train_e = set(kg["train"][:, [0, 2]].ravel().tolist())
    train_r = set(kg["train"][:, 1].tolist())
    for s in ("valid", "test"):
        assert len(kg[s]) > 0
        assert set(kg[s][:, [0, 2]].ravel().tolist()) <= train_e
        assert set(kg[s][:, 1].tolist()) <= train_r


def test_no_duplicate_triples_and_no_self_loops(kg):
    rows = [tuple(x) for s in SPLITS for x in kg[s].tolist()]
    assert len(rows) == len(set(rows))
    assert all(h != t for h, _, t in rows)


def test_degrees_are_skewed(kg_ids):
    ids, _ = kg_ids
    ents = np.concatenate([ids[s][:, [0, 2]].ravel() for s in SPLITS])
    degree = np.bincount(ents, minlength=SPEC.num_entities)
    degree = degree[degree > 0]
    assert degree.max() >= 5 * np.median(degree)
    rel_freq = np.bincount(np.concatenate([ids[s][:, 1] for s in SPLITS]))
    assert rel_freq.max() >= 2 * np.median(rel_freq[rel_freq > 0])


def test_ids_are_in_range(kg_ids):
    ids, ent_type = kg_ids
    for s in SPLITS:
        assert ids[s].dtype == np.int64
        assert ids[s][:, [0, 2]].min() >= 0 and ids[s][:, [0, 2]].max() < SPEC.num_entities
        assert ids[s][:, 1].min() >= 0 and ids[s][:, 1].max() < SPEC.num_relations
    assert set(np.unique(ent_type).tolist()) == set(range(SPEC.num_types))


def test_generation_in_many_chunks_is_deterministic_and_keeps_its_shape(monkeypatch):
    import jobi_tf.data.synthetic as synthetic

    monkeypatch.setattr(synthetic, "_CHUNK", 1000)  # many chunks, as for a multi-million graph
    ids, types = make_typed_kg_ids(SPEC)
    again, _ = make_typed_kg_ids(SPEC)
    for s in SPLITS:
        np.testing.assert_array_equal(again[s], ids[s])
    every = np.concatenate([ids[s] for s in SPLITS])
    assert 0.8 * SPEC.num_triples <= len(every) <= SPEC.num_triples
    assert len(np.unique(every, axis=0)) == len(every) and (every[:, 0] != every[:, 2]).all()
    for rel in np.unique(every[:, 1]):  # still one domain type and one range type per relation
        rows = every[every[:, 1] == rel]
        assert len(np.unique(types[rows[:, 0]])) == 1 and len(np.unique(types[rows[:, 2]])) == 1


def test_exact_held_out_sizes_and_written_folder(tmp_path):
    from jobi_tf.data.folder import read_folder_index

    spec = SyntheticSpec(num_entities=300, num_relations=6, num_triples=3000, num_valid=100, num_test=50, seed=1)
    sizes = write_typed_kg(spec, tmp_path)
    assert 90 <= sizes["valid"] <= 100 and 45 <= sizes["test"] <= 50  # unseen ones go back to train
    ids, _ = make_typed_kg_ids(spec)
    every = np.concatenate([ids[s] for s in SPLITS])
    assert sizes == {
        **{s: len(ids[s]) for s in SPLITS},
        "entities": len(np.unique(every[:, [0, 2]])),
        "relations": len(np.unique(every[:, 1])),
    }
    entities, relations, index = read_folder_index(tmp_path)
    labels = make_typed_kg(spec)
    for s in SPLITS:
        got = np.stack([entities.decode(index.split(s)[:, 0]), relations.decode(index.split(s)[:, 1])], axis=1)
        np.testing.assert_array_equal(got, labels[s][:, :2])
