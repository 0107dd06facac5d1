"""`BatchPlan`: what a run's training batches hold, said once and read by sampler and model alike.

A run's settings decide the batches' contents in one place (`BatchPlan.for_run`, from the
sampler and training sections): the
regime, the sampler's layout (per-triple or shared negatives, biased runs), which features
the model's objectives read and the pair head's ``pair_every``. The sampler
(`jobi_tf.sampling.negatives.NegativeSampler`, `jobi_tf.sampling.pipelines`) draws exactly the plan's
features; the model is checked against the plan (`BatchPlan.check_model`) and the pipeline's
element spec against the plan's shapes (`BatchPlan.check_batches`) when the run is built, so
a disagreement is one line at start-up, not a shape error inside the loss. The features
themselves (dtype, shape, writer) are `jobi_tf.contracts.features`.
"""

from __future__ import annotations

import dataclasses

from jobi_tf import losses
from jobi_tf.config import SamplerConfig, TrainConfig
from jobi_tf.contracts import features as F
from jobi_tf.contracts.objectives import K_VS_ALL, ONE_VS_ALL, SAMPLED, PairBCE, reads_of
from jobi_tf.runtime.types import PAIR_HEAD

__all__ = ["BatchPlan"]


@dataclasses.dataclass(frozen=True)
class BatchPlan:
    """The contents of every training batch of a run.

    Args:
        regime: `SAMPLED`, `ONE_VS_ALL` or `K_VS_ALL` (the triple head's loss's).
        sampler: the resolved sampler settings (batch size, negatives, chunks).
        reads: the features the model's objectives read (`reads_of`).
        pair_every: the pair head trains on positives 0, n, 2n, ... (``--pair-every``).
        provenance: sampled batches also say which negatives are biased (inspection only).
        prior_weight: ``W`` of ``--slot-prior-in-loss``: sampled batches carry the candidates'
            ``negative_prior`` at that weight (0: none).

    Two names for the biased share ``p`` (``--p``), one per layout: per triple, each negative
    is biased with probability `biased_chance`; with shared negatives, each positive gets
    exactly `biased_count` = ``round(p * neg)`` biased ones (per positive or per run).
    """

    regime: str
    sampler: SamplerConfig
    reads: frozenset[str] = frozenset()
    pair_every: int = 1
    provenance: bool = False
    prior_weight: float = 0.0

    def __post_init__(self) -> None:
        if not self.sampler.is_resolved:
            raise ValueError("BatchPlan needs a resolved SamplerConfig (SamplerConfig.resolved)")

    @classmethod
    def for_run(cls, sampler: SamplerConfig, train: TrainConfig, *, joint: bool) -> BatchPlan:
        """The plan of a run, from its sampler and training sections and whether the model
        has a pair head (``--joint``): the one place its batches' contents are decided
        (training, parameter-server workers and the checks all call this)."""
        regime = losses.loss_class(train.loss).regime
        if not sampler.is_resolved:  # as a run resolves it on one device (`jobi_tf.regimes.resolve`)
            sampler = sampler.resolved(sampled=regime == SAMPLED, pair_every=train.pair_every)
        objectives = [losses.get(train.loss, label_smoothing=train.label_smoothing, slot_weight=train.slot_weight)]
        if joint:
            objectives.append(PairBCE(regime=regime, every=train.pair_every))
        prior_weight = train.slot_prior if train.slot_prior_in_loss and regime == SAMPLED else 0.0
        return cls(regime, sampler, reads_of(objectives), train.pair_every if joint else 1, False, prior_weight)

    @classmethod
    def sampled(
        cls, sampler: SamplerConfig, *, pair_labels: bool = True, pair_every: int = 1, provenance: bool = False
    ) -> BatchPlan:
        """A sampled plan from sampler settings alone (``None`` settings chosen as a run would)."""
        if not sampler.is_resolved:
            sampler = sampler.resolved(pair_every=pair_every)
        reads = frozenset({F.VALID_NEGATIVE} | ({F.PAIR_LABELS} if pair_labels else set()))
        return cls(SAMPLED, sampler, reads, pair_every if pair_labels else 1, provenance)

    @classmethod
    def every_entity(cls, sampler: SamplerConfig, *, slot_rows: bool = False) -> BatchPlan:
        """A 1-vs-all plan: positives, with ``slot_rows`` their dense slot rows (pair labels)."""
        reads = frozenset({F.PAIR_LABELS_TAIL, F.PAIR_LABELS_HEAD} if slot_rows else ())
        return cls(ONE_VS_ALL, sampler if sampler.is_resolved else sampler.resolved(sampled=False), reads)

    @classmethod
    def queries(cls, sampler: SamplerConfig, *, joint: bool = False) -> BatchPlan:
        """A k-vs-all plan: distinct queries and their answers, with ``joint`` their slot rows."""
        reads = frozenset({F.QUERY_IS_TAIL, F.ANSWER_LABELS} | ({F.QUERY_PAIR_LABELS} if joint else set()))
        return cls(K_VS_ALL, sampler if sampler.is_resolved else sampler.resolved(sampled=False), reads)

    # -- the sampler's layout ------------------------------------------------------------
    @property
    def pair_labels(self) -> bool:
        return F.PAIR_LABELS in self.reads

    @property
    def looks_up_slots(self) -> bool:
        """Whether any feature asks which slots an entity was seen in (`SlotMembership`)."""
        return bool({F.PAIR_LABELS, F.PAIR_LABELS_TAIL, F.QUERY_PAIR_LABELS, F.NEGATIVE_PRIOR} & set(self.features()))

    @property
    def slot_prior_in_loss(self) -> bool:
        """Whether the batches carry each candidate's ``negative_prior`` (``--slot-prior-in-loss``)."""
        return self.regime == SAMPLED and self.prior_weight > 0

    @property
    def logq_correction(self) -> bool:
        """Whether the batches carry each candidate's ``negative_log_q`` (``--logq-correction``)."""
        return self.regime == SAMPLED and self.sampler.logq_correction

    @property
    def per_positive_side(self) -> bool:
        return self.sampler.corrupt_side == "per-positive"

    @property
    def shared(self) -> int:
        """C: positives per chunk sharing the uniform negatives (0: per triple)."""
        return self.sampler.shared_negatives

    @property
    def biased_chunk(self) -> int:
        """C_b: positives per run sharing the biased negatives (0: each its own)."""
        return self.sampler.biased_chunk

    @property
    def biased_chance(self) -> float:
        """Per triple: each negative's probability of coming from its slot."""
        return self.sampler.p

    @property
    def biased_count(self) -> int:
        """K_b: biased negatives per positive (shared layout: exactly this many; per triple: 0,
        the count is random)."""
        return int(round(self.sampler.p * self.sampler.neg)) if self.shared else 0

    @property
    def sorts_triples(self) -> bool:
        """Whether the sampler returns the batch's triples sorted by relation and corrupted side
        (``--biased-chunk``: runs of one slot share their biased negatives)."""
        return self.regime == SAMPLED and bool(self.shared and self.biased_chunk)

    @property
    def riders(self) -> tuple[tuple[int, int], ...]:
        """``(head, every)`` of the heads trained on every n-th positive (`ScoredBatch` riders)."""
        return ((PAIR_HEAD, self.pair_every),) if self.pair_labels and self.pair_every > 1 else ()

    # -- the features and their shapes ---------------------------------------------------
    def features(self) -> tuple[F.Feature, ...]:
        """The features every batch holds, ``triples`` first."""
        return (
            F.TRIPLES,
            *{SAMPLED: self._sampled, ONE_VS_ALL: self._every_entity, K_VS_ALL: self._queries}[self.regime](),
        )

    def _sampled(self) -> list[F.Feature]:
        if not self.shared:
            out = [F.CANDIDATES, F.CORRUPT_TAIL, F.VALID_NEGATIVE]
            out += [F.BIASED] if self.provenance else []
        else:
            own = [F.CHUNK_CANDIDATES, F.CHUNK_CORRUPT_TAIL] if self.biased_chunk else [F.CANDIDATES, F.CORRUPT_TAIL]
            out = [F.SHARED_CANDIDATES, F.SHARED_CORRUPT_TAIL, *own, F.VALID_NEGATIVE]
        out += [F.PAIR_LABELS] if self.pair_labels else []
        out += [F.NEGATIVE_LOG_Q] if self.logq_correction else []
        out += [F.NEGATIVE_PRIOR] if self.slot_prior_in_loss else []
        return out + ([F.POSITIVE_CORRUPT_TAIL] if self.per_positive_side else [])

    def _every_entity(self) -> list[F.Feature]:
        return [F.PAIR_LABELS_TAIL, F.PAIR_LABELS_HEAD] if self.reads & {F.PAIR_LABELS_TAIL, F.PAIR_LABELS_HEAD} else []

    def _queries(self) -> list[F.Feature]:
        return [F.QUERY_IS_TAIL, F.ANSWER_LABELS] + ([F.QUERY_PAIR_LABELS] if F.QUERY_PAIR_LABELS in self.reads else [])

    def sizes(self, num_entities: int | None = None) -> dict[str, int | None]:
        """The value of each symbol of the features' shapes (`jobi_tf.contracts.features`)."""
        b, k, k_b = self.sampler.batch_size, self.sampler.neg, self.biased_count
        c, c_b, n = self.shared or None, self.biased_chunk or None, self.pair_every
        return {
            "B": b,
            "K": k,
            "K_b": k_b if self.shared else k,
            "K_u": k - k_b,
            "E": num_entities,
            "B / C": b // c if c else None,
            "B / C_b": b // c_b if c_b else None,
            "B / n": b // n,
        }

    def shapes(self, num_entities: int | None = None) -> dict[str, tuple[int | None, ...]]:
        """Each feature's global shape (the whole batch, before replicas split it)."""
        sizes = self.sizes(num_entities)
        shapes = {f: tuple(sizes[d] if isinstance(d, str) else d for d in f.shape) for f in self.features()}
        if self.shared and not self.biased_chunk:  # per-positive biased candidates: K_b columns
            shapes[F.CANDIDATES] = shapes[F.CORRUPT_TAIL] = (sizes["B"], self.biased_count)
        return shapes

    def row_units(self) -> dict[str, int]:
        """For each setting that groups positives, the positives one row stands for, by flag
        name: a replica's slice of the batch must hold whole groups (`jobi_tf.regimes.checks`)."""
        units = {"batch_size": 1}
        rows = {f.rows for f in self.features()}
        if F.CHUNK in rows:
            units["shared_negatives"] = self.shared
        if F.BIASED_RUN in rows:
            units["biased_chunk"] = self.biased_chunk
        if F.PAIR_ROW in rows and self.pair_every > 1:
            units["pair_every"] = self.pair_every
        return units

    # -- the checks at start-up ----------------------------------------------------------
    def check_batches(self, element_spec: dict, num_entities: int | None = None) -> None:
        """Refuse a pipeline whose batches are not this plan's (keys, dtypes, static shapes)."""
        want = self.shapes(num_entities)
        if set(element_spec) != set(want):
            raise ValueError(
                f"the batches hold {sorted(element_spec)}, the plan {sorted(want)}: build them from the run's BatchPlan"
            )
        for key, spec in element_spec.items():
            feature = F.FEATURES[key]
            got = tuple(spec.shape.as_list())
            agree = spec.dtype.name == feature.dtype and len(got) == len(want[key])
            agree = agree and all(g is None or w is None or g == w for g, w in zip(got, want[key], strict=True))
            if not agree:
                raise ValueError(
                    f"feature {key!r}: the pipeline gives {spec.dtype.name} {list(got)}, the plan "
                    f"{feature.dtype} {list(want[key])} ({', '.join(map(str, feature.shape))})"
                )

    def check_model(self, model) -> None:
        """Refuse a model that reads features the plan leaves out, or trains its pair head on
        other rows than the plan draws labels for (a `jobi_tf.models.JoBiModel`)."""
        missing = sorted(reads_of(model.objectives) - set(self.features()))
        if missing:
            raise ValueError(f"the model reads {missing}, which the run's batches do not hold (its BatchPlan)")
        if self.pair_labels and getattr(model, "pair_every", 1) != self.pair_every:
            raise ValueError(
                f"the model's pair head trains on every {model.pair_every}th positive, the batches hold the pair "
                f"labels of every {self.pair_every}th: build both from one RunConfig"
            )
