"""Batches of distinct training queries with their answer rows; an epoch visits every query once."""

from __future__ import annotations

from jobi_tf.contracts.objectives import K_VS_ALL
from jobi_tf.regimes import Regime
from jobi_tf.sampling.pipelines import TrainingQueries, query_batches, query_steps_per_epoch

__all__ = ["KvsAll", "REGIME"]


class KvsAll(Regime):
    name = K_VS_ALL
    options = ("matmul_dtype",)
    epoch_of = "queries"

    def steps(self, index, plan, rows=None):
        return query_steps_per_epoch(TrainingQueries.from_index(index), plan.sampler.batch_size)

    def dataset(self, index, plan, rows=None, **where):
        return query_batches(index, plan, **where)


REGIME = KvsAll
