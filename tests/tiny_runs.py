"""A tiny JoBi run on a synthetic graph: what the tests of damaged files and full disks train."""

from __future__ import annotations

from jobi_tf.config import DataConfig, ModelConfig, RunConfig, SamplerConfig, TrainConfig


def tiny_config(epochs: int) -> RunConfig:
    """Seconds per epoch: 800 triples over 80 entities, ComplEx dim 8, validated every epoch."""
    return RunConfig(
        data=DataConfig(dataset="synthetic", synthetic_entities=80, synthetic_relations=4, synthetic_triples=800),
        sampler=SamplerConfig(batch_size=100, neg=8, p=0.3),
        model=ModelConfig(model="complex", dim=8, joint=True),
        train=TrainConfig(epochs=epochs, eval_every=1, patience=10, jit_compile=False),
        seed=3,
    )
