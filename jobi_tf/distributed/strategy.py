"""Which `tf.distribute` strategy a run trains under, and which process writes its files.

``jobi-tf train --strategy``:

* ``default``: one device (TensorFlow's default strategy).
* ``mirrored``: `tf.distribute.MirroredStrategy` over this machine's GPUs (``--gpus``
  picks them), or, without GPUs, over logical CPU devices (``--logical-cpus N`` or
  ``JOBI_TF_LOGICAL_CPUS=N``: how the code path is tested on machines without GPUs).
  Every replica holds the full tables; Keras's ``fit`` splits each global batch across the
  replicas and sums their gradients (sparse gradients are gathered, not densified).
* ``multi-worker``: `tf.distribute.MultiWorkerMirroredStrategy`, the cluster read from
  ``TF_CONFIG``; the global batch is split over every replica of every worker.
* ``parameter-server``: `tf.distribute.experimental.ParameterServerStrategy` over the
  ``TF_CONFIG`` cluster: tables row-sharded over its ``ps`` tasks, asynchronous steps on its
  ``worker`` tasks, scheduled by the ``chief`` (`jobi_tf.distributed.ps_training`).

Why the batch is split and not re-sampled per replica: the tf.data sampler draws a
*global* batch (positives and their negatives) from one seeded stream, and the strategy
hands each replica a slice of it, so replicas always see different negatives and a run's
batches do not depend on the number of replicas.

Only the chief writes (run folder, checkpoints, TensorBoard, metrics); every worker
validates the same weights, so early stopping decides the same on all of them.
"""

from __future__ import annotations

import json
import os

import tensorflow as tf

from jobi_tf.config import STRATEGIES
from jobi_tf.runtime.errors import ConfigError, JobiError

__all__ = ["STRATEGIES", "configure_devices", "make_strategy", "is_chief", "num_replicas"]

#: Environment variable: split the CPU into this many logical devices (``--logical-cpus``).
LOGICAL_CPUS_ENV = "JOBI_TF_LOGICAL_CPUS"


def configure_devices(logical_cpus: int | None = None) -> int:
    """Split the CPU into logical devices before TensorFlow starts; returns how many exist.

    ``logical_cpus`` (or ``$JOBI_TF_LOGICAL_CPUS``) > 1 makes N CPU devices that share the
    machine's cores: the way to run ``mirrored`` with N replicas without GPUs (the point is
    to exercise the distributed code path; N replicas on shared cores are not faster).
    """
    if logical_cpus is None:
        raw = os.environ.get(LOGICAL_CPUS_ENV, "")
        try:
            logical_cpus = int(raw) if raw else 0
        except ValueError:
            raise JobiError(f"${LOGICAL_CPUS_ENV}: must be an integer. Received: {raw!r}") from None
    cpu = tf.config.list_physical_devices("CPU")[0]
    if not logical_cpus or logical_cpus < 2:
        # Listing logical devices would start TensorFlow, after which a multi-worker
        # strategy can no longer configure its collective ops.
        return len(tf.config.list_physical_devices("CPU"))
    if logical_cpus and logical_cpus > 1:
        wanted = [tf.config.LogicalDeviceConfiguration()] * logical_cpus
        try:
            tf.config.set_logical_device_configuration(cpu, wanted)
        except RuntimeError:  # TensorFlow already started: fine if it already has them
            if len(tf.config.list_logical_devices("CPU")) != logical_cpus:
                raise JobiError(
                    f"--logical-cpus {logical_cpus}: TensorFlow has already started with "
                    f"{len(tf.config.list_logical_devices('CPU'))} CPU device(s); set {LOGICAL_CPUS_ENV} "
                    "before the process uses TensorFlow"
                ) from None
    return len(tf.config.list_logical_devices("CPU"))


def _mirrored_devices(gpus: str | None) -> list[str]:
    """The devices of a mirrored strategy: the chosen GPUs, all GPUs, or the logical CPUs."""
    found = [d.name for d in tf.config.list_logical_devices("GPU")]
    if gpus:
        try:
            wanted = [int(g) for g in gpus.split(",")]
        except ValueError:
            raise ConfigError("gpus", f"must be comma-separated GPU numbers, e.g. 0,1. Received: {gpus!r}") from None
        missing = [g for g in wanted if g < 0 or g >= len(found)]
        if missing:
            raise ConfigError("gpus", f"GPU {missing[0]} does not exist (this machine has {len(found)} GPU(s))")
        return [found[g] for g in wanted]
    if found:
        return found
    cpus = [d.name for d in tf.config.list_logical_devices("CPU")]
    if len(cpus) < 2:
        raise ConfigError(
            "strategy",
            "mirrored needs 2 or more devices: this machine has no GPU and one CPU device "
            f"(add --logical-cpus 2, or set {LOGICAL_CPUS_ENV}=2, to mirror over logical CPUs)",
        )
    return cpus


def make_strategy(name: str, gpus: str | None = None) -> tf.distribute.Strategy:
    """The `tf.distribute.Strategy` for a ``--strategy`` value (see the module docstring)."""
    if name == "default":
        if gpus:
            raise ConfigError("gpus", "only applies to --strategy mirrored")
        return tf.distribute.get_strategy()
    if name == "mirrored":
        return tf.distribute.MirroredStrategy(devices=_mirrored_devices(gpus))
    if name == "multi-worker":
        _tf_config_cluster(name)
        return tf.distribute.MultiWorkerMirroredStrategy()
    if name == "parameter-server":
        cluster = _tf_config_cluster(name)
        missing = [job for job in ("chief", "ps", "worker") if not cluster.get(job)]
        if missing:
            raise JobiError(
                f"$TF_CONFIG: --strategy parameter-server needs 'chief', 'ps' and 'worker' tasks; no {missing[0]!r}"
            )
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        if resolver.task_type != "chief":
            raise JobiError(f"$TF_CONFIG: task {resolver.task_type!r} does not schedule steps; only the chief does")
        return tf.distribute.experimental.ParameterServerStrategy(resolver)
    raise ConfigError("strategy", f"must be one of {', '.join(STRATEGIES)}. Received: {name!r}")


def _tf_config_cluster(name: str) -> dict:
    """The ``cluster`` of ``$TF_CONFIG``, or a one-line error saying what is wrong with it."""
    raw = os.environ.get("TF_CONFIG")
    if not raw:
        raise ConfigError("strategy", f"{name} reads the cluster from $TF_CONFIG, which is not set")
    try:
        cluster = json.loads(raw)["cluster"]
    except (ValueError, KeyError, TypeError):
        raise JobiError(
            "$TF_CONFIG: not JSON with a 'cluster' entry (see docs/distributed.md, 'Several machines')"
        ) from None
    if not isinstance(cluster, dict) or not cluster:
        raise JobiError("$TF_CONFIG: 'cluster' must map task types to address lists")
    return cluster


def is_chief(strategy: tf.distribute.Strategy) -> bool:
    """True for the one process that writes files: the chief, else worker 0, else a lone process."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.cluster_spec().as_dict():
        return True
    task_type, task_id = resolver.task_type, resolver.task_id
    if task_type == "chief":
        return True
    has_chief = "chief" in resolver.cluster_spec().as_dict()
    return task_type == "worker" and task_id == 0 and not has_chief


def num_replicas(strategy: tf.distribute.Strategy) -> int:
    return int(strategy.num_replicas_in_sync)


def weights_digest(variables) -> str:
    """SHA-256 of the variables' bytes, read a block of rows at a time.

    Why: the workers of a cluster must end a run with identical weights (each applies the
    same all-reduced update); each worker logs this digest so that it can be checked
    without copying tables between machines.
    """
    import hashlib

    digest = hashlib.sha256()
    for var in variables:
        rows = int(var.shape[0]) if var.shape.rank else 1
        step = 1 << 16
        for start in range(0, rows, step):
            block = var[start : start + step] if var.shape.rank else var
            digest.update(tf.convert_to_tensor(block).numpy().tobytes())
    return digest.hexdigest()
