"""The scores a batch's objectives share (`ScoredBatch`), computed once per batch.

Objectives (`jobi_tf.contracts.objectives`) read candidate scores from a `ScoredBatch`, which computes
each kind of score at most once per batch for every head at the same time (one product over
the stacked triple and pair queries), so two heads cost one pass over the candidate rows; it
also records the rows those scores used (`Factors`), which the regularizer
(`jobi_tf.regularizers`) penalises. A head trained on every n-th positive only (JoBi's pair
head with ``pair_every``) has queries of those rows only, scored in the stacked heads' chunk
products when the batch names it a rider (`ScoredBatch.sampled_rows`).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Protocol

import tensorflow as tf

from jobi_tf.contracts import features as F
from jobi_tf.runtime.types import HEAD, RELATION, TAIL, TRIPLE_HEAD

if TYPE_CHECKING:
    from jobi_tf.contracts.scorer import Scorer

__all__ = ["ScoredBatch", "Factors", "ScoringModel", "CHUNK_FEATURES", "every_nth_positive"]


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
        read: candidate rows already read for this batch, by feature name (`sampled_rows`).
        riders: ``(head, every)`` of heads trained on every n-th positive only, scored in the
            same chunk products as the stacked heads (`sampled_rows`); the stacked heads must
            then be one.

    Attributes:
        head_q, tail_q: ``[B, S, W]`` queries of the stacked heads (S = 1 or 2: triple, pair).
        rows: the positive's ``head``, ``tail``, ``relation`` rows (the first stacked head's)
            and, with ``reciprocal``, ``inverse``.
    """

    def __init__(
        self,
        model: ScoringModel,
        features: dict[str, tf.Tensor],
        heads: tuple[int, ...] | None = None,
        read: dict[str, tf.Tensor] | None = None,
        riders: tuple[tuple[int, int], ...] = (),
    ) -> None:
        self.model = model
        self.riders = tuple(riders)
        self.features = features
        self._read_rows = dict(read or {})
        self.head_q, self.tail_q, self.rows = model.queries(features[F.TRIPLES], heads)
        self.heads = tuple(heads) if heads is not None else tuple(getattr(model, "stacked_heads", (TRIPLE_HEAD,)))
        if self.riders and self.head_q.shape[1] != 1:
            raise ValueError(f"riders need one stacked head, not {self.head_q.shape[1]}. Received: riders={riders!r}")
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
            self._score_sampled()
        return self._sampled

    def sampled_rows(self, head: int, every: int) -> tf.Tensor:
        """``[B / every, 1 + K]``: the scores `sampled` would give ``head`` on positives 0,
        every, 2 every, ..., from queries of those rows alone (``head`` is not stacked then);
        a rider's (``riders``) come with `sampled`, from the same chunk products.

        Why: JoBi's second head doubles the per-positive work of a step (its queries, their
        gradient, a second score of every candidate); trained on every n-th positive it costs
        about 1/n of that. The rows keep their candidates: a chunk's shared ones stay the
        chunk's, so ``every`` must divide each chunk's size (`jobi_tf.regimes` checks it), and
        those rows are read once for both (a second read was a second gather and scatter of
        every chunk's rows: at small chunks it cost what the thinning saved). The regularizer
        sees only the stacked heads' rows (`factors`).
        """
        key = (head, every)
        if key in self.riders:
            self.sampled()  # scored with this batch's chunk products
        elif key not in self._strided:
            self._strided[key] = self._strided_batch(head, every).sampled()[:, 0]
        return self._strided[key]

    def _strided_batch(self, head: int, every: int) -> ScoredBatch:
        """Positives 0, every, 2 every, ... scored by ``head`` alone, reading this batch's chunk rows."""
        chunks = {k: self._rows(k) for k in CHUNK_FEATURES if k in self.features}
        return ScoredBatch(self.model, every_nth_positive(self.features, every), heads=(head,), read=chunks)

    def all_entities(self) -> tuple[tf.Tensor, tf.Tensor]:
        """``([B, S, E], [B, S, E])``: every entity scored as the tail, then as the head."""
        if self._all is None:
            tail, head = self._every_entity(self.tail_q), self._every_entity(self.head_q)
            prior = getattr(self.model, "prior", None)
            if prior is not None and TRIPLE_HEAD in self.heads:
                triples = self.features[F.TRIPLES]
                h, r, t = triples[:, HEAD], triples[:, RELATION], triples[:, TAIL]
                tail = self._with_prior(tail, prior.tails(h, r))
                head = self._with_prior(head, prior.heads(r, t))
            self._all = tail, head
            self._both_directions_used()
        return self._all

    def _with_prior(self, scores: tf.Tensor, offsets: tf.Tensor) -> tf.Tensor:
        """``[B, S, E]`` scores with the slot prior's ``[B, E]`` offsets added to the triple head's."""
        parts = tf.split(scores, len(self.heads), axis=1)  # [B, 1, E] each
        parts = [p + offsets[:, None] if h == TRIPLE_HEAD else p for h, p in zip(self.heads, parts, strict=True)]
        return parts[0] if len(parts) == 1 else tf.concat(parts, axis=1)

    def query_scores(self) -> tf.Tensor:
        """``[B, S, E]``: every entity scored for each row's one query (k-vs-all batches: the
        tail query where ``query_is_tail``, else the head query), one matmul per row."""
        if self._query is None:
            side = self.features[F.QUERY_IS_TAIL][:, None, None]
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

    def _score_sampled(self) -> None:
        """Score this batch's candidates and its riders' (`sampled_rows`), chunks together."""
        members = [self] + [self._strided_batch(head, every) for head, every in self.riders]
        parts = [member._own_scores() for member in members]  # the positive, per-triple candidates
        for key, side_key in ((F.CHUNK_CANDIDATES, F.CHUNK_CORRUPT_TAIL), (F.SHARED_CANDIDATES, F.SHARED_CORRUPT_TAIL)):
            if key in self.features:
                chunk_scores = self._score_chunks(self._rows(key), side_key, members)
                for own, scores in zip(parts, chunk_scores, strict=True):
                    own.append(scores)
        if len(parts[0]) == 1:
            raise ValueError(
                "sampled training needs `candidates` or `shared_candidates`: build the batches with "
                "jobi_tf.sampling.pipelines.make_train_dataset"
            )
        # The positive's column, then the candidates' (nested as before riders: the same sums).
        joined = [tf.concat([own[0], tf.concat(own[1:], axis=-1)], axis=-1) for own in parts]
        self._sampled = joined[0]
        for key, scores in zip(self.riders, joined[1:], strict=True):
            self._strided[key] = scores[:, 0]

    def _own_scores(self) -> list[tf.Tensor]:
        """``[B, S, 1]`` the positive's score, then ``[B, S, K_b]`` its own candidates' (if any)."""
        model, features, rows = self.model, self.features, self.rows
        head_q, tail_q, score = self.head_q, self.tail_q, model.scorer.score_candidates
        pos = _own_row_scores(model.scorer, tail_q, rows["tail"])  # [B, S]
        # With one corrupted side per positive, pick that side's query once and score every
        # candidate with it; otherwise score each candidate both ways and select per candidate.
        one_side = features.get(F.POSITIVE_CORRUPT_TAIL)
        if one_side is not None:
            query = tf.where(one_side[:, None, None], tail_q, head_q)
        if model.reciprocal:
            if one_side is None:
                raise ValueError("a reciprocal model needs `positive_corrupt_tail` (one corrupted side per positive)")
            # A head corruption is ranked by the inverse query, the positive included.
            other = tf.where(one_side[:, None], rows["tail"], rows["head"])  # the entity not asked for
            pos = _own_row_scores(model.scorer, query, other)
            self.relation_rows = [tf.where(one_side[:, None], rows["relation"], rows["inverse"])]
        parts = [pos[:, :, None]]
        if F.CANDIDATES in features:
            cand = self._rows(F.CANDIDATES)  # [B, K_b, W]
            if one_side is not None:
                parts.append(score(query, cand))
            else:
                by_tail, by_head = score(tail_q, cand), score(head_q, cand)
                parts.append(tf.where(features[F.CORRUPT_TAIL][:, None, :], by_tail, by_head))
            self.candidate_rows.append(cand)
        return parts

    def _rows(self, key: str) -> tf.Tensor:
        """The entity rows of candidate feature ``key``, read once per batch."""
        if key not in self._read_rows:
            self._read_rows[key] = self.model.entity_rows(self.features[key])
        return self._read_rows[key]

    def _score_chunks(self, rows: tf.Tensor, side_key: str, members: list[ScoredBatch]) -> list[tf.Tensor]:
        """``[B_m, S, K]`` scores, for each member batch, of candidates shared by chunks of
        consecutive positives: ``rows`` ``[G, K, W]`` (chunk g's candidates), each member's
        ``side_key`` feature ``[B_m, K]`` (which slot each replaces).

        Why one product for all: each chunk's product is small (10 positives by 30 candidates
        with ``--biased-chunk 10``), and a batch of small products costs per product more
        than per row (`bench/chunk_product.py`, retired: `git show 2ed5841:bench/chunk_product.py`;
        forward, two chunks per product, twice the multiply-adds, take the time of one). So the
        members' queries (the pair head's rows of ``pair_every``) are concatenated along each
        chunk's rows and scored with one batched product (one per side with a side per
        candidate), then split. A batch with no riders
        computes exactly the products it did before riders existed.
        """
        groups = tf.shape(rows)[0]

        def by_chunk(x: tf.Tensor) -> tf.Tensor:  # [B_m, ...] -> [G, B_m / G, ...]
            return tf.reshape(x, tf.concat([[groups, -1], tf.shape(x)[1:]], 0))

        score, one_side = self.model.scorer.score_candidates, F.POSITIVE_CORRUPT_TAIL in self.features

        def scored(queries: list[tf.Tensor]) -> list[tf.Tensor]:  # one product for every member's rows
            blocks = [by_chunk(q) for q in queries]  # [G, C_m, S, W]
            if len(blocks) == 1:
                return [score(blocks[0], rows)]
            together = score(tf.concat(blocks, axis=1), rows)  # [G, sum C_m, S, K]
            return tf.split(together, [tf.shape(b)[1] for b in blocks], axis=1, num=len(blocks))

        if one_side:  # (the side's query taken again here: the gradients sum as they always did)
            pieces = scored(
                [tf.where(m.features[F.POSITIVE_CORRUPT_TAIL][:, None, None], m.tail_q, m.head_q) for m in members]
            )
        else:
            by_head, by_tail = scored([m.head_q for m in members]), scored([m.tail_q for m in members])
            pieces = [
                tf.where(by_chunk(m.features[side_key])[:, :, None, :], tail, head)
                for m, head, tail in zip(members, by_head, by_tail, strict=True)
            ]
        return [tf.reshape(p, tf.concat([[-1], tf.shape(p)[2:]], 0)) for p in pieces]


#: Sampler features with one row per chunk or run of positives, not per positive
#: (`jobi_tf.contracts.features`: their ``rows``).
CHUNK_FEATURES = tuple(f for f in F.FEATURES.values() if f.rows in (F.CHUNK, F.BIASED_RUN))


def every_nth_positive(features: dict[str, tf.Tensor], every: int) -> dict[str, tf.Tensor]:
    """What scoring reads of positives 0, every, 2 every, ... of a sampled batch: per-positive
    features strided, per-chunk ones (`CHUNK_FEATURES`) kept whole, so each kept positive
    still reads its chunk's candidates when ``every`` divides the chunk size (the pair head's
    rows, ``pair_labels``, are left out: scores do not read labels)."""
    kept = {}
    for key, value in features.items():
        rows = F.FEATURES[key].rows if key in F.FEATURES else F.POSITIVE
        if rows != F.PAIR_ROW:
            kept[key] = value if rows in (F.CHUNK, F.BIASED_RUN) else value[::every]
    return kept


def _own_row_scores(scorer, queries: tf.Tensor, rows: tf.Tensor) -> tf.Tensor:
    """``[B, S]``: each example's S queries ``[B, S, W]`` against its one row ``[B, W]`` (a
    positive's): an elementwise product and sum for a dot-product scorer, else its
    ``score_candidates``."""
    if scorer.dot_product:
        return tf.reduce_sum(queries * rows[:, None, :], -1)
    return scorer.score_candidates(queries, rows[:, None, :])[..., 0]
