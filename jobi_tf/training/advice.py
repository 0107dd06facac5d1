"""Which regime to train a graph with in a budget of hours on this CPU: 1-vs-all or sampled JoBi.

Why measured: a 1-vs-all epoch is nearly all matrix products, ``12·T·N·W`` FLOPs (T training
triples, N entities, rows of W floats), whose rate differs by more than 10x between CPUs
(bfloat16 dot products or not, cores, load); the decision guide used one AMD EPYC core's.
`measure_rate` times those products here, `epoch_flops` counts an epoch, `RULE` says how many
epochs 1-vs-all needed to pass sampled JoBi's converged model at a graph's sparsity
(`MEASUREMENTS`), and `advise` puts them together. TensorFlow is imported only when measuring.
"""

from __future__ import annotations

import dataclasses
import math
import os
import shlex
import statistics
import time
from pathlib import Path
from typing import Any

from jobi_tf.config import DataConfig, ModelConfig
from jobi_tf.config.fields import MATMUL_DTYPE_CHOICES
from jobi_tf.data.index import KGIndex
from jobi_tf.datasets.loading import LOCAL_COPIES_ENV
from jobi_tf.runtime.errors import ConfigError
from jobi_tf.runtime.tf_settings import choose_matmul_dtype
from jobi_tf.training.presets import PRESETS

__all__ = ["Measurement", "MEASUREMENTS", "RuleRow", "RULE", "rule_row", "RateMeasurement", "product_flops"]
__all__ += ["measure_rate", "epoch_flops", "Advice", "advise", "ONE_VS_ALL", "SAMPLED_JOBI"]

ONE_VS_ALL = "1-vs-all"
SAMPLED_JOBI = "sampled JoBi"
#: The 1-vs-all recipe the rule was measured with; its batch and XLA setting shape the rate.
ONE_VS_ALL_PRESET = "kbc-fast"
#: Entities the rate is measured against at most: the products' steady speed in a few seconds.
MAX_CANDIDATES = 50_000


@dataclasses.dataclass(frozen=True)
class Measurement:
    """One graph on which 1-vs-all (``--preset kbc-fast``) raced sampled JoBi (``--joint --p 0.3``).

    Attributes:
        graph: the graph's name.
        triples_per_entity: its training triples per entity, T / N.
        epochs: the 1-vs-all epochs after which its validation MRR first passed sampled
            JoBi's best; None: not passed in the epochs trained (``result`` says how many).
        result: the figures behind ``epochs``.
        source: where they were measured: raw files under docs/results/, or a report.
    """

    graph: str
    triples_per_entity: float
    epochs: int | None
    result: str
    source: str


_APH = "bench/accuracy_per_hour.py on one AMD EPYC core with AVX512-BF16, bfloat16 products: docs/results/"
#: What `RULE` stands on, one seed each. All but the last graph: ``--preset kbc-fast
#: --matmul-dtype bfloat16`` against sampled JoBi's run to convergence (each raw file's
#: ``curve`` holds the validation MRR of every epoch).
MEASUREMENTS: tuple[Measurement, ...] = (
    Measurement(
        "FB15k-237", 18.7, 2, "validation MRR 0.3263 after 2 epochs against JoBi's best 0.3207",
        _APH + "accuracy-per-hour/fb15k-237-one-vs-all-s0.json against fb15k-237-jobi-s0.json",
    ),
    Measurement(
        "FB15k-237 replicated at K = 1", 10.5, 2, "validation MRR 0.2182 after 2 epochs against JoBi's best 0.2163",
        _APH + "replicated/aph-K1-one-vs-all-s0.json against aph-K1-jobi-s0.json",
    ),
    Measurement(
        "FB15k-237 replicated at K = 4", 10.6, 2, "validation MRR 0.1988 after 2 epochs against JoBi's best 0.1937",
        _APH + "replicated/aph-K4-one-vs-all-s0.json against aph-K4-jobi-s0.json",
    ),
    Measurement(
        "WN18RR", 2.1, 4, "validation MRR 0.4525 after 4 epochs against JoBi's best 0.4489 "
        "(0.4483 after 3; level on test after 3: 0.4501 against 0.4490)",
        _APH + "accuracy-per-hour/wn18rr-one-vs-all-s0.json against wn18rr-jobi-s0.json",
    ),
    Measurement(
        "a user's graph of 78k entities", 1.3, None, "not passed in 3 epochs: test MRR 0.080 against JoBi's 0.179",
        "a user's bug report (the graph of docs/studies/one-vs-all-stall.md); AVX2, float32 products",
    ),
)  # fmt: skip


@dataclasses.dataclass(frozen=True, kw_only=True)
class RuleRow:
    """A band of sparsity and the 1-vs-all epochs it takes there to pass sampled JoBi.

    Attributes:
        min_triples_per_entity: where the band starts (it ends where the denser row starts).
        epochs: the 1-vs-all epochs to budget; None: 1-vs-all is not recommended in the band.
        measured_on: the `MEASUREMENTS` in the band.
    """

    min_triples_per_entity: float
    epochs: int | None
    measured_on: tuple[Measurement, ...]


def _band(low: float, high: float) -> tuple[Measurement, ...]:
    return tuple(m for m in MEASUREMENTS if low <= m.triples_per_entity < high)


#: The rule, densest band first: 2 epochs from 10 triples per entity, 4 from 2 (WN18RR's 4 are
#: by validation), and below 2 no measured graph where 1-vs-all passed sampled JoBi in time.
RULE: tuple[RuleRow, ...] = (
    RuleRow(min_triples_per_entity=10.0, epochs=2, measured_on=_band(10.0, math.inf)),
    RuleRow(min_triples_per_entity=2.0, epochs=4, measured_on=_band(2.0, 10.0)),
    RuleRow(min_triples_per_entity=0.0, epochs=None, measured_on=_band(0.0, 2.0)),
)


def rule_row(triples_per_entity: float) -> RuleRow:
    """The row of `RULE` whose band holds ``triples_per_entity``."""
    return next(row for row in RULE if triples_per_entity >= row.min_triples_per_entity)


@dataclasses.dataclass(frozen=True)
class RateMeasurement:
    """How fast this CPU ran 1-vs-all's products: ``[batch_size, width]`` queries against
    ``candidates`` entity rows, the forward and both backward products, in ``dtype``; the
    median of ``calls`` timed calls."""

    flops_per_second: float
    dtype: str
    batch_size: int
    candidates: int
    width: int
    seconds_per_call: float
    calls: int
    flops_per_call: int


def product_flops(batch_size: int, candidates: int, width: int) -> int:
    """FLOPs of one 1-vs-all step's products: the scores ``q @ E^T`` and the gradients of
    ``q`` and of ``E``, each ``2·B·M·W`` (a multiply and an add per term)."""
    return 3 * 2 * batch_size * candidates * width


def measure_rate(
    width: int, candidates: int, *, batch_size: int = 500, dtype: str = "float32", calls: int = 5, seed: int = 0
) -> RateMeasurement:
    """Time 1-vs-all's products on this CPU: one warm-up call, then the median of ``calls``.

    The three products run in one ``tf.function`` without XLA, as ``--preset kbc-fast``
    trains, on the threads TensorFlow gives by default, as training leaves them; the inputs
    are cast to ``dtype`` before the timed calls, as the model casts its rows before its products.
    """
    import tensorflow as tf

    shapes = [(batch_size, width), (candidates, width), (batch_size, candidates)]
    queries, table, upstream = (
        tf.cast(tf.random.stateless_normal(s, seed=(seed, i)), dtype) for i, s in enumerate(shapes)
    )

    @tf.function(jit_compile=False)
    def step(q: tf.Tensor, e: tf.Tensor, g: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        scores = tf.matmul(q, e, transpose_b=True)  # [B, M]
        return scores, tf.matmul(g, e), tf.matmul(g, q, transpose_a=True)  # d/dq [B, W], d/dE [M, W]

    step(queries, table, upstream)  # traces
    seconds = []
    for _ in range(calls):
        start = time.perf_counter()
        step(queries, table, upstream)
        seconds.append(time.perf_counter() - start)
    median, flops = statistics.median(seconds), product_flops(batch_size, candidates, width)
    return RateMeasurement(flops / median, dtype, batch_size, candidates, width, median, calls, flops)


def epoch_flops(num_triples: int, num_entities: int, width: int) -> int:
    """FLOPs of one 1-vs-all epoch: 2 queries per triple (reciprocal relations), each
    ``2·N·W`` forward and ``4·N·W`` backward: ``12·T·N·W``."""
    return 12 * num_triples * num_entities * width


def _duration(seconds: float) -> str:
    for unit, size, above in (("years", 365 * 86400, 365 * 86400), ("days", 86400, 2 * 86400), ("h", 3600, 7200)):
        if seconds >= above:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds / 60:.1f} min" if seconds >= 120 else f"{seconds:.1f} s"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Advice:
    """What `advise` measured for a graph and a budget. The decision (`regime`, `command`,
    `reason`) is derived from the fields, so an `Advice` with another rate decides anew.

    Attributes:
        graph, num_entities, num_relations, num_triples: the graph's name and sizes (T: training triples).
        rank, width: ComplEx's rank and its rows' floats W (``2·rank``); matmul_dtype: training's
            products' dtype (``auto`` resolved as training resolves it).
        rate: this CPU's FLOP/s on those products; measurement: how (None: the rate was given).
        hours: the budget; graph_flags: the graph's flags in the commands; floor_command: how to
            measure the slot-frequency floor to read any result against.
    """

    graph: str
    num_entities: int
    num_relations: int
    num_triples: int
    rank: int
    width: int
    matmul_dtype: str
    rate: float
    measurement: RateMeasurement | None
    hours: float
    graph_flags: str
    floor_command: str

    @property
    def triples_per_entity(self) -> float:
        return self.num_triples / self.num_entities

    @property
    def flops_per_epoch(self) -> int:
        return epoch_flops(self.num_triples, self.num_entities, self.width)

    @property
    def epoch_seconds(self) -> float:
        return self.flops_per_epoch / self.rate

    @property
    def epoch_time(self) -> str:
        return _duration(self.epoch_seconds)

    @property
    def rule(self) -> RuleRow:
        return rule_row(self.triples_per_entity)

    @property
    def regime(self) -> str:
        """`ONE_VS_ALL` when the rule's epochs fit in the budget, else `SAMPLED_JOBI`."""
        epochs = self.rule.epochs
        return ONE_VS_ALL if epochs is not None and epochs * self.epoch_seconds <= self.hours * 3600 else SAMPLED_JOBI

    @property
    def command(self) -> str:
        one_vs_all = self.regime == ONE_VS_ALL
        recipe = f"--preset {ONE_VS_ALL_PRESET} --matmul-dtype auto" if one_vs_all else "--joint --p 0.3"
        dim = PRESETS[ONE_VS_ALL_PRESET].settings["dim"] if one_vs_all else ModelConfig().dim
        return f"jobi-tf train {self.graph_flags} {recipe}" + ("" if self.rank == dim else f" --dim {self.rank}")

    @property
    def reason(self) -> str:
        """One sentence: the rule's row, its epochs, an epoch's time and the budget."""
        row, epoch, density = self.rule, self.epoch_time, f"{self.triples_per_entity:.1f}"
        if row.epochs is None:
            seen = "; ".join(f"{m.graph}, {m.triples_per_entity:g} per entity: {m.result}" for m in row.measured_on)
            return (
                f"{density} training triples per entity is below {RULE[-2].min_triples_per_entity:g}, where the "
                f"guide does not recommend 1-vs-all: no graph measured there on which it passed sampled JoBi in time "
                f"({seen}); one 1-vs-all epoch would take {epoch}."
            )
        graphs = ", ".join(f"{m.graph} ({m.triples_per_entity:g})" for m in row.measured_on)
        verdict = "fit in" if self.regime == ONE_VS_ALL else "exceed"
        return (
            f"{density} training triples per entity is in the rule's row from {row.min_triples_per_entity:g} "
            f"(measured on {graphs}): {row.epochs} epochs of 1-vs-all to pass sampled JoBi, and {row.epochs} x "
            f"{epoch} = {_duration(row.epochs * self.epoch_seconds)} {verdict} the budget of {self.hours:g} h."
        )

    def to_dict(self) -> dict[str, Any]:
        """Every field and derived value, JSON-ready."""
        derived = ("triples_per_entity", "flops_per_epoch", "epoch_seconds", "epoch_time", "regime", "command")
        out = {**dataclasses.asdict(self), **{name: getattr(self, name) for name in (*derived, "reason")}}
        return {**out, "epochs": self.rule.epochs, "rule": dataclasses.asdict(self.rule)}


def advise(
    index: KGIndex,
    hours: float,
    *,
    data: DataConfig | None = None,
    rank: int = 200,
    matmul_dtype: str = "auto",
    rate: float | None = None,
) -> Advice:
    """Measure this CPU's 1-vs-all rate (unless ``rate`` is given) and advise on a regime.

    Args:
        index: the graph; the size of its training split is what counts.
        hours: the training budget.
        data: where the graph came from, for the commands (None: ``--data-dir GRAPH``).
        rank: ComplEx's rank (``--dim``) of the recipes.
        matmul_dtype: ``auto`` (resolved as kbc-fast's training resolves it), ``float32``, ``bfloat16``.
        rate: FLOP/s to decide with instead of measuring (a test, a rate measured elsewhere).

    Raises:
        ConfigError: an argument out of range, naming it.
    """
    _check_arguments(hours, rank, matmul_dtype, rate)
    import tensorflow as tf

    from jobi_tf.models.scorers import get_scorer

    recipe = PRESETS[ONE_VS_ALL_PRESET].settings  # its scorer is ComplEx; its XLA setting counts for auto
    width = get_scorer("complex").entity_width(rank)
    dtype = choose_matmul_dtype(matmul_dtype, recipe["jit_compile"], bool(tf.config.list_physical_devices("GPU")))
    measurement = None
    if rate is None:  # kbc-fast's batch against (at most MAX_CANDIDATES of) the graph's entities
        candidates = min(index.num_entities, MAX_CANDIDATES)
        measurement = measure_rate(width, candidates, batch_size=recipe["batch_size"], dtype=dtype)
        rate = measurement.flops_per_second
    return Advice(
        graph=data.name if data is not None else "triples",
        num_entities=index.num_entities,
        num_relations=index.num_relations,
        num_triples=len(index.train),
        rank=rank,
        width=width,
        matmul_dtype=dtype,
        rate=float(rate),
        measurement=measurement,
        hours=float(hours),
        graph_flags=_graph_flags(data),
        floor_command=_floor_command(data),
    )


def _check_arguments(hours: float, rank: int, matmul_dtype: str, rate: float | None) -> None:
    for name, value in (("hours", hours), ("rate", 1.0 if rate is None else rate)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise ConfigError(name, f"must be a finite number > 0. Received: {value!r}")
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise ConfigError("rank", f"must be an integer >= 1. Received: {rank!r}")
    if matmul_dtype not in MATMUL_DTYPE_CHOICES:
        raise ConfigError("matmul_dtype", f"must be one of {MATMUL_DTYPE_CHOICES}. Received: {matmul_dtype!r}")


def _graph_flags(data: DataConfig | None) -> str:
    if data is None:
        return "--data-dir GRAPH"
    given = (("--dataset", data.dataset), ("--data-dir", data.data_dir))
    return shlex.join([part for flag, value in given if value is not None for part in (flag, value)])


def _floor_command(data: DataConfig | None) -> str:
    """bench/popularity_ranking.py (a source checkout's) on the graph's folder, or a named graph's local copy."""
    folder, root = (data.data_dir if data else None), os.environ.get(LOCAL_COPIES_ENV)
    if folder is None and data is not None and data.dataset and root and (Path(root) / data.dataset).is_dir():
        folder = str(Path(root) / data.dataset)
    return "python bench/popularity_ranking.py --data-dir " + (shlex.quote(folder) if folder else "DIR")
