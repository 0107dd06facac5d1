"""The evaluation section of a run's config: how filtered ranking is batched, how ties
count, which candidates are ranked, and what validation ranks (a sample, a dtype)."""

from __future__ import annotations

import dataclasses

from jobi_tf.config.fields import (
    AT_LEAST_0,
    AT_LEAST_1,
    MATMUL_DTYPE_CHOICES,
    RANK_TYPES,
    RESTRICTS,
    SHARE,
    _choice,
    check_bounds,
    setting,
)

__all__ = ["EvalConfig"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class EvalConfig:
    """Filtered ranking.

    Attributes:
        eval_batch_size: queries scored per matmul.
        chunk_size: entities per score block; bounds memory at
            ``eval_batch_size * chunk_size`` floats.
        rank_type: how ties count; ``realistic`` is the mean of optimistic and pessimistic.
        restrict: ``slots`` ranks only the entities seen in the asked slot of the relation in
            training (`jobi_tf.evaluation.ranking`); ``soft-slots`` also those the pair head places
            in that slot with probability ``σ(pair score) >= pair_threshold`` (a joint model's
            guess for entities new to the slot); ``none`` ranks every entity (the standard protocol).
        pair_threshold: the pair-head probability from which ``soft-slots`` admits an entity.
        valid_sample: validate on this many validation triples, a fixed sample (0: all);
            `jobi_tf.evaluation.ranking.validation_sample` draws it.
        valid_dtype: the validation products' dtype (``auto``: resolved when the run starts,
            as ``--matmul-dtype auto`` is); the test set is always ranked in float32.
    """

    eval_batch_size: int = setting(1000, "Queries per score block.", bounds=AT_LEAST_1)
    chunk_size: int = setting(100_000, "Entities per score block.", bounds=AT_LEAST_1)
    rank_type: str = setting(
        "realistic", "How ties count: realistic is the mean of optimistic and pessimistic.", choices=RANK_TYPES
    )
    restrict: str = setting(
        "none",
        "slots: rank only the entities seen in that slot of the relation in training (type-aware answers); "
        "an answer never seen there counts as missed. soft-slots: also the entities a joint model's pair head "
        "places in the slot.",
        choices=RESTRICTS,
    )
    valid_sample: int = setting(
        0,
        "Validate on a fixed sample of N validation triples, the same for every run of the graph (0: all of "
        "them); the test set is always ranked whole.",
        metavar="N",
        bounds=AT_LEAST_0,
    )
    valid_dtype: str = setting(
        "float32",
        "dtype of the products that rank validation queries. bfloat16: bfloat16-rounded rows and scores, about "
        "2x faster on CPUs with AVX512-BF16 (a close approximation of the float32 ranks); auto: bfloat16 on such "
        "a CPU, else float32. The test set is always ranked in float32.",
        choices=MATMUL_DTYPE_CHOICES,
    )
    pair_threshold: float = setting(
        0.99,
        "With --restrict soft-slots: the pair-head probability from which an entity counts as fitting the slot "
        "(a JoBi pair head is confident: on FB15k-237 0.5 admits nearly every entity).",
        bounds=SHARE,
    )

    def __post_init__(self) -> None:
        check_bounds(self)
        _choice("rank_type", self.rank_type, RANK_TYPES)
        _choice("restrict", self.restrict, RESTRICTS)
        _choice("valid_dtype", self.valid_dtype, MATMUL_DTYPE_CHOICES)
