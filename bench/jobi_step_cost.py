"""What JoBi's training step costs against the baseline's, and against PyTorch-BigGraph, in one run.

Steps:
1. Load FB15k-237. For each setting, train ComplEx dim 200 through the real pipeline (tf.data
   sampler → `JoBiModel` → Keras ``fit``, XLA) for ``--epochs`` full epochs each: the baseline
   (no pair head, p 0), JoBi (pair head, p 0.3, biased negatives per triple) and, where the
   uniform negatives are shared, JoBi with ``--biased-chunk 5`` (biased negatives shared by
   runs of 5 positives of the batch sorted by relation and side) and with the pair head on every
   5th or 10th positive (``--pair-every``); at 1000 x 100 shared also each of JoBi's two parts
   without the other (biased negatives with no pair head; the pair head with p 0). Settings: the paper's
   500 × 50 per-triple (dense Adam); 1000 × 100 shared in chunks of 1000 (dense Adam); and
   PBG's work per positive (``pbg``): 1000 × 100 shared in
   chunks of 50, reciprocal relations, Adagrad 0.1 with one accumulator per entity row
   (``--optimizer row-adagrad``, PBG's own optimizer), which is what PBG does with 50 uniform
   negatives per side (it corrupts both sides of each positive: 100 negatives scored per
   positive, one draw per side per chunk of 50 positives; see `bench/pbg_vs_jobi.py`). Its
   variants marked "element-wise adagrad" run ``--optimizer adagrad`` instead (what this
   setting ran before row-adagrad existed), so the optimizer's share is measured too.
2. With ``--peer-python`` (a virtualenv holding PBG, never a dependency of jobi-tf), PBG trains
   one epoch of FB15k-237 in each round, before our ``pbg`` setting (`bench/peer_pbg.py`:
   ``complex_diagonal`` dim 400, softmax loss, batch 1000, 50 uniform negatives per side, no
   batch negatives, Adagrad 0.1, 2 Hogwild workers); its rate is PBG's own log line
   ("Processed N edges in X s"), workers started before the clock runs.
3. Our rates as in `bench/train_speed.py`: positives per second, the median of
   75,000-positive windows after 10,000 of warm-up. ``--rounds`` repeats the whole sequence,
   interleaved, so each ratio compares runs minutes apart; each round gives its own ratios.
4. One JSON line: the rates, each round's ratios and their medians, PBG's full resolved
   config, the machine (CPU model and flags), library versions, and every setting.

Run:  JOBI_TF_DATA_DIR=../shared/datasets python bench/jobi_step_cost.py --rounds 3 \
          --peer-python /path/to/pbgvenv/bin/python
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).parent))
from _common import data_dir, emit, kernel_check, machine, peak_rss_gib, summary  # noqa: E402, I001
from train_speed import ours  # noqa: E402

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from jobi_tf.data.index import build_index  # noqa: E402
from jobi_tf.data.triples import read_split_folder  # noqa: E402

# name: (batch, negatives, shared chunk, joint, biased chunk[, {what else differs: optimizer if
# not the setting's, pair_every}]); the first of each setting is its reference
SETTINGS = {
    "500x50 per-triple": {
        "baseline": (500, 50, 0, False, 0),
        "jobi": (500, 50, 0, True, 0),
        "jobi pair-every 5": (500, 50, 0, True, 0, {"pair_every": 5}),
        "jobi pair-every 10": (500, 50, 0, True, 0, {"pair_every": 10}),
    },
    "1000x100 shared 1000": {
        "baseline": (1000, 100, 1000, False, 0),
        "jobi": (1000, 100, 1000, True, 0),
        "jobi biased-chunk 5": (1000, 100, 1000, True, 5),
        "jobi biased-chunk 10": (1000, 100, 1000, True, 10),
        "jobi biased-chunk 20": (1000, 100, 1000, True, 20),
        "jobi biased-chunk 10, pair-every 5": (1000, 100, 1000, True, 10, {"pair_every": 5}),
        "jobi biased-chunk 10, pair-every 10": (1000, 100, 1000, True, 10, {"pair_every": 10}),
        # JoBi's two parts apart: what each costs of the step above
        "biased-chunk 10 alone": (1000, 100, 1000, False, 10, {"p": 0.3}),
        "pair-every 10 alone": (1000, 100, 1000, True, 0, {"pair_every": 10, "p": 0.0}),
    },
    "pbg": {
        "baseline": (1000, 100, 50, False, 0),
        "jobi": (1000, 100, 50, True, 0),
        "jobi biased-chunk 5": (1000, 100, 50, True, 5),
        "jobi biased-chunk 10": (1000, 100, 50, True, 10),
        "jobi biased-chunk 10, pair-every 5": (1000, 100, 50, True, 10, {"pair_every": 5}),
        "jobi biased-chunk 10, pair-every 10": (1000, 100, 50, True, 10, {"pair_every": 10}),
        "baseline, element-wise adagrad": (1000, 100, 50, False, 0, {"optimizer": "adagrad"}),
        "jobi biased-chunk 10, element-wise adagrad": (1000, 100, 50, True, 10, {"optimizer": "adagrad"}),
    },
}
FIELDS = ("batch", "neg", "shared_negatives", "joint", "biased_chunk")
#: What differs between settings besides the table above (the ``pbg`` setting is PBG's recipe).
EXTRA = {
    "500x50 per-triple": {"optimizer": "auto", "lr": 0.001, "reciprocal": False},
    "1000x100 shared 1000": {"optimizer": "auto", "lr": 0.001, "reciprocal": False},
    "pbg": {"optimizer": "row-adagrad", "lr": 0.1, "reciprocal": True},
}
PBG_ARGS = ["--dim", "400", "--batch-size", "1000", "--uniform-negs", "50", "--batch-negs", "0", "--lr", "0.1"]
PBG_ARGS += ["--epochs", "1", "--workers", "2"]


def pbg_epoch(python: str, folder: Path, out: Path) -> dict:
    """One PBG epoch of the dataset in ``folder`` (its own process and virtualenv)."""
    script = Path(__file__).parent / "peer_pbg.py"
    command = [python, str(script), "--data-dir", str(folder), "--out", str(out), "--check", "0", *PBG_ARGS]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode:
        sys.exit(f"peer_pbg.py failed ({done.returncode}): {done.stderr.strip().splitlines()[-1:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir")
    parser.add_argument("--epochs", type=int, default=1, help="full epochs per measurement")
    parser.add_argument("--rounds", type=int, default=3, help="repeats of the interleaved sequence")
    parser.add_argument("--only", nargs="*", help="settings to run (default: all)")
    parser.add_argument("--variants", nargs="*", help="variants to run in each setting (default: all; baseline always)")
    parser.add_argument("--peer-python", help="python of a virtualenv with PyTorch-BigGraph (adds PBG to 'pbg')")
    args = parser.parse_args()
    folder = data_dir("fb15k-237", args.data_dir)
    _, _, index = build_index(read_split_folder(folder), "fb15k-237")
    settings = {
        k: {v: c for v, c in variants.items() if not args.variants or v == "baseline" or v in args.variants}
        for k, variants in SETTINGS.items()
        if not args.only or k in args.only
    }

    rates: dict[str, dict[str, list[float]]] = {s: {v: [] for v in variants} for s, variants in settings.items()}
    medians: dict[str, dict[str, list[float]]] = {s: {v: [] for v in variants} for s, variants in settings.items()}
    usages = {}
    pbg_runs: list[dict] = []
    scratch = Path(tempfile.mkdtemp(prefix="jobi-step-cost-"))
    for round_ in range(args.rounds):
        for setting, variants in settings.items():
            if setting == "pbg" and args.peer_python:
                pbg_runs.append(pbg_epoch(args.peer_python, folder, scratch / f"pbg-{round_}"))
                print(f"round {round_} pbg PBG: {pbg_runs[-1]['edges_per_s']:,.0f}/s", file=sys.stderr)
            for variant, (b, k, c, joint, c_b, *own) in variants.items():
                extra = {**EXTRA[setting], **(own[0] if own else {})}
                got, used = ours(index, b, k, c, args.epochs, joint=joint, biased_chunk=c_b, **extra)
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
        if setting == "pbg" and pbg_runs:
            pbg_rates = [run["edges_per_s"] for run in pbg_runs]
            entry["pytorch_biggraph"] = {"positives_per_s": pbg_rates, "median": statistics.median(pbg_rates)}
            for variant in variants:
                per_round = [o / p for o, p in zip(medians[setting][variant], pbg_rates, strict=True)]
                entry[f"{variant.replace(' ', '_')}_over_pbg"] = {
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
                    v: dict(zip(FIELDS, c[:5], strict=True)) | (c[5] if len(c) > 5 else {}) for v, c in variants.items()
                }
                for s, variants in settings.items()
            },
            "extra": {s: EXTRA[s] for s in settings},
            "common": "complex dim 200; JoBi: alpha 0.5, p 0.3; baseline: p 0, no pair head; corrupt side per "
            "positive; --optimizer auto is dense Adam here; XLA; seed 0",
            "pbg": None
            if not pbg_runs
            else {
                "command": "peer_pbg.py --data-dir FB15k-237 --check 0 " + " ".join(PBG_ARGS),
                "settings": pbg_runs[0].get("pbg_config"),
                "overrides_of_defaults": pbg_runs[0].get("overrides_of_pbg_defaults"),
                "versions": pbg_runs[0].get("versions"),
                "warm_workers": [run.get("warm_workers") for run in pbg_runs],
                "train_seconds": [run.get("train_seconds") for run in pbg_runs],
            },
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
