"""The rule `jobi-tf advise` decides with, and the measurements it stands on.

Why a module of its own: the rule is data measured by benchmarks; the measurements live in
``regime_measurements.json`` beside this module (each with the raw files it was read from and
the page that shows them, docs/decision-guide.md), which the tests check against those files;
`jobi_tf.planning.advice` only applies the rule to a graph, a CPU's measured speed and a budget.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

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
        raw: the raw benchmark files it was read from (``A.json against B.json``, B's folder
            relative to A's), under the data file's ``raw_folder``.
    """

    graph: str
    triples_per_entity: float
    epochs: int
    result: str
    raw: str


def _read(path: Path) -> tuple[dict, tuple[Measurement, ...]]:
    data = json.loads(path.read_text(encoding="utf-8"))
    return data, tuple(Measurement(**m) for m in data["measurements"])


#: The measurements' file: its ``page``, ``how`` they were measured and ``raw_folder``, beside them.
MEASURED, MEASUREMENTS = _read(Path(__file__).with_name("regime_measurements.json"))


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
