"""``jobi-tf train`` with a probe of the first epoch: every ``PROBE_EVERY`` steps (default 10)
the triple loss of the steps since the last probe, the mean L2 norm of the entity rows and of
the forward and inverse relation rows, and the spread (standard deviation over the entities)
of the tail scores of 256 fixed random queries, one JSON line each in ``RUN/probe.jsonl``.

Why: to see which part moves, and which does not, in a first epoch that ends at a uniform
softmax (docs/studies/one-vs-all-stall.md). Arguments are those of ``jobi-tf train``:

    PROBE_EVERY=10 python bench/stall_probe.py --data-dir DIR --preset kbc-fast --epochs 1 --out RUN
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf
from jobi_tf.cli.main import entry_point

from jobi_tf import training


class Probe(keras.callbacks.Callback):
    def __init__(self, model, run_dir: Path, every: int) -> None:
        super().__init__()
        self.net, self.every, self.path = model, every, Path(run_dir) / "probe.jsonl"
        rng = np.random.default_rng(0)
        self.heads = tf.constant(rng.integers(0, model.num_entities, 256), tf.int32)
        self.rels = tf.constant(rng.integers(0, model.num_relations, 256), tf.int32)
        self.step, self.last = 0, (0, 0.0)
        self.path.unlink(missing_ok=True)

    def on_train_batch_end(self, batch, logs=None):
        self.step += 1
        if self.step == 1 or self.step % self.every == 0:
            self.write(self.step, float((logs or {}).get("triple_loss", float("nan"))))

    def on_epoch_end(self, epoch, logs=None):
        self.step = 0
        self.last = (0, 0.0)

    def write(self, step: int, mean: float) -> None:
        n0, m0 = self.last
        window = (mean * step - m0 * n0) / (step - n0)
        self.last = (step, mean)
        ent = tf.convert_to_tensor(self.net.entity_embeddings)
        rel = tf.convert_to_tensor(self.net.triple_relations)
        nr = self.net.num_relations
        scores = tf.matmul(self.net.tail_queries(self.heads, self.rels), ent, transpose_b=True)
        row = {
            "step": step,
            "triple_loss": window,
            "entity_norm": float(tf.reduce_mean(tf.norm(ent, axis=1))),
            "relation_norm": float(tf.reduce_mean(tf.norm(rel[:nr], axis=1))),
            "inverse_norm": float(tf.reduce_mean(tf.norm(rel[nr:], axis=1))) if rel.shape[0] > nr else None,
            "score_std": float(tf.reduce_mean(tf.math.reduce_std(scores, axis=1))),
        }
        with self.path.open("a") as f:
            f.write(json.dumps(row) + "\n")


def main() -> None:
    every = int(os.environ.get("PROBE_EVERY", "10"))
    original = training._callbacks

    def with_probe(cfg, run_dir, model, *args, **kwargs):
        return original(cfg, run_dir, model, *args, **kwargs) + [Probe(model, run_dir, every)]

    training._callbacks = with_probe
    sys.argv = ["jobi-tf", "train", *sys.argv[1:]]
    entry_point()


if __name__ == "__main__":
    main()
