"""Approximate signatures (``--cells``): k-means cells against NumPy, and answers against the exact ones."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from click.testing import CliRunner

from jobi_tf.config import ExportConfig
from jobi_tf.export.cells import default_cells, kmeans_cells
from jobi_tf.export.savedmodel import export_saved_model
from jobi_tf.runtime.errors import ConfigError, ExportError

CELLS = 4


def _cells_export(random_export, tmp_path, model: str, filter_known: bool, reciprocal: bool = False):
    source = random_export(model, filter_known=filter_known, reciprocal=reciprocal)
    cfg = ExportConfig(filter_known=filter_known, cells=CELLS)
    result = export_saved_model(
        source.model, source.entities, source.relations, tmp_path, cfg, train_triples=source.train
    )
    return source, tf.saved_model.load(str(result.path))


def _ask(loaded, signature: str, k: int, probe: int | None = None, **names):
    inputs = {key: tf.constant(value) for key, value in names.items()}
    extra = {} if probe is None else {"probe": tf.constant(probe, tf.int32)}
    out = loaded.signatures[signature](**inputs, k=tf.constant(k, tf.int32), **extra)
    return {key: value.numpy() for key, value in out.items()}


def test_kmeans_assigns_every_row_to_its_nearest_centroid():
    rows = np.random.default_rng(0).normal(size=(500, 6)).astype(np.float32)
    centroids, cell, radius = kmeans_cells(rows, 7, sample=300)
    distances = ((rows[:, None, :] - centroids[None]) ** 2).sum(-1)
    np.testing.assert_allclose(distances[np.arange(len(rows)), cell], distances.min(1), rtol=1e-4, atol=1e-4)
    farthest = [np.sqrt(distances[cell == c, c].max()) for c in range(7)]
    np.testing.assert_allclose(radius, farthest, rtol=1e-4)
    assert centroids.shape == (7, 6) and len(np.unique(cell)) == 7
    assert default_cells(1_853_898) == 5446 and default_cells(3) == 3


@pytest.mark.parametrize(("model", "reciprocal"), [("complex", False), ("distmult", False), ("complex", True)])
@pytest.mark.parametrize("filter_known", [False, True])
def test_probing_every_cell_gives_the_exact_answers(random_export, tmp_path, model, reciprocal, filter_known):
    source, loaded = _cells_export(random_export, tmp_path, model, filter_known, reciprocal)
    heads, relations = source.entities.decode(source.train[:6, 0]), source.relations.decode(source.train[:6, 1])
    tails = source.entities.decode(source.train[:6, 2])
    for side, names in (
        ("tail", {"head": heads, "relation": relations}),
        ("head", {"relation": relations, "tail": tails}),
    ):
        exact = _ask(loaded, f"predict_{side}", 8, **names)
        approximate = _ask(loaded, f"predict_{side}_approximate", 8, probe=CELLS, **names)
        np.testing.assert_array_equal(approximate[f"{side}s"], exact[f"{side}s"])
        np.testing.assert_allclose(approximate["scores"], exact["scores"], rtol=1e-5, atol=1e-5)


def _export_ids(export_path) -> dict[str, int]:
    """The export's own entity ids by name (its entities.txt: line number = id)."""
    lines = (export_path / "assets" / "entities.txt").read_text(encoding="utf-8").splitlines()
    return {name: i for i, name in enumerate(lines)}


def test_one_cell_gives_the_exact_top_k_among_that_cells_rows(random_export, tmp_path):
    source, loaded = _cells_export(random_export, tmp_path, "complex", filter_known=True)
    offsets = loaded.cells.offsets.numpy()
    export_id = _export_ids(tmp_path / "1")
    cell_of = {name: int(np.searchsorted(offsets, i, side="right")) - 1 for name, i in export_id.items()}
    h, r = source.train[0, 0], source.train[0, 1]
    names = {"head": source.entities.decode([h]), "relation": source.relations.decode([r])}
    out = _ask(loaded, "predict_tail_approximate", 30, probe=1, **names)
    answers = [a.decode() for a in out["tails"][0] if a]
    assert len({cell_of[a] for a in answers}) == 1  # one cell's rows only
    exact = _ask(loaded, "predict_tail", len(export_id), **names)  # every entity, filtered, best first
    in_cell = [a.decode() for a in exact["tails"][0] if a and cell_of[a.decode()] == cell_of[answers[0]]]
    known = set(source.entities.decode(source.train[(source.train[:, 0] == h) & (source.train[:, 1] == r), 2]))
    assert answers == [a for a in in_cell if a not in known]


def test_the_export_numbers_entities_cell_by_cell_and_keeps_each_names_row(random_export, tmp_path):
    source, loaded = _cells_export(random_export, tmp_path, "complex", filter_known=True)
    export_id = _export_ids(tmp_path / "1")
    offsets = loaded.cells.offsets.numpy()
    rows = loaded.entities.values.numpy()
    run_rows = source.model.entity_embeddings.numpy()
    names = source.entities.decode(np.arange(len(source.entities)))
    assert sorted(export_id) == sorted(names) and offsets[0] == 0 and offsets[-1] == len(names)
    for run_id, name in enumerate(names):
        np.testing.assert_array_equal(rows[export_id[name]], run_rows[run_id])  # the same row under the same name
    centroids = loaded.cells.centroids.numpy()
    cell = np.searchsorted(offsets, np.arange(len(names)), side="right") - 1  # the runs of ids the index reads
    nearest = ((rows[:, None, :] - centroids[None]) ** 2).sum(-1).argmin(1)
    np.testing.assert_array_equal(cell, nearest)


def test_numbering_cell_by_cell_leaves_every_exact_answer_unchanged(random_export, tmp_path):
    """The renumbered export against one without cells, by names: the known facts, the slots and
    the rows must follow the entities to their new ids, or some answer moves."""
    source = random_export("complex", filter_known=True)
    loaded = {}
    for cells in (0, CELLS):
        cfg = ExportConfig(filter_known=True, typed=True, pair_head=True, cells=cells)
        out = tmp_path / f"cells-{cells}"
        result = export_saved_model(
            source.model, source.entities, source.relations, out, cfg, train_triples=source.train
        )
        loaded[cells] = tf.saved_model.load(str(result.path))
    h, r, t = (source.train[:8, i] for i in range(3))
    heads, tails = source.entities.decode(h), source.entities.decode(t)
    relations = source.relations.decode(r)
    asked = [
        ("score", None, {"head": heads, "relation": relations, "tail": tails}),
        ("predict_relation", 4, {"head": heads, "tail": tails}),
    ]
    for side, names in (
        ("tail", {"head": heads, "relation": relations}),
        ("head", {"relation": relations, "tail": tails}),
    ):
        asked += [(f"predict_{side}{kind}", 12, names) for kind in ("", "_typed", "_soft_typed")]
    for signature, k, names in asked:
        extra = {} if k is None else {"k": tf.constant(k, tf.int32)}
        if signature.endswith("soft_typed"):
            extra["min_pair_probability"] = tf.constant(0.3)
        plain, numbered = (
            {key: v.numpy() for key, v in loaded[c].signatures[signature](**names, **extra).items()} for c in (0, CELLS)
        )
        assert plain.keys() == numbered.keys()
        for key in plain:
            if plain[key].dtype.kind == "f":
                np.testing.assert_allclose(numbered[key], plain[key], rtol=1e-5, atol=1e-6, err_msg=signature)
            else:
                np.testing.assert_array_equal(numbered[key], plain[key], err_msg=f"{signature}: {key}")


def test_candidates_are_padded_to_few_sizes_never_fewer_than_asked():
    from jobi_tf.export.approximate import padded_size

    sizes = {n: int(padded_size(tf.constant(n))) for n in [0, 1, 1024, 1025, 5000, 80_000, 80_001, 2_000_000]}
    assert all(size >= max(n, 1024) for n, size in sizes.items())
    assert all(size <= 1.19 * max(n, 1024) + 1 for n, size in sizes.items())
    assert len({int(padded_size(tf.constant(n))) for n in range(1024, 8193, 7)}) <= 13  # 3 doublings: 4 sizes each


def test_unknown_names_are_not_found(random_export, tmp_path):
    _, loaded = _cells_export(random_export, tmp_path, "complex", filter_known=False)
    out = _ask(loaded, "predict_tail_approximate", 3, probe=2, head=["nobody", "Berlin"], relation=["borders"] * 2)
    assert out["found"].tolist() == [False, True]
    assert (out["tails"][0] == b"").all() and np.isnan(out["scores"][0]).all() and np.isfinite(out["scores"][1]).all()
    empty = _ask(loaded, "predict_tail_approximate", 3, probe=2, head=np.array([], str), relation=np.array([], str))
    assert empty["tails"].shape[0] == 0 and empty["found"].shape == (0,)
    many = _ask(loaded, "predict_tail_approximate", 1000, probe=1, head=["Berlin"], relation=["borders"])
    assert many["tails"].shape == (1, 30)  # k clipped to the entities; a cell's missing answers are empty
    assert (many["tails"][0][np.isneginf(many["scores"][0])] == b"").all() and np.isneginf(many["scores"][0]).any()


def test_bad_cells_are_refused_in_one_line(tmp_path):
    from jobi_tf.cli.main import main as cli

    with pytest.raises(ConfigError, match="cells"):
        ExportConfig(cells=-1)
    result = CliRunner().invoke(cli, ["export", str(tmp_path), "--out", str(tmp_path / "x"), "--cells", "many"])
    assert result.exit_code == 2 and "--cells" in result.output and "'many'" in result.output


def test_a_scorer_that_is_not_a_dot_product_is_refused(random_export, tmp_path, monkeypatch):
    source = random_export("complex")
    monkeypatch.setattr(type(source.model.scorer), "dot_product", False)  # what a distance declares
    with pytest.raises(ExportError, match="--cells: the complex scorer is not a dot product"):
        export_saved_model(source.model, source.entities, source.relations, tmp_path, ExportConfig(cells=2))
    assert not any(tmp_path.iterdir())  # nothing written
