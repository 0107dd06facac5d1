"""Filtered link-prediction ranking (the paper's protocol), batched and chunked.

Every evaluation triple ``(h, r, t)`` is ranked twice: ``t`` against ``(h, r, e)`` for every
entity ``e`` (tail query) and ``h`` against ``(e, r, t)`` (head query). Candidates that form
a known fact (train, valid or test) other than the one ranked are removed ("filtered",
Bordes et al., 2013).

How: queries are scored ``eval_batch_size`` at a time against blocks of ``chunk_size``
entities (`jobi_tf.evaluation.block_ranking`), so memory is bounded by ``eval_batch_size * chunk_size``
floats, whatever the graph's size.

Ties: ``optimistic = 1 + #greater``, ``pessimistic = 1 + #greater + #equal``, and the
default ``realistic`` rank is their mean (as PyKEEN and LibKGE report).

The same pass keeps each query's filtered top-1 prediction, for the paper's qualitative
analysis (section 4): the share of top-1 predictions whose entity was never seen in that
slot of that relation in training ("type-inconsistent", e.g. a sports team predicted as
someone's gender). The paper reports 65% for ComplEx vs 2% for JoBi on YAGO3-10's hasGender.

Type-aware ranking (``EvalConfig.restrict="slots"``) ranks only the entities seen in the
asked slot of the relation in training (a relation's training tails for a tail query, its
heads for a head query), as a type-restricted answer list would: an answer never seen in
that slot is not among the candidates, so its query counts as missed (rank = the number of
entities). ``restrict="soft-slots"`` (a joint model) also admits the entities the pair head
places in the slot, ``σ(pair score) >= pair_threshold``: JoBi's own guess for answers new to
their slot, which a strict restriction always misses.

Relation prediction (`FilteredEvaluator.relation_metrics`) ranks the true relation of
``(h, ?, t)`` among every relation, the other relations known to link ``h`` to ``t`` removed,
with the same tie rule (Chen et al., 2021, evaluate it this way).
"""

from __future__ import annotations

import dataclasses
import logging

import numpy as np

from jobi_tf.config import EvalConfig
from jobi_tf.data.index import CSR, KGIndex
from jobi_tf.data.keys import pack, sorted_contains
from jobi_tf.evaluation.block_ranking import BlockRanker
from jobi_tf.evaluation.counts import BlockCounts, entity_blocks
from jobi_tf.evaluation.neighbourhood import NeighbourhoodTerms
from jobi_tf.models.tables import pair_score_threshold
from jobi_tf.runtime.errors import ConfigError
from jobi_tf.runtime.types import HEAD, RELATION, TAIL

__all__ = ["Ranks", "rank_metrics", "tie_ranks", "FilteredEvaluator", "validation_sample"]

logger = logging.getLogger(__name__)

HITS_AT = (1, 3, 10)
#: Seed of `validation_sample` (``--valid-sample``): the same triples for every run of a graph.
VALID_SAMPLE_SEED = 20261129
#: Largest ``[2 * relations, entities]`` bool table type-aware ranking builds (FB15k-237: 7 MB).
SLOT_TABLE_MAX_BYTES = 1 << 30


@dataclasses.dataclass(frozen=True)
class Ranks:
    """Ranks of one evaluation run, one entry per query.

    Attributes:
        optimistic, pessimistic: float64 ``(Q,)`` ranks (1 = best).
        tail_query: bool ``(Q,)``, True where the query asked for the tail.
        relations: int32 ``(Q,)`` relation of each query.
        top1: int32 ``(Q,)`` the filtered top-1 prediction: the best-scoring entity among the
            target and the candidates the filter keeps (exact ties go to the lower id); -1
            when type-aware ranking left no candidate.
        targets: int32 ``(Q,)`` the true entity of each query.
    """

    optimistic: np.ndarray
    pessimistic: np.ndarray
    tail_query: np.ndarray
    relations: np.ndarray
    top1: np.ndarray
    targets: np.ndarray

    def get(self, rank_type: str = "realistic") -> np.ndarray:
        return tie_ranks(self.optimistic, self.pessimistic, rank_type)


def tie_ranks(optimistic: np.ndarray, pessimistic: np.ndarray, rank_type: str = "realistic") -> np.ndarray:
    """The ranks a tie rule gives: either bound, or ``realistic``, their mean."""
    if rank_type == "realistic":
        return (optimistic + pessimistic) / 2.0
    return {"optimistic": optimistic, "pessimistic": pessimistic}[rank_type]


def rank_metrics(ranks: np.ndarray) -> dict[str, float]:
    """MRR, Hits@1/3/10 and mean rank of an array of ranks."""
    ranks = np.asarray(ranks, dtype=np.float64)
    out = {"mrr": float(np.mean(1.0 / ranks)) if len(ranks) else float("nan")}
    for k in HITS_AT:
        out[f"hits@{k}"] = float(np.mean(ranks <= k)) if len(ranks) else float("nan")
    out["mean_rank"] = float(np.mean(ranks)) if len(ranks) else float("nan")
    out["count"] = int(len(ranks))
    return out


class FilteredEvaluator:
    """Filtered ranking of a split's triples against every entity.

    Args:
        index: the graph (its known-facts filter).
        cfg: batch, chunk and tie settings.
        relation_labels: optional names for the per-relation breakdown.
        dtype: the products' dtype, ``float32`` (exact) or ``bfloat16`` (validation on a large
            graph, `jobi_tf.evaluation.block_ranking`).
    """

    def __init__(
        self,
        index: KGIndex,
        cfg: EvalConfig | None = None,
        relation_labels: np.ndarray | None = None,
        dtype: str = "float32",
    ):
        self.index = index
        self.cfg = cfg or EvalConfig()
        self.relation_labels = relation_labels
        self._ranker = BlockRanker(dtype)

    def ranks(self, model, triples: np.ndarray, *, tails_only: bool = False, progress: bool = False) -> Ranks:
        """Filtered ranks of ``triples`` (int ``(N, 3)``) under ``model``'s triple head.

        ``model`` needs ``entity_embeddings`` ``[E, W]``, ``tail_queries(h, r)`` and
        ``head_queries(r, t)``; ranks of the head queries come first, then the tail queries.
        """
        triples = np.asarray(triples, dtype=np.int32)
        r = self.index.num_relations
        dirs = [(True, self.index.known_tails, pack(triples[:, HEAD], triples[:, RELATION], r), triples[:, TAIL])]
        if not tails_only:
            dirs.insert(
                0, (False, self.index.known_heads, pack(triples[:, TAIL], triples[:, RELATION], r), triples[:, HEAD])
            )
        n_batches = sum(-(-len(triples) // self.cfg.eval_batch_size) for _ in dirs)
        bar = _progress_bar(n_batches) if progress else None
        greater, equal, top1 = [], [], []
        products = self._ranker.product_table(model.entity_embeddings)  # cast once, not per batch
        for is_tail, known, keys, targets in dirs:
            for start in range(0, len(triples), self.cfg.eval_batch_size):
                sl = slice(start, start + self.cfg.eval_batch_size)
                allowed = self._allowed(model, triples[sl], is_tail)
                g, e, t = self._batch(model, triples[sl], is_tail, known, keys[sl], targets[sl], allowed, products)
                greater.append(g)
                equal.append(e)
                top1.append(t)
                if bar is not None:
                    bar.add(1)
        greater, equal = np.concatenate(greater), np.concatenate(equal)
        return Ranks(
            optimistic=1.0 + greater,
            pessimistic=1.0 + greater + equal,
            tail_query=np.concatenate([np.full(len(triples), d[0]) for d in dirs]),
            relations=np.tile(triples[:, RELATION], len(dirs)),
            top1=np.concatenate(top1).astype(np.int32),
            targets=np.concatenate([d[3] for d in dirs]).astype(np.int32),
        )

    def _allowed(self, model, triples: np.ndarray, is_tail: bool) -> np.ndarray | None:
        """bool ``[B, E]``: the candidates type-aware ranking keeps for each query, or None."""
        if self.cfg.restrict == "none":
            return None
        if self.cfg.restrict == "soft-slots" and getattr(model, "pair_relations", None) is None:
            raise ConfigError("restrict", "'soft-slots' needs a model with a pair head (trained with --joint)")
        e, r = self.index.num_entities, self.index.num_relations
        if 2 * r * e > SLOT_TABLE_MAX_BYTES:
            raise ConfigError(
                "restrict",
                f"'slots' needs a {2 * r * e / 2**30:.1f} GiB table of {r} relations x {e} entities "
                f"(limit {SLOT_TABLE_MAX_BYTES / 2**30:.1f} GiB)",
            )
        rows = triples[:, RELATION] + (0 if is_tail else r)
        allowed = self.index.slot_rows()[rows]
        if self.cfg.restrict == "soft-slots":
            allowed = allowed | self._pair_fits(model, triples, is_tail)
        return allowed

    def _pair_fits(self, model, triples: np.ndarray, is_tail: bool) -> np.ndarray:
        """bool ``[B, E]``: ``σ(pair score) >= pair_threshold`` for every entity in the asked slot."""
        if is_tail:
            q = model.pair_tail_queries(triples[:, HEAD], triples[:, RELATION])
        else:
            q = model.pair_head_queries(triples[:, RELATION], triples[:, TAIL])
        threshold = float(pair_score_threshold(np.float64(self.cfg.pair_threshold)))  # 0, 1: all or none
        table = model.entity_embeddings
        blocks = entity_blocks(self.index.num_entities, self.cfg.chunk_size)
        return np.concatenate(
            [model.scorer.score_candidates(q, table[lo:hi]).numpy() >= threshold for lo, hi in blocks], axis=1
        )

    def _batch(
        self, model, triples, is_tail, known: CSR, keys, targets, allowed: np.ndarray | None = None, products=None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(greater, equal, top1)`` of one batch of queries (see `Ranks`)."""
        prior = getattr(model, "prior", None)
        offsets = None
        if is_tail:
            q = model.tail_queries(triples[:, HEAD], triples[:, RELATION])
            if prior is not None:
                offsets = prior.tails(triples[:, HEAD], triples[:, RELATION])
        else:
            q = model.head_queries(triples[:, RELATION], triples[:, TAIL])
            if prior is not None:
                offsets = prior.heads(triples[:, RELATION], triples[:, TAIL])
        targets = np.asarray(targets, np.int64)
        blocks = entity_blocks(self.index.num_entities, self.cfg.chunk_size)
        filtered = known.lookup(keys)  # every known answer, the true one included
        given = triples[:, HEAD] if is_tail else triples[:, TAIL]
        terms = NeighbourhoodTerms.of(model, given, targets, filtered, allowed)
        table, shift = model.entity_embeddings, None if terms is None else terms.target_shift
        ranker = self._ranker
        counts = ranker.count(model.scorer, q, table, filtered, targets, blocks, allowed, offsets, products, shift)
        if terms is not None:
            counts = terms.correct(counts, model.scorer, q, table, offsets)
        return self._outcome(counts, targets, allowed)

    def _outcome(
        self, counts: BlockCounts, targets: np.ndarray, allowed: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The batch's ``(greater, equal, top1)`` from its block counts, the top-1 being the
        target where it beats the best rival (exact ties: the lower id)."""
        greater, equal, rival = counts.greater, counts.equal, counts.rival
        target_first = (counts.target_score > counts.rival_score) | (
            (counts.target_score == counts.rival_score) & (targets < rival)
        )
        if allowed is not None:  # an answer outside the slot is no candidate: the query is missed
            outside = ~allowed[np.arange(len(targets)), targets]
            greater = np.where(outside, self.index.num_entities - 1.0, greater)
            equal = np.where(outside, 0.0, equal)
            target_first &= ~outside
            rival = np.where(np.isneginf(counts.rival_score), -1, rival)  # every candidate filtered: no answer
        return greater, equal, np.where(target_first, targets, rival)

    def evaluate(
        self, model, split: str = "test", *, tails_only: bool = False, progress: bool = False, triples=None
    ) -> dict:
        """Metrics of a split: overall, per direction and per relation (see `metrics_from_ranks`).
        ``triples``: rank these (a `validation_sample` of the split) instead of the whole split."""
        triples = self.index.split(split) if triples is None else triples
        ranks = self.ranks(model, triples, tails_only=tails_only, progress=progress)
        return self.metrics_from_ranks(ranks)

    def relation_ranks(self, model, triples: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Filtered ``(optimistic, pessimistic)`` ranks of each triple's relation among all
        relations for ``(h, ?, t)``; the triple head's forward relation rows are the candidates
        (a reciprocal model's inverse rows are not relations of the graph)."""
        triples = np.asarray(triples, dtype=np.int32)
        num_relations = self.index.num_relations
        table = model.triple_relations[:num_relations]
        greater, equal = [], []
        for start in range(0, len(triples), self.cfg.eval_batch_size):
            batch = triples[start : start + self.cfg.eval_batch_size]
            query = model.scorer.relation_query(model.entity_rows(batch[:, HEAD]), model.entity_rows(batch[:, TAIL]))
            scores = model.scorer.score_candidates(query, table)  # [B, R]
            if getattr(model, "prior", None) is not None:
                scores += model.prior.relations(batch[:, HEAD], batch[:, TAIL])
            scores = scores.numpy()
            target = scores[np.arange(len(batch)), batch[:, RELATION]]
            pairs = pack(batch[:, HEAD], batch[:, TAIL], self.index.num_entities)
            rows, known = self.index.known_relations.lookup(pairs)
            scores[rows, known] = -np.inf  # every known relation of the pair, the true one included
            greater.append(np.sum(scores > target[:, None], axis=1))
            equal.append(np.sum(scores == target[:, None], axis=1))
        greater, equal = np.concatenate(greater).astype(np.float64), np.concatenate(equal).astype(np.float64)
        return 1.0 + greater, 1.0 + greater + equal

    def relation_metrics(self, model, split: str = "test") -> dict:
        """Filtered MRR and Hits@1/3/10 of relation prediction ``(h, ?, t)`` on a split."""
        ranks = tie_ranks(*self.relation_ranks(model, self.index.split(split)), self.cfg.rank_type)
        return {**rank_metrics(ranks), "rank_type": self.cfg.rank_type}

    def metrics_from_ranks(self, ranks: Ranks) -> dict:
        """``{"mrr", "hits@k", ..., "type_inconsistent", "head": {...}, "tail": {...}, "per_relation": {...}}``.

        ``type_inconsistent`` is the share of top-1 predictions never seen in that slot of
        that relation in training (see `type_inconsistent`); ``type_inconsistent_answers``
        is the same share for the true answers: what a perfect model would score, since a
        true answer can be new to its slot (a person's spouse seen in no other marriage).
        """
        values = ranks.get(self.cfg.rank_type)
        odd = self.type_inconsistent(ranks)
        odd_answers = self.type_inconsistent(ranks, of="targets")

        def part(mask):
            return {
                **rank_metrics(values[mask]),
                "type_inconsistent": _share(odd[mask]),
                "type_inconsistent_answers": _share(odd_answers[mask]),
            }

        out = part(slice(None))
        out["rank_type"] = self.cfg.rank_type
        out["tail"] = part(ranks.tail_query)
        if not ranks.tail_query.all():
            out["head"] = part(~ranks.tail_query)
        per_relation = {}
        for rel in np.unique(ranks.relations):
            name = str(self.relation_labels[rel]) if self.relation_labels is not None else str(int(rel))
            per_relation[name] = part(ranks.relations == rel)
        out["per_relation"] = per_relation
        return out

    def type_inconsistent(self, ranks: Ranks, of: str = "top1") -> np.ndarray:
        """bool ``(Q,)``: the query's top-1 entity (``of="targets"``: its true answer) never
        occurs in training in that slot of that relation.

        "Slot" is the asked side: the tails of the relation for a tail query, its heads for a
        head query (the entity sets JoBi's pair head and biased negatives are built from).
        """
        answers = getattr(ranks, of)
        e, r = self.index.num_entities, self.index.num_relations
        keys = pack(ranks.relations, answers, e) + np.where(ranks.tail_query, 0, r * e)  # `KGIndex.slot_keys`
        seen = sorted_contains(self.index.slot_keys, keys)
        return ~seen & (answers >= 0)  # -1: type-aware ranking left no candidate to answer with


def validation_sample(triples: np.ndarray, size: int, seed: int = VALID_SAMPLE_SEED) -> np.ndarray:
    """A fixed sample of ``size`` triples (all of them for 0 or more than there are), in the
    split's order: the same for every run of a graph, so that runs validated on it compare."""
    triples = np.asarray(triples)
    if size <= 0 or size >= len(triples):
        return triples
    rows = np.random.default_rng(seed).choice(len(triples), size=size, replace=False)
    return triples[np.sort(rows)]


def _share(flags: np.ndarray) -> float:
    return float(np.mean(flags)) if len(flags) else float("nan")


def _progress_bar(total: int):
    import keras

    return keras.utils.Progbar(total, unit_name="batch")
