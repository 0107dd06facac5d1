"""``--strategy parameter-server``: tables row-sharded over parameter servers, steps run by workers.

Why a loop of our own: Keras 3's ``fit`` does not drive TensorFlow's ``ClusterCoordinator``,
and Keras variables and optimizers cannot hold sharded tables (`jobi_tf.models.sharding`). Everything
else is the single-device run's: the model (`JoBiModel` with ``table_shards``), its objectives,
the sampler, the callbacks (validation, early stopping, checkpoints, TensorBoard, stop on
signals), the run folder and the checkpoint format.

The cluster comes from ``$TF_CONFIG`` as for ``multi-worker``: ``ps`` tasks hold the tables,
``worker`` tasks run steps, and the ``chief`` schedules them, validates between epochs and
writes every file. Every process runs the same ``jobi-tf train`` command; on a ``ps`` or
``worker`` task it only serves (`serve`).

How a step is scheduled: the chief draws each epoch's order of training triples (the same
stateless shuffle as `jobi_tf.sampling.pipelines.make_train_dataset`) and hands a worker the batch's row
ids and its global step; the worker draws the negatives in-graph, keyed on that step, runs the
model, takes gradients with respect to the shards it read and applies the sharded lazy
optimizer on the servers. So a batch is a function of ``(seed, step)`` wherever it runs: with
one worker stepped one at a time, the run is the single-device run with lazy Adam; with
several, steps overlap (asynchronous SGD). A worker that dies has its steps re-run by another;
a step it had half applied may then apply twice, which asynchronous SGD tolerates. Epochs are
counted by the chief, never by the servers' step counter.
"""

from __future__ import annotations

import collections
import contextlib
import json
import logging
import os
import re

import keras
import tensorflow as tf

from jobi_tf.config import ModelConfig, TrainConfig
from jobi_tf.data.index import KGIndex
from jobi_tf.models import JoBiModel
from jobi_tf.models.sharding import make_sharded_optimizer
from jobi_tf.regimes import checks
from jobi_tf.runtime.errors import JobiError
from jobi_tf.sampling.batch_plan import BatchPlan
from jobi_tf.sampling.pipelines import NegativeSampler, epoch_order, steps_per_epoch

__all__ = ["is_parameter_server", "check_config", "build", "ShardedTrainer", "serve", "serves_only", "server_config"]

logger = logging.getLogger(__name__)

#: Steps scheduled ahead of the last one whose result the chief has read: enough to keep every
#: worker busy, few enough that a stop request is honoured soon.
IN_FLIGHT_PER_WORKER = 8


def is_parameter_server(strategy: tf.distribute.Strategy) -> bool:
    return isinstance(strategy, tf.distribute.experimental.ParameterServerStrategy)


#: Refuse, before anything is written, what sharded tables cannot train (kept with every
#: other check in `jobi_tf.regimes.checks`).
check_config = checks.check_parameter_server


def _cluster_spec(strategy: tf.distribute.Strategy) -> tf.train.ClusterSpec:
    # ParameterServerStrategy keeps its resolver without exposing it as ``cluster_resolver``.
    resolver = strategy.cluster_resolver or getattr(strategy, "_cluster_resolver", None)
    return resolver.cluster_spec()


def num_parameter_servers(strategy: tf.distribute.Strategy) -> int:
    return _cluster_spec(strategy).num_tasks("ps")


def num_workers(strategy: tf.distribute.Strategy) -> int:
    return _cluster_spec(strategy).num_tasks("worker")


def build(
    index: KGIndex,
    model_cfg: ModelConfig,
    train: TrainConfig,
    strategy: tf.distribute.Strategy,
    *,
    ps_shards: int = 0,
    seed: int = 0,
):
    """The sharded model and its optimizer (from the run's model and training sections),
    created in ``strategy``'s scope (so on the servers).

    The entity table gets ``ps_shards`` row blocks (``--ps-shards``; 0: one per parameter
    server), which the strategy places on the servers round-robin; each relation table is one
    block. ``seed`` draws the sharded tables' initial rows.
    """
    shards = ps_shards or num_parameter_servers(strategy)
    with strategy.scope():
        model = JoBiModel.for_run(
            model_cfg, train, index.num_entities, index.num_relations, table_shards=shards, table_seed=seed
        )
        optimizer = make_sharded_optimizer(train.optimizer, train.lr, train.initial_accumulator_value)
        optimizer.build(model.sharded_tables)
    model.optimizer = optimizer  # what the callbacks checkpoint and log, as after compile
    model.stop_training = False
    for table in model.sharded_tables:
        logger.info(
            "%s: %d rows in %d blocks on %s",
            table.path,
            table.shape[0],
            table.num_shards,
            ", ".join(sorted({s.device for s in table.shards})),
        )
    return model, optimizer


class ShardedTrainer:
    """Runs epochs of a sharded model on a cluster's workers: ``fit`` for `ClusterCoordinator`.

    Args:
        model: a `JoBiModel` with ``table_shards``, built in the strategy's scope.
        optimizer: its `jobi_tf.models.sharding` optimizer.
        strategy: the ``ParameterServerStrategy`` they were built in.
        index: the graph.
        plan: what the single-device run's batches hold (`BatchPlan.for_run`).
        seed: the run's seed (epoch order and negatives).
        checkpoint_steps: ``--checkpoint-steps``; the steps in flight drain before each.
    """

    def __init__(
        self,
        model: JoBiModel,
        optimizer,
        strategy,
        index: KGIndex,
        plan: BatchPlan,
        *,
        seed: int = 0,
        checkpoint_steps: int = 0,
    ) -> None:
        self.model, self.optimizer, self.index, self.plan = model, optimizer, index, plan
        self.seed, self.checkpoint_steps = seed, checkpoint_steps
        self.plan.check_model(model)
        self.coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
        self.steps = steps_per_epoch(index, plan.sampler.batch_size)
        self.in_flight = IN_FLIGHT_PER_WORKER * max(1, num_workers(strategy))
        self._step_fn = tf.function(self._step)

    def _step(self, triples: tf.Tensor, step: tf.Tensor) -> dict[str, tf.Tensor]:
        """One training step on a worker; traced on the chief, so the sampler's pools travel to
        each worker once, as constants of the function. The batch's triples come with each call
        (12 KB at batch 1000): no worker holds the training set."""
        model = self.model
        features = NegativeSampler(self.index, self.plan, self.seed)(triples, step)
        tables = model.sharded_tables
        with tf.GradientTape() as tape:
            logits, penalty = model.forward(features)
            terms = model.loss_terms(features, logits)
            loss = model.weighted_loss(terms)
            if penalty is not None:
                loss = loss + penalty
        gradients = tape.gradient(loss, [shard for table in tables for shard in table.shards])
        updates, at = [], 0
        for table in tables:
            updates.append((table, gradients[at : at + table.num_shards]))
            at += table.num_shards
        self.optimizer.apply(updates)
        return {"loss": loss, **terms}

    def fit(self, epochs: int, initial_epoch: int, initial_step: int, callbacks: list, verbose: int) -> None:
        """Epochs ``initial_epoch..epochs-1`` (the first from ``initial_step``), with Keras
        callbacks called as ``fit`` calls them (batch ends in order, epoch-end logs averaged)."""
        model = self.model
        model.stop_training = False
        calls = keras.callbacks.CallbackList(
            callbacks, add_progbar=verbose != 0, model=model, verbose=verbose, epochs=epochs, steps=self.steps
        )
        with _server_failures_reported():
            calls.on_train_begin()
            for epoch in range(initial_epoch, epochs):
                first = initial_step if epoch == initial_epoch else 0
                calls.on_epoch_begin(epoch)
                logs = self._epoch(epoch, first, calls)
                calls.on_epoch_end(epoch, logs)
                if model.stop_training:
                    break
            calls.on_train_end()

    def _epoch(self, epoch: int, first: int, calls) -> dict:
        order = epoch_order(tf.range(len(self.index.train)), self.seed, epoch, self.steps, self.plan.sampler.batch_size)
        order = order.numpy()
        logger.info("epoch %d: scheduling steps %d-%d on the workers", epoch + 1, first + 1, self.steps)
        pending: collections.deque = collections.deque()
        sums: dict[str, float] = {}
        done = 0

        def read_one() -> None:
            nonlocal done
            values = pending.popleft().fetch()
            for key, value in values.items():
                sums[key] = sums.get(key, 0.0) + float(value)
            calls.on_train_batch_end(done, {k: v / (done + 1) for k, v in sums.items()})
            done += 1

        for step in range(first, self.steps):
            args = (
                tf.constant(self.index.train[order[step]], tf.int32),
                tf.constant(epoch * self.steps + step, tf.int64),
            )
            pending.append(self.coordinator.schedule(self._step_fn, args=args))
            every = self.checkpoint_steps
            drain = every and (step + 1) % every == 0  # a periodic checkpoint sees no step in flight
            while len(pending) > (0 if drain else self.in_flight):
                read_one()
            if self.model.stop_training:  # a signal or a bad loss: schedule no more
                break
        while pending:
            read_one()
        return {k: v / max(done, 1) for k, v in sums.items()}


@contextlib.contextmanager
def _server_failures_reported():
    """A parameter server that stops answering ends the run with one line naming it.

    Why not go on: the servers hold the only copy of the tables; TensorFlow's coordinator
    reschedules a dead worker's steps, but a dead server's rows are gone, so the run resumes
    from its last checkpoint once the servers are back (rerun the same commands).
    """
    try:
        yield
    except tf.errors.OpError as exc:
        text = str(exc)
        task = re.search(r"/job:ps/replica:\d+/task:\d+", text)
        if task is None and "/job:ps" not in text:
            raise
        name = task.group(0) if task else "a parameter server"
        grpc = re.search(r'grpc_message:"([^"]+)"', text)
        first = grpc.group(1) if grpc else (text.strip().splitlines() or [""])[0][:160]
        raise JobiError(
            f"parameter server {name} stopped answering ({type(exc).__name__}: {first}); training stopped, the "
            "last checkpoint is kept: restart the servers and rerun the same commands to resume"
        ) from None


def server_config(workers: int) -> tf.compat.v1.ConfigProto:
    """A server's session config: at least ``workers + 1`` inter-op threads.

    Why: with fewer threads than the coordinator has concurrent remote calls (one per worker,
    plus its own), an asynchronous run can stop making progress without an error
    (bench/ps_probe.py, retired: `git show d054bd8:bench/ps_probe.py`; TensorFlow's
    parameter-server tutorial asks the same).
    """
    config = tf.compat.v1.ConfigProto()
    config.inter_op_parallelism_threads = max(os.cpu_count() or 1, workers + 1)
    return config


def task_of_tf_config() -> tuple[str, int] | None:
    """``(type, index)`` of this process in ``$TF_CONFIG``, or None without one."""
    raw = os.environ.get("TF_CONFIG")
    if not raw:
        return None
    try:
        task = json.loads(raw).get("task") or {}
        return str(task["type"]), int(task.get("index", 0))
    except (ValueError, KeyError, TypeError, AttributeError):
        raise JobiError(
            "$TF_CONFIG: 'task' must give a 'type' and an 'index' (see docs/distributed.md, 'Several machines')"
        ) from None


def serve() -> None:
    """On a ``ps`` or ``worker`` task of ``$TF_CONFIG``: start its server and serve until killed."""
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    spec = resolver.cluster_spec()
    task_type, task_id = resolver.task_type, resolver.task_id
    logger.info("%s %d: serving the cluster %s", task_type, task_id, json.dumps(spec.as_dict()))
    server = tf.distribute.Server(
        spec,
        job_name=task_type,
        task_index=task_id,
        protocol=resolver.rpc_layer or "grpc",
        config=server_config(spec.num_tasks("worker")),
        start=True,
    )
    server.join()


def serves_only() -> bool:
    """True on a ``ps`` or ``worker`` task of ``$TF_CONFIG`` (they run `serve`, not the loop)."""
    task = task_of_tf_config()
    return task is not None and task[0] in ("ps", "worker")
