"""tf.data input pipeline: positives in, (biased) negatives and pair labels drawn in-graph.

Steps, all vectorised TensorFlow ops (no Python per triple):

1. Each epoch, a stateless permutation keyed on ``(seed, epoch)`` orders the training
   triples; they are cut into batches of ``batch_size`` (the remainder is dropped).
2. Each batch of positives gets its features: for sampled training, negatives and pair
   labels drawn in-graph by `jobi_tf.sampling.negatives.NegativeSampler` (keyed on ``(seed, global
   step)``); for 1-vs-all, the dense slot rows the pair head reads; for k-vs-all (batches of
   distinct training queries, `TrainingQueries`), the answer rows.

Because every draw is keyed on the step, a resumed run sees exactly the batches and
negatives an uninterrupted run would have seen.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import tensorflow as tf

from jobi_tf.config import SamplerConfig
from jobi_tf.contracts import features as F
from jobi_tf.contracts.objectives import SAMPLED
from jobi_tf.data.index import KGIndex
from jobi_tf.runtime.errors import ConfigError
from jobi_tf.sampling.batch_plan import BatchPlan
from jobi_tf.sampling.negatives import DENSE_SLOT_TABLE_BYTES, NegativeSampler

__all__ = [
    "NegativeSampler",
    "EpochRows",
    "TrainingQueries",
    "make_train_dataset",
    "make_query_dataset",
    "triple_batches",
    "query_batches",
    "epoch_order",
    "steps_per_epoch",
    "DENSE_SLOT_TABLE_BYTES",
]


@dataclasses.dataclass(frozen=True)
class EpochRows:
    """Which training triples an epoch visits, when it is not all of them.

    A warm start on a grown graph (`jobi_tf.growth.warm_start`) visits every ``fresh`` row each epoch
    and ``replayed`` of the ``old`` rows, a different draw every epoch (keyed on the seed
    and the epoch, so a resumed run sees the same ones).

    Attributes:
        fresh: int64 indices into ``index.train``, visited every epoch.
        old: int64 indices into ``index.train``, of which ``replayed`` per epoch.
        replayed: rows of ``old`` per epoch (at most ``len(old)``).
    """

    fresh: np.ndarray
    old: np.ndarray
    replayed: int

    @classmethod
    def with_replay(cls, fresh: np.ndarray, old: np.ndarray, share: float) -> EpochRows:
        return cls(np.asarray(fresh, np.int64), np.asarray(old, np.int64), int(round(share * len(old))))

    def __len__(self) -> int:
        return len(self.fresh) + self.replayed


def steps_per_epoch(index: KGIndex, batch_size: int, rows: EpochRows | None = None) -> int:
    """Full batches per epoch; the remainder of each shuffled epoch is dropped."""
    if rows is None:
        return _full_batches(len(index.train), batch_size, "training triples")
    return _full_batches(len(rows), batch_size, "training triples an epoch visits (new + --replay share)")


def _full_batches(examples: int, batch_size: int, what: str) -> int:
    if examples < batch_size:
        raise ConfigError("batch_size", f"is larger than the {examples} {what}; use a smaller --batch-size")
    return examples // batch_size


#: Batches the input pipeline prepares ahead of the train step.
PREFETCH_BATCHES = 2


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity, where the OS tells it)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _epoch_stream(epoch_batches, to_features, initial_epoch: int, initial_step: int, epochs: int) -> tf.data.Dataset:
    """Epochs ``initial_epoch..epochs-1`` of ``epoch_batches(epoch)``, the first ``initial_step``
    batches left out (a resumed run), mapped by ``to_features`` in order and prefetched.

    Fixed parallelism, tf.data's autotuning off: with autotuning on (TensorFlow 2.21), freeing
    the iterator at the end of ``fit`` waits for the autotuner's thread to wake from its sleep,
    up to ~40 s measured at the end of every training run; the sampler is one map whose
    parallelism is simply the cores this process may use.
    """
    ds = tf.data.Dataset.range(initial_epoch, epochs).flat_map(epoch_batches).skip(initial_step)
    ds = ds.map(to_features, num_parallel_calls=usable_cores(), deterministic=True)
    ds = ds.prefetch(PREFETCH_BATCHES)
    options = tf.data.Options()
    options.autotune.enabled = False
    return ds.with_options(options)


def make_train_dataset(
    index: KGIndex,
    cfg: SamplerConfig,
    *,
    full_softmax: bool = False,
    slot_rows: bool = False,
    pair_labels: bool = True,
    pair_every: int = 1,
    **where,
) -> tf.data.Dataset:
    """`triple_batches` of the plan these keywords describe, for use outside a run.

    Args:
        index: the graph.
        cfg: sampler settings; ``cfg.batch_size`` is the global batch.
        full_softmax: positives only (1-vs-all training); with ``slot_rows`` also the dense
            slot rows ``pair_labels_tail``/``pair_labels_head`` ``[B, num_entities]`` (the pair
            head's labels and ``--slot-weight``'s weights read them).
        pair_labels: sampled batches carry the candidates' pair labels (False: a model with
            no pair head does not read them).
        pair_every: the pair labels of every n-th positive only (a pair head trained with
            ``pair_every=n`` reads no others).
        **where: ``seed``, ``initial_epoch``, ``initial_step``, ``epochs``, ``rows`` (`triple_batches`).
    """
    if full_softmax:
        plan = BatchPlan.every_entity(cfg, slot_rows=slot_rows)
    else:
        plan = BatchPlan.sampled(cfg, pair_labels=pair_labels, pair_every=pair_every)
    return triple_batches(index, plan, **where)


def triple_batches(
    index: KGIndex,
    plan: BatchPlan,
    *,
    seed: int = 0,
    initial_epoch: int = 0,
    initial_step: int = 0,
    epochs: int = 1_000_000,
    rows: EpochRows | None = None,
) -> tf.data.Dataset:
    """An endless-enough dataset of ``plan``'s batches of training triples (sampled or 1-vs-all).

    Args:
        index: the graph.
        plan: what each batch holds (`jobi_tf.sampling.batch_plan.BatchPlan`); its batch size is global.
        seed: run seed (epoch order and negatives).
        initial_epoch: first epoch to produce (resume starts here).
        initial_step: batches of ``initial_epoch`` to leave out (resume mid-epoch: every
            batch is a function of ``(seed, global step)``, so the rest is what an
            uninterrupted run would have seen).
        epochs: last epoch (exclusive).
        rows: the training triples each epoch visits (default: all of them).

    Returns:
        ``tf.data.Dataset`` of feature dicts (`jobi_tf.contracts.features`), ``steps_per_epoch``
        batches per epoch, prefetched; its element spec is checked against ``plan``.
    """
    batch = plan.sampler.batch_size
    steps = steps_per_epoch(index, batch, rows)
    train = tf.constant(index.train, tf.int32)
    sampler = NegativeSampler(index, plan, seed)
    visit = _epoch_pool(len(index.train), seed, rows)

    def epoch_batches(epoch: tf.Tensor) -> tf.data.Dataset:
        chosen = epoch_order(visit(epoch), seed, epoch, steps, batch)
        first_step = epoch * steps
        return tf.data.Dataset.from_tensor_slices((first_step + tf.range(steps, dtype=tf.int64), chosen))

    def to_features(step: tf.Tensor, chosen: tf.Tensor) -> dict[str, tf.Tensor]:
        triples = tf.gather(train, chosen)
        if plan.regime == SAMPLED:
            return sampler(triples, step)
        if F.PAIR_LABELS_TAIL not in plan.features():
            return {F.TRIPLES: triples}
        return {F.TRIPLES: triples, **sampler.dense_pair_labels(triples)}

    dataset = _epoch_stream(epoch_batches, to_features, initial_epoch, initial_step, epochs)
    plan.check_batches(dataset.element_spec, index.num_entities)
    return dataset


def epoch_order(pool: tf.Tensor, seed: int, epoch, steps: int, batch: int) -> tf.Tensor:
    """int32 ``[steps, batch]``: the rows of ``index.train`` each step of ``epoch`` trains on
    (``pool`` shuffled with a stateless draw keyed on ``(seed, epoch)``, the remainder dropped).

    Also what the chief of ``--strategy parameter-server`` hands its workers, step by step
    (`jobi_tf.distributed.ps_training`): both paths see the same batches.
    """
    epoch = tf.cast(epoch, tf.int64)
    order = tf.random.experimental.stateless_shuffle(
        tf.range(tf.shape(pool)[0]), seed=tf.stack([tf.cast(seed, tf.int64), epoch])
    )
    return tf.reshape(tf.gather(pool, order[: steps * batch]), [steps, batch])


def _epoch_pool(num_train: int, seed: int, rows: EpochRows | None):
    """``epoch -> int32 [n]``: the rows of ``index.train`` that epoch visits, before shuffling."""
    if rows is None:
        everything = tf.range(num_train)
        return lambda epoch: everything
    fresh, old = tf.constant(rows.fresh, tf.int32), tf.constant(rows.old, tf.int32)

    def pool(epoch: tf.Tensor) -> tf.Tensor:
        # Keyed on another seed than the epoch order, so the two draws are independent.
        pick = tf.random.experimental.stateless_shuffle(
            tf.range(tf.size(old)), seed=tf.stack([tf.cast(seed, tf.int64) + 7919, epoch])
        )
        return tf.concat([fresh, tf.gather(old, pick[: rows.replayed])], axis=0)

    return pool


@dataclasses.dataclass(frozen=True)
class TrainingQueries:
    """Every distinct training query, ``(h, r, ?)`` then ``(?, r, t)``, with its training
    answers: the examples of k-vs-all training (`jobi_tf.contracts.objectives.KvsAll`).

    Attributes:
        triples: int32 ``(Q, 3)``: a training triple of each query (the query and its first
            answer), so the model builds the query's rows as for any triple.
        is_tail: bool ``(Q,)``: True for ``(h, r, ?)``, False for ``(?, r, t)``.
        offsets: int64 ``(Q + 1,)``; query ``q``'s answers are ``answers[offsets[q]:offsets[q + 1]]``.
        answers: int32, sorted within each query.
    """

    triples: np.ndarray
    is_tail: np.ndarray
    offsets: np.ndarray
    answers: np.ndarray

    @classmethod
    def from_index(cls, index: KGIndex) -> TrainingQueries:
        r = index.num_relations
        tails, heads = index.train_facts
        h, hr = np.divmod(tails.keys, r)
        t, tr = np.divmod(heads.keys, r)
        triples = np.concatenate(
            [
                np.stack([h, hr, tails.values[tails.offsets[:-1]]], axis=1),
                np.stack([heads.values[heads.offsets[:-1]], tr, t], axis=1),
            ]
        ).astype(np.int32)
        offsets = np.concatenate([tails.offsets[:-1], heads.offsets + len(tails.values)]).astype(np.int64)
        is_tail = np.concatenate([np.ones(len(tails.keys), bool), np.zeros(len(heads.keys), bool)])
        return cls(triples, is_tail, offsets, np.concatenate([tails.values, heads.values]).astype(np.int32))

    def __len__(self) -> int:
        return len(self.is_tail)


def query_steps_per_epoch(queries: TrainingQueries, batch_size: int) -> int:
    """Full batches of distinct queries per epoch (k-vs-all)."""
    return _full_batches(len(queries), batch_size, "distinct training queries")


def make_query_dataset(index: KGIndex, cfg: SamplerConfig, *, joint: bool = False, **where) -> tf.data.Dataset:
    """`query_batches` of the k-vs-all plan of ``cfg`` (with ``joint``, the slot rows too)."""
    return query_batches(index, BatchPlan.queries(cfg, joint=joint), **where)


def query_batches(
    index: KGIndex, plan: BatchPlan, *, seed: int = 0, initial_epoch: int = 0, initial_step: int = 0, epochs=1_000_000
) -> tf.data.Dataset:
    """Batches of distinct training queries for k-vs-all training, shuffled each epoch.

    Each batch is a dict of ``triples`` int32 ``[B, 3]`` (see `TrainingQueries`),
    ``query_is_tail`` bool ``[B]`` and ``answer_labels`` float32 ``[B, E]`` (1 at every
    training answer of the query, built in-graph from the answer lists); with the plan's
    ``query_pair_labels`` also those, float32 ``[B, E]``: the entities seen in the asked slot
    of the query's relation (a pair label is 1 when both pairs occur, and the query's own
    pair always does). Epoch order is keyed on ``(seed, epoch)``, so a resumed run sees the
    same batches.
    """
    queries = TrainingQueries.from_index(index)
    batch = plan.sampler.batch_size
    steps = query_steps_per_epoch(queries, batch)
    answers = _answer_rows(queries, batch, index.num_entities)
    triples, is_tail = tf.constant(queries.triples), tf.constant(queries.is_tail)
    sampler = NegativeSampler(index, plan, seed) if F.QUERY_PAIR_LABELS in plan.features() else None

    def epoch_batches(epoch: tf.Tensor) -> tf.data.Dataset:
        order = tf.random.experimental.stateless_shuffle(
            tf.range(len(queries)), seed=tf.stack([tf.cast(seed, tf.int64), epoch])
        )
        chosen = tf.reshape(order[: steps * batch], [steps, batch])
        return tf.data.Dataset.from_tensor_slices(chosen)

    def to_features(chosen: tf.Tensor) -> dict[str, tf.Tensor]:
        out = {F.TRIPLES: tf.gather(triples, chosen), F.QUERY_IS_TAIL: tf.gather(is_tail, chosen)}
        out[F.ANSWER_LABELS] = answers(chosen)
        if sampler is not None:
            slots = sampler.dense_pair_labels(out[F.TRIPLES])
            side = out[F.QUERY_IS_TAIL][:, None]
            out[F.QUERY_PAIR_LABELS] = tf.where(side, slots[F.PAIR_LABELS_TAIL], slots[F.PAIR_LABELS_HEAD])
        return out

    dataset = _epoch_stream(epoch_batches, to_features, initial_epoch, initial_step, epochs)
    plan.check_batches(dataset.element_spec, index.num_entities)
    return dataset


def _answer_rows(queries: TrainingQueries, batch: int, num_entities: int):
    """``chosen -> float32 [batch, E]``: 1 at every training answer of each chosen query."""
    offsets, answers = tf.constant(queries.offsets), tf.constant(queries.answers)

    def rows(chosen: tf.Tensor) -> tf.Tensor:
        spans = tf.ragged.range(tf.gather(offsets, chosen), tf.gather(offsets, chosen + 1))
        cells = tf.stack([spans.value_rowids(), tf.cast(tf.gather(answers, spans.flat_values), tf.int64)], axis=1)
        return tf.scatter_nd(cells, tf.ones(tf.shape(cells)[:1]), tf.constant([batch, num_entities], tf.int64))

    return rows
