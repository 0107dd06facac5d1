"""``jobi-tf advise``: graph flags and a budget → `jobi_tf.api.advise` (times steps on this CPU) → advice on stdout."""

from __future__ import annotations

import json
import math

import click
from jobi_tf.cli._errors import progress_to_stderr, reports_errors, start_tensorflow
from jobi_tf.cli.options import graph_options

from jobi_tf.config import MATMUL_DTYPE_CHOICES, DataConfig

__all__ = ["advise"]


def _positive(ctx: click.Context, param: click.Parameter, value: float) -> float:
    if not (math.isfinite(value) and value > 0):
        raise click.BadParameter(f"must be a finite number > 0. Received: {value!r}", ctx=ctx, param=param)
    return value


@click.command()
@graph_options
@click.option(
    "--hours", type=float, required=True, callback=_positive, metavar="H", help="The training budget in hours (> 0)."
)
@click.option("--rank", type=click.IntRange(min=1), default=200, show_default=True, help="ComplEx's rank (--dim).")
@click.option(
    "--matmul-dtype",
    type=click.Choice(MATMUL_DTYPE_CHOICES),
    default="auto",
    show_default=True,
    help="The products' dtype; auto: as training chooses (bfloat16 on a CPU with avx512_bf16 or amx_bf16).",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON line with every figure instead.")
@click.pass_context
@reports_errors
def advise(
    ctx: click.Context,
    dataset: str | None,
    data_dir: str | None,
    hours: float,
    rank: int,
    matmul_dtype: str,
    as_json: bool,
) -> None:
    """Time a few kbc-fast training steps on this CPU (seconds to half a minute) and say whether
    1-vs-all (--preset kbc-fast) or sampled JoBi (--joint --p 0.3) fits the budget, with the
    command to run and why. The epoch's time is an estimate: steps on a stand-in graph of up to
    20,000 entities, scaled to the graph's entities.

    Example: jobi-tf advise --dataset fb15k-237 --hours 1
    """
    data = DataConfig(dataset=dataset, data_dir=data_dir)
    start_tensorflow()
    from jobi_tf.api import advise as advise_on  # imports TensorFlow
    from jobi_tf.api import load_dataset

    with progress_to_stderr():
        advice = advise_on(load_dataset(data), hours, rank=rank, matmul_dtype=matmul_dtype)
    if as_json:
        click.echo(json.dumps(advice.to_dict()))
        return
    p = advice.probe
    xla = "XLA on" if p.jit_compile else "XLA off"
    steps = f"{advice.steps_per_epoch:,} step" + ("" if advice.steps_per_epoch == 1 else "s")
    click.echo(
        f"graph: {advice.graph}: {advice.num_entities:,} entities, {advice.num_relations:,} relations, "
        f"{advice.num_triples:,} training triples ({advice.triples_per_entity:.1f} per entity)\n"
        f"this CPU: a kbc-fast training step takes {p.seconds_per_step:.3g} s (batch {p.batch_size}, rank "
        f"{advice.rank}, {p.matmul_dtype} products, {xla}; median of {len(p.step_seconds)} after "
        f"{p.warmup_steps} warm-up) on a stand-in graph of {p.num_entities:,} entities and "
        f"{p.num_relations:,} relations\n"
        f"one 1-vs-all epoch ≈ {advice.epoch_time}, an estimate ({steps} x "
        f"{p.seconds_per_step:.3g} s x {advice.num_entities:,} / {p.num_entities:,} entities; validation not "
        f"included; its products: {advice.flops_per_epoch:.3g} FLOPs = 12·T·N·W at rank {advice.rank}, "
        f"{advice.effective_rate:.3g} FLOP/s over the whole step)\n"
        f"recommendation: {advice.regime}\ncommand: {advice.command}\nwhy: {advice.reason}\n"
        f"floor: measure the slot-frequency floor beside any result: {advice.floor_command}"
    )
