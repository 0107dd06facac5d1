"""How long a run's training step takes on this CPU, timed on a stand-in graph of random triples.

Why whole steps and not their products: a 1-vs-all step is more than its matrix products
(the softmax over every entity, the casts around bfloat16 products, N3, Adagrad's update of
the whole entity table), and every part of it grows with the entities scored. Timing the
products alone put an FB15k-237 epoch at ~30 s where kbc-fast trained it in 49–51 s.

`probe_steps` trains a run's config through the library's own path: the regime's batches
(`jobi_tf.regimes`), the model and optimizer `jobi_tf.training.trainer` builds, Keras's
``fit`` with the config's XLA setting, on `stand_in_graph` (so no graph of millions of
entities has to be loaded or fit in memory to be timed). `scale_to_epoch` turns its median step
into a graph's epoch. TensorFlow is imported only when probing.
"""

from __future__ import annotations

import dataclasses
import statistics
import time

import numpy as np

from jobi_tf.config import RunConfig
from jobi_tf.data.index import KGIndex

__all__ = ["StepTiming", "MAX_PROBE_ENTITIES", "stand_in_graph", "probe_steps", "steps_per_epoch", "scale_to_epoch"]

#: Entities of the stand-in graph at most: steady step times in a few seconds, tables of a few MiB.
MAX_PROBE_ENTITIES = 20_000


@dataclasses.dataclass(frozen=True, kw_only=True)
class StepTiming:
    """Training steps timed on a stand-in graph (`probe_steps`).

    Attributes:
        seconds_per_step: the median of ``step_seconds``.
        step_seconds: each timed step, after ``warmup_steps`` untimed ones (tracing, compiling).
        num_entities, num_relations: the stand-in graph's sizes (M, R).
        batch_size: training triples per step; matmul_dtype, jit_compile: how the step ran.
        wall_seconds: the whole probe: graph, model, warm-up and timed steps.
    """

    seconds_per_step: float
    step_seconds: tuple[float, ...]
    warmup_steps: int
    num_entities: int
    num_relations: int
    batch_size: int
    matmul_dtype: str
    jit_compile: bool
    wall_seconds: float

    def epoch_seconds(self, num_triples: int, num_entities: int) -> float:
        """`scale_to_epoch` for a graph of ``num_triples`` training triples and ``num_entities``."""
        return scale_to_epoch(self.seconds_per_step, self.batch_size, self.num_entities, num_triples, num_entities)


def steps_per_epoch(num_triples: int, batch_size: int) -> int:
    """The batches of an epoch as training runs them: full ones, the remainder dropped
    (`jobi_tf.sampling.pipelines.steps_per_epoch`); at least one."""
    return max(1, num_triples // batch_size)


def scale_to_epoch(
    step_seconds: float, batch_size: int, probe_entities: int, num_triples: int, num_entities: int
) -> float:
    """Seconds of an epoch of ``num_triples`` over ``num_entities``, from one step timed
    against ``probe_entities``: ``steps_per_epoch · step_seconds · N / M``.

    Why linear in the entities: a 1-vs-all step's work is per entity scored (its products,
    softmax and casts are ``[batch, N]``; Adagrad updates all ``N`` rows of the entity table
    every step), and its parts that do not grow with N (the relation rows, the step's
    dispatch) are small beside them at ``M`` in the thousands; so ``N / M`` carries a step to
    the graph's size. It assumes the graph's tables fit in memory as the stand-in's do.
    """
    return steps_per_epoch(num_triples, batch_size) * step_seconds * num_entities / probe_entities


def stand_in_graph(num_entities: int, num_relations: int, num_triples: int, seed: int = 0) -> KGIndex:
    """A graph of ``num_triples`` uniformly random training triples (ids only; a step's cost
    does not depend on which triples it holds), with one validation and one test triple."""
    rng = np.random.default_rng(seed)
    columns = [rng.integers(0, n, num_triples) for n in (num_entities, num_relations, num_entities)]
    train = np.stack(columns, axis=1).astype(np.int32)
    return KGIndex.from_ids({"train": train, "valid": train[:1], "test": train[:1]}, num_entities, num_relations)


def probe_steps(
    cfg: RunConfig, num_entities: int, num_relations: int, *, warmup: int = 2, steps: int = 5
) -> StepTiming:
    """Train ``cfg``'s model on a stand-in graph for ``warmup`` + ``steps`` steps and time the last ``steps``.

    Args:
        cfg: the run, its ``auto`` settings resolved (``matmul_dtype``, the optimizer):
            its regime, batch, model, loss, regularizer, optimizer and ``jit_compile`` are what is timed.
        num_entities, num_relations: the stand-in graph's sizes.
        warmup: untimed first steps (tracing, XLA compilation).
        steps: timed steps; their median is the result.

    The caller's global random states are left as they were (`jobi_tf.runtime.rng`).
    """
    from jobi_tf.runtime.rng import caller_random_state_kept

    if warmup < 1 or steps < 1:
        raise ValueError(f"probe_steps needs warmup >= 1 and steps >= 1. Received: {warmup=}, {steps=}")
    start = time.perf_counter()
    with caller_random_state_kept():
        seconds = _timed_steps(cfg, num_entities, num_relations, warmup, steps)
    return StepTiming(
        seconds_per_step=statistics.median(seconds),
        step_seconds=tuple(seconds),
        warmup_steps=warmup,
        num_entities=num_entities,
        num_relations=num_relations,
        batch_size=cfg.sampler.batch_size,
        matmul_dtype=cfg.train.matmul_dtype,
        jit_compile=cfg.train.jit_compile,
        wall_seconds=time.perf_counter() - start,
    )


def _timed_steps(cfg: RunConfig, num_entities: int, num_relations: int, warmup: int, steps: int) -> list[float]:
    """The seconds of each of the steps after ``warmup``, as the trainer builds and fits a run on one device."""
    import keras

    from jobi_tf import regimes
    from jobi_tf.sampling.batch_plan import BatchPlan
    from jobi_tf.training.callbacks import steps_done
    from jobi_tf.training.trainer import build_model, make_optimizer

    cfg = regimes.resolve(cfg)
    batch = cfg.sampler.batch_size
    index = stand_in_graph(num_entities, num_relations, batch * (warmup + steps), seed=cfg.seed)
    regime, plan = regimes.regime_of(cfg.train.loss), BatchPlan.for_run(cfg.sampler, cfg.train, joint=cfg.model.joint)
    keras.utils.set_random_seed(cfg.seed)
    model = build_model(index, cfg)
    optimizer = make_optimizer(cfg.train, index.num_entities)
    model.compile(
        optimizer=optimizer, jit_compile=cfg.train.jit_compile, steps_per_execution=cfg.train.steps_per_execution
    )
    optimizer.build(model.trainable_variables)
    plan.check_model(model)
    marks: list[tuple[int, float]] = []
    clock = keras.callbacks.LambdaCallback(
        on_train_batch_end=lambda b, logs: marks.append((steps_done(clock, b), time.perf_counter()))
    )
    total = regime.steps(index, plan)
    model.fit(
        regime.dataset(index, plan, seed=cfg.seed),
        epochs=1,
        steps_per_epoch=total,
        callbacks=[clock],
        shuffle=False,
        verbose=0,
    )
    timed = [(n, t) for n, t in marks if n >= warmup]
    return [(t1 - t0) / (n1 - n0) for (n0, t0), (n1, t1) in zip(timed[:-1], timed[1:], strict=True)]
