"""The object a jobi-tf SavedModel serves: tables, vocabularies and the signatures' code.

An export answers questions in *names*: the entity and relation vocabularies ship as
SavedModel assets read by ``tf.lookup`` tables, so clients never see integer ids. It holds
only what the test-time model needs — the entity table and the triple head's relation
table (SimplE's inverse-relation and tail-role halves live in the same rows) — and no pair
head (unless asked for soft typed answers), optimizer slot or training graph.

The signatures and their input and output names are the serving contract,
`jobi_tf.serving.contract` (``serving_default`` is ``predict_tail``); ``B`` is the batch and
``k`` is clipped to the number of candidates. Names are ``[B]`` strings, scores float32; a
typed signature's slot smaller than ``k`` pads the rest with empty names and score ``-inf``.
A run calibrated with ``jobi-tf calibrate`` (`jobi_tf.calibration`) exports probabilities
too: ``probability`` ``[B]`` in ``score``, ``probabilities`` ``[B, k]`` in the others.

Unknown names, the same in every signature: a row with a name outside the vocabulary gets
``found = False``, score(s) NaN and empty names; the other rows are answered normally.
Nothing raises, so one bad row never fails a batch.

Top-k is the scorer's ``score_candidates`` of the query against the entity table (one
matmul) and ``tf.math.top_k`` (ties: lower id first); queries are the model's own
(`jobi_tf.models.tables.Queries`). Exported with ``filter_known``, the training facts of
each query are set to ``-inf`` before the top-k, so they come last and appear only when
``k`` exceeds the number of other entities. `jobi_tf.api.Run`'s predictions run this same
code in-process.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from jobi_tf.calibration import Calibration
from jobi_tf.data.index import CSR
from jobi_tf.models import JoBiModel
from jobi_tf.models.scorers import Scorer
from jobi_tf.models.tables import Queries, pair_score_threshold

__all__ = ["TripleScorerModule", "scorer_module"]

_NAMES = tf.TensorSpec([None], tf.string)
_K = tf.TensorSpec([], tf.int32)
_PROBABILITY = tf.TensorSpec([], tf.float32)


def _read(variable: tf.Variable) -> tf.Tensor:
    """The variable's value as a tensor, to gather from.

    Why not ``tf.gather(variable, ids)``: a gather on the variable itself (``ResourceGather``)
    puts it in copy-on-read mode, and every dense read after it (the top-k matmul) then
    copies the whole table: +2 ms per FB15k-237 query, more than the matmul itself.
    """
    return variable.value()


def _vocab_table(path: str, size: int, *, to_ids: bool) -> tf.lookup.StaticHashTable:
    """name → id (default -1) or id → name (default ""), read from a one-label-per-line asset."""
    line, number = tf.lookup.TextFileIndex.WHOLE_LINE, tf.lookup.TextFileIndex.LINE_NUMBER
    if to_ids:
        init = tf.lookup.TextFileInitializer(path, tf.string, line, tf.int64, number, vocab_size=size)
        return tf.lookup.StaticHashTable(init, default_value=-1)
    init = tf.lookup.TextFileInitializer(path, tf.int64, number, tf.string, line, vocab_size=size)
    return tf.lookup.StaticHashTable(init, default_value="")


class _KnownFacts(tf.Module):
    """Training facts of each query key as CSR (see `jobi_tf.data.index.CSR`), held in variables.

    Variables rather than graph constants keep ``saved_model.pb`` small (and under
    protobuf's 2 GiB limit) whatever the graph's size.
    """

    def __init__(self, csr: CSR, name: str) -> None:
        super().__init__(name=name)
        self.keys = tf.Variable(csr.keys.astype(np.int64), trainable=False, name="keys")
        self.offsets = tf.Variable(csr.offsets.astype(np.int64), trainable=False, name="offsets")
        self.values = tf.Variable(csr.values.astype(np.int32), trainable=False, name="values")  # entity ids

    def mask(self, scores: tf.Tensor, query_keys: tf.Tensor) -> tf.Tensor:
        """``scores [B, E]`` with the known entities of each row's key set to ``-inf``."""
        keys, offsets, values = _read(self.keys), _read(self.offsets), _read(self.values)
        last = tf.shape(keys, out_type=tf.int64)[0] - 1
        pos = tf.minimum(tf.searchsorted(keys, query_keys, out_type=tf.int64), last)
        hit = tf.gather(keys, pos) == query_keys
        starts = tf.where(hit, tf.gather(offsets, pos), 0)
        limits = tf.where(hit, tf.gather(offsets, pos + 1), 0)
        spans = tf.ragged.range(starts, limits)
        cells = tf.stack([spans.value_rowids(), tf.cast(tf.gather(values, spans.flat_values), tf.int64)], axis=1)
        minus_inf = tf.fill(tf.shape(cells)[:1], tf.constant(-np.inf, scores.dtype))
        return tf.tensor_scatter_nd_update(scores, cells, minus_inf)

    def listed(self, scores: tf.Tensor, query_keys: tf.Tensor) -> tf.Tensor:
        """bool, shaped like ``scores [B, E]``: the entities listed under each row's key."""
        return tf.math.is_inf(self.mask(tf.zeros_like(scores), query_keys))  # -inf exactly at the listed cells


class TripleScorerModule(tf.Module):
    """The exported object: tables, vocabularies and the three signatures (module docstring).

    Args:
        scorer: the bilinear scorer of the run.
        entity_embeddings: float32 ``(E, entity_width)``.
        triple_relations: float32 ``(R, relation_width)``, the triple head's table; ``(2R,
            relation_width)`` with ``reciprocal`` (rows ``R..2R-1`` are the inverses).
        entity_vocab, relation_vocab: one-label-per-line files (line number = id); they
            become assets of the SavedModel.
        known_tails: training tails keyed by ``head * R + relation``, or None (no filter).
        known_heads: training heads keyed by ``tail * R + relation``, or None.
        known_relations: training relations keyed by ``head * E + tail``, or None.
        slots: the training tails and heads of each relation (`KGIndex.train_tails`,
            ``train_heads``) for the typed signatures, or None (they then rank every entity).
        reciprocal: the model ranks heads of ``(?, r, t)`` as tails of ``(t, r⁻¹, ?)``.
    """

    def __init__(
        self,
        scorer: Scorer,
        entity_embeddings: np.ndarray,
        triple_relations: np.ndarray,
        entity_vocab: str,
        relation_vocab: str,
        known_tails: CSR | None = None,
        known_heads: CSR | None = None,
        known_relations: CSR | None = None,
        reciprocal: bool = False,
        slots: tuple[CSR, CSR] | None = None,
        calibration: Calibration | None = None,
        pair_relations: np.ndarray | None = None,
    ) -> None:
        super().__init__(name="jobi_triple_scorer")
        self._scorer = scorer
        self._reciprocal = reciprocal
        self.num_entities = len(entity_embeddings)
        self.num_relations = len(triple_relations) // (2 if reciprocal else 1)
        self.entity_embeddings = tf.Variable(entity_embeddings, trainable=False, name="entity_embeddings")
        self.triple_relations = tf.Variable(triple_relations, trainable=False, name="triple_relations")
        self.entity_ids = _vocab_table(entity_vocab, self.num_entities, to_ids=True)
        self.relation_ids = _vocab_table(relation_vocab, self.num_relations, to_ids=True)
        self.entity_names = _vocab_table(entity_vocab, self.num_entities, to_ids=False)
        self.relation_names = _vocab_table(relation_vocab, self.num_relations, to_ids=False)
        self.known_tails = _KnownFacts(known_tails, "known_tails") if known_tails is not None else None
        self.known_heads = _KnownFacts(known_heads, "known_heads") if known_heads is not None else None
        self.known_relations = _KnownFacts(known_relations, "known_relations") if known_relations is not None else None
        self.calibration = self.knots = self.values = None
        if calibration is not None and calibration.method == "platt":  # per row: a, b of sigma(a * score + b)
            ab = np.stack([calibration.a, calibration.b], 1).astype(np.float32)
            self.calibration = tf.Variable(ab, trainable=False, name="platt")
        elif calibration is not None:  # per row: a piecewise-linear map, knots -> values
            self.knots = tf.Variable(calibration.knots.astype(np.float32), trainable=False, name="isotonic_knots")
            self.values = tf.Variable(calibration.values.astype(np.float32), trainable=False, name="isotonic_values")
        self.slot_tails = _KnownFacts(slots[0], "slot_tails") if slots is not None else None
        self.slot_heads = _KnownFacts(slots[1], "slot_heads") if slots is not None else None
        # The pair head's relation table (soft typed answers only): it scores whether an entity fits a slot.
        self.pair_relations = (
            tf.Variable(pair_relations, trainable=False, name="pair_relations") if pair_relations is not None else None
        )

    @staticmethod
    def _same_length(**names: tf.Tensor) -> list[tf.Tensor]:
        """The inputs, once checked to have one length (else InvalidArgumentError naming them);
        elementwise ops would otherwise broadcast a length-1 batch or return nothing."""
        (first, a), *rest = names.items()
        checks = [
            tf.debugging.assert_equal(
                tf.size(a), tf.size(b), message=f"inputs '{first}' and '{other}' must have the same length"
            )
            for other, b in rest
        ]
        with tf.control_dependencies(checks):
            return [tf.identity(t) for t in names.values()]

    @staticmethod
    def _safe(found: tf.Tensor, ids: tf.Tensor) -> tf.Tensor:
        """Unknown ids (-1) become 0 so gathers stay in range; their outputs are masked later."""
        return tf.where(found, ids, tf.zeros_like(ids))

    @tf.function(input_signature=[_NAMES, _NAMES, _NAMES], autograph=False)
    def score(self, head: tf.Tensor, relation: tf.Tensor, tail: tf.Tensor) -> dict[str, tf.Tensor]:
        """Triple-head score of each (head, relation, tail) row; NaN where a name is unknown."""
        head, relation, tail = self._same_length(head=head, relation=relation, tail=tail)
        h, r, t = self.entity_ids.lookup(head), self.relation_ids.lookup(relation), self.entity_ids.lookup(tail)
        found = (h >= 0) & (r >= 0) & (t >= 0)
        h, r, t = self._safe(found, h), self._safe(found, r), self._safe(found, t)
        entities, relations = _read(self.entity_embeddings), _read(self.triple_relations)
        # The same expression as JoBiModel.score_triples.
        scores = self._scorer.score(tf.gather(entities, h), tf.gather(relations, r), tf.gather(entities, t))
        out = {"score": tf.where(found, scores, np.nan), "found": found}
        if self.calibrated:
            out["probability"] = tf.where(found, self._probability(scores, r), np.nan)
        return out

    @property
    def calibrated(self) -> bool:
        return self.calibration is not None or self.knots is not None

    def _probability(self, scores: tf.Tensor, rows: tf.Tensor) -> tf.Tensor:
        """Probabilities of ``scores`` (``[B]`` or ``[B, k]``), each query with its calibration row (``rows [B]``)."""
        columns = scores if scores.shape.rank == 2 else scores[:, None]
        if self.calibration is not None:
            ab = tf.gather(_read(self.calibration), rows)  # [B, 2]
            p = tf.sigmoid(ab[:, :1] * columns + ab[:, 1:])
        else:
            p = _interpolate(tf.gather(_read(self.knots), rows), tf.gather(_read(self.values), rows), columns)
        return p if scores.shape.rank == 2 else p[:, 0]

    @tf.function(input_signature=[_NAMES, _NAMES, _K], autograph=False)
    def predict_tail(self, head: tf.Tensor, relation: tf.Tensor, k: tf.Tensor) -> dict[str, tf.Tensor]:
        """Top-k tails of each (head, relation) row."""
        return self._predict_tail(head, relation, k, None)

    def _predict_tail(self, head, relation, k, slots: _KnownFacts | None, min_pair=None) -> dict[str, tf.Tensor]:
        head, relation = self._same_length(head=head, relation=relation)
        h, r = self.entity_ids.lookup(head), self.relation_ids.lookup(relation)
        found = (h >= 0) & (r >= 0)
        h, r = self._safe(found, h), self._safe(found, r)
        entities = _read(self.entity_embeddings)
        query = self._queries(entities, self.triple_relations).tail(h, r)
        soft = None
        if min_pair is not None and self.pair_relations is not None:  # the pair head's query for the same slot
            soft = (self._queries(entities, self.pair_relations).tail(h, r), min_pair)
        keys = h * self.num_relations + r
        names, scores = self._top_k(entities, query, keys, self.known_tails, found, k, slots, r, soft)
        out = {"tails": names, "scores": scores, "found": found}
        if self.calibrated:
            out["probabilities"] = self._probability(scores, r)
        return out

    @tf.function(input_signature=[_NAMES, _NAMES, _K], autograph=False)
    def predict_tail_typed(self, head: tf.Tensor, relation: tf.Tensor, k: tf.Tensor) -> dict[str, tf.Tensor]:
        """Top-k tails of each (head, relation) row among the relation's training tails."""
        return self._predict_tail(head, relation, k, self.slot_tails)

    @tf.function(input_signature=[_NAMES, _NAMES, _K, _PROBABILITY], autograph=False)
    def predict_tail_soft_typed(
        self, head: tf.Tensor, relation: tf.Tensor, k: tf.Tensor, min_pair_probability: tf.Tensor
    ) -> dict[str, tf.Tensor]:
        """Top-k tails among the relation's training tails and the entities the pair head
        places in that slot with probability >= ``min_pair_probability``."""
        return self._predict_tail(head, relation, k, self.slot_tails, min_pair_probability)

    @tf.function(input_signature=[_NAMES, _NAMES, _K, _PROBABILITY], autograph=False)
    def predict_head_soft_typed(
        self, relation: tf.Tensor, tail: tf.Tensor, k: tf.Tensor, min_pair_probability: tf.Tensor
    ) -> dict[str, tf.Tensor]:
        """Top-k heads among the relation's training heads and the entities the pair head
        places in that slot with probability >= ``min_pair_probability``."""
        return self._predict_head(relation, tail, k, self.slot_heads, min_pair_probability)

    @tf.function(input_signature=[_NAMES, _NAMES, _K], autograph=False)
    def predict_head_typed(self, relation: tf.Tensor, tail: tf.Tensor, k: tf.Tensor) -> dict[str, tf.Tensor]:
        """Top-k heads of each (relation, tail) row among the relation's training heads."""
        return self._predict_head(relation, tail, k, self.slot_heads)

    @tf.function(input_signature=[_NAMES, _NAMES, _K], autograph=False)
    def predict_head(self, relation: tf.Tensor, tail: tf.Tensor, k: tf.Tensor) -> dict[str, tf.Tensor]:
        """Top-k heads of each (relation, tail) row."""
        return self._predict_head(relation, tail, k, None)

    def _predict_head(self, relation, tail, k, slots: _KnownFacts | None, min_pair=None) -> dict[str, tf.Tensor]:
        relation, tail = self._same_length(relation=relation, tail=tail)
        r, t = self.relation_ids.lookup(relation), self.entity_ids.lookup(tail)
        found = (r >= 0) & (t >= 0)
        r, t = self._safe(found, r), self._safe(found, t)
        entities = _read(self.entity_embeddings)
        query = self._queries(entities, self.triple_relations).head(r, t)
        soft = None
        if min_pair is not None and self.pair_relations is not None:  # (traced, not exported, without it)
            soft = (self._queries(entities, self.pair_relations).head(r, t), min_pair)
        keys = t * self.num_relations + r
        names, scores = self._top_k(entities, query, keys, self.known_heads, found, k, slots, r, soft)
        out = {"heads": names, "scores": scores, "found": found}
        if self.calibrated:  # a reciprocal model's head scores have the inverse row's scale
            out["probabilities"] = self._probability(scores, r + self.num_relations if self._reciprocal else r)
        return out

    def _queries(self, entities: tf.Tensor, relation_table: tf.Variable) -> Queries:
        """The model's own query expressions (`jobi_tf.models.tables.Queries`), over value reads."""
        relations = _read(relation_table)
        return Queries(
            self._scorer,
            lambda ids: tf.gather(entities, ids),
            lambda ids: tf.gather(relations, ids),
            self.num_relations,
            self._reciprocal,
        )

    @tf.function(input_signature=[_NAMES, _NAMES, _K], autograph=False)
    def predict_relation(self, head: tf.Tensor, tail: tf.Tensor, k: tf.Tensor) -> dict[str, tf.Tensor]:
        """Top-k relations of each (head, tail) row: the forward relations, scored as triples."""
        head, tail = self._same_length(head=head, tail=tail)
        h, t = self.entity_ids.lookup(head), self.entity_ids.lookup(tail)
        found = (h >= 0) & (t >= 0)
        h, t = self._safe(found, h), self._safe(found, t)
        entities, relations = _read(self.entity_embeddings), _read(self.triple_relations)
        query = self._scorer.relation_query(tf.gather(entities, h), tf.gather(entities, t))
        scores = self._scorer.score_candidates(query, relations[: self.num_relations])  # [B, R]
        if self.known_relations is not None:
            scores = self.known_relations.mask(scores, h * self.num_entities + t)
        best, ids = tf.math.top_k(scores, k=tf.clip_by_value(k, 0, self.num_relations))
        names = self.relation_names.lookup(tf.cast(ids, tf.int64))
        return {
            "relations": tf.where(found[:, None], names, ""),
            "scores": tf.where(found[:, None], best, np.nan),
            "found": found,
        }

    def _top_k(
        self,
        entities: tf.Tensor,
        query: tf.Tensor,
        keys: tf.Tensor,
        known: _KnownFacts | None,
        found: tf.Tensor,
        k: tf.Tensor,
        slots: _KnownFacts | None = None,
        relations: tf.Tensor | None = None,
        soft: tuple[tf.Tensor, tf.Tensor] | None = None,
    ) -> tuple[tf.Tensor, tf.Tensor]:
        """Names ``[B, k]`` and scores ``[B, k]`` of the best entities for ``query [B, W]``
        (among each row's relation's slot entities when ``slots`` is given, and also those
        whose pair-head probability reaches ``p`` when ``soft = (pair_query, p)``)."""
        scores = self._scorer.score_candidates(query, entities)  # [B, E]
        if known is not None:
            scores = known.mask(scores, keys)
        if slots is not None:
            allowed = slots.listed(scores, tf.cast(relations, tf.int64))
            if soft is not None:
                pair_query, min_probability = soft
                min_score = pair_score_threshold(min_probability)
                allowed |= self._scorer.score_candidates(pair_query, entities) >= min_score
            scores = tf.where(allowed, scores, tf.constant(-np.inf, scores.dtype))
        best, ids = tf.math.top_k(scores, k=tf.clip_by_value(k, 0, self.num_entities))
        names = self.entity_names.lookup(tf.cast(ids, tf.int64))
        if slots is not None:  # a slot smaller than k: the rest are no answers, not entities
            names = tf.where(tf.math.is_inf(best), "", names)
        return tf.where(found[:, None], names, ""), tf.where(found[:, None], best, np.nan)


def _interpolate(knots: tf.Tensor, values: tf.Tensor, x: tf.Tensor) -> tf.Tensor:
    """Row-wise ``np.interp(x[i], knots[i], values[i])`` (``[B, K]``, ``[B, K]``, ``[B, k]``):
    linear between knots, constant beyond the ends; repeated knots (padding) are skipped."""
    width = tf.shape(knots)[1]
    upper = tf.clip_by_value(tf.searchsorted(knots, x, side="right"), 1, width - 1)
    x0, x1 = tf.gather(knots, upper - 1, batch_dims=1), tf.gather(knots, upper, batch_dims=1)
    y0, y1 = tf.gather(values, upper - 1, batch_dims=1), tf.gather(values, upper, batch_dims=1)
    gap = x1 - x0
    share = tf.clip_by_value(tf.math.divide_no_nan(x - x0, gap), 0.0, 1.0)
    return y0 + share * (y1 - y0)


def scorer_module(
    model: JoBiModel,
    entity_vocab: str,
    relation_vocab: str,
    known: tuple[CSR | None, CSR | None, CSR | None] = (None, None, None),
    tables: tuple[np.ndarray, np.ndarray] | None = None,
    slots: tuple[CSR, CSR] | None = None,
    calibration: Calibration | None = None,
    pair_relations: np.ndarray | None = None,
) -> TripleScorerModule:
    """The exported object of a model: what a SavedModel serves and `jobi_tf.api.Run` predicts with.

    ``tables``: the entity and triple-relation tables already read (else read from ``model``).
    """
    if tables is None:
        tables = (
            np.asarray(model.entity_embeddings.numpy(), np.float32),
            np.asarray(model.triple_relations.numpy(), np.float32),
        )
    return TripleScorerModule(
        model.scorer,
        *tables,
        entity_vocab,
        relation_vocab,
        *known,
        reciprocal=bool(getattr(model, "reciprocal", False)),
        slots=slots,
        calibration=calibration,
        pair_relations=pair_relations,
    )
