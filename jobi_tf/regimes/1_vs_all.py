"""Every entity a candidate for both directions of each training triple (the pair head reads dense slot rows)."""

from __future__ import annotations

from jobi_tf.models.objectives import ONE_VS_ALL
from jobi_tf.regimes import Regime

__all__ = ["OneVsAll", "REGIME"]


class OneVsAll(Regime):
    name = ONE_VS_ALL
    options = ("matmul_dtype",)


REGIME = OneVsAll
