"""`SlotPrior`: how often each entity fills each relation's slot in training, added to every score.

Why: a 1-vs-all model starts with every score near zero (each is a product of three small
rows), so its softmax is uniform, and on a sparse graph its first epoch can end there: below
what merely counting slot frequencies ranks (docs/studies/one-vs-all-stall.md). With the prior
the score of ``(h, r, t)`` is the bilinear score plus

    w · (log(1 + c_tail(r, t)) + log(1 + c_head(r, h)))

where ``c_tail(r, t)`` counts the training triples ``(*, r, t)`` and ``c_head(r, h)`` those of
``(h, r, *)``. For a tail query ``(h, r, ?)`` the second term is the same for every candidate,
so with ``w = 1`` an untrained model's softmax is ``p(t | r) ∝ 1 + c_tail(r, t)`` (add-one
smoothing) and it ranks as the count does; the tables learn what the counts miss. Neither the
counts nor ``w`` are trained (a weight per slot, trained, grew to 1.5-6.7 on FB15k-237 and cost
0.02 validation MRR: docs/studies/slot-prior.md); ``w`` may fade to 0 over the first epochs
(`SlotPriorFade`), handing the ranking over to the tables. A checkpoint or an export carries both.

One expression for every consumer (training logits, evaluation, the exported signatures), so a
triple's score is the same whichever direction asks it, as without the prior.
"""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from jobi_tf.runtime.errors import ConfigError

__all__ = [
    "SlotPrior",
    "SlotPriorFade",
    "add_slot_prior",
    "faded_weight",
    "slot_log_counts",
    "untrained_loss",
    "MAX_PRIOR_ENTRIES",
]

#: Largest ``2 x relations x entities`` table of counts kept (float32: 1 GiB). A graph above it
#: is far beyond what 1-vs-all, the regime the prior serves, can train in a day.
MAX_PRIOR_ENTRIES = 1 << 28


def slot_log_counts(train: np.ndarray, num_entities: int, num_relations: int) -> np.ndarray:
    """float32 ``[2R, E]``: row ``r`` holds ``log(1 + c_tail(r, e))``, row ``R + r`` ``log(1 +
    c_head(r, e))``, counted over the training triples ``train`` (the layout of
    `jobi_tf.data.index.KGIndex.slot_rows`: tail slots first)."""
    e, r = int(num_entities), int(num_relations)
    if 2 * r * e > MAX_PRIOR_ENTRIES:
        raise ConfigError(
            "slot_prior",
            f"needs a table of 2 x {r:,} relations x {e:,} entities ({8 * r * e / 2**30:.1f} GiB, limit "
            f"{4 * MAX_PRIOR_ENTRIES / 2**30:.0f} GiB); set it to 0 on a graph this large",
        )
    train = np.asarray(train, np.int64)
    tails = train[:, 1] * e + train[:, 2]
    heads = (r + train[:, 1]) * e + train[:, 0]
    counts = np.bincount(np.concatenate([tails, heads]), minlength=2 * r * e)
    return np.log1p(counts).astype(np.float32).reshape(2 * r, e)


def untrained_loss(log_counts: np.ndarray, train: np.ndarray, weight: float) -> float:
    """The full softmax's ``triple_loss`` (tail plus head, mean over ``train``) of a model whose
    bilinear scores are all equal, at ``w = weight``: the prior's alone.
    What a run that has learned nothing sits at, in place of ``2 ln N``
    (`jobi_tf.training.stalls`). One row at a time: no ``[2R, E]`` copy."""
    train = np.asarray(train, np.int64)
    r = log_counts.shape[0] // 2
    norm = np.empty(2 * r)
    for slot in range(2 * r):
        logits = np.float64(weight) * log_counts[slot].astype(np.float64)
        top = logits.max()
        norm[slot] = top + np.log(np.sum(np.exp(logits - top)))
    tails, heads = train[:, 1], r + train[:, 1]
    tail = norm[tails] - weight * log_counts[tails, train[:, 2]].astype(np.float64)
    head = norm[heads] - weight * log_counts[heads, train[:, 0]].astype(np.float64)
    return float(np.mean(tail + head))


class SlotPrior:
    """The prior's offsets (module docstring) from a ``[2R, E]`` table of log counts and ``w``.

    Args:
        table: the counts (`slot_log_counts`): a ``tf.Variable`` (read a row at a time) or a tensor.
        weight: ``w``, a scalar (a variable, so that `SlotPriorFade` can move it, or a tensor).
        num_relations: ``R`` (head slots are rows ``R..2R-1``).
    """

    def __init__(self, table, weight, num_relations: int) -> None:
        backing = getattr(table, "value", table)  # gathers from a tf.Variable read only the rows asked
        self.table = backing if isinstance(backing, tf.Variable) else table
        self.weight, self.num_relations = weight, int(num_relations)

    def tails(self, heads: tf.Tensor, relations: tf.Tensor) -> tf.Tensor:
        """``[B, E]``: the offset of every entity as the tail of ``(h, r, ?)``."""
        return self._scaled(tf.gather(self.table, relations) + self._at(self._head_slot(relations), heads)[:, None])

    def heads(self, relations: tf.Tensor, tails: tf.Tensor) -> tf.Tensor:
        """``[B, E]``: the offset of every entity as the head of ``(?, r, t)``."""
        return self._scaled(tf.gather(self.table, self._head_slot(relations)) + self._at(relations, tails)[:, None])

    def triples(self, heads: tf.Tensor, relations: tf.Tensor, tails: tf.Tensor) -> tf.Tensor:
        """``[B]``: the offset of each triple."""
        return self._scaled(self._at(relations, tails) + self._at(self._head_slot(relations), heads))

    def relations(self, heads: tf.Tensor, tails: tf.Tensor) -> tf.Tensor:
        """``[B, R]``: the offset of every relation for ``(h, ?, t)``."""
        heads, tails = tf.convert_to_tensor(heads), tf.cast(tails, heads.dtype)
        slots = tf.range(self.num_relations, dtype=heads.dtype)[None] + tf.zeros_like(heads)[:, None]  # [B, R]
        tail_part = self._at(slots, tails[:, None] + tf.zeros_like(slots))
        return self._scaled(tail_part + self._at(self._head_slot(slots), heads[:, None] + tf.zeros_like(slots)))

    def _scaled(self, counts: tf.Tensor) -> tf.Tensor:
        return tf.cast(self.weight, counts.dtype) * counts

    def _head_slot(self, relations: tf.Tensor) -> tf.Tensor:
        return relations + tf.constant(self.num_relations, relations.dtype)

    def _at(self, slots: tf.Tensor, entities: tf.Tensor) -> tf.Tensor:
        """The table at ``(slots, entities)``, elementwise (any shape)."""
        return tf.gather_nd(self.table, tf.stack([slots, tf.cast(entities, slots.dtype)], axis=-1))


def add_slot_prior(model: keras.Model, num_entities: int, num_relations: int, weight: float) -> SlotPrior:
    """Give ``model`` the prior's two weights, neither trained: ``model.slot_log_counts`` (zeros
    until filled from the training triples) and ``model.slot_prior_weight`` (``w``, from ``weight``)."""
    if weight < 0:
        raise ValueError(f"slot_prior must be >= 0. Received: slot_prior={weight!r}")
    shape = (2 * num_relations, num_entities)
    model.slot_log_counts = model.add_weight(shape=shape, initializer="zeros", trainable=False, name="slot_log_counts")
    model.slot_prior_weight = model.add_weight(
        shape=(), initializer=keras.initializers.Constant(weight), trainable=False, name="slot_prior_weight"
    )
    return SlotPrior(model.slot_log_counts, model.slot_prior_weight, num_relations)


def faded_weight(weight: float, fade_epochs: int, epoch: int) -> float:
    """``w`` during epoch ``epoch`` (from 0): ``weight`` falling linearly to 0 over the first
    ``fade_epochs`` epochs (``weight · max(0, 1 - epoch / fade_epochs)``); 0 epochs: no fade."""
    if not fade_epochs:
        return float(weight)
    return float(weight) * max(0.0, 1.0 - epoch / fade_epochs)


class SlotPriorFade(keras.callbacks.Callback):
    """Sets the model's ``w`` at each epoch's start (`faded_weight`), so a resumed run gets the
    weight of the epoch it resumes in; a run's best weights keep the ``w`` they were validated with.

    Why fade: the prior gives a 1-vs-all run its first epoch (it starts at the count floor, not at
    a uniform softmax), but kept at 1 it cost kbc-fast's end on FB15k-237 and WN18RR
    (docs/studies/slot-prior.md); faded, the tables take the ranking over, and the run ends
    with the model it would have had without the prior.
    """

    def __init__(self, weight: float, fade_epochs: int) -> None:
        super().__init__()
        self.weight, self.fade_epochs = weight, fade_epochs

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        self.model.slot_prior_weight.assign(faded_weight(self.weight, self.fade_epochs, epoch))
