"""Re-derive the speed ratios the docs quote from the raw rates in their committed JSON files.

A ratio in the docs is only as good as the arithmetic from the measured rates to it. This
script recomputes every ratio a raw file holds from the rates stored beside it and says, per
ratio, whether the stored figure is what the rates give (within `TOLERANCE`: the stored rates are
rounded). The raw files outlive the scripts that wrote them (bench/README.md, "Retired"), so
each kind of file is understood here by its ``bench`` field, not by importing its script:

* ``jobi_step_cost``: each variant's windows are the rounds' windows in order (one epoch per
  round); a round's rate is the median of its windows; step cost = baseline / variant per
  round, and ours / PBG per round; the median of rounds.
* ``train_speed``: median of our windows / median of PyKEEN's windows of the same setting.
* ``kbc_anchor``: per round, kbc's epoch seconds / ours (each matmul dtype), and float32's /
  bfloat16's; the median of rounds.
* ``core_scaling``, ``steps_per_execution``: per variant and round, one mode's (or N steps per
  call's) steps per second / another's (one step per call's, PBG's); the median of rounds.
* ``allocator_ab``, ``predict_latency_versions``, ``head_scoring``: one per-round ratio.
* ``eval_speed``, ``predict_latency``, ``batch_queries(_sizes)``, ``replicas_speed``,
  ``slot_membership``, ``adagrad_update``, ``big_epoch_ab``: one figure over another.

Run:  python bench/rederive_ratios.py docs/results/speed/*.json
Prints one JSON line per file: the ratios recomputed, the stored ones, and ``ok``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

#: The raw files store window rates rounded to whole positives per second, so a ratio
#: recomputed from them may differ from the stored one in its last digit.
TOLERANCE = 0.002


def ratio_entry(per_round: list[float]) -> dict:
    """How a raw file stores a ratio taken within each round: the rounds' ratios and their median."""
    return {"per_round": [round(x, 3) for x in per_round], "median": round(statistics.median(per_round), 3)}


def _per_round(top: list[float], bottom: list[float]) -> dict:
    return ratio_entry([a / b for a, b in zip(top, bottom, strict=True)])


def _whole(top: float, bottom: float) -> dict:
    return {"median": round(top / bottom, 2)}


def _rounds(windows: list[float], rounds: int) -> list[float]:
    """Per-round rates: the median of each round's share of the windows."""
    if rounds < 1 or len(windows) % rounds:
        raise ValueError(f"{len(windows)} windows do not split into {rounds} equal rounds")
    size = len(windows) // rounds
    return [statistics.median(windows[i * size : (i + 1) * size]) for i in range(rounds)]


# Each handler yields ``(key, recomputed, stored)``.
def jobi_step_cost(r: dict):
    for setting, entry in r["results"].items():
        windows = {v: e["windows"] for v, e in entry.items() if isinstance(e, dict) and "windows" in e}
        rates = {v: _rounds(w, r["rounds"]) for v, w in windows.items()}
        pbg = entry.get("pytorch_biggraph")
        for variant, per_round in rates.items():
            name = variant.replace(" ", "_")
            if variant != "baseline":
                key = f"step_cost_{name}_over_baseline"
                yield f"{setting}/{key}", _per_round(rates["baseline"], per_round), entry[key]
            if pbg:
                key = f"{name}_over_pbg"
                yield f"{setting}/{key}", _per_round(per_round, pbg["positives_per_s"]), entry[key]


def train_speed(r: dict):
    for name, entry in r["ours"].items():
        peer = (r.get("pykeen") or {}).get(name.rsplit(" ", 1)[-1])
        if peer and "ratio_to_pykeen_same_setting" in entry:
            ratio = statistics.median(entry["windows"]) / statistics.median(peer["windows"])
            stored = {"median": entry["ratio_to_pykeen_same_setting"]}
            yield f"{name}/ratio_to_pykeen_same_setting", {"median": round(ratio, 2)}, stored


def kbc_anchor(r: dict):
    for setting, entry in r["results"].items():
        seconds = entry["epoch_seconds"]
        pairs = [("kbc", side) for side in seconds if side != "kbc"]
        if {"float32", "bfloat16"} <= set(seconds):
            pairs.append(("float32", "bfloat16"))
        for slow, fast in pairs:
            key = f"{slow}_over_{fast}"
            yield f"{setting}/{key}", _per_round(seconds[slow], seconds[fast]), entry[key]


def core_scaling(r: dict):
    for variant, by_mode in r["rates"].items():
        for top, bottom in (("both_cores", "one_core"), ("two_threads", "both_cores"), ("two_threads", "one_core")):
            key = f"{variant}/{top}_over_{bottom}"
            yield key, _per_round(by_mode[top], by_mode[bottom]), r["ratios"][key]


def steps_per_execution(r: dict):
    rates = r["rates"]
    for variant in r["setting"]["variants"]:
        for value in r["values"]:
            references = {"spe_1": rates[f"{variant} spe 1"]} if value != 1 else {}
            if rates.get("pbg"):
                references["pbg"] = rates["pbg"]
            for reference, bottom in references.items():
                key = f"{variant}/spe_{value}_over_{reference}"
                yield key, _per_round(rates[f"{variant} spe {value}"], bottom), r["ratios"][key]


def batch_queries_sizes(r: dict):
    for run in r["runs"]:
        ratio = _whole(run["batched_queries_per_second"], run["single_queries_per_second"])
        yield f"batch {run['batch_size']}/ratio", ratio, {"median": run["ratio"]}


def adagrad_update(r: dict):
    for t in r["tables"]:
        if "keras_rounds_ms" in t:
            ratio = _whole(statistics.median(t["keras_rounds_ms"]), statistics.median(t["fused_rounds_ms"]))
            yield f"{t['rows']}x{t['width']}/speedup", ratio, {"median": t["speedup"]}


def big_epoch_ab(r: dict):
    seconds = {name: run["epoch_seconds"] for name, run in r["runs"].items()}
    for top, bottom in (("before", "after"), ("before", "baseline"), ("after", "baseline")):
        key = f"{top}_over_{bottom}"
        yield key, _whole(seconds[top], seconds[bottom]), {"median": r["ratios"][key]}


#: Files holding one figure over another, stored at the top level: ``key: (top, bottom)``.
WHOLE = {
    "eval_speed": lambda r: ("ratio_to_reference", r["value"], r["reference_bare_matmuls_s"]),
    "predict_latency": lambda r: ("ratio", r["value"], r["reference_ms"]),
    "batch_queries": lambda r: ("ratio", r["batched_queries_per_second"], r["single_queries_per_second"]),
    "slot_membership": lambda r: ("ratio_per_row_to_shared_search", r["value"]["per_row_search"],
                                  r["value"]["shared_search"]),
    "replicas_speed": lambda r: ("ratio_mirrored_to_single_no_xla", r["value"]["mirrored_2_no_xla"],
                                 r["value"]["single_no_xla"]),
}  # fmt: skip
#: Files holding one per-round ratio at the top level: ``key: (top rounds, bottom rounds)``.
PER_ROUND = {
    "allocator_ab": lambda r: ("wall_ratio", [x["wall_s"] for x in r["runs"]["tensorflow_default_4k_pages"]],
                               [x["wall_s"] for x in r["runs"]["defaults"]]),
    "predict_latency_versions": lambda r: ("ratio_v2_over_v1", r["version_2_ms"], r["version_1_ms"]),
    "head_scoring": lambda r: ("ratio_two_heads_to_one", r["rounds_ms"]["heads_2"], r["rounds_ms"]["heads_1"]),
}  # fmt: skip
DERIVE = {
    **{b: lambda r, f=f: [(k, _whole(t, d), {"median": r[k]}) for k, t, d in [f(r)]] for b, f in WHOLE.items()},
    **{b: lambda r, f=f: [(k, _per_round(t, d), r[k]) for k, t, d in [f(r)]] for b, f in PER_ROUND.items()},
    **{f.__name__: f for f in (jobi_step_cost, train_speed, kbc_anchor, core_scaling, steps_per_execution)},
    **{f.__name__: f for f in (batch_queries_sizes, adagrad_update, big_epoch_ab)},
}


def _same(stored_entry: dict, derived: dict) -> bool:
    pairs = [(stored_entry.get("median"), derived["median"])]
    pairs += list(zip(stored_entry.get("per_round", []), derived.get("per_round", []), strict=False))
    return all(a is not None and abs(a - b) <= TOLERANCE for a, b in pairs)


def check(path: Path) -> dict:
    record = json.loads(path.read_text(encoding="utf-8"))
    derive = DERIVE.get(record.get("bench"))
    if derive is None:
        return {"file": str(path), "bench": record.get("bench"), "skipped": "no ratio this script re-derives"}
    found = list(derive(record))
    mismatched = [key for key, derived, stored in found if not _same(stored, derived)]
    ratios = {key: derived for key, derived, _ in found}
    return {"file": str(path), "bench": record["bench"], "ratios": ratios, "mismatched": mismatched,
            "ok": not mismatched}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", type=Path, nargs="+")
    args = parser.parse_args()
    results = [check(path) for path in args.files]
    for result in results:
        print(json.dumps(result))
    sys.exit(0 if all(r.get("ok", True) for r in results) else 1)


if __name__ == "__main__":
    main()
