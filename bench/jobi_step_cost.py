"""What JoBi's training step costs against the baseline's, measured in one run.

Steps:
1. Load FB15k-237. For each setting (500 × 50 per-triple negatives; 1000 × 100 with the uniform
   negatives shared in chunks of 1000), train ComplEx dim 200 through the real pipeline (tf.data
   sampler → `JoBiModel` → Keras ``fit``, ``--optimizer auto``, XLA) for ``--epochs`` full
   epochs each: the baseline (no pair head, p 0), JoBi (pair head, p 0.3, biased negatives per
   triple) and, in the shared setting, JoBi with ``--share-biased`` (biased negatives shared
   in each chunk too).
2. Rates as in `bench/train_speed.py`: positives per second, the median of 75,000-positive
   windows after 10,000 of warm-up. ``--rounds`` repeats the whole sequence, interleaved, so a
   ratio compares runs minutes apart; each round gives its own JoBi / baseline step-cost ratio.
3. One JSON line: the rates, each round's ratios and their medians, the machine (CPU model and
   flags), library versions, and every setting.

Run:  JOBI_TF_DATA_DIR=../shared/datasets python bench/jobi_step_cost.py --rounds 3
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).parent))
from _common import data_dir, emit, kernel_check, machine, peak_rss_gib, summary  # noqa: E402, I001
from train_speed import ours  # noqa: E402

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from jobi_tf.data.index import build_index  # noqa: E402
from jobi_tf.data.triples import read_split_folder  # noqa: E402

# name: (batch, negatives, shared chunk, joint, share_biased); the first of each setting is its reference
SETTINGS = {
    "500x50 per-triple": {
        "baseline": (500, 50, 0, False, False),
        "jobi": (500, 50, 0, True, False),
    },
    "1000x100 shared 1000": {
        "baseline": (1000, 100, 1000, False, False),
        "jobi": (1000, 100, 1000, True, False),
        "jobi share-biased": (1000, 100, 1000, True, True),
    },
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir")
    parser.add_argument("--epochs", type=int, default=1, help="full epochs per measurement")
    parser.add_argument("--rounds", type=int, default=3, help="repeats of the interleaved sequence")
    parser.add_argument("--only", nargs="*", help="settings to run (default: all)")
    args = parser.parse_args()
    folder = data_dir("fb15k-237", args.data_dir)
    _, _, index = build_index(read_split_folder(folder), "fb15k-237")
    settings = {k: v for k, v in SETTINGS.items() if not args.only or k in args.only}

    rates: dict[str, dict[str, list[float]]] = {s: {v: [] for v in variants} for s, variants in settings.items()}
    medians: dict[str, dict[str, list[float]]] = {s: {v: [] for v in variants} for s, variants in settings.items()}
    usages = {}
    for round_ in range(args.rounds):
        for setting, variants in settings.items():
            for variant, (b, k, c, joint, share) in variants.items():
                got, used = ours(index, b, k, c, args.epochs, joint=joint, share_biased=share)
                rates[setting][variant].extend(got)
                medians[setting][variant].append(statistics.median(got))
                usages[f"{setting} {variant} #{round_}"] = used
                print(f"round {round_} {setting} {variant}: {statistics.median(got):,.0f}/s", file=sys.stderr)
                keras.backend.clear_session()

    results = {}
    for setting, variants in settings.items():
        ref = medians[setting]["baseline"]
        entry = {v: summary(r) for v, r in rates[setting].items()}
        for variant in variants:
            if variant == "baseline":
                continue
            # step cost ratio = baseline rate / JoBi rate, per round (runs minutes apart)
            per_round = [b / j for b, j in zip(ref, medians[setting][variant], strict=True)]
            entry[f"step_cost_{variant.replace(' ', '_')}_over_baseline"] = {
                "per_round": [round(x, 3) for x in per_round],
                "median": round(statistics.median(per_round), 3),
            }
        results[setting] = entry
    emit(
        {
            "bench": "jobi_step_cost",
            "metric": "positive triples per second (median of 75,000-positive windows over full epochs); "
            "step cost ratio = baseline rate / JoBi rate, per round",
            "command": " ".join(["python", *sys.argv]),
            "dataset": "fb15k-237",
            "settings": {
                s: {
                    v: dict(zip(("batch", "neg", "shared_negatives", "joint", "share_biased"), c, strict=True))
                    for v, c in variants.items()
                }
                for s, variants in settings.items()
            },
            "common": "complex dim 200; JoBi: alpha 0.5, p 0.3; baseline: p 0, no pair head; corrupt side per "
            "positive; --optimizer auto (dense Adam, lr 0.001); XLA; seed 0",
            "results": results,
            "epochs_per_measurement": args.epochs,
            "rounds": args.rounds,
            "kernel_check": kernel_check(usages),
            "peak_rss_gib": round(peak_rss_gib(), 2),
            "machine": machine(),
            "tf": tf.__version__,
            "keras": keras.__version__,
            "python": platform.python_version(),
        }
    )


if __name__ == "__main__":
    main()
