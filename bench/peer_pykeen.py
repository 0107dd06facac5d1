"""PyKEEN's sLCWA training throughput on FB15k-237, steady state over full epochs (runs in a
separate benchmark virtualenv; PyKEEN is never a dependency of jobi-tf).

ComplEx dim 200, Xavier-normal init, softmax cross-entropy over the positive and its
per-triple uniform negatives (PyKEEN's closest loss to sampled-softmax NLL), Adam 0.001,
on the whole training split. **No regularizer** by default, as on jobi-tf's side: PyKEEN's
``ComplEx`` adds an L2 penalty (``LpRegularizer``, weight 0.01, on every scored embedding)
unless given ``regularizer=None``; ``--regularizer pykeen-default`` keeps it, to measure what
it costs. The JSON line records the resolved model, regularizer, loss, sampler and optimizer.

Measured as ours (`bench/_steady.py`): a timestamp after every batch over ``--epochs`` full
epochs, the first 10,000 positives dropped as warm-up, the rest cut into windows of 75,000
positives; one rate per window, median reported. The loop's own set-up (building the loop,
the first batches) is outside the windows, epoch boundaries inside.

Run:  /path/to/benchvenv/bin/python bench/peer_pykeen.py --data-dir ../shared/datasets/fb15k-237
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import pykeen
import pykeen.regularizers
import torch
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--batch-size", type=int, default=500)
    parser.add_argument("--neg", type=int, default=50)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument(
        "--regularizer",
        choices=["none", "pykeen-default"],
        default="none",
        help="none: jobi-tf's setting; pykeen-default: ComplEx's own L2 (weight 0.01)",
    )
    args = parser.parse_args()
    train = TriplesFactory.from_path(f"{args.data_dir}/train.txt")
    regularizer = {"regularizer": None} if args.regularizer == "none" else {}
    model = ComplEx(
        triples_factory=train,
        embedding_dim=200,
        loss=CrossEntropyLoss(),
        entity_initializer="xavier_normal",
        relation_initializer="xavier_normal",
        random_seed=0,
        **regularizer,
    )
    loop = SLCWATrainingLoop(
        model=model,
        triples_factory=train,
        optimizer=torch.optim.Adam(model.parameters(), lr=0.001),
        negative_sampler=BasicNegativeSampler,
        negative_sampler_kwargs={"num_negs_per_pos": args.neg},
    )
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
    print(
        json.dumps(
            {
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
        )
    )


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


if __name__ == "__main__":
    main()
