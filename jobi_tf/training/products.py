"""Which dtype a run's every-entity products take: ``--matmul-dtype`` (training's) and
``--valid-dtype`` (validation's), ``auto`` resolved from the CPU when the run starts, and a
warning where bfloat16 would be emulated.
"""

from __future__ import annotations

import dataclasses
import logging

import tensorflow as tf

from jobi_tf.config import EvalConfig, TrainConfig
from jobi_tf.runtime.tf_settings import choose_matmul_dtype, cpu_has_native_bfloat16

__all__ = ["resolve_dtypes", "check_matmul_dtype"]

logger = logging.getLogger(__name__)


def resolve_dtypes(
    train: TrainConfig, evaluation: EvalConfig, cpuinfo: str = "/proc/cpuinfo"
) -> tuple[TrainConfig, EvalConfig]:
    """The training and evaluation settings with ``--matmul-dtype auto`` and ``--valid-dtype
    auto`` replaced by their choices (logged in one line each); validation's products run
    outside XLA."""
    gpus = bool(tf.config.list_physical_devices("GPU"))
    if evaluation.valid_dtype == "auto":
        chosen = choose_matmul_dtype("auto", False, gpus, cpuinfo)
        logger.info("--valid-dtype auto: %s", chosen)
        evaluation = dataclasses.replace(evaluation, valid_dtype=chosen)
    if train.matmul_dtype != "auto":
        return train, evaluation
    chosen = choose_matmul_dtype(train.matmul_dtype, train.jit_compile, gpus, cpuinfo)
    logger.info("--matmul-dtype auto: %s", chosen)
    return dataclasses.replace(train, matmul_dtype=chosen), evaluation


def check_matmul_dtype(train: TrainConfig, evaluation: EvalConfig, cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Warn, in one line, when bfloat16 products will run on a CPU without bfloat16 arithmetic.

    Why a warning and not a switch to float32: the dtype is part of what the run trains (its
    config, its resumption, a comparison's like-for-like check), so it is the user's to
    change; but a 20x slower step should not go unexplained. Returns whether it warned.
    """
    asked = [
        flag
        for flag, dtype in (("--matmul-dtype", train.matmul_dtype), ("--valid-dtype", evaluation.valid_dtype))
        if dtype == "bfloat16"
    ]
    if not asked or tf.config.list_physical_devices("GPU"):
        return False
    if cpu_has_native_bfloat16(cpuinfo) is not False:
        return False
    for flag in asked:
        logger.warning(
            "%s bfloat16: this CPU has no bfloat16 dot products (no avx512_bf16 or amx_bf16 flag), "
            "so each product runs about 20x slower than in float32; use %s float32 (or auto)",
            flag,
            flag,
        )
    return True
