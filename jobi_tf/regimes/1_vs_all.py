"""Every entity a candidate for both directions of each training triple (the pair head reads dense slot rows)."""

from __future__ import annotations

from jobi_tf.contracts.objectives import ONE_VS_ALL
from jobi_tf.regimes import Regime
from jobi_tf.runtime.errors import ConfigError

__all__ = ["OneVsAll", "REGIME"]


class OneVsAll(Regime):
    name = ONE_VS_ALL
    options = ("matmul_dtype", "slot_prior")

    @classmethod
    def check(cls, cfg):
        if cfg.train.slot_prior and cfg.train.relation_prediction:
            raise ConfigError(
                "slot_prior", "is not combined with --relation-prediction (its softmax over relations has no prior)"
            )


REGIME = OneVsAll
