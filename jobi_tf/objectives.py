"""What the heads of `JoBiModel` are trained to do, as objects, and the scores they share.

An objective owns the sampler features it reads (`Objective.features`), the logits it asks
of the model (`Objective.logits`) and its loss (`Objective.loss`); `JoBiModel` keeps the
tables and the queries and holds one objective per head. The triple head's objectives are
the ``--loss`` choices, one module each in `jobi_tf.losses`; the pair head's `PairBCE` and
the auxiliary `RelationPrediction` live here, beside the base class.

Objectives read candidate scores from a `ScoredBatch`, which computes each kind of score at
most once per batch for every head at the same time (one product over the stacked triple and
pair queries), so two heads cost one pass over the candidate rows; it also records the rows
those scores used (`Factors`), which the regularizer (`jobi_tf.regularizers`) penalises. A
head trained on every n-th positive only (JoBi's pair head with ``pair_every``) is scored
apart, on those rows (`ScoredBatch.sampled_rows`).

Losses are reduced as Keras losses are: averaged over the batch and divided by the number of
replicas under ``tf.distribute``, which keeps gradients right under ``MirroredStrategy`` (a
hand-written ``reduce_mean`` would make them N times too large).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import keras
import tensorflow as tf

from jobi_tf.types import PAIR_HEAD, RELATION, TRIPLE_HEAD

if TYPE_CHECKING:
    from jobi_tf.config import RunConfig
    from jobi_tf.models.scorers import Scorer

__all__ = [
    "Objective",
    "PairBCE",
    "RelationPrediction",
    "ScoredBatch",
    "Factors",
    "ScoringModel",
    "REGIMES",
    "replica_share",
]

#: Logit given to a sampled candidate that is not a negative (it equals the positive).
MASKED_LOGIT = -1e9

#: The training regimes an objective can name (`Objective.regime`; `jobi_tf.regimes` builds
#: their batches): the positive against sampled negatives, every entity for both directions
#: of each positive, every entity for batches of distinct training queries.
SAMPLED, ONE_VS_ALL, K_VS_ALL = "sampled", "1-vs-all", "k-vs-all"
REGIMES = (SAMPLED, ONE_VS_ALL, K_VS_ALL)


class ScoringModel(Protocol):
    """What a `ScoredBatch` reads of the model (`jobi_tf.models.JoBiModel` is one)."""

    scorer: Scorer
    reciprocal: bool
    matmul_dtype: str
    entity_embeddings: Any
    triple_relations: Any

    def queries(
        self, triples: tf.Tensor, heads: tuple[int, ...] | None = None
    ) -> tuple[tf.Tensor, tf.Tensor, dict[str, tf.Tensor]]: ...

    def entity_rows(self, ids: tf.Tensor) -> tf.Tensor: ...


@dataclasses.dataclass(frozen=True)
class Factors:
    """The rows a batch's scores used, for a regularizer (`jobi_tf.regularizers`).

    Attributes:
        scorer: the model's scorer (it knows how a row splits into components).
        head, tail: ``[B, W]`` the positive's entity rows.
        relations: ``[B, W]`` each: the triple head's relation rows the positive's scores
            used: its relation's; with ``reciprocal``, the one of the corrupted side
            (sampled) or the forward and the inverse row (every entity scored both ways).
        candidates: ``[B, K, W]`` each: the sampled candidates' rows (none when every
            entity is scored).
    """

    scorer: Scorer
    head: tf.Tensor
    tail: tf.Tensor
    relations: tuple[tf.Tensor, ...]
    candidates: tuple[tf.Tensor, ...]


class ScoredBatch:
    """One batch's queries, and the candidate scores objectives ask for, computed once.

    Args:
        model: the model whose tables and scorer score the batch.
        features: the sampler's feature dict (``triples`` and whatever the objectives read).
        heads: the heads whose queries are stacked (default: the model's choice, every head
            scored on every positive).

    Attributes:
        head_q, tail_q: ``[B, S, W]`` queries of the stacked heads (S = 1 or 2: triple, pair).
        rows: the positive's ``head``, ``tail``, ``relation`` rows (the first stacked head's)
            and, with ``reciprocal``, ``inverse``.
    """

    def __init__(
        self, model: ScoringModel, features: dict[str, tf.Tensor], heads: tuple[int, ...] | None = None
    ) -> None:
        self.model = model
        self.features = features
        self.head_q, self.tail_q, self.rows = model.queries(features["triples"], heads)
        self.relation_rows = [self.rows["relation"]]  # what the positive's scores used (`Factors`)
        self.candidate_rows: list[tf.Tensor] = []
        self._sampled: tf.Tensor | None = None
        self._strided: dict[tuple[int, int], tf.Tensor] = {}
        self._all: tuple[tf.Tensor, tf.Tensor] | None = None
        self._query: tf.Tensor | None = None

    def sampled(self) -> tf.Tensor:
        """``[B, S, 1 + K]``: column 0 the positive, then the sampled candidates (per-triple,
        then shared), each scored from the side the sampler corrupted."""
        if self._sampled is None:
            self._sampled = self._score_sampled()
        return self._sampled

    def sampled_rows(self, head: int, every: int) -> tf.Tensor:
        """``[B / every, 1 + K]``: the scores `sampled` would give ``head`` on positives 0,
        every, 2 every, ..., computed on those rows alone (``head`` is not stacked then).

        Why: JoBi's second head doubles the per-positive work of a step (its queries, their
        gradient, a second score of every candidate); trained on every n-th positive it costs
        about 1/n of that. The rows keep their candidates: a chunk's shared ones stay the
        chunk's, so ``every`` must divide each chunk's size (`jobi_tf.regimes` checks it).
        The regularizer sees only the stacked heads' rows (`factors`).
        """
        key = (head, every)
        if key not in self._strided:
            strided = ScoredBatch(self.model, every_nth_positive(self.features, every), heads=(head,))
            self._strided[key] = strided.sampled()[:, 0]
        return self._strided[key]

    def all_entities(self) -> tuple[tf.Tensor, tf.Tensor]:
        """``([B, S, E], [B, S, E])``: every entity scored as the tail, then as the head."""
        if self._all is None:
            self._all = self._every_entity(self.tail_q), self._every_entity(self.head_q)
            self._both_directions_used()
        return self._all

    def query_scores(self) -> tf.Tensor:
        """``[B, S, E]``: every entity scored for each row's one query (k-vs-all batches: the
        tail query where ``query_is_tail``, else the head query), one matmul per row."""
        if self._query is None:
            side = self.features["query_is_tail"][:, None, None]
            self._query = self._every_entity(tf.where(side, self.tail_q, self.head_q))
            self._both_directions_used()
        return self._query

    def _both_directions_used(self) -> None:
        if "inverse" in self.rows:  # a reciprocal model's head queries used the inverse rows
            self.relation_rows = [self.rows["relation"], self.rows["inverse"]]

    def factors(self) -> Factors:
        """The rows the scores computed so far used (ask after the objectives' logits)."""
        rows = self.rows
        return Factors(
            self.model.scorer, rows["head"], rows["tail"], tuple(self.relation_rows), tuple(self.candidate_rows)
        )

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
            self.relation_rows = [tf.where(one_side[:, None], rows["relation"], rows["inverse"])]
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


#: Sampler features with one row per chunk of positives, not per positive
#: (`jobi_tf.negatives.NegativeSampler`).
CHUNK_FEATURES = ("shared_candidates", "chunk_candidates")


def every_nth_positive(features: dict[str, tf.Tensor], every: int) -> dict[str, tf.Tensor]:
    """What scoring reads of positives 0, every, 2 every, ... of a sampled batch: per-positive
    features strided, per-chunk ones (`CHUNK_FEATURES`) kept whole, so each kept positive
    still reads its chunk's candidates when ``every`` divides the chunk size (``pair_labels``,
    drawn for those positives only, is left out: scores do not read labels)."""
    return {k: v if k in CHUNK_FEATURES else v[::every] for k, v in features.items() if k != "pair_labels"}


class Objective:
    """One head's objective: the features it reads, its logits and its loss.

    Subclasses set ``default_name`` (the prefix of their logits in the model's output and of
    their loss in the logs, e.g. ``triple`` → ``triple_loss``) and ``regime``, the training
    regime whose batches they read (`SAMPLED`: the positive and the sampler's negatives,
    ``batch.sampled()``; `ONE_VS_ALL`: every entity for both directions of each positive,
    ``batch.all_entities()``; `K_VS_ALL`: every entity for batches of distinct queries,
    ``batch.query_scores()``), and implement `logits` and `loss`. A ``--loss`` (a module of
    `jobi_tf.losses`) also lists in ``options`` the `jobi_tf.config.TrainConfig` fields it
    takes as constructor keywords, and may refuse settings in `check`.

    Args:
        head: whose queries are trained: `TRIPLE_HEAD` (0) or `PAIR_HEAD` (1).
        name: overrides the class's default name.
    """

    regime: str = SAMPLED
    default_name: ClassVar[str] = "triple"
    #: Features the objective reads besides ``triples`` (the model checks they are there).
    features: tuple[str, ...] = ()
    #: `jobi_tf.config.TrainConfig` fields the constructor takes (``--loss`` objectives).
    options: ClassVar[tuple[str, ...]] = ()

    def __init__(self, head: int = TRIPLE_HEAD, name: str | None = None) -> None:
        self.head = head
        self.name = name or self.default_name

    @classmethod
    def check(cls, cfg: RunConfig) -> None:
        """Refuse, as a `jobi_tf.errors.ConfigError`, a run this objective cannot train."""

    def logits(self, batch: ScoredBatch) -> dict[str, tf.Tensor]:
        """The logits this objective's loss reads, keyed ``name`` or ``name_<part>``."""
        raise NotImplementedError

    def loss(self, features: dict[str, tf.Tensor], logits: dict[str, tf.Tensor]) -> tf.Tensor:
        """A scalar, reduced as a Keras loss is (see the module docstring)."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}(head={self.head}, name={self.name!r})"


class PairBCE(Objective):
    """JoBi's pair loss: binary cross-entropy of the pair head's logits against pair labels.

    A label is 1 when both the (head, relation) and (relation, tail) pairs of the candidate
    triple occur in training. Over sampled candidates the positive itself is included with
    label 1 and the mean runs over the positive and its negatives; over all entities
    (1-vs-all), labels are the sampler's dense ``pair_labels_tail`` /
    ``pair_labels_head`` and both directions are summed; over the queries of a k-vs-all
    batch, ``query_pair_labels`` (the asked slot of each query's relation).

    Args:
        regime: one of `REGIMES`: the triple head's, so both heads score the same candidates.
        every: train on positives 0, every, 2 every, ... of each sampled batch only (1: all of
            them, the paper's objective); a cheaper step (`ScoredBatch.sampled_rows`). The
            batch's ``pair_labels`` then hold those positives' rows only (the sampler's
            ``pair_every``).
    """

    default_name = "pair"

    def __init__(self, regime: str = SAMPLED, head: int = PAIR_HEAD, name: str | None = None, every: int = 1) -> None:
        if regime not in REGIMES:
            raise ValueError(f"regime must be one of {list(REGIMES)}. Received: regime={regime!r}")
        if every < 1 or (every > 1 and regime != SAMPLED):
            raise ValueError(f"every must be 1, or > 1 with sampled training only. Received: every={every!r}")
        super().__init__(head, name)
        self.regime, self.every = regime, every
        self.features = {
            SAMPLED: ("pair_labels",),
            ONE_VS_ALL: ("pair_labels_tail", "pair_labels_head"),
            K_VS_ALL: ("query_is_tail", "query_pair_labels"),
        }[regime]
        self._loss = keras.losses.BinaryCrossentropy(from_logits=True, name=f"{self.name}_loss")

    def logits(self, batch: ScoredBatch) -> dict[str, tf.Tensor]:
        if self.regime == SAMPLED:
            if self.every > 1:
                return {self.name: batch.sampled_rows(self.head, self.every)}
            return {self.name: batch.sampled()[:, self.head]}
        if self.regime == K_VS_ALL:
            return {self.name: batch.query_scores()[:, self.head]}
        tail, head = batch.all_entities()
        return {f"{self.name}_tail": tail[:, self.head], f"{self.name}_head": head[:, self.head]}

    def loss(self, features, logits):
        if self.regime == K_VS_ALL:
            return self._loss(features["query_pair_labels"], logits[self.name])
        if self.regime == ONE_VS_ALL:
            return self._loss(features["pair_labels_tail"], logits[f"{self.name}_tail"]) + self._loss(
                features["pair_labels_head"], logits[f"{self.name}_head"]
            )
        labels, scores = features["pair_labels"], logits[self.name]
        if labels.shape[0] is not None and scores.shape[0] is not None and labels.shape[0] != scores.shape[0]:
            raise ValueError(
                f"pair_labels has {labels.shape[0]} rows for the pair head's {scores.shape[0]} positives (every "
                f"{self.every}): build the batches with make_train_dataset(..., pair_every={self.every})"
            )
        return self._loss(tf.pad(labels, [[0, 0], [1, 0]], constant_values=1.0), scores)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(regime={self.regime!r}, every={self.every}, name={self.name!r})"


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
