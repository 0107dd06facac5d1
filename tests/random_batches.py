"""Random sampler-shaped batches for model and objective tests (no sampler involved), and random
models that rank with the slot counts, for export tests."""

from __future__ import annotations

import numpy as np


def sampled_batch(rng: np.random.Generator, e: int = 12, r: int = 3, b: int = 4, k: int = 5) -> dict[str, np.ndarray]:
    """Features of ``b`` random positives with ``k`` per-triple candidates each, as
    `jobi_tf.sampling.pipelines.NegativeSampler` gives them (one coin per candidate)."""
    triples = np.stack([rng.integers(e, size=b), rng.integers(r, size=b), rng.integers(e, size=b)], 1).astype(np.int32)
    cand = rng.integers(e, size=(b, k)).astype(np.int32)
    tail = rng.random((b, k)) < 0.5
    replaced = np.where(tail, triples[:, 2:3], triples[:, 0:1])
    return {
        "triples": triples,
        "candidates": cand,
        "corrupt_tail": tail,
        "valid_negative": cand != replaced,
        "pair_labels": (rng.random((b, k)) < 0.5).astype(np.float32),
    }


def counted_model(train: np.ndarray, e: int, r: int, *, model: str, dim: int, weight: float, reciprocal=False, seed=2):
    """A `JoBiModel` with random float32 tables whose slot counts are ``train``'s, ranked with
    ``weight`` times their log (``--slot-prior``)."""
    from jobi_tf.models import JoBiModel

    jobi = JoBiModel(
        num_entities=e,
        num_relations=r,
        model=model,
        dim=dim,
        loss="sampled-softmax",
        slot_prior=weight,
        reciprocal=reciprocal,
    )
    rng = np.random.default_rng(seed)
    for var in (jobi.entity_embeddings, jobi.triple_relations):
        var.assign(rng.normal(size=var.shape).astype(np.float32))
    jobi.prior.fill(train)
    return jobi
