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

Two stores of the same counts. 1-vs-all keeps the dense ``[2R, E]`` table (`SlotPrior`): its
softmax reads every entity of a slot each step. A sampled run keeps only the counts that occur,
at most two per training triple (`SparseSlotPrior`), so the prior fits a graph of any size (at
1.85M entities the dense table would hold 878M entries); its run folder stores them
(``slot_counts.npz``). Sampled training leaves the counts out of its loss: the tables learn
alone, and the counts join every score the model ranks or serves, its validation included, so
early stopping picks the weights that rank best with them (docs/replicated-graph.md measured
why: the counts rank a large graph's hub answers better than sampled tables learn to).
"""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from jobi_tf.config.fields import slot_prior_weight
from jobi_tf.contracts.objectives import ONE_VS_ALL, SAMPLED
from jobi_tf.models.hub_route import HubRoute
from jobi_tf.models.slot_offsets import SlotOffsets
from jobi_tf.runtime.atomic import replacing
from jobi_tf.runtime.errors import ConfigError, JobiError

__all__ = [
    "SlotPrior",
    "SparseSlotPrior",
    "SlotOffsets",
    "add_slot_prior",
    "slot_log_counts",
    "slot_counts",
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


class _Weighted:
    """The prior's weight ``w``, checked on every assignment (`slot_prior_weight`): the one owner
    of the value that ``--slot-prior``, ``--prior-weight`` and ``--choose-slot-prior`` set."""

    @property
    def weight(self) -> float:
        return self._weight

    @weight.setter
    def weight(self, value: float) -> None:
        self._weight = slot_prior_weight(value)


class SlotPrior(_Weighted):
    """The prior's offsets (module docstring) from a ``[2R, E]`` table of log counts and ``w``.

    Args:
        table: the counts (`slot_log_counts`): a ``tf.Variable`` (read a row at a time) or a tensor.
        weight: ``w``.
        num_relations: ``R`` (head slots are rows ``R..2R-1``).
    """

    in_loss = True  # 1-vs-all trains with the counts in its softmax

    def __init__(self, table, weight: float, num_relations: int) -> None:
        backing = getattr(table, "value", table)  # gathers from a tf.Variable read only the rows asked
        self.table = backing if isinstance(backing, tf.Variable) else table
        self.weight, self.num_relations = weight, int(num_relations)

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


def add_slot_prior(model: keras.Model, weight: float) -> SlotPrior | SparseSlotPrior:
    """The prior of a `jobi_tf.models.JoBiModel`. 1-vs-all without relation prediction: the dense
    table, a weight that is saved but not trained, ``model.slot_log_counts`` (zeros until
    `SlotPrior.fill`), in its training softmax too. Sampled: the sparse counts, filled by
    `SparseSlotPrior.fill` or `SparseSlotPrior.load`, for ranking and serving only (module
    docstring). Other objectives take no prior."""
    if model.objective.regime == SAMPLED:
        return SparseSlotPrior(weight, model.num_entities, model.num_relations)
    if model.objective.regime != ONE_VS_ALL or model.relation_prediction:
        raise ValueError(
            "slot_prior needs sampled training or the full softmax (loss='full-softmax') without "
            "relation_prediction: the other objectives' scores take no prior"
        )
    shape = (2 * model.num_relations, model.num_entities)
    model.slot_log_counts = model.add_weight(shape=shape, initializer="zeros", trainable=False, name="slot_log_counts")
    return SlotPrior(model.slot_log_counts, weight, model.num_relations)


def slot_counts(train: np.ndarray, num_entities: int, num_relations: int) -> tuple[np.ndarray, np.ndarray]:
    """The counts that occur in ``train``: int64 keys ``slot * E + entity``, sorted, and float32
    ``log(1 + count)`` (slot ``r``: tails of ``r``; ``R + r``: its heads, as `slot_log_counts`)."""
    e, r = int(num_entities), int(num_relations)
    train = np.asarray(train, np.int64).reshape(-1, 3)
    keys = np.concatenate([train[:, 1] * e + train[:, 2], (r + train[:, 1]) * e + train[:, 0]])
    keys, counts = np.unique(keys, return_counts=True)
    return keys.astype(np.int64), np.log1p(counts).astype(np.float32)


class SparseSlotPrior(_Weighted):
    """The prior's offsets (module docstring) from the counts that occur (`slot_counts`) and ``w``.

    Same methods as `SlotPrior`, except that ``tails`` and ``heads`` return `SlotOffsets`: a
    batch's ``[B, E]`` offsets built a block of entities at a time, never whole. With a ``route``
    (`jobi_tf.models.hub_route`) a query asked from a hub takes the route's weight, not ``w``.
    """

    in_loss = False  # sampled training's loss leaves the counts out

    def __init__(
        self, weight: float, num_entities: int, num_relations: int, keys=None, values=None, route=None
    ) -> None:
        self.weight, self.num_entities, self.num_relations = weight, int(num_entities), int(num_relations)
        self.keys, self.values, self.route = None, None, route
        if keys is not None:
            self._hold(keys, values)

    def fill(self, train: np.ndarray) -> None:
        """Count the training triples ``train`` (int ``[T, 3]``)."""
        self._hold(*slot_counts(train, self.num_entities, self.num_relations))

    def save(self, path) -> None:
        """Write the counts and ``w`` to ``path`` (``.npz``), replaced whole."""
        keys, values = self.arrays()
        with replacing(path) as tmp, open(tmp, "wb") as f:
            route = {} if self.route is None else self.route.arrays()
            np.savez(f, keys=keys, values=values, weight=np.float64(self.weight), **route)

    def load(self, path) -> None:
        """Read what `save` wrote: the counts, and ``w`` (a weight chosen after training)."""
        try:
            with np.load(path) as data:
                keys, values = data["keys"], data["values"]
                weight = float(data["weight"]) if "weight" in data.files else self.weight
                route = HubRoute.from_arrays(data, self.num_entities, path)
        except (OSError, KeyError, ValueError) as exc:
            raise JobiError(f"{path}: cannot read the slot prior's counts ({exc})") from None
        self.weight, self.route = weight, route
        if len(keys) and int(keys[-1]) >= 2 * self.num_relations * self.num_entities:
            raise JobiError(f"{path}: the slot prior's counts belong to a larger graph")
        self._hold(keys, values)

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """The counts as NumPy ``(keys, values)``."""
        self._check_filled()
        return np.asarray(self.keys), np.asarray(self.values)

    def groups(self, given) -> tf.Tensor:
        """int64, ``given``'s shape: each query's weight, 0 (``w``) or 1 (its route's ``hub_weight``)."""
        if self.route is None:
            return tf.zeros(tf.shape(given), tf.int64)
        return self.route.groups(given)

    def group_weights(self, groups: tf.Tensor) -> tf.Tensor:
        """float32: the counts' weight of each of ``groups`` (`groups`)."""
        hub = self.weight if self.route is None else self.route.hub_weight
        return tf.gather(tf.constant([self.weight, hub], tf.float32), groups)

    def triples(self, heads: tf.Tensor, relations: tf.Tensor, tails: tf.Tensor) -> tf.Tensor:
        """``[B]``: the offset of each triple (with a route, the weight of its tail query: from ``heads``)."""
        weights = self.group_weights(self.groups(heads))
        return weights * (self._at(relations, tails) + self._at(self._head_slot(relations), heads))

    def tails(self, heads: tf.Tensor, relations: tf.Tensor) -> SlotOffsets:
        """The offsets of every entity as the tail of ``(h, r, ?)``."""
        return SlotOffsets(self, relations, self._at(self._head_slot(relations), heads), heads)

    def heads(self, relations: tf.Tensor, tails: tf.Tensor) -> SlotOffsets:
        """The offsets of every entity as the head of ``(?, r, t)``."""
        return SlotOffsets(self, self._head_slot(relations), self._at(relations, tails), tails)

    def relations(self, heads: tf.Tensor, tails: tf.Tensor) -> tf.Tensor:
        """``[B, R]``: the offset of every relation for ``(h, ?, t)``."""
        heads, tails = tf.cast(heads, tf.int64)[:, None], tf.cast(tails, tf.int64)[:, None]
        slots = tf.range(self.num_relations, dtype=tf.int64)[None] + tf.zeros_like(heads)  # [B, R]
        every = tf.zeros_like(slots)  # broadcasts the entities to [B, R]
        weights = self.group_weights(self.groups(heads))  # [B, 1]: the tail query's, as `triples`
        return weights * (self._at(slots, tails + every) + self._at(self._head_slot(slots), heads + every))

    def log_counts(self, slots: tf.Tensor, entities: tf.Tensor) -> tf.Tensor:
        """The log counts at ``(slots, entities)``, elementwise (``w`` not applied; 0 where none)."""
        return self._at(slots, entities)

    def renumbered(self, new_id: np.ndarray) -> SparseSlotPrior:
        """The same counts and ``w`` with entity ``e`` numbered ``new_id[e]`` (an export that
        numbers its entities otherwise: `jobi_tf.export.cells.cell_order`)."""
        keys, values = self.arrays()
        e = self.num_entities
        moved = keys // e * e + np.asarray(new_id, np.int64)[keys % e]
        order = np.argsort(moved, kind="stable")
        route = None if self.route is None else self.route.renumbered(new_id)
        return SparseSlotPrior(self.weight, e, self.num_relations, moved[order], values[order], route)

    @classmethod
    def of(cls, prior: SlotPrior | SparseSlotPrior, num_entities: int) -> SparseSlotPrior:
        """``prior`` as sparse counts (a dense table keeps its nonzero entries)."""
        if isinstance(prior, SparseSlotPrior):
            return prior
        table = np.asarray(prior.table.numpy() if hasattr(prior.table, "numpy") else prior.table, np.float32)
        keys = np.flatnonzero(table.reshape(-1))
        return cls(prior.weight, num_entities, prior.num_relations, keys, table.reshape(-1)[keys])

    def slot_rows(self, distinct: tf.Tensor, lo: int, hi: int) -> tf.Tensor:
        """float32 ``[U, hi - lo]``: the log counts of entities ``lo..hi-1`` in each of the slots
        ``distinct`` (int64 ``[U]``; ``w`` not applied), each from its span of the sorted keys."""
        self._check_filled()
        e = tf.constant(self.num_entities, tf.int64)
        starts = tf.searchsorted(self.keys, distinct * e + lo, out_type=tf.int64)
        spans = tf.ragged.range(starts, tf.searchsorted(self.keys, distinct * e + hi, out_type=tf.int64))
        at, row = spans.flat_values, spans.value_rowids()
        cols = tf.gather(self.keys, at) - tf.gather(distinct, row) * e - lo
        shape = tf.stack([tf.size(distinct, out_type=tf.int64), tf.constant(hi - lo, tf.int64)])
        return tf.scatter_nd(tf.stack([row, cols], axis=1), tf.gather(self.values, at), shape)

    def _hold(self, keys, values) -> None:
        self.keys = tf.convert_to_tensor(keys, tf.int64)
        self.values = tf.convert_to_tensor(values, tf.float32)

    def _check_filled(self) -> None:
        if self.keys is None:
            raise JobiError("the slot prior has no counts yet: fill it from the training triples or load them")

    def _head_slot(self, relations: tf.Tensor) -> tf.Tensor:
        return relations + tf.constant(self.num_relations, relations.dtype)

    def _at(self, slots: tf.Tensor, entities: tf.Tensor) -> tf.Tensor:
        """The log counts at ``(slots, entities)``, elementwise (any shape; 0 where none)."""
        self._check_filled()
        keys = tf.cast(slots, tf.int64) * self.num_entities + tf.cast(entities, tf.int64)
        if self.keys.shape[0] == 0:  # a graph with no training triple
            return tf.zeros(tf.shape(keys), tf.float32)
        flat = tf.reshape(keys, [-1])
        last = tf.size(self.keys, out_type=tf.int64) - 1
        pos = tf.minimum(tf.searchsorted(self.keys, flat, out_type=tf.int64), last)
        found = tf.where(tf.gather(self.keys, pos) == flat, tf.gather(self.values, pos), 0.0)
        return tf.reshape(found, tf.shape(keys))
