"""An approximate export ranks its cells' candidates by a bfloat16 copy of the rows, then scores
the best ``k + rescored`` again in float32: the answers and scores are the float32 ones.

Against the export's exact signatures with every cell probed, on a graph large enough that the
copy's ranking chooses (far more candidates than ``k + rescored``); and the placement of known
facts among the probed rows against NumPy.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from random_batches import counted_model

from jobi_tf.config import ExportConfig
from jobi_tf.data.vocab import Vocab
from jobi_tf.export.approximate import ApproximateScorerModule
from jobi_tf.export.cells import cell_offsets, places_in_cells, row_shifts
from jobi_tf.export.savedmodel import export_saved_model
from jobi_tf.export.served_tables import row_ids

E, R, CELLS, RESCORED, K = 1500, 3, 6, 6, 10


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """``make(table_dtype, share, rescored)``: the loaded approximate export (its copy keeping
    ``share`` of the directions, ``k + rescored`` scored again), the training triples and vocabularies."""
    built = {}

    def make(table_dtype="float32", share=1.0, rescored=RESCORED):
        if (table_dtype, share, rescored) not in built:
            rng = np.random.default_rng(4)
            drawn = [rng.integers(E, size=4000), rng.integers(R, size=4000), rng.integers(E, size=4000)]
            train = np.unique(np.stack(drawn, 1), axis=0).astype(np.int32)
            entities = Vocab.from_labels([f"e{i}" for i in range(E)])
            relations = Vocab.from_labels([f"r{i}" for i in range(R)])
            cfg = ExportConfig(filter_known=True, cells=CELLS, table_dtype=table_dtype)
            cls = ApproximateScorerModule
            saved = cls.rescored, cls.coarse_share
            cls.rescored, cls.coarse_share = rescored, share
            try:
                base = tmp_path_factory.mktemp("cells-rescored")
                jobi = counted_model(train, E, R, model="complex", dim=8, weight=0.5, seed=5)
                result = export_saved_model(jobi, entities, relations, base, cfg, train_triples=train)
            finally:
                cls.rescored, cls.coarse_share = saved
            built[table_dtype, share, rescored] = tf.saved_model.load(str(result.path)), train, entities, relations
        return built[table_dtype, share, rescored]

    return make


def _ask(loaded, signature, probe=None, **names):
    extra = {} if probe is None else {"probe": tf.constant(probe, tf.int32)}
    out = loaded.signatures[signature](**{n: tf.constant(v) for n, v in names.items()}, k=tf.constant(K), **extra)
    return {key: value.numpy() for key, value in out.items()}


def _picked_names(train, entities, relations):
    picked = train[::97][:24]
    return entities.decode(picked[:, 0]), relations.decode(picked[:, 1]), entities.decode(picked[:, 2])


def _assert_approximate_equals_exact(loaded, h, r, t):
    for side, names in (("tail", {"head": h, "relation": r}), ("head", {"relation": r, "tail": t})):
        exact = _ask(loaded, f"predict_{side}", **names)
        approximate = _ask(loaded, f"predict_{side}_approximate", probe=CELLS, **names)
        np.testing.assert_array_equal(approximate[f"{side}s"], exact[f"{side}s"])
        np.testing.assert_allclose(approximate["scores"], exact["scores"], rtol=1e-6, atol=1e-6)


def test_every_cell_probed_gives_the_float32_answers_and_scores(exported):
    loaded, train, entities, relations = exported()
    copy = loaded.coarse_rows
    assert copy.values.dtype == tf.bfloat16 and copy.directions.shape == (16, 16)
    # The copy's own scores differ from float32's: only a second scoring makes them equal below.
    rows = loaded.entities.values.numpy()
    query = np.random.default_rng(0).normal(size=rows.shape[1]).astype(np.float32)
    rounded = tf.cast(copy.values, tf.float32).numpy() @ (copy.directions.numpy().T @ query)
    assert np.max(np.abs(rounded - rows @ query)) > 1e-3
    _assert_approximate_equals_exact(loaded, *_picked_names(train, entities, relations))


def test_a_copy_of_half_the_directions_is_numpy_s_projection_and_answers_exactly_when_all_rescored(exported):
    loaded, train, entities, relations = exported(share=0.5, rescored=E)
    rows = loaded.entities.values.numpy()
    directions = loaded.coarse_rows.directions.numpy()
    assert directions.shape == (16, 8)
    np.testing.assert_allclose(directions.T @ directions, np.eye(8), atol=1e-5)
    top = np.linalg.svd(rows.astype(np.float64), full_matrices=False)[2][:8]  # the largest singular directions
    np.testing.assert_allclose(np.abs(top @ directions), np.eye(8), atol=1e-3)  # the same, up to sign
    expected = tf.cast(tf.cast(rows @ directions, tf.bfloat16), tf.float32).numpy()
    np.testing.assert_array_equal(tf.cast(loaded.coarse_rows.values, tf.float32).numpy(), expected)
    _assert_approximate_equals_exact(loaded, *_picked_names(train, entities, relations))


def test_a_bfloat16_table_holds_no_second_copy(exported):
    loaded, *_ = exported(table_dtype="bfloat16")
    assert getattr(loaded, "coarse_rows", None) is None
    assert loaded.entities.values.dtype == tf.bfloat16


def test_counts_and_facts_are_placed_among_the_probed_rows_as_numpy_places_them():
    """A slot's sorted keys and a query's sorted facts, found as one run a cell, against NumPy."""
    rng = np.random.default_rng(1)
    offsets = np.concatenate([[0], np.cumsum(rng.integers(0, 9, size=30))]).astype(np.int64)  # empty cells too
    e, slot = int(offsets[-1]), 2
    np.testing.assert_array_equal(cell_offsets(np.repeat(np.arange(30), np.diff(offsets)), 30), offsets)
    chosen = np.sort(rng.choice(30, size=11, replace=False))
    starts, ends = offsets[chosen], offsets[chosen + 1]
    rows = np.concatenate([np.arange(a, b) for a, b in zip(starts, ends, strict=True)])  # as rows_of lists them
    keys = np.sort(rng.choice(4 * e, size=3 * e, replace=False))  # four slots' keys, slot * e + id
    facts = np.sort(rng.choice(e, size=40, replace=False)).astype(np.int32)
    everyone = np.concatenate([[7, 3, 9], facts]).astype(np.int32)  # other keys' facts first
    cases = (
        (keys, np.searchsorted(keys, slot * e + offsets), slot * e, keys[keys // e == slot] % e),
        (everyone, 3 + np.searchsorted(facts, offsets), 0, facts),
    )
    for array, runs, base, members in cases:
        lo, hi = runs[chosen], runs[chosen + 1]
        args = (array, lo, hi, row_shifts(tf.constant(starts), tf.constant(ends)))
        at, place = (x.numpy() for x in places_in_cells(*map(tf.constant, args), base=tf.constant(base, tf.int64)))
        expected = [int(np.flatnonzero(rows == m)[0]) for m in members if m in rows]
        assert 0 < len(expected) < len(members)
        np.testing.assert_array_equal(place[:, 0], expected)
        np.testing.assert_array_equal(array[at] - base, rows[place[:, 0]])


def test_the_row_of_each_value_is_the_one_numpy_repeats():
    lengths = np.array([2, 0, 5, 1, 0, 3])
    spans = tf.RaggedTensor.from_row_lengths(tf.range(int(lengths.sum())), tf.constant(lengths))
    np.testing.assert_array_equal(row_ids(spans).numpy(), np.repeat(np.arange(len(lengths)), lengths))
    empty = tf.RaggedTensor.from_row_lengths(tf.zeros([0], tf.int32), tf.zeros([0], tf.int64))
    assert row_ids(empty).numpy().shape == (0,)
