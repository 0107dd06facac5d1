"""What JoBi's compiled step would cost if its biased negatives cost no table rows: a what-if probe.

Why: at 1.85M entities JoBi's step costs about twice the baseline's (docs/performance.md,
"JoBi's step, part by part"), and the extra rows its biased negatives bring (about 2,900 a step
with ``--biased-chunk 10``, each gathered from the table and updated by the optimizer) are the
largest part. This probe measures what is left when those rows are free: the biased chunk
candidates are read from the rows the batch already holds (its positives' heads and tails),
so they add no gather from the table and no row to the optimizer's update. What remains is
the chunk products, the pair head on every ``--pair-every``-th positive, and the pipeline.

It is a probe, not a sampler: the candidates are random positives' entities of the same side
(the speed does not depend on which), not the slot's entities, and the library has no such
option. The model is the library's; only `ScoredBatch`'s read of the chunk candidates is
replaced in this process.

Steps: draw ``--steps`` batches from the real tf.data sampler (the baseline: 1000 x 100 uniform
shared, one corrupted side per positive; JoBi: p 0.3, ``--biased-chunk 10``, ``--pair-every
10``), compile Keras's train step with XLA, time ``--passes`` passes (median) of: the baseline,
JoBi, JoBi with free rows, the baseline again. One JSON line.

Run:  python bench/free_rows_probe.py --data-dir /work/data/replicated/K137
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import data_dir, emit, provenance, shared_batch_sampler, timed_model_steps, versions  # noqa: E402, I001

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from jobi_tf.config import DataConfig  # noqa: E402
from jobi_tf.contracts import features as F  # noqa: E402
from jobi_tf.contracts import scored_batch  # noqa: E402
from jobi_tf.datasets.loading import load_index  # noqa: E402
from jobi_tf.sampling.pipelines import make_train_dataset  # noqa: E402

POSITIONS = "chunk_positions"  # this probe's own feature: rows of [heads; tails] of the batch
_library_rows = scored_batch.ScoredBatch._rows


def _rows_free(self, key: str) -> tf.Tensor:
    """`ScoredBatch._rows`, except that chunk candidates come from the batch's positive rows."""
    if key == F.CHUNK_CANDIDATES and POSITIONS in self.features and key not in self._read_rows:
        held = tf.concat([self.rows["head"], self.rows["tail"]], axis=0)  # [2B, W], already gathered
        self._read_rows[key] = tf.gather(held, self.features[POSITIONS])
    return _library_rows(self, key)


def batches(index, joint: bool, free_rows: bool, args) -> list[dict]:
    cfg = shared_batch_sampler(p=0.3 if joint else 0.0, biased_chunk=10 if joint else 0)
    pair_every = args.pair_every if joint else 1
    stream = iter(make_train_dataset(index, cfg, seed=0, pair_labels=joint, pair_every=pair_every))
    rng, out = np.random.default_rng(0), []
    for _ in range(args.steps):
        batch = dict(next(stream))
        if free_rows:  # each run's candidates: random positives' entities on the run's corrupted side
            triples, tail = batch[F.TRIPLES].numpy(), batch[F.POSITIVE_CORRUPT_TAIL].numpy()
            runs, k = batch[F.CHUNK_CANDIDATES].shape
            side = tail.reshape(runs, -1)[:, :1].astype(np.int32)  # the run's first side (the speed is the same)
            positions = rng.integers(0, len(triples), size=(runs, k)).astype(np.int32) + len(triples) * side
            batch[POSITIONS] = tf.constant(positions)
            ends = np.concatenate([triples[:, 0], triples[:, 2]])
            batch[F.CHUNK_CANDIDATES] = tf.constant(ends[positions].astype(np.int32))
        out.append(batch)
    return out


def time_variant(index, joint: bool, free: bool, args) -> dict:
    """Median and passes (ms) of one variant's compiled step on its own batches."""
    every = args.pair_every if joint else 1
    seconds = timed_model_steps(index, batches(index, joint, free, args), joint=joint, pair_every=every, args=args)
    passes = [1e3 * s for s in seconds]
    print(f"joint={joint} free_rows={free}: {statistics.median(passes):.2f} ms", file=sys.stderr)
    return {"median_ms": round(statistics.median(passes), 2), "passes_ms": [round(p, 2) for p in passes]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", help="a graph folder (default: $JOBI_TF_DATA_DIR/fb15k-237)")
    parser.add_argument("--dim", type=int, default=100)
    parser.add_argument("--steps", type=int, default=100, help="distinct batches per pass")
    parser.add_argument("--passes", type=int, default=5)
    parser.add_argument("--pair-every", type=int, default=10)
    parser.add_argument("--optimizer", default="adagrad")
    parser.add_argument("--lr", type=float, default=0.1)
    args = parser.parse_args()
    folder = data_dir("fb15k-237", args.data_dir)
    _, _, index = load_index(DataConfig(data_dir=str(folder)))
    scored_batch.ScoredBatch._rows = _rows_free
    compiled = {
        name: time_variant(index, joint, free, args)
        for name, joint, free in (
            ("baseline", False, False),
            ("jobi", True, False),
            ("jobi_free_rows", True, True),
            ("baseline_again", False, False),
        )
    }
    base = statistics.mean([compiled["baseline"]["median_ms"], compiled["baseline_again"]["median_ms"]])
    emit(
        {
            "bench": "free_rows_probe",
            "metric": "ms per compiled train step (median of passes); JoBi's biased chunk rows read from the batch",
            "compiled": compiled,
            "over_baseline_mean": {k: round(compiled[k]["median_ms"] / base, 3) for k in ("jobi", "jobi_free_rows")},
            "config": {
                "dataset": str(folder),
                "entities": index.num_entities,
                "model": f"complex dim {args.dim}",
                "batch": "1000 x 100, uniform shared by the batch, one corrupted side per positive",
                "jobi": {"p": 0.3, "biased_chunk": 10, "pair_every": args.pair_every},
                "optimizer": f"{args.optimizer} {args.lr}",
                "steps": args.steps,
                "passes": args.passes,
            },
            **provenance(__file__),
            "versions": versions(),
        }
    )


if __name__ == "__main__":
    main()
