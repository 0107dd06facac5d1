"""Where a run trains: the distribution section of a run's config (`jobi_tf.config.RunConfig`)."""

from __future__ import annotations

import dataclasses

from jobi_tf.config.fields import AT_LEAST_0, STRATEGIES, _choice, check_bounds, setting

__all__ = ["DistributeConfig"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class DistributeConfig:
    """Where a run trains (`jobi_tf.distributed.strategy`); not part of what must match to resume.

    Attributes:
        strategy: ``default`` (one device), ``mirrored`` (the GPUs, or logical CPUs, of this
            machine), ``multi-worker`` (the cluster in ``$TF_CONFIG``, tables mirrored) or
            ``parameter-server`` (the cluster in ``$TF_CONFIG``, tables row-sharded over its
            ``ps`` tasks: `jobi_tf.distributed.ps_training`).
        gpus: comma-separated GPU numbers for ``mirrored`` (None: all).
        logical_cpus: split the CPU into this many devices (0: leave it whole).
        ps_shards: row blocks of the entity table under ``parameter-server`` (0: one per
            parameter server; blocks go to the servers round-robin).
    """

    strategy: str = setting(
        "default",
        "default: one device; mirrored: this machine's GPUs (or logical CPUs); "
        "multi-worker: the cluster in $TF_CONFIG; parameter-server: that cluster, tables sharded over its ps tasks.",
        choices=STRATEGIES,
    )
    gpus: str | None = setting(None, "GPUs for --strategy mirrored, e.g. 0,1 (default: all).", metavar="LIST")
    logical_cpus: int = setting(
        0,
        "Split the CPU into N devices (mirrored without GPUs; also $JOBI_TF_LOGICAL_CPUS).",
        metavar="N",
        bounds=AT_LEAST_0,
    )
    ps_shards: int = setting(
        0,
        "Row blocks of the entity table under --strategy parameter-server (default: one per ps task).",
        metavar="N",
        bounds=AT_LEAST_0,
    )

    def __post_init__(self) -> None:
        check_bounds(self)
        _choice("strategy", self.strategy, STRATEGIES)
