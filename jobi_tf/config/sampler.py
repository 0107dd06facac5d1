"""The sampler's section of a run's config: how negatives are drawn, and the defaults a run
chooses when it starts (`SamplerConfig.resolved`)."""

from __future__ import annotations

import dataclasses

from jobi_tf.config.fields import (
    AT_LEAST_0,
    AT_LEAST_1,
    CORRUPT_SIDES,
    SHARE,
    _choice,
    check_bounds,
    setting,
)
from jobi_tf.runtime import plugins
from jobi_tf.runtime.errors import ConfigError

__all__ = ["SamplerConfig", "AUTO_BIASED_CHUNK"]

#: ``--biased-chunk``'s default where it applies: the recommended recipe's (README's first row).
AUTO_BIASED_CHUNK = 10
#: ``--negative-distribution``: how a negative that is not biased picks its entity.
NEGATIVE_DISTRIBUTIONS = plugins.names("negatives")  # the modules of jobi_tf/sampling/distributions
#: ``--biased-draw``: how a biased negative picks among its slot's entities.
BIASED_DRAWS = ("distinct", "frequency")


@dataclasses.dataclass(frozen=True, kw_only=True)
class SamplerConfig:
    """How negatives are drawn.

    The defaults are the recommended sampled recipe (1000 positives x 100 negatives, the
    uniform ones shared by the batch, the biased ones by runs of 10: README's first row);
    ``jobi-tf train --preset paper`` is the paper's 500 x 50 per-triple negatives.

    Attributes:
        batch_size: positives per step (global, across replicas).
        neg: negatives per positive.
        p: the share of negatives whose replacement entity comes from the relation's
            training heads/tails instead of all entities (0 = uniform negatives). Per triple
            (``shared_negatives=0``) each negative is biased with probability ``p``; with
            shared negatives exactly ``round(p * neg)`` of each positive's are (its own, or its
            run's), the rest shared: `jobi_tf.sampling.batch_plan.BatchPlan.biased_chance` and
            ``biased_count`` name the two.
        shared_negatives: 0 for per-triple negatives (the paper's semantics); C > 0 shares
            the uniform negatives within chunks of C positives, which turns the scoring of
            those negatives into a matmul (biased ones too with ``biased_chunk``). None
            (the default) is chosen when the run starts (`resolved`): each replica's whole
            batch with a sampled loss, 0 with a loss that scores every entity.
        corrupt_side: ``"per-negative"`` flips the head-or-tail coin for every negative, so
            one positive's softmax mixes head and tail corruptions; ``"per-positive"``
            flips it once per positive, so each softmax ranks the answers of one query
            (head or tail), as evaluation does and as PyKEEN's sampler does. The default:
            on FB15k-237 it trains clearly better baselines and JoBi models
            (``docs/results.md``), and it halves the cost of scoring negatives.
        biased_chunk: 0 keeps the ``round(p * neg)`` biased negatives per triple. C_b > 0
            (with ``shared_negatives``) sorts each batch by relation and corrupted side and
            shares the biased negatives within runs of C_b positives of that order, each drawn
            from the training slot of one of the run's positives, picked at random; pair
            labels are looked up per positive (`jobi_tf.sampling.pipelines.NegativeSampler`). A cheaper
            JoBi step: a run of one relation gets exactly its slot's negatives, shared.
            None (the default) is chosen when the run starts (`resolved`): `AUTO_BIASED_CHUNK`
            where it can be (biased negatives, shared negatives, a chunk it divides, a
            ``pair_every`` that divides it), else 0.
        negative_distribution: ``uniform`` (the paper's), ``degree`` (each entity in proportion
            to its training triple ends) or ``mix`` (half of each) for the negatives that are not
            biased. Why: on a graph of millions of entities a uniform draw almost never picks one
            of its few hub entities, so the model never ranks hubs against each other in a slot.
        biased_draw: ``distinct`` (the paper's: uniform over the slot's distinct entities) or
            ``frequency`` (in proportion to how often each fills the slot).
        logq_correction: subtract ``log(Q(e)·E)`` (the draw's probability over a uniform one's)
            from the logit of each negative drawn by ``negative_distribution``.
    """

    batch_size: int = setting(1000, "Positive triples per step.", bounds=AT_LEAST_1)
    neg: int = setting(100, "Negatives per positive.", bounds=AT_LEAST_1)
    p: float = setting(
        0.0,
        "Share of negatives drawn from the relation's training heads/tails (biased): each negative's chance per "
        "triple, exactly round(p x neg) per positive with shared negatives.",
        bounds=SHARE,
    )
    shared_negatives: int | None = setting(
        None,
        "Share the uniform negatives within chunks of C positives (0 = per triple, the paper's). "
        "Default: the whole batch (of each replica) with a sampled loss, 0 with a loss that scores every entity.",
        metavar="C",
        type=int,
        shown_default="auto",
        bounds=AT_LEAST_0,
    )
    corrupt_side: str = setting(
        "per-positive",
        "Flip the head-or-tail coin for every negative, or once per positive (each softmax ranks one query).",
        choices=CORRUPT_SIDES,
    )
    biased_chunk: int | None = setting(
        None,
        "With --shared-negatives: share the biased negatives within runs of C_b positives of the batch "
        f"sorted by relation and side (0 = per triple). Default: {AUTO_BIASED_CHUNK} with --p > 0 and shared "
        f"negatives when {AUTO_BIASED_CHUNK} divides the chunk and --pair-every divides {AUTO_BIASED_CHUNK}, else 0.",
        metavar="C_b",
        type=int,
        shown_default="auto",
        bounds=AT_LEAST_0,
    )
    negative_distribution: str = setting(
        "uniform",
        "How the negatives that are not biased pick their entity. " + plugins.about("negatives"),
        choices=NEGATIVE_DISTRIBUTIONS,
    )
    biased_draw: str = setting(
        "distinct",
        "With --p > 0: a biased negative is drawn uniformly from the distinct entities seen in the slot (the "
        "paper's rule), or by frequency: in proportion to how often each fills the slot in training.",
        choices=BIASED_DRAWS,
    )
    logq_correction: bool = setting(
        False,
        "With a non-uniform --negative-distribution and a softmax loss: subtract from each such negative's logit "
        "the log of its draw probability over a uniform draw's (the sampled softmax's correction), so that "
        "popular entities are not learned down for being drawn often.",
    )

    def __post_init__(self) -> None:
        check_bounds(self)
        _choice("negative_distribution", self.negative_distribution, NEGATIVE_DISTRIBUTIONS)
        _choice("biased_draw", self.biased_draw, BIASED_DRAWS)
        _choice("corrupt_side", self.corrupt_side, CORRUPT_SIDES)
        if self.shared_negatives is not None:
            if self.shared_negatives and self.batch_size % self.shared_negatives:
                raise ConfigError(
                    "shared_negatives",
                    f"must divide --batch-size {self.batch_size}. Received: {self.shared_negatives}",
                )
        if self.biased_chunk is not None:
            if self.biased_chunk and self.shared_negatives == 0:
                raise ConfigError("biased_chunk", "needs --shared-negatives C (the uniform negatives shared as well)")
            if self.biased_chunk and self.batch_size % self.biased_chunk:
                raise ConfigError(
                    "biased_chunk", f"must divide --batch-size {self.batch_size}. Received: {self.biased_chunk}"
                )

    @property
    def is_resolved(self) -> bool:
        """Whether every setting is a number (no ``None`` left for `resolved` to choose)."""
        return self.shared_negatives is not None and self.biased_chunk is not None

    def resolved(self, *, sampled: bool = True, pair_every: int = 1, replicas: int = 1) -> SamplerConfig:
        """This config with ``None`` settings chosen: what a run records in ``config.json``.

        ``shared_negatives``: each replica's whole batch with a sampled loss (``sampled``),
        0 with a loss that scores every entity (negatives have no meaning there).
        ``biased_chunk``: `AUTO_BIASED_CHUNK` when there are biased negatives (``p > 0``) and
        shared ones, it divides their chunk, and ``pair_every`` divides it; else 0.

        Why: the defaults are the recommended sampled recipe (README's first row), and a run
        that changes the batch, the loss, ``p`` or the devices should still get a valid
        setting, not an error about a flag it never gave. Settings given stay as given.
        """
        shared = self.shared_negatives
        if shared is None:
            per_replica = self.batch_size // replicas if self.batch_size % replicas == 0 else 0
            shared = per_replica if sampled else 0
        chunk = self.biased_chunk
        if chunk is None:
            fits = shared and shared % AUTO_BIASED_CHUNK == 0 and AUTO_BIASED_CHUNK % pair_every == 0
            chunk = AUTO_BIASED_CHUNK if sampled and self.p > 0 and fits else 0
        return dataclasses.replace(self, shared_negatives=shared, biased_chunk=chunk)
