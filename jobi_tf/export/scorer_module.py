"""The object a jobi-tf SavedModel serves: its signatures' code over its tables and vocabularies.

An export answers questions in *names*: the entity and relation vocabularies ship as
SavedModel assets read by ``tf.lookup`` tables, so clients never see integer ids. It holds
only what the test-time model needs — the entity table and the triple head's relation
table (SimplE's inverse-relation and tail-role halves live in the same rows) — and no pair
head (unless asked for soft typed answers), optimizer slot or training graph. The lookups the
signatures read live in `jobi_tf.export.served_tables`.

The signatures and their input and output names are the serving contract,
`jobi_tf.serving.contract` (``serving_default`` is ``predict_tail``); ``B`` is the batch and
``k`` is clipped to the number of candidates. Names are ``[B]`` strings, scores float32; a
typed signature's slot smaller than ``k`` pads the rest with empty names and score ``-inf``.
A run calibrated with ``jobi-tf calibrate`` (`jobi_tf.evaluation.calibration`) exports probabilities
too: ``probability`` ``[B]`` in ``score``, ``probabilities`` ``[B, k]`` in the others.

Unknown names, the same in every signature: a row with a name outside the vocabulary gets
``found = False``, score(s) NaN and empty names; the other rows are answered normally.
Nothing raises, so one bad row never fails a batch.

Top-k: the query's scores against the entity table (`EntityTable.scores`, one matmul) and
`served_tables.top_k` (``tf.math.top_k``'s answers, found by blocks; ties: lower id first);
queries are the model's own (`Queries`). With ``filter_known`` each query's training facts
score ``-inf``, so they come last.
`jobi_tf.api.Run`'s predictions run this same code in-process.
"""

from __future__ import annotations

import functools

import numpy as np
import tensorflow as tf

from jobi_tf.data.index import CSR
from jobi_tf.evaluation.calibration import Calibration
from jobi_tf.export import served_tables as served
from jobi_tf.export.served_neighbourhood import ServedNeighbourhood
from jobi_tf.export.served_tables import EntityTable, KnownFacts, ServedPrior, read_value, vocab_table
from jobi_tf.models import JoBiModel
from jobi_tf.models.neighbourhood import Neighbourhood
from jobi_tf.models.scorers import Scorer
from jobi_tf.models.slot_prior import SlotPrior, SparseSlotPrior
from jobi_tf.models.tables import Queries, pair_score_threshold

__all__ = ["TripleScorerModule", "scorer_module"]

_NAMES = tf.TensorSpec([None], tf.string)
_K = tf.TensorSpec([], tf.int32)
_PROBABILITY = tf.TensorSpec([], tf.float32)


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
        slot_prior: the model's slot prior (`jobi_tf.models.slot_prior`), added to every score;
            None for a model trained without one.
        table_dtype: the entity table's stored dtype (`EntityTable`; ``bfloat16``: half the bytes).
        neighbourhood: the model's neighbourhood term (`jobi_tf.models.neighbourhood`), or None.
    """

    entity_columns = True  # `EntityTable`: a dot-product scorer's table stored as columns

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
        slot_prior: SlotPrior | SparseSlotPrior | None = None,
        table_dtype: str = "float32",
        neighbourhood: Neighbourhood | None = None,
    ) -> None:
        super().__init__(name="jobi_triple_scorer")
        self._scorer = scorer
        self._reciprocal = reciprocal
        self.num_relations = len(triple_relations) // (2 if reciprocal else 1)
        self.entities = EntityTable(entity_embeddings, scorer, self.entity_columns, table_dtype)  # (columns: dot)
        self.num_entities = self.entities.num_entities
        self.triple_relations = tf.Variable(triple_relations, trainable=False, name="triple_relations")
        self.entity_ids = vocab_table(entity_vocab, self.num_entities, to_ids=True)
        self.relation_ids = vocab_table(relation_vocab, self.num_relations, to_ids=True)
        self.entity_names = vocab_table(entity_vocab, self.num_entities, to_ids=False)
        self.relation_names = vocab_table(relation_vocab, self.num_relations, to_ids=False)
        self.known_tails = KnownFacts.optional(known_tails, "known_tails")
        self.known_heads = KnownFacts.optional(known_heads, "known_heads")
        self.known_relations = KnownFacts.optional(known_relations, "known_relations")
        # Platt's per-row [a, b], or an isotonic map's knots and values (`calibration_variables`).
        self.calibration, self.knots, self.values = served.calibration_variables(calibration)
        tails, heads = slots if slots is not None else (None, None)
        self.slot_tails = KnownFacts.optional(tails, "slot_tails")
        self.slot_heads = KnownFacts.optional(heads, "slot_heads")
        # The pair head's relation table (soft typed answers only): it scores whether an entity fits a slot.
        self.pair_relations = (
            tf.Variable(pair_relations, trainable=False, name="pair_relations") if pair_relations is not None else None
        )
        # The slot prior's counts (`jobi_tf.models.slot_prior`), part of every score of a model trained with one.
        self.slot_prior = ServedPrior.optional(slot_prior, self.num_entities, self.num_relations)
        self.neighbourhood = ServedNeighbourhood.optional(neighbourhood)  # its graph, walked per query
        if not scorer.has_relation_query():  # saving traces every function: leave out the one it cannot build
            self.predict_relation = None

    @staticmethod
    def _same_length(**names: tf.Tensor) -> list[tf.Tensor]:
        """The inputs, checked to have one length (elementwise ops would broadcast a length-1 batch)."""
        (first, a), *rest = names.items()
        checks = [
            tf.debugging.assert_equal(
                tf.size(a), tf.size(b), message=f"inputs '{first}' and '{other}' must have the same length"
            )
            for other, b in rest
        ]
        with tf.control_dependencies(checks):
            return [tf.identity(t) for t in names.values()]

    def _ids(self, **names: tf.Tensor) -> tuple[tf.Tensor, list[tf.Tensor]]:
        """``(found, ids)`` of the named inputs, checked to have one length: their ids (a
        ``relation`` in the relation vocabulary, the others in the entity one), and bool
        ``found [B]`` where every name of the row is known. Unknown ids (-1) become 0 so that
        gathers stay in range; their outputs are masked later."""
        values = self._same_length(**names)
        ids = [
            (self.relation_ids if name == "relation" else self.entity_ids).lookup(v)
            for name, v in zip(names, values, strict=True)
        ]
        found = functools.reduce(tf.logical_and, [i >= 0 for i in ids])
        return found, [tf.where(found, i, tf.zeros_like(i)) for i in ids]

    @tf.function(input_signature=[_NAMES, _NAMES, _NAMES], autograph=False)
    def score(self, head: tf.Tensor, relation: tf.Tensor, tail: tf.Tensor) -> dict[str, tf.Tensor]:
        """Triple-head score of each (head, relation, tail) row; NaN where a name is unknown."""
        found, (h, r, t) = self._ids(head=head, relation=relation, tail=tail)
        relations = read_value(self.triple_relations)
        # The same expression as JoBiModel.score_triples.
        scores = self._scorer.score(self.entities.rows(h), tf.gather(relations, r), self.entities.rows(t))
        if self.slot_prior is not None:
            scores += self.slot_prior.read().triples(h, r, t)
        if self.neighbourhood is not None:
            scores += self.neighbourhood.at_pairs(h, t)
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
            ab = tf.gather(read_value(self.calibration), rows)  # [B, 2]
            p = tf.sigmoid(ab[:, :1] * columns + ab[:, 1:])
        else:
            p = served.interpolate(
                tf.gather(read_value(self.knots), rows), tf.gather(read_value(self.values), rows), columns
            )
        return p if scores.shape.rank == 2 else p[:, 0]

    @tf.function(input_signature=[_NAMES, _NAMES, _K], autograph=False)
    def predict_tail(self, head: tf.Tensor, relation: tf.Tensor, k: tf.Tensor) -> dict[str, tf.Tensor]:
        """Top-k tails of each (head, relation) row."""
        return self._answers("tail", k, None, head=head, relation=relation)

    @tf.function(input_signature=[_NAMES, _NAMES, _K], autograph=False)
    def predict_tail_typed(self, head: tf.Tensor, relation: tf.Tensor, k: tf.Tensor) -> dict[str, tf.Tensor]:
        """Top-k tails of each (head, relation) row among the relation's training tails."""
        return self._answers("tail", k, self.slot_tails, head=head, relation=relation)

    @tf.function(input_signature=[_NAMES, _NAMES, _K, _PROBABILITY], autograph=False)
    def predict_tail_soft_typed(
        self, head: tf.Tensor, relation: tf.Tensor, k: tf.Tensor, min_pair_probability: tf.Tensor
    ) -> dict[str, tf.Tensor]:
        """Top-k tails among the relation's training tails and the entities the pair head
        places in that slot with probability >= ``min_pair_probability``."""
        return self._answers("tail", k, self.slot_tails, min_pair_probability, head=head, relation=relation)

    @tf.function(input_signature=[_NAMES, _NAMES, _K, _PROBABILITY], autograph=False)
    def predict_head_soft_typed(
        self, relation: tf.Tensor, tail: tf.Tensor, k: tf.Tensor, min_pair_probability: tf.Tensor
    ) -> dict[str, tf.Tensor]:
        """`predict_tail_soft_typed`'s answers for the head slot."""
        return self._answers("head", k, self.slot_heads, min_pair_probability, relation=relation, tail=tail)

    @tf.function(input_signature=[_NAMES, _NAMES, _K], autograph=False)
    def predict_head_typed(self, relation: tf.Tensor, tail: tf.Tensor, k: tf.Tensor) -> dict[str, tf.Tensor]:
        """Top-k heads of each (relation, tail) row among the relation's training heads."""
        return self._answers("head", k, self.slot_heads, relation=relation, tail=tail)

    @tf.function(input_signature=[_NAMES, _NAMES, _K], autograph=False)
    def predict_head(self, relation: tf.Tensor, tail: tf.Tensor, k: tf.Tensor) -> dict[str, tf.Tensor]:
        """Top-k heads of each (relation, tail) row."""
        return self._answers("head", k, None, relation=relation, tail=tail)

    def _answers(
        self, side: str, k: tf.Tensor, slots: KnownFacts | None, min_pair: tf.Tensor | None = None, **names: tf.Tensor
    ) -> dict[str, tf.Tensor]:
        """Top-k ``side`` entities (``"tail"`` or ``"head"``) of each row of ``names``
        (``head, relation`` or ``relation, tail``), among ``slots`` when given (and the pair
        head's picks of probability >= ``min_pair``)."""
        found, ids = self._ids(**names)
        anchor, r = ids if side == "tail" else ids[::-1]  # anchor: the entity given

        def query(relation_table: tf.Variable) -> tf.Tensor:  # `Queries.tail(h, r)` or `Queries.head(r, t)`
            queries = self._queries(relation_table)
            return queries.tail(anchor, r) if side == "tail" else queries.head(r, anchor)

        triple_query, soft = query(self.triple_relations), None
        if min_pair is not None and self.pair_relations is not None:  # (traced, not exported, without it)
            soft = (query(self.pair_relations), min_pair)  # the pair head's query for the same slot
        known = self.known_tails if side == "tail" else self.known_heads
        keys = anchor * self.num_relations + r
        offsets = None
        if self.slot_prior is not None:
            prior = self.slot_prior.read()
            offsets = tf.convert_to_tensor(prior.tails(anchor, r) if side == "tail" else prior.heads(r, anchor))
        answers, scores = self._top_k(triple_query, keys, known, found, k, slots, r, soft, offsets, anchor)
        out = {f"{side}s": answers, "scores": scores, "found": found}
        if self.calibrated:  # a reciprocal model's head scores have the inverse row's scale
            inverse = side == "head" and self._reciprocal
            out["probabilities"] = self._probability(scores, r + self.num_relations if inverse else r)
        return out

    def _queries(self, relation_table: tf.Variable) -> Queries:
        """The model's own query expressions (`jobi_tf.models.tables.Queries`), over value reads."""
        relations = read_value(relation_table)
        return Queries(
            self._scorer,
            self.entities.rows,
            lambda ids: tf.gather(relations, ids),
            self.num_relations,
            self._reciprocal,
        )

    @tf.function(input_signature=[_NAMES, _NAMES, _K], autograph=False)
    def predict_relation(self, head: tf.Tensor, tail: tf.Tensor, k: tf.Tensor) -> dict[str, tf.Tensor]:
        """Top-k relations of each (head, tail) row: the forward relations, scored as triples."""
        found, (h, t) = self._ids(head=head, tail=tail)
        relations = read_value(self.triple_relations)
        query = self._scorer.relation_query(self.entities.rows(h), self.entities.rows(t))
        scores = self._scorer.score_candidates(query, relations[: self.num_relations])  # [B, R]
        if self.slot_prior is not None:
            scores += self.slot_prior.read().relations(h, t)
        scores += 0.0 if self.neighbourhood is None else self.neighbourhood.at_pairs(h, t)[:, None]  # (alike for all)
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
        query: tf.Tensor,
        keys: tf.Tensor,
        known: KnownFacts | None,
        found: tf.Tensor,
        k: tf.Tensor,
        slots: KnownFacts | None = None,
        relations: tf.Tensor | None = None,
        soft: tuple[tf.Tensor, tf.Tensor] | None = None,
        offsets: tf.Tensor | None = None,
        anchor: tf.Tensor | None = None,
    ) -> tuple[tf.Tensor, tf.Tensor]:
        """Names ``[B, k]`` and scores ``[B, k]`` of the best entities for ``query [B, W]``
        (among each row's relation's slot entities when ``slots`` is given, and also those
        whose pair-head probability reaches ``p`` when ``soft = (pair_query, p)``); ``offsets``
        ``[B, E]``: the slot prior's part of the scores, or None; ``anchor``: the given entities,
        for the neighbourhood term."""
        scores = self.entities.scores(query, self._scorer)  # [B, E]
        if offsets is not None:
            scores += offsets
        scores = scores if self.neighbourhood is None else self.neighbourhood.add_to(scores, anchor)
        if known is not None:
            scores = known.mask(scores, keys)
        if slots is not None:
            allowed = slots.listed(scores, tf.cast(relations, tf.int64))
            if soft is not None:
                pair_query, min_probability = soft
                min_score = pair_score_threshold(min_probability)
                allowed |= self.entities.scores(pair_query, self._scorer) >= min_score
            scores = tf.where(allowed, scores, tf.constant(-np.inf, scores.dtype))
        best, ids = served.top_k(scores, tf.clip_by_value(k, 0, self.num_entities))
        names = self.entity_names.lookup(tf.cast(ids, tf.int64))
        if slots is not None:  # a slot smaller than k: the rest are no answers, not entities
            names = tf.where(tf.math.is_inf(best), "", names)
        return tf.where(found[:, None], names, ""), tf.where(found[:, None], best, np.nan)


def scorer_module(
    model: JoBiModel,
    entity_vocab: str,
    relation_vocab: str,
    known: tuple[CSR | None, CSR | None, CSR | None] = (None, None, None),
    tables: tuple[np.ndarray, np.ndarray] | None = None,
    slots: tuple[CSR, CSR] | None = None,
    calibration: Calibration | None = None,
    pair_relations: np.ndarray | None = None,
    module_class: type[TripleScorerModule] = TripleScorerModule,
    **extra,
) -> TripleScorerModule:
    """The exported object of a model: what a SavedModel serves and `jobi_tf.api.Run` predicts with.

    ``tables``: the entity and triple-relation tables already read (else read from ``model``);
    ``module_class``, ``extra``: a subclass and its own arguments (`jobi_tf.export.approximate`),
    or a ``slot_prior`` in place of the model's (an export that numbers its entities otherwise).
    """
    if tables is None:
        tables = (
            np.asarray(model.entity_embeddings.numpy(), np.float32),
            np.asarray(model.triple_relations.numpy(), np.float32),
        )
    own = {"slot_prior": getattr(model, "prior", None), "neighbourhood": getattr(model, "neighbourhood", None)}
    return module_class(
        model.scorer,
        *tables,
        entity_vocab,
        relation_vocab,
        *known,
        reciprocal=bool(getattr(model, "reciprocal", False)),
        slots=slots,
        calibration=calibration,
        pair_relations=pair_relations,
        **(own | extra),
    )
