"""Random sampler-shaped batches for model and objective tests (no sampler involved)."""

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
