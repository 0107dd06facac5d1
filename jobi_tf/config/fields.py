"""What every config field is made of: choice lists, `setting` (a field that is also a flag)
and the one-line checks that name the flag.

The choice lists of ``--model``, ``--optimizer``, ``--loss`` and ``--regularizer`` are the
plug-in folders' modules (`jobi_tf.runtime.plugins`), read without importing them.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from jobi_tf.runtime import plugins
from jobi_tf.runtime.errors import ConfigError

__all__ = ["setting", "flag_name", "variant_name", "VARIANTS", "slot_prior_weight", "Bounds", "check_bounds"]

MODELS = plugins.names("scorer")  # the modules of jobi_tf/models/scorers
LOSSES = plugins.names("loss")  # the modules of jobi_tf/losses
#: ``auto`` (`jobi_tf.optimizers.choose_optimizer`), then the modules of jobi_tf/optimizers.
OPTIMIZERS = ("auto", *plugins.names("optimizer"))
#: ``--optimizer auto`` trains lazy Adam from this many entity rows on (dense Adam below).
LAZY_MIN_ROWS = 100_000
RANK_TYPES = ("optimistic", "realistic", "pessimistic")
RESTRICTS = ("none", "slots", "soft-slots")
CORRUPT_SIDES = ("per-negative", "per-positive")
MONITORS = ("hits@10", "hits@3", "hits@1", "mrr")
INITS = ("table-glorot", "row-glorot")
REGULARIZERS = plugins.names("regularizer")  # the modules of jobi_tf/regularizers
#: dtypes of the every-entity scoring products in training (``--matmul-dtype``).
MATMUL_DTYPES = ("float32", "bfloat16")
#: ``--matmul-dtype`` choices: a dtype, or ``auto`` (chosen from the CPU when the run starts).
MATMUL_DTYPE_CHOICES = (*MATMUL_DTYPES, "auto")
#: dtypes an export can store its entity table in (``jobi-tf export --table-dtype``).
TABLE_DTYPES = ("float32", "bfloat16")
STRATEGIES = ("default", "mirrored", "multi-worker", "parameter-server")  # see jobi_tf.distributed.strategy


#: The paper's ablation names (its Table 4), in the order `variant_name` indexes them.
VARIANTS = ("baseline", "biasedneg", "joint", "jobi")


def variant_name(joint: bool, p: float) -> str:
    """The paper's ablation name of a (joint, p) setting."""
    return VARIANTS[2 * bool(joint) + (p > 0)]


def setting(default: Any, help: str = "", *, choices: tuple[str, ...] | None = None, **cli: Any):
    """A config field that also describes its command-line flag: help, choices and, in
    ``cli``, click's extras (``metavar``, ``flag`` for another name, ``cli=False`` to hide it).

    Why: a field's default, choices and meaning are written once; `jobi_tf.cli.options`
    builds each ``jobi-tf`` flag from them, so the CLI, the Python API and ``config.json`` agree.
    """
    return dataclasses.field(default=default, metadata={"help": help, "choices": choices, **cli})


def flag_name(section: type, field: str) -> str:
    """The ``--flag`` of a config field (its name with ``-``, unless its metadata names another)."""
    meta = next(f.metadata for f in dataclasses.fields(section) if f.name == field)
    return "--" + meta.get("flag", field).replace("_", "-")


@dataclasses.dataclass(frozen=True)
class Bounds:
    """The values a numeric field takes: its check (`check_bounds`, in the section's
    ``__post_init__``) and the range its ``--help`` shows, from one declaration
    (``setting(..., bounds=AT_LEAST_1)``).

    Args:
        integer: an integer (bools refused), else a finite number.
        low: the smallest value; ``high``: the largest (None: none).
        open_low: ``low`` itself refused (a learning rate > 0).
    """

    integer: bool
    low: float
    high: float | None = None
    open_low: bool = False

    def words(self) -> str:
        """``an integer >= 1``, ``a number > 0``, ``a number in [0, 1]``."""
        if self.high is not None:
            return f"a number in [{self.low:g}, {self.high:g}]"
        what = "an integer" if self.integer else "a number"
        return f"{what} {'>' if self.open_low else '>='} {self.low:g}"

    def check(self, field: str, value: float) -> None:
        """A `ConfigError` naming ``field`` when ``value`` is out of bounds."""
        if self.integer:
            _positive_int(field, value, int(self.low))
        elif self.high is not None:
            _probability(field, value)
        else:
            _positive_float(field, value, allow_zero=not self.open_low)


AT_LEAST_1 = Bounds(integer=True, low=1)
AT_LEAST_0 = Bounds(integer=True, low=0)
POSITIVE = Bounds(integer=False, low=0, open_low=True)
NOT_NEGATIVE = Bounds(integer=False, low=0)
SHARE = Bounds(integer=False, low=0, high=1)


def check_bounds(section: Any) -> None:
    """Check every field of a config ``section`` that declares `Bounds` (None: chosen later)."""
    for field in dataclasses.fields(section):
        bounds, value = field.metadata.get("bounds"), getattr(section, field.name)
        if bounds is not None and value is not None:
            bounds.check(field.name, value)


def _positive_int(field: str, value: int, minimum: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(field, f"must be an integer >= {minimum}. Received: {value!r}")


def _probability(field: str, value: float) -> None:
    if not isinstance(value, (int, float)) or not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise ConfigError(field, f"must be a number in [0, 1]. Received: {value!r}")


def slot_prior_weight(value: float, option: str = "slot_prior") -> float:
    """The slot counts' weight ``w`` (`jobi_tf.models.slot_prior`) as a float, or a `ConfigError`
    naming ``option``: the one check of it, for the training flag (``--slot-prior``), the
    evaluate/export override (``--prior-weight``) and the prior object's ``weight``."""
    if isinstance(value, bool):
        raise ConfigError(option, f"must be a finite number >= 0. Received: {value!r}")
    NOT_NEGATIVE.check(option, value)
    return float(value)


def _positive_float(field: str, value: float, allow_zero: bool = False) -> None:
    ok = isinstance(value, (int, float)) and math.isfinite(value) and (value > 0 or (allow_zero and value == 0))
    if not ok:
        bound = ">= 0" if allow_zero else "> 0"
        raise ConfigError(field, f"must be a finite number {bound}. Received: {value!r}")


def _choice(field: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ConfigError(field, f"must be one of {', '.join(choices)}. Received: {value!r}")
