"""SavedModel export: numerics against NumPy, unknown names, contents, versioned atomic writes."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from subprocess import PIPE

import numpy as np
import pytest
import tensorflow as tf
from jobi_tf.serving import contract
from jobi_tf.serving.contract import SIGNATURES
from references import all_scores

from jobi_tf.api import load_run
from jobi_tf.config import DataConfig, ExportConfig, ModelConfig, RunConfig, SamplerConfig, TrainConfig
from jobi_tf.export.savedmodel import export_run, export_saved_model
from jobi_tf.runtime.errors import ExportError
from jobi_tf.training.trainer import train

MODELS = ("distmult", "complex", "simple")


def _text(names: np.ndarray) -> np.ndarray:
    """A string tensor's bytes as str (UTF-8)."""
    return np.char.decode(names.astype(bytes), "utf-8")


def _tables(export):
    return export.model.entity_embeddings.numpy(), export.model.triple_relations.numpy()


def _call(export, signature: str, **inputs):
    loaded = tf.saved_model.load(str(export.path))
    dtypes = {"k": tf.int32, "min_pair_probability": tf.float32}
    tensors = {k: tf.constant(v, dtypes.get(k, tf.string)) for k, v in inputs.items()}
    return {k: v.numpy() for k, v in loaded.signatures[signature](**tensors).items()}


@pytest.mark.parametrize("model", MODELS)
def test_score_equals_the_trained_models_score(model, random_export):
    export = random_export(model)
    rng = np.random.default_rng(0)
    ids = np.stack([rng.integers(30, size=20), rng.integers(4, size=20), rng.integers(30, size=20)], 1)
    names = {
        "head": export.entities.decode(ids[:, 0]),
        "relation": export.relations.decode(ids[:, 1]),
        "tail": export.entities.decode(ids[:, 2]),
    }
    out = _call(export, "score", **names)
    expected = export.model.score_triples(tf.constant(ids, tf.int32)).numpy()
    np.testing.assert_allclose(out["score"], expected, rtol=1e-6, atol=1e-6)
    reference = all_scores(model, *_tables(export))[ids[:, 0], ids[:, 1], ids[:, 2]]
    np.testing.assert_allclose(out["score"], reference, rtol=1e-5, atol=1e-5)
    assert out["found"].all()


@pytest.mark.parametrize("model", MODELS)
def test_top_k_equals_numpy_top_k_and_the_score_of_the_returned_triples(model, random_export):
    export = random_export(model)
    everything = all_scores(model, *_tables(export))  # [E, R, E]
    heads, relations = np.array([0, 3, 7, 29]), np.array([0, 1, 2, 3])
    k = 6
    out = _call(
        export, "predict_tail", head=export.entities.decode(heads), relation=export.relations.decode(relations), k=k
    )
    expected = np.argsort(-everything[heads, relations, :], axis=1, kind="stable")[:, :k]
    np.testing.assert_array_equal(_text(out["tails"]), export.entities.decode(expected))
    np.testing.assert_allclose(
        out["scores"], np.take_along_axis(everything[heads, relations, :], expected, 1), atol=1e-5
    )
    # predict_tail's scores are the score signature's scores of the triples it returns.
    rows = np.repeat(np.arange(len(heads)), k)
    again = _call(
        export,
        "score",
        head=export.entities.decode(heads[rows]),
        relation=export.relations.decode(relations[rows]),
        tail=out["tails"].reshape(-1),
    )
    np.testing.assert_allclose(again["score"], out["scores"].reshape(-1), rtol=1e-6, atol=1e-6)

    tails = heads[::-1]
    out = _call(
        export, "predict_head", relation=export.relations.decode(relations), tail=export.entities.decode(tails), k=k
    )
    expected = np.argsort(-everything[:, relations, tails].T, axis=1, kind="stable")[:, :k]
    np.testing.assert_array_equal(_text(out["heads"]), export.entities.decode(expected))
    np.testing.assert_allclose(
        out["scores"], np.take_along_axis(everything[:, relations, tails].T, expected, 1), atol=1e-5
    )


@pytest.mark.parametrize("model", MODELS)
def test_a_reciprocal_export_ranks_heads_with_the_inverse_relation(model, random_export):
    """Tails and scores come from the forward rows, heads from the inverse rows ``R..2R-1``:
    ``predict_head(r, t)`` ranks ``h`` by ``s(t, r⁻¹, h)``, filtered by the known heads."""
    export = random_export(model, filter_known=True, reciprocal=True)
    ent, rel = _tables(export)
    r_count = len(export.relations)
    assert rel.shape[0] == 2 * r_count
    forward = all_scores(model, ent, rel[:r_count])  # [h, r, t]
    inverse = all_scores(model, ent, rel[r_count:])  # [t, r, h]: the inverse's tails are heads
    train = export.train
    relations, tails = np.array([0, 1, 2, 3]), np.array([train[0, 2], 5, 11, 29])
    k = 6
    out = _call(
        export, "predict_head", relation=export.relations.decode(relations), tail=export.entities.decode(tails), k=k
    )
    for row, (r, t) in enumerate(zip(relations, tails, strict=True)):
        scores = inverse[t, r].copy()
        scores[train[(train[:, 2] == t) & (train[:, 1] == r), 0]] = -np.inf
        expected = np.argsort(-scores, kind="stable")[:k]
        np.testing.assert_array_equal(_text(out["heads"][row]), export.entities.decode(expected))
        np.testing.assert_allclose(out["scores"][row], scores[expected], atol=1e-5)
    ids = train[:5]
    out = _call(
        export,
        "score",
        head=export.entities.decode(ids[:, 0]),
        relation=export.relations.decode(ids[:, 1]),
        tail=export.entities.decode(ids[:, 2]),
    )
    np.testing.assert_allclose(out["score"], forward[ids[:, 0], ids[:, 1], ids[:, 2]], rtol=1e-5, atol=1e-5)
    info = json.loads((export.path / "assets.extra" / "jobi_tf.json").read_text())
    assert info["reciprocal"] is True and info["num_relations"] == r_count


def test_filter_known_ranks_training_facts_last(random_export):
    raw, filtered = random_export("complex"), random_export("complex", filter_known=True)
    everything = all_scores("complex", *_tables(filtered))
    train = filtered.train
    h, r = train[0, 0], train[0, 1]
    known = train[(train[:, 0] == h) & (train[:, 1] == r), 2]
    masked = everything[h, r].copy()
    masked[known] = -np.inf
    num_entities = len(filtered.entities)
    names = {"head": filtered.entities.decode([h]), "relation": filtered.relations.decode([r])}
    out = _call(filtered, "predict_tail", **names, k=num_entities)
    expected = np.argsort(-masked, kind="stable")
    np.testing.assert_array_equal(_text(out["tails"][0]), filtered.entities.decode(expected))
    assert np.isneginf(out["scores"][0, -len(known) :]).all() and np.isfinite(out["scores"][0, : -len(known)]).all()
    assert set(_text(out["tails"][0, -len(known) :])) == set(filtered.entities.decode(known))
    unfiltered = _call(raw, "predict_tail", **names, k=num_entities)
    assert np.isfinite(unfiltered["scores"]).all()  # the option changes only the filtered export

    t = train[0, 2]
    known_heads = train[(train[:, 2] == t) & (train[:, 1] == r), 0]
    out = _call(
        filtered, "predict_head", relation=filtered.relations.decode([r]), tail=filtered.entities.decode([t]), k=3
    )
    assert not set(_text(out["heads"][0])) & set(filtered.entities.decode(known_heads))


def test_unknown_names_give_found_false_nan_and_empty_names_in_every_signature(random_export):
    export = random_export("simple")
    good = {"head": "Berlin", "relation": "is-capital-of", "tail": "Germany"}
    for signature in SIGNATURES:
        asked = {"predict_tail": "tail", "predict_head": "head", "predict_relation": "relation"}.get(signature)
        slots = [s for s in ("head", "relation", "tail") if s != asked]
        # Row 0 is known; each next row has one unknown name.
        batch = {s: [good[s]] + [("nobody" if s == bad else good[s]) for bad in slots] for s in slots}
        extra = {} if signature == "score" else {"k": 4}
        out = _call(export, signature, **batch, **extra)
        alone = _call(export, signature, **{s: [good[s]] for s in slots}, **extra)
        np.testing.assert_array_equal(out["found"], [True] + [False] * len(slots))
        scores = out["score" if signature == "score" else "scores"]
        # A batch's matmul may round differently from a single row's: equal to float tolerance.
        np.testing.assert_allclose(scores[:1], alone["score" if signature == "score" else "scores"], rtol=1e-6)
        assert np.isnan(scores[1:]).all()
        if signature != "score":
            names = out[asked + "s"]
            assert (names[1:] == b"").all() and (names[:1] != b"").all()


@pytest.mark.parametrize(("model", "reciprocal"), [("distmult", False), ("complex", False), ("simple", True)])
def test_predict_relation_equals_numpy_top_k_over_the_forward_relations(model, reciprocal, random_export):
    export = random_export(model, reciprocal=reciprocal)
    ent, rel = _tables(export)
    r_count = len(export.relations)
    everything = all_scores(model, ent, rel[:r_count])  # [h, r, t]: inverse rows are no relations
    heads, tails = np.array([0, 3, 7, 29]), np.array([5, 3, 0, 11])
    out = _call(export, "predict_relation", head=export.entities.decode(heads), tail=export.entities.decode(tails), k=3)
    scores = everything[heads, :, tails]  # [B, R]
    expected = np.argsort(-scores, axis=1, kind="stable")[:, :3]
    np.testing.assert_array_equal(_text(out["relations"]), export.relations.decode(expected))
    np.testing.assert_allclose(out["scores"], np.take_along_axis(scores, expected, 1), atol=1e-5)
    wide = _call(export, "predict_relation", head=["Berlin"], tail=["Germany"], k=100)
    assert wide["relations"].shape == (1, r_count)  # k clipped to the relations


def test_filter_known_leaves_training_relations_of_a_pair_out(random_export):
    filtered = random_export("complex", filter_known=True)
    h, r, t = filtered.train[0]
    known = set(filtered.train[(filtered.train[:, 0] == h) & (filtered.train[:, 2] == t), 1].tolist())
    names = {"head": filtered.entities.decode([h]), "tail": filtered.entities.decode([t])}
    out = _call(filtered, "predict_relation", **names, k=len(filtered.relations))
    last = _text(out["relations"][0, -len(known) :])
    assert (
        set(last) == set(filtered.relations.decode(sorted(known)))
        and np.isneginf(out["scores"][0, -len(known) :]).all()
    )


def test_k_is_clipped_to_the_number_of_entities(random_export):
    export = random_export("distmult")
    num_entities = len(export.entities)
    for k, width in ((10_000, num_entities), (0, 0), (-3, 0)):
        out = _call(export, "predict_tail", head=["Berlin", "Brazil"], relation=["borders", "borders"], k=k)
        assert out["tails"].shape == out["scores"].shape == (2, width)


def test_the_export_holds_only_the_triple_tables_and_the_vocabularies(random_export):
    export = random_export("complex")
    stored = {name: shape for name, shape in tf.train.list_variables(str(export.path / "variables" / "variables"))}
    stored.pop("_CHECKPOINTABLE_OBJECT_GRAPH")
    assert stored == {  # ComplEx scores by dot products: its entity table is stored as columns (`EntityTable`)
        "entities/values/.ATTRIBUTES/VARIABLE_VALUE": [10, len(export.entities)],
        "triple_relations/.ATTRIBUTES/VARIABLE_VALUE": [len(export.relations), 10],
    }
    loaded = tf.saved_model.load(str(export.path))
    assert loaded.entities.values.name.startswith("entity_columns")
    np.testing.assert_array_equal(loaded.entities.values.numpy().T, export.model.entity_embeddings.numpy())
    assert not any("pair" in name or "optimizer" in name for name in stored)
    assets = export.path / "assets"
    assert (assets / "entities.txt").read_text(encoding="utf-8").splitlines() == list(export.entities.labels)
    assert (assets / "relations.txt").read_text(encoding="utf-8").splitlines() == list(export.relations.labels)
    info = json.loads((export.path / "assets.extra" / "jobi_tf.json").read_text())
    assert info["model"] == "complex" and info["filter_known"] is False


def test_no_signature_gathers_from_a_variable(random_export):
    """A ``ResourceGather`` would make every top-k matmul copy the whole table (see ``served_tables.read_value``)."""
    from tensorflow.core.protobuf import saved_model_pb2

    export = random_export("complex", filter_known=True)
    saved = saved_model_pb2.SavedModel.FromString((export.path / "saved_model.pb").read_bytes())
    graph = saved.meta_graphs[0].graph_def
    ops = {node.op for function in graph.library.function for node in function.node_def}
    assert "ResourceGather" not in ops
    assert {"ReadVariableOp", "GatherV2", "TopKV2"} <= ops


def test_a_fresh_process_loads_it_and_saved_model_cli_lists_the_signatures(random_export):
    export = random_export("complex")
    code = (
        "import json, sys, tensorflow as tf\n"
        "m = tf.saved_model.load(sys.argv[1])\n"
        "out = m.signatures['serving_default'](head=tf.constant(['Berlin']), relation=tf.constant(['borders']),"
        " k=tf.constant(3))\n"
        "tails = [[t.decode() for t in row] for row in out['tails'].numpy()]\n"
        "print(json.dumps({'tails': tails, 'scores': out['scores'].numpy().tolist()}))"
    )
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    cli = os.path.join(os.path.dirname(sys.executable), "saved_model_cli")
    # Both processes import TensorFlow (seconds each): run them side by side.
    loading = subprocess.Popen(
        [sys.executable, "-c", code, str(export.path)], stdout=PIPE, stderr=PIPE, text=True, env=env
    )
    showing = subprocess.Popen(
        [cli, "show", "--all", "--dir", str(export.path)], stdout=PIPE, stderr=PIPE, text=True, env=env
    )
    (loaded, load_err), (shown, show_err) = loading.communicate(timeout=120), showing.communicate(timeout=120)
    assert loading.returncode == 0, load_err[-2000:]
    fresh = json.loads(loaded.strip().splitlines()[-1])
    here = _call(export, "predict_tail", head=["Berlin"], relation=["borders"], k=3)
    assert fresh["tails"] == _text(here["tails"]).tolist()
    np.testing.assert_allclose(fresh["scores"], here["scores"], rtol=1e-6)
    assert showing.returncode == 0, show_err[-2000:]
    for name in ("serving_default", *SIGNATURES):
        assert f"signature_def['{name}']" in shown
    for output in ("outputs['tails']", "outputs['heads']", "outputs['score']", "outputs['found']", "inputs['k']"):
        assert output in shown


def test_versions_are_numbered_never_overwritten_and_replaced_only_with_force(random_export, tmp_path):
    source = random_export("distmult")
    base = tmp_path / "exports"
    args = (source.model, source.entities, source.relations, base)
    assert export_saved_model(*args).version == 1
    second = export_saved_model(*args)
    assert second.version == 2 and second.path == base / "2"
    before = (base / "2" / "saved_model.pb").stat().st_mtime_ns
    with pytest.raises(ExportError, match="version 2 exists; use --force"):
        export_saved_model(*args, ExportConfig(version=2))
    assert (base / "2" / "saved_model.pb").stat().st_mtime_ns == before
    replaced = export_saved_model(*args, ExportConfig(version=2, force=True))
    assert replaced.version == 2 and replaced.export_bytes > replaced.table_bytes > 0
    assert sorted(p.name for p in base.iterdir()) == ["1", "2"]  # no staging or replaced folder left


def test_a_failed_write_leaves_no_version(random_export, tmp_path, monkeypatch):
    source = random_export("distmult")

    def crash(obj, export_dir, **kwargs):
        Path(export_dir).mkdir()
        (Path(export_dir) / "saved_model.pb").write_text("half")
        raise OSError("disk full")

    monkeypatch.setattr(tf.saved_model, "save", crash)
    with pytest.raises(OSError, match="disk full"):
        export_saved_model(source.model, source.entities, source.relations, tmp_path / "exports")
    assert list((tmp_path / "exports").iterdir()) == []


def test_nan_weights_are_refused_and_nothing_is_written(random_export, tmp_path):
    from jobi_tf.models import JoBiModel

    source = random_export("distmult")
    broken = JoBiModel(num_entities=len(source.entities), num_relations=len(source.relations), model="distmult", dim=5)
    broken.entity_embeddings.assign(np.full(broken.entity_embeddings.shape, np.nan, np.float32))
    with pytest.raises(ExportError, match="entity_embeddings: 150 non-finite weights"):
        export_saved_model(broken, source.entities, source.relations, tmp_path / "exports")
    assert not (tmp_path / "exports").exists()


def test_export_run_serves_the_runs_best_weights(tmp_path):
    cfg = RunConfig(
        data=DataConfig(dataset="synthetic", synthetic_entities=80, synthetic_relations=4, synthetic_triples=800),
        sampler=SamplerConfig(batch_size=100, neg=4),
        model=ModelConfig(model="simple", dim=4, joint=True),
        train=TrainConfig(epochs=1, eval_every=1, jit_compile=False),
    )
    train(cfg, tmp_path / "run", verbose=0)
    run = load_run(tmp_path / "run")
    result = export_run(tmp_path / "run", tmp_path / "exports", ExportConfig(filter_known=True), model=run.model)
    assert result.path == tmp_path / "exports" / "1"
    model, test = run.model, run.data.index.test[:10]
    entities = (tmp_path / "run" / "entities.txt").read_text(encoding="utf-8").splitlines()
    relations = (tmp_path / "run" / "relations.txt").read_text(encoding="utf-8").splitlines()
    loaded = tf.saved_model.load(str(result.path))
    out = loaded.signatures["score"](
        head=tf.constant([entities[i] for i in test[:, 0]]),
        relation=tf.constant([relations[i] for i in test[:, 1]]),
        tail=tf.constant([entities[i] for i in test[:, 2]]),
    )
    np.testing.assert_allclose(
        out["score"].numpy(), model.score_triples(tf.constant(test)).numpy(), rtol=1e-6, atol=1e-6
    )
    info = json.loads((result.path / "assets.extra" / "jobi_tf.json").read_text())
    assert info["filter_known"] is True and info["run_dir"] == str((tmp_path / "run").resolve())


@pytest.mark.parametrize(("model", "reciprocal"), [("complex", False), ("distmult", True)])
def test_typed_signatures_rank_only_the_slot_entities(model, reciprocal, random_export, tmp_path):
    source = random_export(model, reciprocal=reciprocal)
    cfg = ExportConfig(typed=True)
    result = export_saved_model(
        source.model, source.entities, source.relations, tmp_path, cfg, train_triples=source.train
    )
    typed = dataclasses.replace(source, path=result.path)
    ent, rel = _tables(source)
    r_count = len(source.relations)
    forward = all_scores(model, ent, rel[:r_count])
    inverse = all_scores(model, ent, rel[r_count:]) if reciprocal else None
    train = source.train
    for r in range(r_count):
        tails, heads = set(train[train[:, 1] == r, 2].tolist()), set(train[train[:, 1] == r, 0].tolist())
        h, t = 3, 7
        out = _call(
            typed, "predict_tail_typed", head=source.entities.decode([h]), relation=source.relations.decode([r]), k=4
        )
        scores = forward[h, r].copy()
        scores[[e for e in range(len(scores)) if e not in tails]] = -np.inf
        expected = np.argsort(-scores, kind="stable")[: min(4, len(tails))]
        np.testing.assert_array_equal(_text(out["tails"][0, : len(expected)]), source.entities.decode(expected))
        assert np.isneginf(out["scores"][0, len(expected) :]).all()  # a small slot: the rest are no answers
        assert (out["tails"][0, len(expected) :] == b"").all()
        out = _call(
            typed, "predict_head_typed", relation=source.relations.decode([r]), tail=source.entities.decode([t]), k=4
        )
        scores = (inverse[t, r] if reciprocal else forward[:, r, t]).copy()
        scores[[e for e in range(len(scores)) if e not in heads]] = -np.inf
        expected = np.argsort(-scores, kind="stable")[: min(4, len(heads))]
        np.testing.assert_array_equal(_text(out["heads"][0, : len(expected)]), source.entities.decode(expected))
    info = json.loads((result.path / "assets.extra" / "jobi_tf.json").read_text())
    assert info["typed"] is True and "predict_tail_typed" in info["signatures"]
    plain = tf.saved_model.load(str(source.path))
    assert "predict_tail_typed" not in plain.signatures  # only a typed export has them


@pytest.mark.parametrize(("model", "reciprocal"), [("complex", True), ("simple", False)])
def test_soft_typed_signatures_also_admit_what_the_pair_head_places_in_the_slot(
    model, reciprocal, random_export, tmp_path
):
    source = random_export(model, reciprocal=reciprocal)
    cfg = ExportConfig(typed=True, pair_head=True)
    result = export_saved_model(
        source.model, source.entities, source.relations, tmp_path, cfg, train_triples=source.train
    )
    soft = dataclasses.replace(source, path=result.path)
    ent, rel = _tables(source)
    pair = source.model.pair_relations.numpy()
    r_count = len(source.relations)
    scores_of = all_scores(model, ent, rel[:r_count]), all_scores(model, ent, pair[:r_count])
    inverse_of = (all_scores(model, ent, rel[r_count:]), all_scores(model, ent, pair[r_count:])) if reciprocal else None
    train = source.train
    admitted_beyond_slots = 0
    for r in range(r_count):
        tails, heads = set(train[train[:, 1] == r, 2].tolist()), set(train[train[:, 1] == r, 0].tolist())
        h, t, p = 3, 7, 0.6
        out = _call(
            soft,
            "predict_tail_soft_typed",
            head=source.entities.decode([h]),
            relation=source.relations.decode([r]),
            k=6,
            min_pair_probability=p,
        )
        triple, pair_scores = scores_of[0][h, r].copy(), scores_of[1][h, r]
        fits = np.array([e in tails for e in range(len(triple))]) | (1 / (1 + np.exp(-pair_scores)) >= p)
        admitted_beyond_slots += int(fits.sum() - len(tails))
        triple[~fits] = -np.inf
        expected = np.argsort(-triple, kind="stable")[: min(6, int(fits.sum()))]
        np.testing.assert_array_equal(_text(out["tails"][0, : len(expected)]), source.entities.decode(expected))
        out = _call(
            soft,
            "predict_head_soft_typed",
            relation=source.relations.decode([r]),
            tail=source.entities.decode([t]),
            k=6,
            min_pair_probability=p,
        )
        if reciprocal:
            triple, pair_scores = inverse_of[0][t, r].copy(), inverse_of[1][t, r]
        else:
            triple, pair_scores = scores_of[0][:, r, t].copy(), scores_of[1][:, r, t]
        fits = np.array([e in heads for e in range(len(triple))]) | (1 / (1 + np.exp(-pair_scores)) >= p)
        triple[~fits] = -np.inf
        expected = np.argsort(-triple, kind="stable")[: min(6, int(fits.sum()))]
        np.testing.assert_array_equal(_text(out["heads"][0, : len(expected)]), source.entities.decode(expected))
    assert admitted_beyond_slots > 0  # the pair head did widen some slots
    strict = _call(
        soft,
        "predict_tail_soft_typed",
        head=source.entities.decode([3]),
        relation=source.relations.decode([0]),
        k=6,
        min_pair_probability=1.0,
    )
    typed = _call(
        soft, "predict_tail_typed", head=source.entities.decode([3]), relation=source.relations.decode([0]), k=6
    )
    np.testing.assert_array_equal(strict["tails"], typed["tails"])  # p = 1 admits nothing new
    info = json.loads((result.path / "assets.extra" / "jobi_tf.json").read_text())
    assert info["pair_head"] is True and "predict_head_soft_typed" in info["signatures"]


def test_pair_head_export_needs_typed_and_a_joint_model(random_export, tmp_path):
    from jobi_tf.models import JoBiModel
    from jobi_tf.runtime.errors import ConfigError

    with pytest.raises(ConfigError, match="--pair-head: needs --typed"):
        ExportConfig(pair_head=True)
    source = random_export("distmult")
    plain = JoBiModel(num_entities=len(source.entities), num_relations=len(source.relations), model="distmult", dim=5)
    with pytest.raises(ExportError, match="--pair-head: this run has no pair head"):
        export_saved_model(
            plain,
            source.entities,
            source.relations,
            tmp_path / "e",
            ExportConfig(typed=True, pair_head=True),
            train_triples=source.train,
        )
    assert not (tmp_path / "e").exists()


def test_a_certain_pair_head_admits_nothing_more_at_probability_one(random_export, tmp_path):
    """σ(score) rounds to 1.0 in float32 above about 17: p = 1 must still mean the strict slots."""
    source = random_export("distmult")
    pair = source.model.pair_relations
    saved = pair.numpy()
    pair.assign(saved * 100.0)  # pair scores in the hundreds: float32 sigmoid is exactly 1
    try:
        result = export_saved_model(
            source.model,
            source.entities,
            source.relations,
            tmp_path,
            ExportConfig(typed=True, pair_head=True),
            train_triples=source.train,
        )
    finally:
        pair.assign(saved)
    soft = dataclasses.replace(source, path=result.path)
    query = {"head": source.entities.decode([3, 4]), "relation": source.relations.decode([0, 1]), "k": 8}
    strict = _call(soft, "predict_tail_soft_typed", **query, min_pair_probability=1.0)
    typed = _call(soft, "predict_tail_typed", **query)
    np.testing.assert_array_equal(strict["tails"], typed["tails"])
    loose = _call(soft, "predict_tail_soft_typed", **query, min_pair_probability=0.5)
    assert not np.array_equal(loose["tails"], typed["tails"])  # at 0.5 the confident pair head does widen the slots


def test_the_written_signatures_are_the_serving_contract(random_export, tmp_path):
    """Every signature of a typed export with the pair head takes and returns exactly the
    names `jobi_tf.serving.contract` gives the clients."""
    source = random_export("complex")
    cfg = ExportConfig(typed=True, pair_head=True)
    result = export_saved_model(
        source.model, source.entities, source.relations, tmp_path, cfg, train_triples=source.train
    )
    loaded = tf.saved_model.load(str(result.path))
    written = contract.SIGNATURES + contract.TYPED_SIGNATURES + contract.SOFT_TYPED_SIGNATURES
    assert set(loaded.signatures) == {*written, "serving_default"}
    for name in written:
        function = loaded.signatures[name]
        assert set(function.structured_input_signature[1]) == set(contract.INPUTS[name]), name
        assert set(function.structured_outputs) == set(contract.OUTPUTS[name]), name
    default = loaded.signatures["serving_default"]
    assert set(default.structured_outputs) == set(contract.OUTPUTS[contract.DEFAULT_SIGNATURE])
