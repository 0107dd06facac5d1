"""The rule `jobi-tf advise` decides with, and the measurements it stands on.

Why a module of its own: the rule is data read from raw benchmark files (docs/results/), which
the tests check against those files; `jobi_tf.training.advice` only applies it to a graph, a
CPU's measured speed and a budget.
"""

from __future__ import annotations

import dataclasses
import math

__all__ = ["Measurement", "MEASUREMENTS", "RuleRow", "RULE", "rule_row", "band_words", "PRESET_FROM_ENTITIES"]

#: From this many entities, on a graph of the densest band, the sampled preset is advised even where
#: 1-vs-all's epochs fit: at K = 8 (108,943 entities, 10.5 triples per entity) it tested 0.2139 ±
#: 0.0007 (JoBi, 3 seeds) after under 13 minutes of training, against 1-vs-all's 0.1963 after 3
#: epochs (152 minutes); on FB15k-237 (14,541) they were level (docs/decision-guide.md). The size
#: where the preset starts to win, between the two, is not measured.
PRESET_FROM_ENTITIES = 100_000


@dataclasses.dataclass(frozen=True)
class Measurement:
    """One graph on which 1-vs-all (``--preset kbc-fast``) raced sampled JoBi (``--joint --p 0.3``).

    Attributes:
        graph: the graph's name.
        triples_per_entity: its training triples per entity, T / N.
        epochs: the 1-vs-all epochs after which its validation MRR first passed sampled
            JoBi's best.
        result: the figures behind ``epochs``.
        source: the raw files under docs/results/ it was read from.
    """

    graph: str
    triples_per_entity: float
    epochs: int
    result: str
    source: str


_APH = "bench/accuracy_per_hour.py on one AMD EPYC core with AVX512-BF16, bfloat16 products: docs/results/"
#: What `RULE` stands on, one seed each: ``--preset kbc-fast --matmul-dtype bfloat16`` against
#: sampled JoBi's run to convergence (each raw file's ``curve`` holds the validation MRR of
#: every epoch). Adagrad's accumulators start at 0, the preset's start, except in the run of
#: K = 8, made when kbc-fast started at 1e-10 (a dense graph, where the start did not change the
#: epochs: FB15k-237, K = 1 and K = 4 passed after 2 both ways), and on WN18RR, whose settings
#: still start at 1e-10 (docs/studies/adagrad-start.md).
MEASUREMENTS: tuple[Measurement, ...] = (
    Measurement(
        "FB15k-237", 18.7, 2, "validation MRR 0.3230 after 2 epochs against JoBi's best 0.3207",
        _APH + "decision-guide/aph-fb15k-237-one-vs-all-from-0-s0.json against "
        "../accuracy-per-hour/fb15k-237-jobi-s0.json",
    ),
    Measurement(
        "FB15k-237 replicated at K = 1", 10.5, 2, "validation MRR 0.2193 after 2 epochs against JoBi's best 0.2163",
        _APH + "decision-guide/aph-K1-one-vs-all-from-0-s0.json against ../replicated/aph-K1-jobi-s0.json",
    ),
    Measurement(
        "FB15k-237 replicated at K = 4", 10.6, 2, "validation MRR 0.2030 after 2 epochs against JoBi's best 0.1937",
        _APH + "decision-guide/aph-K4-one-vs-all-from-0-s0.json against ../replicated/aph-K4-jobi-s0.json",
    ),
    Measurement(
        "FB15k-237 replicated at K = 8", 10.5, 2, "validation MRR 0.1881 after 2 epochs against JoBi's best 0.1795",
        _APH + "replicated/aph-K8-one-vs-all-s0.json against aph-K8-jobi-s0.json",
    ),
    Measurement(
        "WN18RR", 2.1, 4, "validation MRR 0.4525 after 4 epochs against JoBi's best 0.4489 "
        "(0.4483 after 3; level on test after 3: 0.4501 against 0.4490)",
        _APH + "accuracy-per-hour/wn18rr-one-vs-all-s0.json against wn18rr-jobi-s0.json",
    ),
    Measurement(
        "FB15k-237 thinned to 13%", 2.9, 1, "validation MRR 0.1633 after 1 epoch against JoBi's best 0.0698",
        _APH + "adagrad-start/aph-fb15k-237-thin-one-vs-all-from-0-s0.json against "
        "../decision-guide/aph-fb15k-237-thin-jobi-s0.json",
    ),
    Measurement(
        "FB15k-237 thinned to 5%", 1.5, 1, "validation MRR 0.1514 after 1 epoch against JoBi's best 0.0188",
        _APH + "adagrad-start/aph-fb15k-237-thin05-one-vs-all-from-0-s0.json against "
        "../decision-guide/aph-fb15k-237-thin05-jobi-s0.json",
    ),
    Measurement(
        "WN18RR thinned to 50%", 1.3, 2, "validation MRR 0.1846 after 2 epochs against JoBi's best 0.1367",
        _APH + "decision-guide/aph-wn18rr-thin50-one-vs-all-s0.json against aph-wn18rr-thin50-jobi-s0.json",
    ),
)  # fmt: skip


@dataclasses.dataclass(frozen=True, kw_only=True)
class RuleRow:
    """A band of sparsity and the 1-vs-all epochs to budget there to pass sampled JoBi.

    Attributes:
        min_triples_per_entity: where the band starts (it ends where the denser row starts).
        epochs: the 1-vs-all epochs to budget: the most any graph measured in the band needed.
        measured_on: the `MEASUREMENTS` in the band.
    """

    min_triples_per_entity: float
    epochs: int
    measured_on: tuple[Measurement, ...]


def _band(low: float, high: float) -> tuple[Measurement, ...]:
    return tuple(m for m in MEASUREMENTS if low <= m.triples_per_entity < high)


#: The rule, densest band first: 2 epochs from 10 triples per entity, 4 below (WN18RR's 4 are
#: by validation; the thinned graphs, down to 1.3 per entity, needed 1 or 2).
RULE: tuple[RuleRow, ...] = (
    RuleRow(min_triples_per_entity=10.0, epochs=2, measured_on=_band(10.0, math.inf)),
    RuleRow(min_triples_per_entity=0.0, epochs=4, measured_on=_band(0.0, 10.0)),
)


def band_words(row: RuleRow) -> str:
    """``from 10``, ``from 2 to 10`` or ``below 10``: the band's bounds in triples per entity."""
    above = [r.min_triples_per_entity for r in RULE if r.min_triples_per_entity > row.min_triples_per_entity]
    if row.min_triples_per_entity == 0:
        return f"below {min(above):g}"
    return f"from {row.min_triples_per_entity:g}" + (f" to {min(above):g}" if above else "")


def rule_row(triples_per_entity: float) -> RuleRow:
    """The row of `RULE` whose band holds ``triples_per_entity``."""
    return next(row for row in RULE if triples_per_entity >= row.min_triples_per_entity)
