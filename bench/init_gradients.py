"""At the initial weights (seed 0), on the first batch of 500 training triples: the gradient of
the triple loss (the fit) and of the N3 penalty on the relation rows and the entity rows, and
the share of relation coordinates whose first Adagrad step moves towards zero.

Why: to see whether N3's pull on the relation rows outweighs the fit's at the start of a
1-vs-all run (docs/studies/one-vs-all-stall.md).

    python bench/init_gradients.py DATA_DIR [--init table-glorot] [--weight 0.05]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from jobi_tf.models.jobi import JoBiModel


def triples_of(folder: Path) -> tuple[np.ndarray, int, int]:
    rows = [line.rstrip("\n").split("\t") for line in (folder / "train.txt").read_text().splitlines() if line]
    ents = {e: i for i, e in enumerate(sorted({x for h, _, t in rows for x in (h, t)}))}
    rels = {r: i for i, r in enumerate(sorted({r for _, r, _ in rows}))}
    return np.array([[ents[h], rels[r], ents[t]] for h, r, t in rows], np.int32), len(ents), len(rels)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("data_dir", type=Path)
    parser.add_argument("--init", default="table-glorot")
    parser.add_argument("--weight", type=float, default=0.05)
    parser.add_argument("--batch", type=int, default=500)
    args = parser.parse_args()
    triples, n_ent, n_rel = triples_of(args.data_dir)
    keras.utils.set_random_seed(0)
    model = JoBiModel(
        n_ent, n_rel, model="complex", dim=200, loss="full-softmax", reciprocal=True, init=args.init,
        regularization=args.weight, regularizer="n3",
    )  # fmt: skip
    batch = tf.constant(triples[np.random.default_rng(0).permutation(len(triples))[: args.batch]])
    tables = [model.triple_relations, model.entity_embeddings]
    with tf.GradientTape(persistent=True) as tape:
        logits, penalty = model.forward({"triples": batch})
        fit = model.loss_terms({"triples": batch}, logits)["triple_loss"]
    out = {"data": str(args.data_dir), "init": args.init, "n3": args.weight, "entities": n_ent, "relations": n_rel}
    grads = {}
    for name, term in (("fit", fit), ("n3", penalty)):
        g = [tf.convert_to_tensor(x) for x in tape.gradient(term, tables)]
        grads[name] = g
        used = tf.reduce_any(g[0] != 0, axis=1)
        out[f"{name}_relation_grad_rms"] = float(tf.sqrt(tf.reduce_mean(tf.boolean_mask(g[0], used) ** 2)))
        out[f"{name}_entity_grad_rms"] = float(tf.sqrt(tf.reduce_mean(g[1] ** 2)))
    rel = tf.convert_to_tensor(model.triple_relations)
    total = grads["fit"][0] + grads["n3"][0]
    used = tf.reduce_any(total != 0, axis=1)
    towards = tf.boolean_mask(tf.sign(total) == tf.sign(rel), used)  # a step of -lr*sign(g) shrinks |x|
    out["relation_coords_shrinking"] = float(tf.reduce_mean(tf.cast(towards, tf.float32)))
    out["relation_row_norm"] = float(tf.reduce_mean(tf.norm(rel, axis=1)))
    out["entity_row_norm"] = float(tf.reduce_mean(tf.norm(tf.convert_to_tensor(model.entity_embeddings), axis=1)))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
