"""An approximate export (``--cells``) of a model that ranks with the slot counts serves them too.

Against NumPy: the export's own numbering, each slot's most frequent entities, each cell's
largest other count, and a whole approximate query (the probed cells' rows and the frequent
entities, scored exactly with the counts); and against the export's exact signatures.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from random_batches import counted_model
from references import slot_log_counts_by_loop

from jobi_tf.config import ExportConfig
from jobi_tf.data.vocab import Vocab
from jobi_tf.export.approximate import ApproximateScorerModule
from jobi_tf.export.cells import COUNT_SLACK
from jobi_tf.export.savedmodel import export_saved_model
from jobi_tf.models import JoBiModel

E, R, W, CELLS = 60, 3, 0.8, 5


def _graph(seed: int) -> np.ndarray:
    """Training ids whose slots are skewed (a few entities fill most), so counts differ."""
    rng = np.random.default_rng(seed)
    skewed = np.minimum(rng.geometric(0.12, size=(900, 2)) - 1, E - 1)
    shuffle = rng.permutation(E)  # the frequent ones are not the lowest ids
    train = np.stack([shuffle[skewed[:, 0]], rng.integers(R, size=900), shuffle[skewed[:, 1]]], 1)
    return np.unique(train, axis=0).astype(np.int32)


def _model(train: np.ndarray, model: str, reciprocal: bool) -> JoBiModel:
    return counted_model(train, E, R, model=model, dim=4, weight=W, reciprocal=reciprocal)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """``make(model, reciprocal, filter_known, frequent)``: an approximate export of a model that
    ranks with the counts, built once per module, and what it came from."""
    built = {}

    def make(model="complex", reciprocal=False, filter_known=True, frequent=2):
        key = (model, reciprocal, filter_known, frequent)
        if key not in built:
            train = _graph(0)
            jobi = _model(train, model, reciprocal)
            entities = Vocab.from_labels([f"e{i}" for i in range(E)])
            relations = Vocab.from_labels([f"r{i}" for i in range(R)])
            cfg = ExportConfig(filter_known=filter_known, cells=CELLS)
            saved, ApproximateScorerModule.frequent = ApproximateScorerModule.frequent, frequent
            try:
                base = tmp_path_factory.mktemp("cells-counts")
                result = export_saved_model(jobi, entities, relations, base, cfg, train_triples=train)
            finally:
                ApproximateScorerModule.frequent = saved
            built[key] = train, jobi, entities, relations, tf.saved_model.load(str(result.path)), result.path
        return built[key]

    return make


def _ask(loaded, signature, k, probe=None, **names):
    extra = {} if probe is None else {"probe": tf.constant(probe, tf.int32)}
    out = loaded.signatures[signature](**{n: tf.constant(v) for n, v in names.items()}, k=tf.constant(k), **extra)
    return {key: value.numpy() for key, value in out.items()}


def _counts(train: np.ndarray) -> np.ndarray:
    """``[2R, E]`` log(1 + count) in the run's numbering, tail slots first."""
    return slot_log_counts_by_loop(train, E, R)


@pytest.mark.parametrize(
    ("model", "reciprocal", "filter_known", "frequent"),
    [("complex", False, True, 2), ("complex", True, True, 64), ("distmult", False, False, 2)],
)
def test_probing_every_cell_gives_the_exact_answers_with_the_counts(
    exported, model, reciprocal, filter_known, frequent
):
    train, _, entities, relations, loaded, _ = exported(model, reciprocal, filter_known, frequent)
    h, r, t = (entities.decode(train[:8, 0]), relations.decode(train[:8, 1]), entities.decode(train[:8, 2]))
    for side, names in (("tail", {"head": h, "relation": r}), ("head", {"relation": r, "tail": t})):
        exact = _ask(loaded, f"predict_{side}", 10, **names)
        approximate = _ask(loaded, f"predict_{side}_approximate", 10, probe=CELLS, **names)
        np.testing.assert_array_equal(approximate[f"{side}s"], exact[f"{side}s"])
        np.testing.assert_allclose(approximate["scores"], exact["scores"], rtol=1e-5, atol=1e-5)


def test_the_exact_signatures_score_with_the_counts_under_the_new_numbering(exported):
    train, jobi, entities, relations, loaded, _ = exported(filter_known=False)
    test = np.stack([np.arange(E) % E, np.arange(E) % R, (np.arange(E) * 7) % E], 1).astype(np.int32)
    out = _ask_score(loaded, entities.decode(test[:, 0]), relations.decode(test[:, 1]), entities.decode(test[:, 2]))
    lc = _counts(train)
    bilinear = jobi.score_triples(test).numpy() - W * (lc[test[:, 1], test[:, 2]] + lc[R + test[:, 1], test[:, 0]])
    np.testing.assert_allclose(
        out, bilinear + W * (lc[test[:, 1], test[:, 2]] + lc[R + test[:, 1], test[:, 0]]), rtol=1e-5
    )


def _ask_score(loaded, heads, relations, tails):
    out = loaded.signatures["score"](head=tf.constant(heads), relation=tf.constant(relations), tail=tf.constant(tails))
    return out["score"].numpy()


def _numbering(path, entities) -> np.ndarray:
    """``new_id[run id]``, from the export's entities.txt (its line number is its id)."""
    run_id = {name: i for i, name in enumerate(entities.decode(np.arange(E)))}
    names = (path / "assets" / "entities.txt").read_text(encoding="utf-8").splitlines()
    new_id = np.empty(E, np.int64)
    new_id[[run_id[n] for n in names]] = np.arange(E)
    return new_id


def test_the_frequent_lists_and_cell_bounds_equal_numpy(exported):
    train, _, entities, _, loaded, path = exported()
    new_id = _numbering(path, entities)
    lc = np.zeros((2 * R, E))
    lc[:, new_id] = _counts(train)  # in the export's numbering
    offsets = loaded.cells.offsets.numpy()
    cell = np.searchsorted(offsets, np.arange(E), side="right") - 1
    slot_cells = loaded.slot_cells
    starts, ids = slot_cells.frequent_offsets.numpy(), slot_cells.frequent_ids.numpy()
    bound = slot_cells.bound.numpy()
    for slot in range(2 * R):
        members = np.flatnonzero(lc[slot])
        ranked = members[np.lexsort((members, -lc[slot, members]))]  # highest count, then lower id
        np.testing.assert_array_equal(ids[starts[slot] : starts[slot + 1]], ranked[:2])
        np.testing.assert_allclose(
            slot_cells.frequent_counts.numpy()[starts[slot] : starts[slot + 1]], lc[slot, ranked[:2]]
        )
        expected = np.zeros(CELLS)
        for e in ranked[2:]:
            expected[cell[e]] = max(expected[cell[e]], lc[slot, e])
        np.testing.assert_allclose(bound[slot], expected, rtol=1e-6)
        assert len(members) > 2  # the rest is not empty: the bound is tested


@pytest.mark.parametrize("probe, count_slack", [(1, None), (2, None), (1, 1.0), (2, 0.1)])
def test_an_approximate_query_equals_a_numpy_reference(exported, probe, count_slack):
    """The probed cells (centroid score, slack and the count slack x ``W`` x the cell's bound),
    their rows and the slot's frequent entities, each scored exactly with the counts, known facts
    left out. ``count_slack``: the export's own (None), or another assigned, as a study sweeps it."""
    train, _, entities, relations, loaded, path = exported()
    assert float(loaded.slot_cells.slack.numpy()) == pytest.approx(COUNT_SLACK)
    if count_slack is not None:
        loaded.slot_cells.slack.assign(count_slack)
    try:
        _check_approximate_queries(train, entities, relations, loaded, path, probe)
    finally:
        loaded.slot_cells.slack.assign(COUNT_SLACK)


def _check_approximate_queries(train, entities, relations, loaded, path, probe) -> None:
    new_id = _numbering(path, entities)
    lc = np.zeros((2 * R, E))
    lc[:, new_id] = _counts(train)
    rows = loaded.entities.values.numpy()
    rels = loaded.triple_relations.numpy()
    centroids, radius = loaded.cells.centroids.numpy(), loaded.cells.radius.numpy()
    slack = float(loaded.cells.slack.numpy())
    offsets = loaded.cells.offsets.numpy()
    slot_cells = loaded.slot_cells
    starts, frequent_ids = slot_cells.frequent_offsets.numpy(), slot_cells.frequent_ids.numpy()
    known = {(new_id[h], r, new_id[t]) for h, r, t in train.tolist()}
    k, d = 6, rows.shape[1] // 2
    checked, partial = 0, 0
    for h, r, _ in train[:12].tolist():
        hn = rows[new_id[h]]
        rel = rels[r]
        # ComplEx's tail query: Re(<h, r, conj(t)>) = <q, t> with q = [re(h r), im(h r)].
        re = hn[:d] * rel[:d] - hn[d:] * rel[d:]
        im = hn[:d] * rel[d:] + hn[d:] * rel[:d]
        q = np.concatenate([re, im])
        bonus = float(slot_cells.slack.numpy()) * W * slot_cells.bound.numpy()[r]
        probe_scores = centroids @ q + slack * np.linalg.norm(q) * radius + bonus
        chosen = np.sort(np.argsort(-probe_scores, kind="stable")[:probe])
        candidates = set(np.concatenate([np.arange(offsets[c], offsets[c + 1]) for c in chosen]).tolist())
        candidates |= set(frequent_ids[starts[r] : starts[r + 1]].tolist())
        partial += len(candidates) < E  # the probe leaves some rows unscored
        candidates = [e for e in candidates if (new_id[h], r, e) not in known]
        scores = {e: rows[e] @ q + W * (lc[r, e] + lc[R + r, new_id[h]]) for e in candidates}
        best = sorted(scores, key=lambda e: (-scores[e], e))[:k]
        out = _ask(
            loaded,
            "predict_tail_approximate",
            k,
            probe=probe,
            head=entities.decode([h]),
            relation=relations.decode([r]),
        )
        names = (path / "assets" / "entities.txt").read_text(encoding="utf-8").splitlines()
        assert [n.decode() for n in out["tails"][0] if n] == [names[e] for e in best]
        np.testing.assert_allclose(out["scores"][0][: len(best)], [scores[e] for e in best], rtol=1e-4, atol=1e-5)
        checked += 1
    assert checked == 12 and partial == 12
