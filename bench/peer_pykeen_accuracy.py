"""PyKEEN's same-settings ComplEx on FB15k-237: filtered test metrics after a fixed number of epochs.

The issue's reference figure (test MRR 0.281 / Hits@1 0.198 after 4.3 epochs) is one PyKEEN
run; this script measures how much a different seed moves it, so that our baseline can be
compared with PyKEEN's spread rather than with one draw. Settings: ComplEx dim 200,
Xavier-normal init, softmax cross-entropy over the positive and 50 per-triple uniform
negatives (sLCWA), batch 500, Adam 0.001, PyKEEN's default regulariser; ``--epochs`` full
epochs (fixed, so that the machine's load does not change the result), then the filtered
test evaluation of both directions with realistic ranks (ties: mean of optimistic and
pessimistic), filtered by train + valid + test.

Runs in the separate benchmark virtualenv (``pip install torch==2.13.0 && pip install pykeen``):
    /path/to/benchvenv/bin/python bench/peer_pykeen_accuracy.py --data-dir ../shared/datasets/fb15k-237 --seed 1
Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch
from pykeen.evaluation import RankBasedEvaluator
from pykeen.losses import CrossEntropyLoss
from pykeen.models import ComplEx
from pykeen.sampling import BasicNegativeSampler
from pykeen.training import SLCWATrainingLoop
from pykeen.triples import TriplesFactory


def _labels(path: str) -> np.ndarray:
    with open(path, encoding="utf-8") as f:
        return np.array([line.rstrip("\n").split("\t") for line in f], dtype=str)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=500)
    parser.add_argument("--neg", type=int, default=50)
    args = parser.parse_args()
    splits = {s: _labels(f"{args.data_dir}/{s}.txt") for s in ("train", "valid", "test")}
    every = np.concatenate(list(splits.values()))
    # Vocabularies over all splits, as jobi-tf (and the paper's code) build them.
    entity_to_id = {e: i for i, e in enumerate(sorted(set(every[:, 0]) | set(every[:, 2])))}
    relation_to_id = {r: i for i, r in enumerate(sorted(set(every[:, 1])))}
    factories = {
        s: TriplesFactory.from_labeled_triples(t, entity_to_id=entity_to_id, relation_to_id=relation_to_id)
        for s, t in splits.items()
    }
    torch.manual_seed(args.seed)
    model = ComplEx(
        triples_factory=factories["train"],
        embedding_dim=200,
        loss=CrossEntropyLoss(),
        entity_initializer="xavier_normal",
        relation_initializer="xavier_normal",
        random_seed=args.seed,
    )
    loop = SLCWATrainingLoop(
        model=model,
        triples_factory=factories["train"],
        optimizer=torch.optim.Adam(model.parameters(), lr=0.001),
        negative_sampler=BasicNegativeSampler,
        negative_sampler_kwargs={"num_negs_per_pos": args.neg},
    )
    start = time.perf_counter()
    loop.train(triples_factory=factories["train"], num_epochs=args.epochs, batch_size=args.batch_size, use_tqdm=False)
    train_seconds = time.perf_counter() - start
    start = time.perf_counter()
    result = RankBasedEvaluator(filtered=True).evaluate(
        model,
        factories["test"].mapped_triples,
        additional_filter_triples=[factories["train"].mapped_triples, factories["valid"].mapped_triples],
        batch_size=256,  # PyKEEN's automatic choice on CPU is 32
        use_tqdm=False,
    )
    eval_seconds = time.perf_counter() - start
    metrics = {
        "mrr": result.get_metric("both.realistic.inverse_harmonic_mean_rank"),
        **{f"hits@{k}": result.get_metric(f"both.realistic.hits_at_{k}") for k in (1, 3, 10)},
    }
    print(
        json.dumps(
            {
                "bench": "peer_pykeen_accuracy",
                "test": metrics,
                "epochs": args.epochs,
                "seed": args.seed,
                "train_seconds": round(train_seconds, 1),
                "eval_seconds": round(eval_seconds, 1),
                "regularizer": type(model.entity_representations[0].regularizer).__name__
                if getattr(model.entity_representations[0], "regularizer", None) is not None
                else None,
                "torch": torch.__version__,
            }
        )
    )


if __name__ == "__main__":
    main()
