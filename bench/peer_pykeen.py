"""PyKEEN's sLCWA training throughput on FB15k-237 (runs in a separate benchmark virtualenv).

ComplEx dim 200, Xavier-normal init, softmax cross-entropy over the positive and its
per-triple uniform negatives (PyKEEN's closest loss to sampled-softmax NLL), Adam 0.001.
One epoch over the first ``--triples`` training triples (after a short warm-up), timed.

Run:  /path/to/benchvenv/bin/python bench/peer_pykeen.py --data-dir ../shared/datasets/fb15k-237
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from pykeen.losses import CrossEntropyLoss
from pykeen.models import ComplEx
from pykeen.sampling import BasicNegativeSampler
from pykeen.training import SLCWATrainingLoop
from pykeen.triples import TriplesFactory


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--batch-size", type=int, default=500)
    parser.add_argument("--neg", type=int, default=50)
    parser.add_argument("--triples", type=int, default=20000)
    args = parser.parse_args()
    full = TriplesFactory.from_path(f"{args.data_dir}/train.txt")
    part = TriplesFactory(
        mapped_triples=full.mapped_triples[: args.triples],
        entity_to_id=full.entity_to_id,
        relation_to_id=full.relation_to_id,
    )
    warm = TriplesFactory(
        mapped_triples=full.mapped_triples[: 5 * args.batch_size],
        entity_to_id=full.entity_to_id,
        relation_to_id=full.relation_to_id,
    )
    model = ComplEx(
        triples_factory=full,
        embedding_dim=200,
        loss=CrossEntropyLoss(),
        entity_initializer="xavier_normal",
        relation_initializer="xavier_normal",
        random_seed=0,
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=0.001)

    def loop_for(factory):
        return SLCWATrainingLoop(
            model=model,
            triples_factory=factory,
            optimizer=optimizer,
            negative_sampler=BasicNegativeSampler,
            negative_sampler_kwargs={"num_negs_per_pos": args.neg},
        )

    loop_for(warm).train(triples_factory=warm, num_epochs=1, batch_size=args.batch_size, use_tqdm=False)
    loop = loop_for(part)
    start = time.perf_counter()
    loop.train(triples_factory=part, num_epochs=1, batch_size=args.batch_size, use_tqdm=False)
    rate = args.triples / (time.perf_counter() - start)
    print(
        json.dumps(
            {
                "bench": "peer_pykeen",
                "metric": "positive triples per second",
                "value": rate,
                "config": vars(args),
                "torch": torch.__version__,
            }
        )
    )


if __name__ == "__main__":
    main()
