"""Frozen configuration objects, one per stage, composed into `RunConfig`.

Field names are the CLI flag names (``batch_size`` ↔ ``--batch-size``), so a bad value is
reported as the flag the user typed. Defaults are the paper's and its code's, except the
sampler's and the schedule's: those are the recommended sampled recipe (1000 x 100 negatives
shared by the batch, biased ones by runs of 10, validation MRR every epoch, patience 10;
README's first row), and ``--preset paper`` is the paper's (`jobi_tf.planning.presets`). The sections
live in `jobi_tf.config.sections`, `jobi_tf.config.sampler` and `jobi_tf.config.distribution`, what a field is made of
in `jobi_tf.config.fields`; every name is importable from here.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from jobi_tf.config.distribution import DistributeConfig
from jobi_tf.config.fields import (
    AT_LEAST_0,
    LAZY_MIN_ROWS,
    LOSSES,
    MATMUL_DTYPE_CHOICES,
    MATMUL_DTYPES,
    MODELS,
    REGULARIZERS,
    STRATEGIES,
    TABLE_DTYPES,
    VARIANTS,
    _positive_int,
    check_bounds,
    flag_name,
    setting,
    variant_name,
)
from jobi_tf.config.sections import (
    AUTO_BIASED_CHUNK,
    DataConfig,
    EvalConfig,
    ModelConfig,
    SamplerConfig,
    TrainConfig,
)
from jobi_tf.runtime.errors import ConfigError

__all__ = [
    "DataConfig",
    "SamplerConfig",
    "ModelConfig",
    "TrainConfig",
    "EvalConfig",
    "DistributeConfig",
    "RunConfig",
    "SECTIONS",
    "ExportConfig",
    "with_settings",
    "variant_name",
    "setting",
    "flag_name",
    "LAZY_MIN_ROWS",
    "AUTO_BIASED_CHUNK",
    "LOSSES",
    "MATMUL_DTYPES",
    "MATMUL_DTYPE_CHOICES",
    "TABLE_DTYPES",
    "MODELS",
    "REGULARIZERS",
    "STRATEGIES",
    "VARIANTS",
]


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunConfig:
    """One training run; saved as ``config.json`` in the run folder and compared on resume."""

    data: DataConfig = dataclasses.field(default_factory=DataConfig)
    sampler: SamplerConfig = dataclasses.field(default_factory=SamplerConfig)
    model: ModelConfig = dataclasses.field(default_factory=ModelConfig)
    train: TrainConfig = dataclasses.field(default_factory=TrainConfig)
    eval: EvalConfig = dataclasses.field(default_factory=EvalConfig)
    distribute: DistributeConfig = dataclasses.field(default_factory=DistributeConfig)
    seed: int = setting(0, "Seed of the initial weights, the epoch order and the negatives.", bounds=AT_LEAST_0)

    def __post_init__(self) -> None:
        check_bounds(self)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunConfig:
        optional = {"distribute"}  # runs saved before it existed get its defaults
        return cls(seed=d["seed"], **{k: c(**d[k]) for k, c in SECTIONS.items() if k in d or k not in optional})

    def resolved(self, *, sampled: bool, replicas: int = 1) -> RunConfig:
        """This config with the sampler's ``None`` settings chosen (`SamplerConfig.resolved`):
        ``sampled`` says whether the loss samples negatives (`jobi_tf.regimes.resolve` knows),
        ``replicas`` how many replicas split each batch."""
        if self.sampler.is_resolved:
            return self
        sampler = self.sampler.resolved(sampled=sampled, pair_every=self.train.pair_every, replicas=replicas)
        return dataclasses.replace(self, sampler=sampler)

    def hparams(self) -> dict[str, Any]:
        """The hyper-parameters a run shows in TensorBoard's HParams view (``jobi-tf grid`` declares their domains)."""
        return {
            "model": self.model.model,
            "variant": variant_name(self.model.joint, self.sampler.p),
            "dim": self.model.dim,
            "joint": self.model.joint,
            "reciprocal": self.model.reciprocal,
            "p": self.sampler.p,
            "alpha": self.train.alpha,
            "batch_size": self.sampler.batch_size,
            "neg": self.sampler.neg,
            "shared_negatives": self.sampler.shared_negatives,
            "loss": self.train.loss,
            "lr": self.train.lr,
            "optimizer": self.train.optimizer,
            "seed": self.seed,
            "dataset": self.data.name,  # a name, not a machine's path
        }

    def training_identity(self) -> dict[str, Any]:
        """The fields that must match to resume a run (evaluation settings may change)."""
        d = self.to_dict()
        d.pop("eval")
        d.pop("distribute")  # a run may continue on other devices
        d["train"].pop("epochs")
        d["train"].pop("patience")
        d["train"].pop("checkpoint_steps")  # when to save, not what is trained
        d["train"].pop("first_check_steps")  # a look at the model, not what is trained
        d["train"].pop("steps_per_execution")  # how steps are dispatched, not which
        return d


#: The sections of a `RunConfig`, by attribute name.
SECTIONS: dict[str, type] = {
    "data": DataConfig,
    "sampler": SamplerConfig,
    "model": ModelConfig,
    "train": TrainConfig,
    "eval": EvalConfig,
    "distribute": DistributeConfig,
}


def with_settings(base: RunConfig, settings: dict[str, Any]) -> RunConfig:
    """``base`` with fields replaced by name (``batch_size=1000``, ``reciprocal=True``, ``seed=1``).

    Every name is a field of a section other than ``data`` (the data are given separately);
    an unknown name is a `ConfigError` listing the known ones.
    """
    owner = {f.name: section for section, cls in SECTIONS.items() for f in dataclasses.fields(cls)}
    changes: dict[str, dict[str, Any]] = {}
    top: dict[str, Any] = {}
    for name, value in settings.items():
        if name == "seed":
            top["seed"] = value
        elif name in owner and owner[name] != "data":
            changes.setdefault(owner[name], {})[name] = value
        else:
            known = sorted(n for n, s in owner.items() if s != "data") + ["seed"]
            raise ConfigError(name, f"is not a setting of train(); known: {', '.join(known)}", as_flag=False)
    sections = {s: dataclasses.replace(getattr(base, s), **c) for s, c in changes.items()}
    return dataclasses.replace(base, **sections, **top)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ExportConfig:
    """How a run becomes a SavedModel (not part of `RunConfig`: one run can be exported many ways).

    Attributes:
        version: the TensorFlow Serving version folder ``EXPORT_BASE/<version>``; None
            takes one more than the highest existing version (1 in an empty folder).
        force: replace an existing version (otherwise it is refused).
        filter_known: in ``predict_tail``/``predict_head``, rank the facts of the training
            split last (score ``-inf``), so the top-k holds only new facts.
        typed: add ``predict_tail_typed``/``predict_head_typed``: top-k among the entities
            seen in that slot of the relation in training (type-aware answers).
        pair_head: with ``typed``, a joint run also exports its pair head's relation table
            and ``predict_tail_soft_typed``/``predict_head_soft_typed``, which admit the
            entities the pair head places in the slot (``min_pair_probability`` input).
        cells: add ``predict_tail_approximate``/``predict_head_approximate``, served from this
            many k-means cells of the entity rows (`jobi_tf.export.cells`); ``"auto"`` takes
            about 4·sqrt(entities); 0 leaves them out. The export then numbers its entities
            cell by cell (`jobi_tf.export.cells.cell_order`). A model that ranks with slot counts
            is served with them there too (`jobi_tf.export.cells.SlotCells`).
        table_dtype: the stored entity table's dtype: ``float32``, or ``bfloat16`` (half the
            bytes; products in float32 of the rounded rows, through XLA: docs/serving.md).
    """

    version: int | None = None
    force: bool = False
    filter_known: bool = False
    typed: bool = False
    pair_head: bool = False
    cells: int | str = 0
    table_dtype: str = "float32"

    def __post_init__(self) -> None:
        check_bounds(self)
        if self.table_dtype not in TABLE_DTYPES:
            raise ConfigError("table_dtype", f"must be one of {', '.join(TABLE_DTYPES)}, got {self.table_dtype!r}")
        if self.version is not None:
            _positive_int("version", self.version)
        if self.cells != "auto" and (isinstance(self.cells, bool) or not isinstance(self.cells, int) or self.cells < 0):
            raise ConfigError("cells", f"must be 'auto' or a whole number >= 0, got {self.cells!r}")
        if self.pair_head and not self.typed:
            raise ConfigError("pair_head", "needs --typed (it softens the typed answers)")
