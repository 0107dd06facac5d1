"""Shared fixtures, all built in code (no files checked in)."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np
import pytest

from jobi_tf.data.index import build_index
from jobi_tf.data.synthetic import SyntheticSpec, make_typed_kg

TINY_ENTITIES = 10
TINY_RELATIONS = 3


def _tiny_string_splits(seed: int = 7) -> dict[str, np.ndarray]:
    """~10 entities, 3 relations, 30/5/5 distinct triples; valid/test entities all occur in train."""
    rng = np.random.default_rng(seed)
    every = np.array(
        [(h, r, t) for h in range(TINY_ENTITIES) for r in range(TINY_RELATIONS) for t in range(TINY_ENTITIES) if h != t]
    )
    chosen = every[rng.permutation(len(every))]
    # Train: first make sure every entity and relation occurs, then fill up to 30.
    train, rest = [], []
    seen_e, seen_r = set(), set()
    for h, r, t in chosen:
        if (h not in seen_e or t not in seen_e or r not in seen_r) and len(train) < 30:
            train.append((h, r, t))
            seen_e.update((h, t))
            seen_r.add(r)
        else:
            rest.append((h, r, t))
    while len(train) < 30:
        train.append(rest.pop(0))
    assert seen_e == set(range(TINY_ENTITIES)) and seen_r == set(range(TINY_RELATIONS))
    ids = {"train": np.array(train), "valid": np.array(rest[:5]), "test": np.array(rest[5:10])}
    ent = np.array([f"e{i}" for i in range(TINY_ENTITIES)])
    rel = np.array([f"r{i}" for i in range(TINY_RELATIONS)])
    return {s: np.stack([ent[a[:, 0]], rel[a[:, 1]], ent[a[:, 2]]], axis=1) for s, a in ids.items()}


@pytest.fixture
def tiny_splits() -> dict[str, np.ndarray]:
    """String triples ``{"train": (30, 3), "valid": (5, 3), "test": (5, 3)}``."""
    return _tiny_string_splits()


@pytest.fixture
def tiny_index(tiny_splits):
    """``(entity_vocab, relation_vocab, KGIndex)`` of `tiny_splits`."""
    return build_index(tiny_splits, source="tiny")


SMALL_SPEC = SyntheticSpec(num_entities=300, num_relations=8, num_triples=3000, num_types=4, seed=3)


@pytest.fixture(scope="session")
def small_typed_splits() -> dict[str, np.ndarray]:
    """String splits of a few-hundred-entity synthetic typed KG."""
    return make_typed_kg(SMALL_SPEC)


@pytest.fixture(scope="session")
def small_typed_index(small_typed_splits):
    """`KGIndex` of `small_typed_splits` (built once per session; it is immutable)."""
    return build_index(small_typed_splits, source="synthetic")[2]


@pytest.fixture
def shared_datasets() -> Path:
    """Folder of local benchmark copies from ``$JOBI_TF_DATA_DIR``; skips when unset."""
    root = os.environ.get("JOBI_TF_DATA_DIR")
    if not root:
        pytest.skip("JOBI_TF_DATA_DIR not set")
    return Path(root)


@dataclasses.dataclass(frozen=True)
class RandomExport:
    """A SavedModel written from a `JoBiModel` with random weights, and what it came from."""

    path: Path
    model: object  # JoBiModel; kept untyped so this file does not import TensorFlow
    entities: object  # Vocab
    relations: object  # Vocab
    train: np.ndarray  # int32 (N, 3) training ids, for the known-facts filter


#: Entity names of the random exports: spaces and non-ASCII letters must survive the round trip.
EXPORT_ENTITIES = ["Berlin", "Germany", "São Paulo", "Brazil", "is a city"] + [f"entity {i:02d}" for i in range(25)]
EXPORT_RELATIONS = ["is-capital-of", "is-located-in", "borders", "related to"]


@pytest.fixture(scope="session")
def random_export(tmp_path_factory):
    """``make(model="complex", filter_known=False, reciprocal=False) -> RandomExport``, each built once
    per session.

    The model is joint (it has a pair head), so tests can check that the pair head is left out.
    """
    from jobi_tf.config import ExportConfig
    from jobi_tf.data.vocab import Vocab
    from jobi_tf.export.savedmodel import export_saved_model
    from jobi_tf.models import JoBiModel

    built: dict[tuple[str, bool, bool], RandomExport] = {}

    def make(model: str = "complex", filter_known: bool = False, reciprocal: bool = False) -> RandomExport:
        if (model, filter_known, reciprocal) not in built:
            rng = np.random.default_rng(11)
            entities, relations = Vocab.from_labels(EXPORT_ENTITIES), Vocab.from_labels(EXPORT_RELATIONS)
            jobi = JoBiModel(
                num_entities=len(entities),
                num_relations=len(relations),
                model=model,
                dim=5,
                joint=True,
                reciprocal=reciprocal,
            )
            for var in (jobi.entity_embeddings, jobi.triple_relations, jobi.pair_relations):
                var.assign(rng.normal(size=var.shape).astype(np.float32))
            e, r = len(entities), len(relations)
            train = np.unique(
                np.stack([rng.integers(e, size=60), rng.integers(r, size=60), rng.integers(e, size=60)], 1), axis=0
            )
            kind = ("filtered" if filter_known else "raw") + ("-reciprocal" if reciprocal else "")
            base = tmp_path_factory.mktemp(f"export-{model}-{kind}")
            result = export_saved_model(
                jobi, entities, relations, base, ExportConfig(filter_known=filter_known), train_triples=train
            )
            built[model, filter_known, reciprocal] = RandomExport(
                result.path, jobi, entities, relations, train.astype(np.int32)
            )
        return built[model, filter_known, reciprocal]

    return make


def pytest_configure(config):
    """Split the CPU into 2 logical devices before TensorFlow starts, so that the mirrored
    strategy runs with 2 replicas on machines without GPUs (tests/test_distribute.py)."""
    from jobi_tf.distributed.strategy import configure_devices

    configure_devices(2)
