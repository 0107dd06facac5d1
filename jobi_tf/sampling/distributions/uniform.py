"""Uniform over all entities (the paper's)."""

from __future__ import annotations

from jobi_tf.runtime.errors import ConfigError
from jobi_tf.sampling.distributions import NegativeDistribution

__all__ = ["Uniform"]


class Uniform(NegativeDistribution):
    """Every entity equally likely: the paper's negatives, and the default."""

    kind = "uniform"

    @classmethod
    def check(cls, cfg) -> None:
        if cfg.sampler.logq_correction:
            raise ConfigError(
                "logq_correction", "needs a non-uniform --negative-distribution (uniform draws need none)"
            )

    def draw(self, shape, seed):
        return self.uniform(shape, seed)

    def log_q(self):
        return None


DISTRIBUTION = Uniform
