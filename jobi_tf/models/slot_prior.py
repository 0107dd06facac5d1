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
counts nor ``w`` are trained: a weight per slot, trained, grew to 1.5-6.7 on FB15k-237 and cost
0.02 validation MRR, and fading ``w`` to 0 after two epochs kept neither the dense graphs' end
nor the sparse ones' gain (docs/studies/slot-prior.md). A checkpoint or an export carries the
counts; ``w`` is the model's setting.

One expression for every consumer (training logits, evaluation, the exported signatures), so a
triple's score is the same whichever direction asks it, as without the prior.
"""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from jobi_tf.contracts.objectives import ONE_VS_ALL
from jobi_tf.runtime.errors import ConfigError

__all__ = ["SlotPrior", "add_slot_prior", "slot_log_counts", "untrained_loss", "MAX_PRIOR_ENTRIES"]

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
    bilinear scores are all equal: the prior's alone, at ``w = weight``.
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
        weight: ``w``.
        num_relations: ``R`` (head slots are rows ``R..2R-1``).
    """

    def __init__(self, table, weight: float, num_relations: int) -> None:
        backing = getattr(table, "value", table)  # gathers from a tf.Variable read only the rows asked
        self.table = backing if isinstance(backing, tf.Variable) else table
        self.weight, self.num_relations = float(weight), int(num_relations)

    def fill(self, train: np.ndarray) -> None:
        """Count the training triples ``train`` (int ``[T, 3]``) into the table (a variable)."""
        self.table.assign(slot_log_counts(train, self.table.shape[1], self.num_relations))

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
        return self.weight * counts

    def _head_slot(self, relations: tf.Tensor) -> tf.Tensor:
        return relations + tf.constant(self.num_relations, relations.dtype)

    def _at(self, slots: tf.Tensor, entities: tf.Tensor) -> tf.Tensor:
        """The table at ``(slots, entities)``, elementwise (any shape)."""
        return tf.gather_nd(self.table, tf.stack([slots, tf.cast(entities, slots.dtype)], axis=-1))


def add_slot_prior(model: keras.Model, weight: float) -> SlotPrior:
    """Give a `jobi_tf.models.JoBiModel` the prior's table as a weight that is saved but not
    trained, ``model.slot_log_counts`` (zeros until `SlotPrior.fill`); only the full softmax
    without relation prediction adds the prior to its training scores, so only it may have one."""
    if weight < 0:
        raise ValueError(f"slot_prior must be >= 0. Received: slot_prior={weight!r}")
    if model.objective.regime != ONE_VS_ALL or model.relation_prediction:
        raise ValueError(
            "slot_prior needs the full softmax (loss='full-softmax') and relation_prediction=0: "
            "the other objectives' scores take no prior"
        )
    shape = (2 * model.num_relations, model.num_entities)
    model.slot_log_counts = model.add_weight(shape=shape, initializer="zeros", trainable=False, name="slot_log_counts")
    return SlotPrior(model.slot_log_counts, weight, model.num_relations)
