"""Training objectives: what each head of `JoBiModel` is trained to do, as objects.

An objective owns the sampler features it reads (`Objective.features`), the logits it asks
of the model (`Objective.logits`) and its loss (`Objective.loss`); `JoBiModel` keeps the
tables and the queries and holds one objective per head. A new loss is a new subclass here
(or in the user's code), passed to ``JoBiModel(objective=...)``: nothing else changes.

Objectives read candidate scores from a `ScoredBatch`, which computes each kind of score at
most once per batch for every head at the same time (one einsum over the stacked triple and
pair queries), so two heads cost one pass over the candidate rows.

Losses are Keras losses so that Keras reduces them: averaged over the batch and divided by
the number of replicas under ``tf.distribute``, which keeps gradients right under
``MirroredStrategy`` (a hand-written ``reduce_mean`` would make them N times too large).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

import keras
import tensorflow as tf

from jobi_tf.types import HEAD, RELATION, TAIL

if TYPE_CHECKING:
    from jobi_tf.models.jobi import JoBiModel

__all__ = [
    "Objective",
    "SampledSoftmax",
    "FullSoftmax",
    "KvsAll",
    "PairBCE",
    "RelationPrediction",
    "ScoredBatch",
    "OBJECTIVES",
    "get_objective",
]

#: Logit given to a sampled candidate that is not a negative (it equals the positive).
MASKED_LOGIT = -1e9

TRIPLE_HEAD, PAIR_HEAD = 0, 1


class ScoredBatch:
    """One batch's queries, and the candidate scores objectives ask for, computed once.

    Args:
        model: the model whose tables and scorer score the batch.
        features: the sampler's feature dict (``triples`` and whatever the objectives read).

    Attributes:
        head_q, tail_q: ``[B, S, W]`` queries of every head in use (S = 1 or 2: triple, pair).
        rows: the positive's ``head``, ``tail``, ``relation`` rows (triple head) and, with
            ``reciprocal``, ``inverse``.
        penalty_rows: the rows a batch's scores used, for the regularizer: ``positive``
            ``[B, W]`` rows (the relation row the positive was scored with) and sampled
            ``candidates`` ``[B, K, W]`` once sampled scores were computed.
    """

    def __init__(self, model: JoBiModel, features: dict[str, tf.Tensor]) -> None:
        self.model = model
        self.features = features
        self.head_q, self.tail_q, self.rows = model.queries(features["triples"])
        self.penalty_rows = {"positive": [self.rows["head"], self.rows["tail"], self.rows["relation"]]}
        self.candidate_rows: list[tf.Tensor] = []
        self._sampled: tf.Tensor | None = None
        self._all: tuple[tf.Tensor, tf.Tensor] | None = None
        self._query: tf.Tensor | None = None

    def sampled(self) -> tf.Tensor:
        """``[B, S, 1 + K]``: column 0 the positive, then the sampled candidates (per-triple,
        then shared), each scored from the side the sampler corrupted."""
        if self._sampled is None:
            self._sampled = self._score_sampled()
        return self._sampled

    def all_entities(self) -> tuple[tf.Tensor, tf.Tensor]:
        """``([B, S, E], [B, S, E])``: every entity scored as the tail, then as the head."""
        if self._all is None:
            self._all = self._every_entity(self.tail_q), self._every_entity(self.head_q)
        return self._all

    def query_scores(self) -> tf.Tensor:
        """``[B, S, E]``: every entity scored for each row's one query (k-vs-all batches: the
        tail query where ``query_is_tail``, else the head query), one matmul per row."""
        if self._query is None:
            side = self.features["query_is_tail"][:, None, None]
            self._query = self._every_entity(tf.where(side, self.tail_q, self.head_q))
        return self._query

    def _every_entity(self, queries: tf.Tensor) -> tf.Tensor:
        """``[B, S, E]`` scores of every entity, the product in the model's ``matmul_dtype``.

        Why a dtype of its own: these products are nearly all of a 1-vs-all step's work, and
        in bfloat16 they run about 1.6x faster where the hardware has bfloat16 dot products;
        the result comes back as float32, so the softmax, the losses and the tables stay
        float32.
        """
        model = self.model
        if model.matmul_dtype == "float32":
            return model.scorer.score_candidates(queries, model.entity_embeddings)
        dtype = tf.as_dtype(model.matmul_dtype)
        table = tf.cast(model.entity_embeddings, dtype)
        return tf.cast(model.scorer.score_candidates(tf.cast(queries, dtype), table), queries.dtype)

    def _score_sampled(self) -> tf.Tensor:
        model, features, rows = self.model, self.features, self.rows
        head_q, tail_q, score = self.head_q, self.tail_q, model.scorer.score_candidates
        pos = tf.reduce_sum(tail_q * rows["tail"][:, None, :], -1)  # [B, S]
        # With one corrupted side per positive, pick that side's query once and score every
        # candidate with it; otherwise score each candidate both ways and select per candidate.
        one_side = features.get("positive_corrupt_tail")
        if one_side is not None:
            query = tf.where(one_side[:, None, None], tail_q, head_q)
        if model.reciprocal:
            if one_side is None:
                raise ValueError("a reciprocal model needs `positive_corrupt_tail` (one corrupted side per positive)")
            # A head corruption is ranked by the inverse query, the positive included.
            pos = tf.reduce_sum(query * tf.where(one_side[:, None], rows["tail"], rows["head"])[:, None, :], -1)
            self.penalty_rows["positive"][2] = tf.where(one_side[:, None], rows["relation"], rows["inverse"])
        parts = []
        if "candidates" in features:
            cand = model.entity_rows(features["candidates"])  # [B, K_b, W]
            if one_side is not None:
                parts.append(score(query, cand))
            else:
                by_tail, by_head = score(tail_q, cand), score(head_q, cand)
                parts.append(tf.where(features["corrupt_tail"][:, None, :], by_tail, by_head))
            self.candidate_rows.append(cand)
        for key, side_key in (("chunk_candidates", "chunk_corrupt_tail"), ("shared_candidates", "shared_corrupt_tail")):
            if key in features:
                parts.append(self._score_chunks(model.entity_rows(features[key]), features[side_key], one_side))
        if not parts:
            raise ValueError(
                "sampled training needs `candidates` or `shared_candidates`: build the batches with "
                "jobi_tf.sampling.make_train_dataset"
            )
        return tf.concat([pos[:, :, None], tf.concat(parts, axis=-1)], axis=-1)

    def _score_chunks(self, rows: tf.Tensor, side: tf.Tensor, one_side: tf.Tensor | None) -> tf.Tensor:
        """``[B, S, K]`` scores of candidates shared by chunks of consecutive positives: ``rows``
        ``[G, K, W]`` (chunk g's candidates), ``side`` ``[B, K]`` (which slot each replaces)."""
        head_q, tail_q, score = self.head_q, self.tail_q, self.model.scorer.score_candidates
        groups = tf.shape(rows)[0]
        shape_g = tf.concat([[groups, -1], tf.shape(head_q)[1:]], 0)  # [G, C, S, W]
        if one_side is not None:
            query = tf.where(one_side[:, None, None], tail_q, head_q)
            mixed = score(tf.reshape(query, shape_g), rows)
        else:
            by_head = score(tf.reshape(head_q, shape_g), rows)
            by_tail = score(tf.reshape(tail_q, shape_g), rows)
            mixed = tf.where(tf.reshape(side, [groups, -1, 1, tf.shape(rows)[1]]), by_tail, by_head)
        return tf.reshape(mixed, tf.concat([[-1], tf.shape(mixed)[2:]], 0))


class Objective:
    """One head's objective: the features it reads, its logits and its loss.

    Subclasses set ``name`` (the prefix of their logits in the model's output and of their
    loss in the logs, e.g. ``triple`` → ``triple_loss``) and ``candidates`` (``"sampled"``:
    the positive and the sampler's negatives; ``"all"``: every entity, 1-vs-all, both
    directions of each positive; ``"queries"``: every entity, for batches of distinct
    queries, k-vs-all), and implement `logits` and `loss`.

    Args:
        head: whose queries are trained: `TRIPLE_HEAD` (0) or `PAIR_HEAD` (1).
        name: overrides the class's default name.
    """

    candidates: str = "sampled"
    default_name: ClassVar[str] = "triple"
    #: Features the objective reads besides ``triples`` (the model checks they are there).
    features: tuple[str, ...] = ()

    def __init__(self, head: int = TRIPLE_HEAD, name: str | None = None) -> None:
        self.head = head
        self.name = name or self.default_name

    def logits(self, batch: ScoredBatch) -> dict[str, tf.Tensor]:
        """The logits this objective's loss reads, keyed ``name`` or ``name_<part>``."""
        raise NotImplementedError

    def loss(self, features: dict[str, tf.Tensor], logits: dict[str, tf.Tensor]) -> tf.Tensor:
        """A scalar, reduced as a Keras loss is (see the module docstring)."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}(head={self.head}, name={self.name!r})"


class SampledSoftmax(Objective):
    """Negative log-likelihood of the positive in a softmax over it and its sampled negatives.

    ``L = logsumexp(logits) - logits[0]`` per positive, batch-averaged; a candidate equal to
    the positive (``valid_negative`` False) is masked out of the softmax.
    """

    features = ("valid_negative",)

    def __init__(self, head: int = TRIPLE_HEAD, name: str | None = None) -> None:
        super().__init__(head, name)
        self._loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, name=f"{self.name}_loss")

    def logits(self, batch: ScoredBatch) -> dict[str, tf.Tensor]:
        valid = tf.pad(batch.features["valid_negative"], [[0, 0], [1, 0]], constant_values=True)
        return {self.name: tf.where(valid, batch.sampled()[:, self.head], MASKED_LOGIT)}

    def loss(self, features, logits):
        return self._loss(tf.zeros_like(features["triples"][:, 0]), logits[self.name])


class FullSoftmax(Objective):
    """1-vs-all: the true tail in a softmax over every entity, plus the same for the head.

    Args:
        label_smoothing: ε: the target puts ``1 - ε`` on the true entity and spreads ε
            evenly over all of them (LibKGE's and ConvE's option); 0 is the plain softmax.
        slot_weight: w: in the training softmax each entity seen in the asked slot of the
            relation in training counts ``1 + w`` times (``log(1 + w)`` added to its logit),
            so same-type rivals weigh more: biased negatives' counterpart when every entity
            is a candidate. Ranking is unchanged. Reads the sampler's dense slot rows
            (``pair_labels_tail`` / ``pair_labels_head``). 0 = off.
    """

    candidates = "all"

    def __init__(
        self, head: int = TRIPLE_HEAD, name: str | None = None, label_smoothing: float = 0.0, slot_weight: float = 0.0
    ) -> None:
        if not 0.0 <= label_smoothing < 1.0:
            raise ValueError(f"label_smoothing must be in [0, 1). Received: label_smoothing={label_smoothing!r}")
        if not slot_weight >= 0.0:
            raise ValueError(f"slot_weight must be >= 0. Received: slot_weight={slot_weight!r}")
        super().__init__(head, name)
        self.label_smoothing = label_smoothing
        self.slot_weight = slot_weight
        if slot_weight:
            self.features = ("pair_labels_tail", "pair_labels_head")
        self._loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, name=f"{self.name}_loss")

    def logits(self, batch: ScoredBatch) -> dict[str, tf.Tensor]:
        tail, head = batch.all_entities()
        return {f"{self.name}_tail": tail[:, self.head], f"{self.name}_head": head[:, self.head]}

    def loss(self, features, logits):
        triples = features["triples"]
        tail, head = logits[f"{self.name}_tail"], logits[f"{self.name}_head"]
        if self.slot_weight:
            boost = tf.math.log1p(tf.cast(self.slot_weight, tail.dtype))
            tail = tail + boost * tf.cast(features["pair_labels_tail"], tail.dtype)
            head = head + boost * tf.cast(features["pair_labels_head"], head.dtype)
        return self._direction(triples[:, TAIL], tail) + self._direction(triples[:, HEAD], head)

    def _direction(self, targets: tf.Tensor, logits: tf.Tensor) -> tf.Tensor:
        nll = self._loss(targets, logits)
        if not self.label_smoothing:
            return nll
        # Cross-entropy against the uniform target: logsumexp(s) - mean(s), reduced as ``nll``.
        uniform = replica_share(tf.reduce_mean(tf.reduce_logsumexp(logits, axis=-1) - tf.reduce_mean(logits, axis=-1)))
        return (1.0 - self.label_smoothing) * nll + self.label_smoothing * uniform


class KvsAll(Objective):
    """k-vs-all: for each distinct training query ``(h, r, ?)`` or ``(?, r, t)``, binary
    cross-entropy of every entity's logit against "is a training answer" (ConvE's 1-N
    scoring, LibKGE's KvsAll), summed over the entities and averaged over the queries.

    Batches are distinct queries, not triples (`jobi_tf.sampling.TrainingQueries`): a
    query with many answers is one example, not one per answer.

    Args:
        label_smoothing: ε: targets ``(1 - ε) · y + ε / E`` (ConvE's smoothing); 0 = none.
    """

    candidates = "queries"
    features = ("query_is_tail", "answer_labels")

    def __init__(self, head: int = TRIPLE_HEAD, name: str | None = None, label_smoothing: float = 0.0) -> None:
        if not 0.0 <= label_smoothing < 1.0:
            raise ValueError(f"label_smoothing must be in [0, 1). Received: label_smoothing={label_smoothing!r}")
        super().__init__(head, name)
        self.label_smoothing = label_smoothing

    def logits(self, batch: ScoredBatch) -> dict[str, tf.Tensor]:
        return {self.name: batch.query_scores()[:, self.head]}

    def loss(self, features, logits):
        scores = logits[self.name]
        labels = tf.cast(features["answer_labels"], scores.dtype)
        if self.label_smoothing:
            entities = tf.cast(tf.shape(labels)[-1], scores.dtype)
            labels = (1.0 - self.label_smoothing) * labels + self.label_smoothing / entities
        per_query = tf.reduce_sum(tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=scores), axis=-1)
        return replica_share(tf.reduce_mean(per_query))


class PairBCE(Objective):
    """JoBi's pair loss: binary cross-entropy of the pair head's logits against pair labels.

    A label is 1 when both the (head, relation) and (relation, tail) pairs of the candidate
    triple occur in training. Over sampled candidates the positive itself is included with
    label 1 and the mean runs over the positive and its negatives; over all entities
    (``candidates="all"``), labels are the sampler's dense ``pair_labels_tail`` /
    ``pair_labels_head`` and both directions are summed; over the queries of a k-vs-all
    batch (``"queries"``), ``query_pair_labels`` (the asked slot of each query's relation).

    Args:
        candidates: ``"sampled"``, ``"all"`` or ``"queries"``: score the same candidates as the triple head.
    """

    default_name = "pair"

    def __init__(self, candidates: str = "sampled", head: int = PAIR_HEAD, name: str | None = None) -> None:
        if candidates not in ("sampled", "all", "queries"):
            raise ValueError(f"candidates must be 'sampled', 'all' or 'queries'. Received: candidates={candidates!r}")
        super().__init__(head, name)
        self.candidates = candidates
        self.features = {
            "sampled": ("pair_labels",),
            "all": ("pair_labels_tail", "pair_labels_head"),
            "queries": ("query_is_tail", "query_pair_labels"),
        }[candidates]
        self._loss = keras.losses.BinaryCrossentropy(from_logits=True, name=f"{self.name}_loss")

    def logits(self, batch: ScoredBatch) -> dict[str, tf.Tensor]:
        if self.candidates == "sampled":
            return {self.name: batch.sampled()[:, self.head]}
        if self.candidates == "queries":
            return {self.name: batch.query_scores()[:, self.head]}
        tail, head = batch.all_entities()
        return {f"{self.name}_tail": tail[:, self.head], f"{self.name}_head": head[:, self.head]}

    def loss(self, features, logits):
        if self.candidates == "queries":
            return self._loss(features["query_pair_labels"], logits[self.name])
        if self.candidates == "all":
            return self._loss(features["pair_labels_tail"], logits[f"{self.name}_tail"]) + self._loss(
                features["pair_labels_head"], logits[f"{self.name}_head"]
            )
        labels = tf.pad(features["pair_labels"], [[0, 0], [1, 0]], constant_values=1.0)
        return self._loss(labels, logits[self.name])


class RelationPrediction(Objective):
    """Auxiliary: the true relation of ``(h, ?, t)`` in a softmax over every row of the
    triple head's relation table (Chen et al., AKBC 2021: relation prediction as an
    auxiliary training objective). Its weight is the model's ``relation_prediction``.

    With a ``reciprocal`` model the inverse rows are candidates too and, as in Chen et al.'s
    code (which trains on both copies of each triple), the inverse copy ``(t, ?, h)`` is asked
    as well, its answer being the row of ``r⁻¹``; the two softmaxes are summed, as the full
    softmax sums a triple's two queries. Without the inverse copy the inverse rows are only
    ever pushed down (they are wrong answers of ``(h, ?, t)``), yet they rank every head.

    Args:
        inverse_copy: ask ``(t, ?, h)`` too (reciprocal models only); ``False`` keeps only
            ``(h, ?, t)``.
    """

    default_name = "relation"
    candidates = "relations"

    def __init__(self, head: int = TRIPLE_HEAD, name: str | None = None, inverse_copy: bool = True) -> None:
        super().__init__(head, name)
        self.inverse_copy = inverse_copy
        self._loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, name=f"{self.name}_loss")

    def logits(self, batch: ScoredBatch) -> dict[str, tf.Tensor]:
        model, h, t = batch.model, batch.rows["head"], batch.rows["tail"]
        score = model.scorer.score_candidates
        out = {self.name: score(model.scorer.relation_query(h, t), model.triple_relations)}  # [B, R]
        if model.reciprocal and self.inverse_copy:
            out[f"{self.name}_inverse"] = score(model.scorer.relation_query(t, h), model.triple_relations)
        return out

    def loss(self, features, logits):
        relations = features["triples"][:, RELATION]
        loss = self._loss(relations, logits[self.name])
        inverse = logits.get(f"{self.name}_inverse") if self.inverse_copy else None
        if inverse is not None:  # present when the model is reciprocal
            # Reciprocal tables hold r⁻¹ at row r + R, R being half the rows.
            loss += self._loss(relations + tf.shape(inverse, out_type=relations.dtype)[-1] // 2, inverse)
        return loss


def replica_share(value: tf.Tensor) -> tf.Tensor:
    """A per-replica batch mean → its share of the global mean (what Keras losses do)."""
    return value / tf.cast(tf.distribute.get_strategy().num_replicas_in_sync, value.dtype)


#: The triple head's objectives by their ``--loss`` name.
OBJECTIVES: dict[str, type[Objective]] = {
    "sampled-softmax": SampledSoftmax,
    "full-softmax": FullSoftmax,
    "k-vs-all": KvsAll,
}


def get_objective(loss: str | Objective, label_smoothing: float = 0.0, slot_weight: float = 0.0) -> Objective:
    """The triple head's objective for a ``--loss`` name (an `Objective` is returned as is).

    ``label_smoothing`` applies to ``full-softmax`` and ``k-vs-all`` only (a sampled softmax
    has no fixed set of classes to spread it over), ``slot_weight`` to ``full-softmax`` only.
    """
    if isinstance(loss, Objective):
        return loss
    if loss not in OBJECTIVES:
        raise ValueError(f"loss must be one of {sorted(OBJECTIVES)}. Received: loss={loss!r}")
    if slot_weight:
        if OBJECTIVES[loss] is not FullSoftmax:
            raise ValueError(f"slot_weight needs loss='full-softmax'. Received: loss={loss!r}")
        return FullSoftmax(label_smoothing=label_smoothing, slot_weight=slot_weight)
    if label_smoothing:
        if OBJECTIVES[loss] not in (FullSoftmax, KvsAll):
            raise ValueError(f"label_smoothing needs loss='full-softmax' or 'k-vs-all'. Received: loss={loss!r}")
        return OBJECTIVES[loss](label_smoothing=label_smoothing)
    return OBJECTIVES[loss]()
