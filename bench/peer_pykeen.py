"""PyKEEN's sLCWA ComplEx on a triples folder: its training throughput, or its test metrics after N
epochs (runs in a separate benchmark virtualenv; PyKEEN is never a dependency of jobi-tf).

Both modes: ComplEx dim 200, Xavier-normal init, softmax cross-entropy over the positive and
its ``--neg`` per-triple uniform negatives (PyKEEN's closest loss to sampled-softmax NLL), Adam
0.001, batch ``--batch-size``. ``--regularizer``: PyKEEN's ``ComplEx`` adds an L2 penalty
(``LpRegularizer``, weight 0.01, on every scored embedding) unless told not to; ``none`` is
jobi-tf's setting.

* ``--mode speed`` (default; `bench/train_speed.py`): positives per second measured as ours
  (`bench/_steady.py`): a timestamp after every batch over ``--epochs`` full epochs, the first
  10,000 positives of warm-up dropped, the rest cut into windows of 75,000 positives, the
  median window reported. No regularizer by default. The JSON line records what PyKEEN built.
* ``--mode accuracy``: how much a seed moves PyKEEN's test figure, so that our baseline is
  compared with PyKEEN's spread, not one draw. Vocabularies over all splits (as jobi-tf
  builds them), ``--epochs`` fixed (default 4: the machine's load cannot change the result),
  PyKEEN's default regularizer; then the filtered test evaluation of both directions with
  realistic ranks, filtered by train + valid + test.

Run:  /path/to/benchvenv/bin/python bench/peer_pykeen.py --data-dir ../shared/datasets/fb15k-237
      /path/to/benchvenv/bin/python bench/peer_pykeen.py --mode accuracy --data-dir ../shared/datasets/fb15k-237 \\
          --epochs 4 --seed 1
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import pykeen
import pykeen.regularizers
import torch
from pykeen.evaluation import RankBasedEvaluator
from pykeen.losses import CrossEntropyLoss
from pykeen.models import ComplEx
from pykeen.sampling import BasicNegativeSampler
from pykeen.training import SLCWATrainingLoop
from pykeen.training.callbacks import TrainingCallback
from pykeen.triples import TriplesFactory

sys.path.insert(0, str(Path(__file__).parent))
from _steady import Usage, summary, window_rates  # noqa: E402


class _BatchClock(TrainingCallback):
    """The clock after every batch (PyKEEN's ``post_batch`` runs after the optimizer step)."""

    def __init__(self) -> None:
        super().__init__()
        self.ends: list[float] = []

    def post_batch(self, epoch: int, batch, **kwargs) -> None:
        self.ends.append(time.perf_counter())


def build(train, args):
    """PyKEEN's ComplEx and its sLCWA loop with this script's settings."""
    model = ComplEx(
        triples_factory=train,
        embedding_dim=200,
        loss=CrossEntropyLoss(),
        entity_initializer="xavier_normal",
        relation_initializer="xavier_normal",
        random_seed=args.seed,
        **({"regularizer": None} if args.regularizer == "none" else {}),
    )
    loop = SLCWATrainingLoop(
        model=model,
        triples_factory=train,
        optimizer=torch.optim.Adam(model.parameters(), lr=0.001),
        negative_sampler=BasicNegativeSampler,
        negative_sampler_kwargs={"num_negs_per_pos": args.neg},
    )
    return model, loop


def speed(args) -> dict:
    train = TriplesFactory.from_path(f"{args.data_dir}/train.txt")
    model, loop = build(train, args)
    clock = _BatchClock()
    with Usage() as used:
        start = time.perf_counter()
        loop.train(
            triples_factory=train,
            num_epochs=args.epochs,
            batch_size=args.batch_size,
            use_tqdm=False,
            callbacks=[clock],
            drop_last=True,
        )
    rates = window_rates(clock.ends, start, args.batch_size)
    return {
        "bench": "peer_pykeen",
        "metric": "positive triples per second, steady state (median of windows)",
        "value": summary(rates)["median_pos_per_s"],
        **summary(rates),
        "batches": len(clock.ends),
        "cpu": used.record(),
        "config": vars(args),
        "resolved": resolved(model, loop, args),
        "pykeen": pykeen.get_version(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
    }


def _labels(path: str) -> np.ndarray:
    with open(path, encoding="utf-8") as f:
        return np.array([line.rstrip("\n").split("\t") for line in f], dtype=str)


def accuracy(args) -> dict:
    splits = {s: _labels(f"{args.data_dir}/{s}.txt") for s in ("train", "valid", "test")}
    every = np.concatenate(list(splits.values()))
    entity_to_id = {e: i for i, e in enumerate(sorted(set(every[:, 0]) | set(every[:, 2])))}
    relation_to_id = {r: i for i, r in enumerate(sorted(set(every[:, 1])))}
    factories = {
        s: TriplesFactory.from_labeled_triples(t, entity_to_id=entity_to_id, relation_to_id=relation_to_id)
        for s, t in splits.items()
    }
    torch.manual_seed(args.seed)
    model, loop = build(factories["train"], args)
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
    regularizer = getattr(model.entity_representations[0], "regularizer", None)
    return {
        "bench": "peer_pykeen_accuracy",
        "test": {
            "mrr": result.get_metric("both.realistic.inverse_harmonic_mean_rank"),
            **{f"hits@{k}": result.get_metric(f"both.realistic.hits_at_{k}") for k in (1, 3, 10)},
        },
        "epochs": args.epochs,
        "seed": args.seed,
        "train_seconds": round(train_seconds, 1),
        "eval_seconds": round(time.perf_counter() - start, 1),
        "regularizer": None if regularizer is None else type(regularizer).__name__,
        "torch": torch.__version__,
    }


def _name(obj) -> str:
    """A class's or function's name, or an instance's class's (the loop keeps its sampler as a
    class, a representation its initializer as a function)."""
    return getattr(obj, "__name__", None) or type(obj).__name__  # a class or function, or an instance


def resolved(model, loop, args) -> dict:
    """What PyKEEN actually built, read back from the objects (not from our arguments)."""
    regularizers = [
        f"{type(module).__name__}(weight={float(module.weight)}, p={getattr(module, 'p', None)}, "
        f"normalize={getattr(module, 'normalize', None)})"
        for module in model.modules()
        if isinstance(module, pykeen.regularizers.Regularizer)
    ]  # one per representation it applies to
    return {
        "model": f"{type(model).__module__}.{type(model).__name__}",
        "embedding_dim": int(model.entity_representations[0].shape[0]),
        "entity_initializer": _name(getattr(model.entity_representations[0], "initializer", None)),
        "relation_initializer": _name(getattr(model.relation_representations[0], "initializer", None)),
        "regularizers": regularizers,  # [] when none is applied
        "loss": repr(model.loss),
        "negative_sampler": f"{_name(loop.negative_sampler)}(num_negs_per_pos={args.neg})",
        "optimizer": repr(loop.optimizer).replace("\n", " "),
        "training_loop": type(loop).__name__,
        "batch_size": args.batch_size,
        "drop_last": True,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("speed", "accuracy"), default="speed")
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--batch-size", type=int, default=500)
    parser.add_argument("--neg", type=int, default=50)
    parser.add_argument("--epochs", type=int, help="full epochs (default: 1 for speed, 4 for accuracy)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--regularizer",
        choices=["none", "pykeen-default"],
        help="none: jobi-tf's setting (speed's default); pykeen-default: ComplEx's own L2, weight 0.01 (accuracy's)",
    )
    args = parser.parse_args()
    speed_mode = args.mode == "speed"
    args.epochs = args.epochs or (1 if speed_mode else 4)
    args.regularizer = args.regularizer or ("none" if speed_mode else "pykeen-default")
    print(json.dumps(speed(args) if speed_mode else accuracy(args)))


if __name__ == "__main__":
    main()
