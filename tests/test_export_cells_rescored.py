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
from jobi_tf.export.cells import positions_in_cells
from jobi_tf.export.savedmodel import export_saved_model
from jobi_tf.export.served_tables import row_ids

E, R, CELLS, RESCORED, K = 1500, 3, 6, 6, 10


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """``make(table_dtype)``: the loaded approximate export, the training triples and vocabularies."""
    built = {}

    def make(table_dtype="float32"):
        if table_dtype not in built:
            rng = np.random.default_rng(4)
            drawn = [rng.integers(E, size=4000), rng.integers(R, size=4000), rng.integers(E, size=4000)]
            train = np.unique(np.stack(drawn, 1), axis=0).astype(np.int32)
            entities = Vocab.from_labels([f"e{i}" for i in range(E)])
            relations = Vocab.from_labels([f"r{i}" for i in range(R)])
            cfg = ExportConfig(filter_known=True, cells=CELLS, table_dtype=table_dtype)
            saved, ApproximateScorerModule.rescored = ApproximateScorerModule.rescored, RESCORED
            try:
                base = tmp_path_factory.mktemp("cells-rescored")
                jobi = counted_model(train, E, R, model="complex", dim=8, weight=0.5, seed=5)
                result = export_saved_model(jobi, entities, relations, base, cfg, train_triples=train)
            finally:
                ApproximateScorerModule.rescored = saved
            built[table_dtype] = tf.saved_model.load(str(result.path)), train, entities, relations
        return built[table_dtype]

    return make


def _ask(loaded, signature, probe=None, **names):
    extra = {} if probe is None else {"probe": tf.constant(probe, tf.int32)}
    out = loaded.signatures[signature](**{n: tf.constant(v) for n, v in names.items()}, k=tf.constant(K), **extra)
    return {key: value.numpy() for key, value in out.items()}


def test_every_cell_probed_gives_the_float32_answers_and_scores(exported):
    loaded, train, entities, relations = exported()
    assert loaded.coarse_rows.dtype == tf.bfloat16
    # The copy's own scores differ from float32's: only a second scoring makes them equal below.
    rows = loaded.entities.values.numpy()
    rounded = tf.cast(loaded.coarse_rows, tf.float32).numpy()
    query = np.random.default_rng(0).normal(size=rows.shape[1]).astype(np.float32)
    assert np.max(np.abs(rounded @ query - rows @ query)) > 1e-3
    picked = train[::97][:24]
    h, r, t = entities.decode(picked[:, 0]), relations.decode(picked[:, 1]), entities.decode(picked[:, 2])
    for side, names in (("tail", {"head": h, "relation": r}), ("head", {"relation": r, "tail": t})):
        exact = _ask(loaded, f"predict_{side}", **names)
        approximate = _ask(loaded, f"predict_{side}_approximate", probe=CELLS, **names)
        np.testing.assert_array_equal(approximate[f"{side}s"], exact[f"{side}s"])
        np.testing.assert_allclose(approximate["scores"], exact["scores"], rtol=1e-6, atol=1e-6)


def test_a_bfloat16_table_holds_no_second_copy(exported):
    loaded, *_ = exported("bfloat16")
    assert getattr(loaded, "coarse_rows", None) is None
    assert loaded.entities.values.dtype == tf.bfloat16


def test_known_facts_are_placed_among_the_probed_rows_as_numpy_places_them():
    rng = np.random.default_rng(1)
    offsets = np.concatenate([[0], np.cumsum(rng.integers(0, 9, size=30))]).astype(np.int64)  # empty cells too
    chosen = np.sort(rng.choice(30, size=11, replace=False)).astype(np.int32)
    rows = np.concatenate([np.arange(offsets[c], offsets[c + 1]) for c in chosen])  # as rows_of lists them
    facts = np.sort(rng.choice(offsets[-1], size=40, replace=False))  # a key's entities, as listed
    expected = [int(np.flatnonzero(rows == f)[0]) for f in facts if f in rows]
    got = positions_in_cells(tf.constant(facts), tf.constant(offsets), tf.constant(chosen)).numpy()
    assert got.shape == (len(expected), 1) and 0 < len(expected) < len(facts)
    np.testing.assert_array_equal(got[:, 0], expected)


def test_the_row_of_each_value_is_the_one_numpy_repeats():
    lengths = np.array([2, 0, 5, 1, 0, 3])
    spans = tf.RaggedTensor.from_row_lengths(tf.range(int(lengths.sum())), tf.constant(lengths))
    np.testing.assert_array_equal(row_ids(spans).numpy(), np.repeat(np.arange(len(lengths)), lengths))
    empty = tf.RaggedTensor.from_row_lengths(tf.zeros([0], tf.int32), tf.zeros([0], tf.int64))
    assert row_ids(empty).numpy().shape == (0,)
