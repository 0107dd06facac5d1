"""Warm starts on a grown graph (``--init-from``): rows carried by name, new triples plus replay, errors."""

from __future__ import annotations

import numpy as np
import pytest

from jobi_tf.config import DataConfig, ModelConfig, RunConfig, SamplerConfig, TrainConfig
from jobi_tf.data.synthetic import SyntheticSpec, make_typed_kg
from jobi_tf.data.vocab import Vocab
from jobi_tf.datasets.loading import load_index
from jobi_tf.growth.warm_start import old_rows, plan_growth
from jobi_tf.runtime.errors import ConfigError, JobiError
from jobi_tf.runtime.types import HEAD, SPLITS, TAIL
from jobi_tf.sampling.pipelines import EpochRows, make_train_dataset
from jobi_tf.training.trainer import build_model, make_optimizer, train


def _write(folder, splits) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    for split, triples in splits.items():
        (folder / f"{split}.txt").write_text("".join("\t".join(t) + "\n" for t in triples), encoding="utf-8")
    return str(folder)


@pytest.fixture(scope="module")
def graphs(tmp_path_factory):
    """A grown graph and the same graph without 10% of its entities (and their triples).

    The grown graph also has a relation that sorts before every old one, so every old
    relation's id moves up by one: rows must follow names, not ids.
    """
    full = make_typed_kg(SyntheticSpec(num_entities=120, num_relations=5, num_triples=1600, num_types=3, seed=5))
    entities = np.unique(np.concatenate([full[s][:, [HEAD, TAIL]].ravel() for s in SPLITS]))
    held = np.random.default_rng(0).choice(entities, size=len(entities) // 10, replace=False)
    extra = np.stack([held[:-1], np.full(len(held) - 1, "a new relation"), held[1:]], axis=1)
    full = {**full, "train": np.concatenate([full["train"], extra])}
    base = {s: t[~(np.isin(t[:, HEAD], held) | np.isin(t[:, TAIL], held))] for s, t in full.items()}
    root = tmp_path_factory.mktemp("growth")
    return _write(root / "base", base), _write(root / "full", full), held


def _cfg(data_dir, *, dim=8, joint=True, reciprocal=True, optimizer="adagrad", epochs=2, **train_kw) -> RunConfig:
    return RunConfig(
        data=DataConfig(data_dir=data_dir),
        sampler=SamplerConfig(batch_size=100, neg=8, p=0.3),
        model=ModelConfig(model="complex", dim=dim, joint=joint, reciprocal=reciprocal),
        train=TrainConfig(
            epochs=epochs, eval_every=1, patience=10, jit_compile=False, optimizer=optimizer, lr=0.05, **train_kw
        ),
        seed=1,
    )


@pytest.fixture(scope="module")
def source_run(graphs, tmp_path_factory):
    base, _, _ = graphs
    run = tmp_path_factory.mktemp("source") / "run"
    train(_cfg(base), run, verbose=0)
    return run


def test_old_rows_maps_each_new_label_to_its_old_id_or_minus_one():
    old, new = Vocab(np.array(["b", "d", "f"])), Vocab(np.array(["a", "b", "c", "d", "f"]))
    assert old_rows(old, new).tolist() == [-1, 0, -1, 1, 2]
    assert old_rows(Vocab(np.array([], dtype=str)), new).tolist() == [-1] * 5


def test_plan_splits_training_triples_into_new_and_seen_before(graphs, source_run, tmp_path):
    base, full, held = graphs
    cfg = _cfg(full, init_from=str(source_run))
    entities, relations, index = load_index(cfg.data)
    plan = plan_growth(cfg, tmp_path / "grown", entities, relations, index)
    old_train = {tuple(t) for t in (line.split("\t") for line in open(f"{base}/train.txt").read().splitlines())}
    names = np.stack(
        [entities.decode(index.train[:, 0]), relations.decode(index.train[:, 1]), entities.decode(index.train[:, 2])], 1
    )
    seen = np.array([tuple(t) in old_train for t in names])
    assert sorted(plan.old_triples.tolist()) == np.flatnonzero(seen).tolist()
    assert sorted(plan.new_triples.tolist()) == np.flatnonzero(~seen).tolist()
    assert (plan.entity_rows < 0).sum() == len(held)
    assert set(entities.decode(np.flatnonzero(plan.entity_rows < 0))) == set(held)


def test_carry_over_places_source_rows_and_slots_by_name(graphs, source_run, tmp_path):
    _, full, _ = graphs
    cfg = _cfg(full, init_from=str(source_run))
    entities, relations, index = load_index(cfg.data)
    plan = plan_growth(cfg, tmp_path / "grown", entities, relations, index)
    from jobi_tf.growth.warm_start import carry_over

    model = build_model(index, cfg)
    optimizer = make_optimizer(cfg.train)
    optimizer.build(model.trainable_variables)
    fresh = {v.path: np.array(v.numpy()) for v in model.weights}
    carry_over(plan, model, optimizer, "adagrad")

    old_entities = Vocab.load(source_run / "entities.txt")
    old_relations = Vocab.load(source_run / "relations.txt")
    weights, checkpoint = np.load(source_run / "best.weights.npz"), np.load(source_run / "checkpoint.npz")
    r_old, r_new = len(old_relations), len(relations)
    # NumPy reference: a row per name, inverse relations at r + R on both sides.
    for var, slot in ((model.entity_embeddings, 2), (model.triple_relations, 3), (model.pair_relations, 4)):
        is_entity = var is model.entity_embeddings
        old_vocab, new_vocab = (old_entities, entities) if is_entity else (old_relations, relations)
        got, slot_got = var.numpy(), optimizer.variables[slot].numpy()
        stored, stored_slot = weights[f"model/{var.path}"], checkpoint[f"optimizer/{slot:04d}"]
        for new_id, name in enumerate(new_vocab.labels):
            rows_new = [new_id] if is_entity else [new_id, new_id + r_new]
            if name in old_vocab.labels:
                old_id = int(np.flatnonzero(old_vocab.labels == name)[0])
                rows_old = [old_id] if is_entity else [old_id, old_id + r_old]
                np.testing.assert_array_equal(got[rows_new], stored[rows_old])
                np.testing.assert_array_equal(slot_got[rows_new], stored_slot[rows_old])
            else:
                np.testing.assert_array_equal(got[rows_new], fresh[var.path][rows_new])
                # New rows' Adagrad accumulators hold the optimizer's initial value.
                np.testing.assert_array_equal(slot_got[rows_new], np.float32(optimizer.initial_accumulator_value))
    assert int(optimizer.iterations.numpy()) == int(checkpoint["optimizer/0000"])


def test_row_adagrad_carries_its_per_row_accumulators_by_entity_name(graphs, tmp_path):
    base, full, _ = graphs
    source = tmp_path / "source"
    train(_cfg(base, optimizer="row-adagrad", epochs=1), source, verbose=0)
    cfg = _cfg(full, optimizer="row-adagrad", init_from=str(source))
    entities, relations, index = load_index(cfg.data)
    plan = plan_growth(cfg, tmp_path / "grown", entities, relations, index)
    from jobi_tf.growth.warm_start import carry_over

    model = build_model(index, cfg)
    optimizer = make_optimizer(cfg.train)
    optimizer.build(model.trainable_variables)
    carry_over(plan, model, optimizer, "row-adagrad")
    got = optimizer.variables[2].numpy()  # the entity table's accumulator: one float per row
    stored = np.load(source / "checkpoint.npz")["optimizer/0002"]
    assert got.shape == (len(entities),) and stored.ndim == 1
    old = Vocab.load(source / "entities.txt")
    for new_id, name in enumerate(entities.labels):
        if name in old.labels:
            assert got[new_id] == stored[int(np.flatnonzero(old.labels == name)[0])]
        else:
            assert got[new_id] == np.float32(optimizer.initial_accumulator_value)


def test_an_epoch_visits_every_new_row_and_a_fresh_replay_draw_each_epoch(small_typed_index):
    n = len(small_typed_index.train)
    rng = np.random.default_rng(2)
    fresh = np.sort(rng.choice(n, size=n // 5, replace=False))
    old = np.setdiff1d(np.arange(n), fresh)
    rows = EpochRows.with_replay(fresh, old, 0.25)
    assert len(rows) == len(fresh) + round(0.25 * len(old))
    batch = 50
    steps = len(rows) // batch
    cfg = SamplerConfig(batch_size=batch, neg=2)
    ds = make_train_dataset(small_typed_index, cfg, seed=4, epochs=2, rows=rows)
    train = small_typed_index.train
    key = lambda t: t[:, 0].astype(np.int64) * 10**8 + t[:, 1] * 10**4 + t[:, 2]  # noqa: E731
    epochs = []
    triples = [b["triples"].numpy() for b in ds]
    assert len(triples) == 2 * steps
    for e in range(2):
        epochs.append(key(np.concatenate(triples[e * steps : (e + 1) * steps])))
    fresh_keys, old_keys = set(key(train[fresh])), set(key(train[old]))
    for visited in epochs:
        dropped = len(rows) - steps * batch  # the remainder of a shuffled epoch
        assert len(fresh_keys - set(visited)) <= dropped
        assert abs(len(set(visited) & old_keys) - rows.replayed) <= dropped
    assert set(epochs[0]) & old_keys != set(epochs[1]) & old_keys  # a new draw each epoch
    # Resuming at epoch 1 gives the uninterrupted run's second epoch.
    again = make_train_dataset(small_typed_index, cfg, seed=4, initial_epoch=1, epochs=2, rows=rows)
    assert np.array_equal(key(np.concatenate([b["triples"].numpy() for b in again])), epochs[1])


def test_warm_started_run_trains_reports_and_resumes(graphs, source_run, tmp_path):
    _, full, held = graphs
    straight = train(_cfg(full, init_from=str(source_run), epochs=3), tmp_path / "straight", verbose=0)
    summary = straight.metrics["warm_start"]
    assert summary["entities_new"] == len(held) and summary["entities_carried"] > 0
    assert summary["triples_new"] > 0 and summary["triples_old"] > 0
    train(_cfg(full, init_from=str(source_run), epochs=1), tmp_path / "resumed", verbose=0)
    (tmp_path / "resumed" / "metrics.json").unlink()  # as if stopped after epoch 1's checkpoint
    resumed = train(_cfg(full, init_from=str(source_run), epochs=3), tmp_path / "resumed", verbose=0)
    assert resumed.metrics["test"]["mrr"] == pytest.approx(straight.metrics["test"]["mrr"], abs=1e-4)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"dim": 4}, "was trained with --dim 8, this run has --dim 4"),
        ({"joint": False}, "was trained with --joint True, this run has --joint False"),
        ({"reciprocal": False}, "--reciprocal True"),
    ],
)
def test_an_incompatible_source_is_refused_before_anything_is_written(graphs, source_run, tmp_path, change, message):
    _, full, _ = graphs
    with pytest.raises(ConfigError, match=message) as caught:
        train(_cfg(full, init_from=str(source_run), **change), tmp_path / "out", verbose=0)
    assert str(caught.value).startswith("--init-from: ")
    assert not (tmp_path / "out").exists()


def test_a_missing_or_own_source_folder_is_refused(graphs, source_run, tmp_path):
    _, full, _ = graphs
    with pytest.raises(ConfigError, match="not a run folder"):
        train(_cfg(full, init_from=str(tmp_path / "nowhere")), tmp_path / "out", verbose=0)
    before = (source_run / "best.weights.npz").read_bytes()
    with pytest.raises(JobiError):  # the source itself as --out: refused, and left as it was
        train(_cfg(full, init_from=str(source_run)), source_run, verbose=0)
    assert not (tmp_path / "out").exists() and (source_run / "best.weights.npz").read_bytes() == before


def test_another_optimizer_carries_weights_but_starts_its_slots_fresh(graphs, source_run, tmp_path):
    _, full, _ = graphs
    cfg = _cfg(full, init_from=str(source_run), optimizer="adam")
    entities, relations, index = load_index(cfg.data)
    plan = plan_growth(cfg, tmp_path / "grown", entities, relations, index)
    from jobi_tf.growth.warm_start import carry_over

    model, optimizer = build_model(index, cfg), make_optimizer(cfg.train)
    optimizer.build(model.trainable_variables)
    carry_over(plan, model, optimizer, "adam")
    assert int(optimizer.iterations.numpy()) == 0
    assert all(not v.numpy().any() for v in optimizer.variables[2:])
    carried = np.flatnonzero(plan.entity_rows >= 0)
    stored = np.load(source_run / "best.weights.npz")[f"model/{model.entity_embeddings.path}"]
    np.testing.assert_array_equal(model.entity_embeddings.numpy()[carried], stored[plan.entity_rows[carried]])


def test_replay_must_be_a_share():
    with pytest.raises(ConfigError, match="--replay: must be a number in"):
        TrainConfig(replay=1.5)
