"""What ``--steps-per-execution N`` buys a sampled step, through ``jobi-tf train`` itself, with
PyTorch-BigGraph in the same run.

Each round runs, one after another, a PBG epoch (``bench/peer_pbg.py``, the settings of
``bench/jobi_step_cost.py``'s ``pbg`` setting: 2 Hogwild workers) and, for the baseline and JoBi
at PBG's work per positive (FB15k-237, ComplEx 200, batch 1000, 100 negatives per positive shared
in chunks of 50, reciprocal relations, ``row-adagrad`` 0.1; JoBi: pair head, p 0.3,
``--biased-chunk 10``; ``--variants`` adds JoBi with ``--pair-every 5`` or ``10``), one
``jobi_tf.training.train`` per ``--steps-per-execution`` value, each in its own process. A run's
rate is the median, over its epochs after the first (where XLA compiles), of the epoch's
``positives_per_second_median`` (the training loop's own figure: 75,000-positive windows, the
first left out). Ratios are taken within a round; the median of
rounds is reported. Prints one JSON line.

Run:  JOBI_TF_DATA_DIR=../shared/datasets python bench/steps_per_execution.py --rounds 3 \\
          --values 1 16 64 --peer-python /path/to/pbgvenv/bin/python
      ... --values 1 64 --variants baseline jobi "jobi pair-every 5" "jobi pair-every 10"
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).parent))
from _common import data_dir, emit, provenance, ratio_entry  # noqa: E402

VARIANTS = {
    "baseline": {"joint": False, "p": 0.0, "biased_chunk": 0, "pair_every": 1},
    "jobi": {"joint": True, "p": 0.3, "biased_chunk": 10, "pair_every": 1},
    "jobi pair-every 5": {"joint": True, "p": 0.3, "biased_chunk": 10, "pair_every": 5},
    "jobi pair-every 10": {"joint": True, "p": 0.3, "biased_chunk": 10, "pair_every": 10},
}
#: PBG's work per positive on our side (``bench/jobi_step_cost.py``'s ``pbg`` setting).
COMMON = {"batch_size": 1000, "neg": 100, "shared_negatives": 50, "reciprocal": True, "optimizer": "row-adagrad"}
COMMON |= {"lr": 0.1, "model": "complex", "dim": 200, "jit_compile": True}


def child(variant: str, value: int, epochs: int, folder: str) -> dict:
    """One ``train`` of FB15k-237 from ``folder``; the per-epoch window medians."""
    from jobi_tf.config import DataConfig, ModelConfig, RunConfig, SamplerConfig, TrainConfig
    from jobi_tf.training import train

    v = VARIANTS[variant]
    cfg = RunConfig(
        data=DataConfig(dataset="fb15k-237", data_dir=folder),
        sampler=SamplerConfig(
            batch_size=COMMON["batch_size"],
            neg=COMMON["neg"],
            p=v["p"],
            shared_negatives=COMMON["shared_negatives"],
            biased_chunk=v["biased_chunk"],
        ),
        model=ModelConfig(model=COMMON["model"], dim=COMMON["dim"], joint=v["joint"], reciprocal=True),
        train=TrainConfig(
            epochs=epochs,
            eval_every=1,  # the history keeps validated epochs; validation time is not in the rates
            patience=10,
            lr=COMMON["lr"],
            optimizer=COMMON["optimizer"],
            jit_compile=True,
            steps_per_execution=value,
            pair_every=v["pair_every"],
        ),
    )
    with tempfile.TemporaryDirectory(prefix="spe-") as run:
        history = train(cfg, Path(run) / "run", verbose=0).metrics["history"]
    return {"epoch_rates": [h["positives_per_second_median"] for h in history]}


def ratios(rates: dict[str, list[float]], values: list[int], variants) -> dict[str, dict]:
    """Per round: each variant's N steps per call over one (``{variant}/spe_N_over_spe_1``) and
    over PBG (``{variant}/spe_N_over_pbg``); the median of rounds."""
    out = {}
    for variant in variants:
        for value in values:
            references = {"spe_1": rates[f"{variant} spe 1"]} if value != 1 else {}
            if rates.get("pbg"):
                references["pbg"] = rates["pbg"]
            for reference, bottom in references.items():
                per_round = [a / b for a, b in zip(rates[f"{variant} spe {value}"], bottom, strict=True)]
                out[f"{variant}/spe_{value}_over_{reference}"] = ratio_entry(per_round)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=3, help="epochs per run; the first is left out")
    parser.add_argument("--values", type=int, nargs="+", default=[1, 16, 64], help="steps per execution (1 first)")
    parser.add_argument("--peer-python", help="python of a virtualenv with PyTorch-BigGraph")
    parser.add_argument("--variants", nargs="+", default=["baseline", "jobi"], choices=list(VARIANTS))
    parser.add_argument("--child", nargs=2, metavar=("VARIANT", "VALUE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    folder = str(data_dir("fb15k-237", args.data_dir))
    if args.child:
        print(json.dumps(child(args.child[0], int(args.child[1]), args.epochs, folder)))
        return
    if args.values[0] != 1 or args.epochs < 2:
        sys.exit("--values must start with 1 (the reference) and --epochs must be at least 2")
    from jobi_step_cost import PBG_ARGS, pbg_epoch

    rates: dict[str, list[float]] = {f"{v} spe {n}": [] for v in args.variants for n in args.values}
    epoch_rates: dict[str, list[list[float]]] = {name: [] for name in rates}
    pbg = []
    scratch = Path(tempfile.mkdtemp(prefix="spe-pbg-"))
    for round_ in range(args.rounds):
        if args.peer_python:
            pbg.append(pbg_epoch(args.peer_python, Path(folder), scratch / f"pbg-{round_}")["edges_per_s"])
            print(f"round {round_} PBG: {pbg[-1]:,.0f}/s", file=sys.stderr)
        for variant in args.variants:
            for value in args.values:
                command = [sys.executable, __file__, "--data-dir", folder, "--epochs", str(args.epochs)]
                done = subprocess.run(command + ["--child", variant, str(value)], capture_output=True, text=True)
                if done.returncode:
                    sys.exit(f"{variant} spe {value} failed: {done.stderr.strip().splitlines()[-1:]}")
                got = json.loads(done.stdout.strip().splitlines()[-1])["epoch_rates"]
                name = f"{variant} spe {value}"
                epoch_rates[name].append([round(r) for r in got])
                rates[name].append(round(statistics.median(got[1:])))
                print(f"round {round_} {name}: {rates[name][-1]:,}/s", file=sys.stderr)
    if pbg:
        rates["pbg"] = [round(r) for r in pbg]
    emit(
        {
            "bench": "steps_per_execution",
            "metric": "positives per second: per run, the median over epochs 2.. of the epoch's window median",
            "rates": rates,
            "values": args.values,
            "ratios": ratios(rates, args.values, args.variants),
            "epoch_rates": epoch_rates,
            "rounds": args.rounds,
            "epochs_per_run": args.epochs,
            "setting": {"common": COMMON, "variants": {v: VARIANTS[v] for v in args.variants}},
            "pbg": {"command": "peer_pbg.py --data-dir FB15k-237 --check 0 " + " ".join(PBG_ARGS)} if pbg else None,
            **provenance(__file__),
        }
    )


if __name__ == "__main__":
    main()
