"""Sampling: what a training batch holds and how it is drawn in-graph.

A run's `batch_plan.BatchPlan` says once which tensors (`features`) its batches carry;
`pipelines` builds the tf.data pipelines, `negatives` draws (biased) negatives and pair labels
from the slot lookups of `slot_membership`.
"""
