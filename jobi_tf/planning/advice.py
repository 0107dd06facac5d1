"""Which regime to train a graph with in a budget of hours on this CPU: 1-vs-all or sampled JoBi.

Why measured: a 1-vs-all epoch's time differs by more than 10x between CPUs (bfloat16 dot
products or not, cores, load), and its matrix products (``12·T·N·W`` FLOPs: T training
triples, N entities, rows of W floats) are only part of it. So `advise` times whole kbc-fast
steps here (`jobi_tf.planning.step_probe`, on a stand-in graph of the graph's relations and up
to 20,000 entities), scales them to the graph's epoch, and `RULE` says how many epochs 1-vs-all
needed to pass sampled JoBi's converged model at a graph's sparsity (`MEASUREMENTS`; both in
`jobi_tf.planning.regime_rule`); on a dense graph of `PRESET_FROM_ENTITIES` or more the sampled
preset is advised whatever the budget. The estimate was checked against a real epoch once
(docs/decision-guide.md). TensorFlow is imported only when advising.
"""

from __future__ import annotations

import dataclasses
import math
import os
import shlex
from pathlib import Path
from typing import Any

from jobi_tf.config import DataConfig, ModelConfig, RunConfig, SamplerConfig, with_settings
from jobi_tf.config.fields import MATMUL_DTYPE_CHOICES
from jobi_tf.data.index import KGIndex
from jobi_tf.datasets.loading import LOCAL_COPIES_ENV
from jobi_tf.planning.presets import PRESETS, apply_preset
from jobi_tf.planning.regime_rule import (
    MEASUREMENTS,
    PRESET_FROM_ENTITIES,
    RULE,
    Measurement,
    RuleRow,
    band_words,
    rule_row,
)
from jobi_tf.planning.step_probe import MAX_PROBE_ENTITIES, StepTiming, probe_steps, steps_per_epoch
from jobi_tf.runtime.errors import ConfigError
from jobi_tf.runtime.tf_settings import choose_matmul_dtype

__all__ = ["Measurement", "MEASUREMENTS", "RuleRow", "RULE", "rule_row", "one_vs_all_config", "epoch_flops"]
__all__ += ["Advice", "advise", "ONE_VS_ALL", "SAMPLED_JOBI", "PRESET_FROM_ENTITIES"]

ONE_VS_ALL = "1-vs-all"
SAMPLED_JOBI = "sampled JoBi"
#: The 1-vs-all recipe the rule was measured with, and whose steps are timed.
ONE_VS_ALL_PRESET = "kbc-fast"
#: The sampled recipe recommended where 1-vs-all does not fit (docs/replicated-graph.md).
SAMPLED_PRESET = "large-graph"
#: From this many sampled steps an epoch (batches of 1,000), validate a fixed sample about four times
#: an epoch: at 1.85M entities models peaked within epochs 1-2 (docs/performance.md).
LONG_EPOCH_STEPS = 8000


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
    `reason`) is derived from the fields, so an `Advice` with another ``epoch_seconds`` decides anew.

    Attributes:
        graph, num_entities, num_relations, num_triples: the graph's name and sizes (T: training triples).
        rank, width: ComplEx's rank and its rows' floats W (``2·rank``); matmul_dtype: training's
            products' dtype (``auto`` resolved as training resolves it); batch_size: kbc-fast's.
        epoch_seconds: one 1-vs-all epoch on this CPU, estimated from ``probe`` (validation
            not included); probe: the timed steps (None: ``epoch_seconds`` was given).
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
    batch_size: int
    epoch_seconds: float
    probe: StepTiming | None
    hours: float
    graph_flags: str
    floor_command: str

    @property
    def triples_per_entity(self) -> float:
        return self.num_triples / self.num_entities

    @property
    def steps_per_epoch(self) -> int:
        return steps_per_epoch(self.num_triples, self.batch_size)

    @property
    def flops_per_epoch(self) -> int:
        """The epoch's matrix products (`epoch_flops`), for information: not what is timed."""
        return epoch_flops(self.num_triples, self.num_entities, self.width)

    @property
    def effective_rate(self) -> float:
        """The epoch's product FLOPs over its estimated seconds (for information: the rest of the step counts too)."""
        return self.flops_per_epoch / self.epoch_seconds

    @property
    def epoch_time(self) -> str:
        return _duration(self.epoch_seconds)

    @property
    def rule(self) -> RuleRow:
        return rule_row(self.triples_per_entity)

    @property
    def preset_wins(self) -> bool:
        """A graph of the densest band with `PRESET_FROM_ENTITIES` or more: the sampled preset whatever the budget."""
        return self.rule is RULE[0] and self.num_entities >= PRESET_FROM_ENTITIES

    @property
    def regime(self) -> str:
        """`ONE_VS_ALL` when the rule's epochs fit in the budget (and `preset_wins` is false), else `SAMPLED_JOBI`."""
        fits = self.rule.epochs * self.epoch_seconds <= self.hours * 3600
        return ONE_VS_ALL if fits and not self.preset_wins else SAMPLED_JOBI

    @property
    def command(self) -> str:
        one_vs_all = self.regime == ONE_VS_ALL
        recipe = (
            f"--preset {ONE_VS_ALL_PRESET} --matmul-dtype auto"
            if one_vs_all
            else f"--preset {SAMPLED_PRESET} --joint --p 0.3{self._validation_flags()}"
        )
        dim = PRESETS[ONE_VS_ALL_PRESET].settings["dim"] if one_vs_all else ModelConfig().dim
        return f"jobi-tf train {self.graph_flags} {recipe}" + ("" if self.rank == dim else f" --dim {self.rank}")

    def _validation_flags(self) -> str:
        """A sampled run's validation of a fixed sample several times an epoch, on a long epoch."""
        steps = steps_per_epoch(self.num_triples, SamplerConfig().batch_size)
        if steps < LONG_EPOCH_STEPS:
            return ""
        every = max(1000, round(steps / 4, -3))
        return f" --valid-sample 1000 --eval-every-steps {every:.0f} --valid-dtype auto"

    @property
    def reason(self) -> str:
        """One sentence: the rule's row, its epochs, an epoch's time and the budget."""
        row, epoch, density = self.rule, self.epoch_time, f"{self.triples_per_entity:.1f}"
        graphs = ", ".join(f"{m.graph} ({m.triples_per_entity:g})" for m in row.measured_on)
        fits = row.epochs * self.epoch_seconds <= self.hours * 3600
        if self.preset_wins:
            return (
                f"{density} training triples per entity and {self.num_entities:,} entities: on such a graph "
                f"(FB15k-237 replicated to 108,943 entities) --preset {SAMPLED_PRESET} tested 0.214 MRR in under 13 "
                f"minutes of training against 1-vs-all's 0.196 after 3 epochs, so it is advised even though "
                f"{row.epochs} x {epoch} of 1-vs-all {'fit in' if fits else 'exceed'} the budget of {self.hours:g} h."
            )
        verdict = "fit in" if fits else "exceed"
        return (
            f"{density} training triples per entity is in the rule's row {band_words(row)} "
            f"(measured on {graphs}): {row.epochs} epochs of 1-vs-all to pass sampled JoBi, and {row.epochs} x "
            f"{epoch} = {_duration(row.epochs * self.epoch_seconds)} {verdict} the budget of {self.hours:g} h."
        )

    def to_dict(self) -> dict[str, Any]:
        """Every field and derived value, JSON-ready."""
        derived = ("triples_per_entity", "steps_per_epoch", "flops_per_epoch", "effective_rate", "epoch_time")
        derived += ("preset_wins", "regime", "command")
        out = {**dataclasses.asdict(self), **{name: getattr(self, name) for name in (*derived, "reason")}}
        return {**out, "epochs": self.rule.epochs, "rule": dataclasses.asdict(self.rule)}


def one_vs_all_config(rank: int = 200, matmul_dtype: str = "auto", dataset: str | None = None) -> RunConfig:
    """The config ``jobi-tf train --preset kbc-fast --matmul-dtype MATMUL_DTYPE [--dim RANK]``
    trains for ``dataset`` (its name picks the preset's settings for it), with ``auto``
    resolved as training resolves it on this machine (`choose_matmul_dtype`)."""
    import tensorflow as tf

    cfg = apply_preset(RunConfig(), ONE_VS_ALL_PRESET, dataset=dataset)
    gpus = bool(tf.config.list_physical_devices("GPU"))
    dtype = choose_matmul_dtype(matmul_dtype, cfg.train.jit_compile, gpus)
    return with_settings(cfg, {"dim": rank, "matmul_dtype": dtype})


def advise(
    index: KGIndex,
    hours: float,
    *,
    data: DataConfig | None = None,
    rank: int = 200,
    matmul_dtype: str = "auto",
    epoch_seconds: float | None = None,
) -> Advice:
    """Time kbc-fast's training steps on this CPU (unless ``epoch_seconds`` is given) and advise on a regime.

    The steps run on a stand-in graph of ``min(N, 20,000)`` entities and the graph's relations
    (`jobi_tf.planning.step_probe`: the median of five after two warm-up), scaled to the graph's epoch.

    Args:
        index: the graph; the sizes of its training split and entity table are what count.
        hours: the training budget.
        data: where the graph came from, for the commands and the preset's per-dataset
            settings (None: ``--data-dir GRAPH``).
        rank: ComplEx's rank (``--dim``) of the recipes.
        matmul_dtype: ``auto`` (resolved as kbc-fast's training resolves it), ``float32``, ``bfloat16``.
        epoch_seconds: one 1-vs-all epoch's seconds to decide with instead of probing (a
            test, an epoch timed elsewhere).

    Raises:
        ConfigError: an argument out of range, naming it.
    """
    _check_arguments(hours, rank, matmul_dtype, epoch_seconds)
    from jobi_tf.models.scorers import get_scorer

    cfg = one_vs_all_config(rank, matmul_dtype, data.name if data is not None else None)
    num_triples, probe = len(index.train), None
    if epoch_seconds is None:
        probe = probe_steps(cfg, min(index.num_entities, MAX_PROBE_ENTITIES), index.num_relations)
        epoch_seconds = probe.epoch_seconds(num_triples, index.num_entities)
    return Advice(
        graph=data.name if data is not None else "triples",
        num_entities=index.num_entities,
        num_relations=index.num_relations,
        num_triples=num_triples,
        rank=rank,
        width=get_scorer(cfg.model.model).entity_width(rank),
        matmul_dtype=cfg.train.matmul_dtype,
        batch_size=cfg.sampler.batch_size,
        epoch_seconds=float(epoch_seconds),
        probe=probe,
        hours=float(hours),
        graph_flags=_graph_flags(data),
        floor_command=_floor_command(data),
    )


def _check_arguments(hours: float, rank: int, matmul_dtype: str, epoch_seconds: float | None) -> None:
    for name, value in (("hours", hours), ("epoch_seconds", 1.0 if epoch_seconds is None else epoch_seconds)):
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
