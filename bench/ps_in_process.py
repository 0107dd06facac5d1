"""``--strategy parameter-server`` on an in-process cluster (chief + parameter servers + workers
in this one process, on loopback ports), against one device with the same settings and steps.

The cluster trains a small synthetic graph with `jobi_tf.training.trainer.train`; then the same steps
are replayed on one device (Keras's ``fit``, `LazyAdam`, no strategy) from the cluster's own
initial tables. Prints one JSON line: both validation MRRs, the largest difference of each
final table, how far each table moved.

* ``--workers 1``: the steps run one after another, so the two runs compute the same thing
  (same batches, negatives, loss and update): the tables agree to float rounding.
* ``--workers 2``: asynchronous steps interleave their updates, so the runs differ by that
  alone; tests/test_ps_training.py states the tolerance on validation MRR.

Usage: python bench/ps_in_process.py --out /tmp/ps [--workers 2] [--ps 2] [--epochs 10]
Run in its own process: connecting to a cluster changes TensorFlow's process-wide context.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import socket
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import jobi_tf  # noqa: E402, F401  (the pooled allocator, before TensorFlow starts)
from jobi_tf.config import DataConfig, DistributeConfig, ModelConfig, RunConfig, SamplerConfig, TrainConfig  # noqa: E402
from jobi_tf.distributed import ps_training  # noqa: E402
from jobi_tf.distributed.ps_training import server_config  # noqa: E402
from jobi_tf.evaluation.ranking import FilteredEvaluator  # noqa: E402
from jobi_tf.models import JoBiModel  # noqa: E402
from jobi_tf.optimizers import LazyAdam  # noqa: E402
from jobi_tf.sampling.pipelines import make_train_dataset, steps_per_epoch  # noqa: E402
from jobi_tf.training.trainer import load_data, train  # noqa: E402


def free_ports(n: int) -> list[int]:
    """``n`` distinct loopback ports the kernel had free a moment ago (bound at once: distinct)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in socks]
    finally:
        for sock in socks:
            sock.close()


def config(epochs: int, ps_shards: int, checkpoint_steps: int = 0) -> RunConfig:
    return RunConfig(
        data=DataConfig(dataset="synthetic", synthetic_entities=300, synthetic_relations=8, synthetic_triples=4000),
        sampler=SamplerConfig(batch_size=100, neg=16, p=0.3, shared_negatives=0),
        model=ModelConfig(model="complex", dim=16, joint=True),
        train=TrainConfig(
            epochs=epochs,
            eval_every=epochs,
            patience=10,
            monitor="hits@10",
            lr=0.01,
            optimizer="lazy-adam",
            jit_compile=False,
            checkpoint_steps=checkpoint_steps,
        ),
        distribute=DistributeConfig(ps_shards=ps_shards),
        seed=11,
    )


def in_process_cluster(num_ps: int, num_workers: int) -> tf.distribute.Strategy:
    """Servers for the workers and parameter servers in this process; the strategy as chief."""
    ports = free_ports(1 + num_ps + num_workers)
    spec = {
        "chief": [f"127.0.0.1:{ports[0]}"],
        "worker": [f"127.0.0.1:{p}" for p in ports[1 : 1 + num_workers]],
        "ps": [f"127.0.0.1:{p}" for p in ports[1 + num_workers :]],
    }
    cluster = tf.train.ClusterSpec(spec)
    servers = [
        tf.distribute.Server(cluster, job_name=job, task_index=i, protocol="grpc", config=server_config(num_workers))
        for job in ("worker", "ps")
        for i in range(len(spec[job]))
    ]
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
        cluster, task_type="chief", task_id=0, rpc_layer="grpc"
    )
    strategy = tf.distribute.experimental.ParameterServerStrategy(resolver)
    strategy._jobi_servers = servers  # keep them alive with the strategy
    return strategy


def replay_on_one_device(cfg: RunConfig, data, initial: dict[str, np.ndarray], steps: int) -> JoBiModel:
    """The cluster's steps again, from its initial tables, with Keras's ``fit`` and `LazyAdam`
    on one device (no strategy): what the cluster would have computed with no asynchrony."""
    index = data[2]
    model = JoBiModel.for_run(cfg.model, cfg.train, index.num_entities, index.num_relations)
    for weight in model.weights:
        weight.assign(initial[weight.path])
    optimizer = LazyAdam(learning_rate=cfg.train.lr)
    model.compile(optimizer=optimizer, jit_compile=False)
    dataset = make_train_dataset(index, cfg.sampler, seed=cfg.seed)
    model.fit(dataset, epochs=1, steps_per_epoch=steps, verbose=0, shuffle=False)
    return model


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--ps", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--checkpoint-steps", type=int, default=0, help="also checkpoint every N steps (logged)")
    a = ap.parse_args()
    out = Path(a.out)
    cfg = config(a.epochs, a.ps, a.checkpoint_steps)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    data = load_data(cfg)
    index = data[2]
    strategy = in_process_cluster(a.ps, a.workers)
    model, _ = ps_training.build(  # the same initial tables as the run's (seeded)
        index, cfg.model, cfg.train, strategy, ps_shards=cfg.distribute.ps_shards, seed=cfg.seed
    )
    initial = {t.path: t.numpy() for t in model.sharded_tables}  # tiny tables: read whole
    started = time.monotonic()
    sharded = train(cfg, out / "cluster", verbose=0, data=data, strategy=strategy).metrics
    record = {
        "workers": a.workers,
        "ps": a.ps,
        "epochs": a.epochs,
        "cluster_seconds": round(time.monotonic() - started, 1),
    }
    record["cluster_valid_mrr"] = sharded["valid"]["mrr"]
    steps = steps_per_epoch(index, cfg.sampler.batch_size) * a.epochs
    started = time.monotonic()
    single = replay_on_one_device(cfg, data, initial, steps)
    record["single_seconds"] = round(time.monotonic() - started, 1)
    record["single_valid_mrr"] = FilteredEvaluator(index, cfg.eval).evaluate(single, "valid")["mrr"]
    want = {w.path: w.numpy() for w in single.weights}
    with np.load(out / "cluster" / "checkpoint.npz") as saved:
        got = {k: saved[f"model/{k}"] for k in want}
    record["max_abs_difference"] = {k: float(np.abs(got[k] - want[k]).max()) for k in want}
    record["moved"] = {k: float(np.abs(want[k] - initial[k]).max()) for k in want}
    print(json.dumps(record), flush=True)
    os._exit(0)  # in-process servers cannot be shut down cleanly


if __name__ == "__main__":
    sys.exit(main())
