"""Re-derive the speed ratios the docs quote from the raw rates in their committed JSON files.

A ratio in the docs is only as good as the arithmetic from the measured rates to it. This
script recomputes every ratio a raw file holds from the rates stored beside it and says, per
ratio, whether the stored figure is what the rates give (within `TOLERANCE`: the stored rates are
rounded).

Understood files (by their ``bench`` field):
* ``jobi_step_cost``: each variant's windows are the rounds' windows in order (one epoch per
  round, so each round holds the same number); a round's rate is the median of its windows;
  step cost = baseline / variant per round, and ours / PBG per round; the median of rounds.
* ``train_speed``: ratio to PyKEEN = median of our windows / median of PyKEEN's windows of the
  same batch × negatives setting.
* ``kbc_anchor``: per round, kbc's epoch seconds / ours (each matmul dtype), and float32's /
  bfloat16's; the median of rounds.
* ``eval_speed``: the evaluation's median seconds / the bare matmuls' seconds.
* ``predict_latency``: the median query's milliseconds / the NumPy reference's.
* ``batch_queries``: batched queries per second / one-per-call queries per second.
* ``batch_queries_sizes``: each run's batched / one-per-call queries per second.
* ``predict_latency_versions``: per round, version 2's median milliseconds / version 1's; the median.
* ``head_scoring``: per round, two heads' milliseconds / one head's; the median.
* ``replicas_speed``: mirrored steps per second / one device's, both without XLA.
* ``allocator_ab``: per round, the opt-out's wall seconds / the defaults'; the median.
* ``adagrad_update``: per table, the median of Keras's rounds / the median of the fused rounds.
* ``slot_membership``: the per-row search's median sampler milliseconds / the shared search's.
* ``big_epoch_ab``: the epoch seconds of before / after, before / baseline and after / baseline.
* ``core_scaling``: per variant and round, the steps per second of one mode / another's; the median.
* ``steps_per_execution``: per variant and round, the rate with N steps per call / with one, and
  / PBG's; the median.

Run:  python bench/rederive_ratios.py docs/results/speed/*.json
Prints one JSON line per file: the ratios recomputed, the stored ones, and ``ok``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import big_epoch_ab  # noqa: E402
import core_scaling  # noqa: E402
import steps_per_execution  # noqa: E402
from _common import ratio_entry  # noqa: E402


def _rounds(windows: list[float], rounds: int) -> list[float]:
    """Per-round rates: the median of each round's share of the windows."""
    if rounds < 1 or len(windows) % rounds:
        raise ValueError(f"{len(windows)} windows do not split into {rounds} equal rounds")
    size = len(windows) // rounds
    return [statistics.median(windows[i * size : (i + 1) * size]) for i in range(rounds)]


def jobi_step_cost(record: dict) -> dict[str, dict]:
    """``setting/ratio-name -> {per_round, median}``, as the benchmark writes them."""
    rounds, out = record["rounds"], {}
    for setting, entry in record["results"].items():
        rates = {v: _rounds(e["windows"], rounds) for v, e in entry.items() if isinstance(e, dict) and "windows" in e}
        for variant, per_round in rates.items():
            if variant != "baseline":
                ratios = [b / j for b, j in zip(rates["baseline"], per_round, strict=True)]
                out[f"{setting}/step_cost_{variant.replace(' ', '_')}_over_baseline"] = ratio_entry(ratios)
        pbg = entry.get("pytorch_biggraph")
        if pbg:
            for variant, per_round in rates.items():
                ratios = [o / p for o, p in zip(per_round, pbg["positives_per_s"], strict=True)]
                out[f"{setting}/{variant.replace(' ', '_')}_over_pbg"] = ratio_entry(ratios)
    return out


def train_speed(record: dict) -> dict[str, dict]:
    out = {}
    for name, entry in record["ours"].items():
        setting = name.rsplit(" ", 1)[-1]
        peer = (record.get("pykeen") or {}).get(setting)
        if peer and "ratio_to_pykeen_same_setting" in entry:
            ratio = statistics.median(entry["windows"]) / statistics.median(peer["windows"])
            out[f"{name}/ratio_to_pykeen_same_setting"] = {"median": round(ratio, 2)}
    return out


def kbc_anchor(record: dict) -> dict[str, dict]:
    out = {}
    for setting, entry in record["results"].items():
        seconds = entry["epoch_seconds"]
        pairs = [("kbc", side) for side in seconds if side != "kbc"]
        if {"float32", "bfloat16"} <= set(seconds):
            pairs.append(("float32", "bfloat16"))
        for slow, fast in pairs:
            ratios = [a / b for a, b in zip(seconds[slow], seconds[fast], strict=True)]
            out[f"{setting}/{slow}_over_{fast}"] = ratio_entry(ratios)
    return out


def eval_speed(record: dict) -> dict[str, dict]:
    return {"ratio_to_reference": {"median": round(record["value"] / record["reference_bare_matmuls_s"], 2)}}


def predict_latency(record: dict) -> dict[str, dict]:
    return {"ratio": {"median": round(record["value"] / record["reference_ms"], 2)}}


def batch_queries_sizes(record: dict) -> dict[str, dict]:
    return {f"batch {run['batch_size']}/ratio": batch_queries(run)["ratio"] for run in record["runs"]}


def predict_latency_versions(record: dict) -> dict[str, dict]:
    pairs = zip(record["version_1_ms"], record["version_2_ms"], strict=True)
    return {"ratio_v2_over_v1": ratio_entry([v2 / v1 for v1, v2 in pairs])}


def head_scoring(record: dict) -> dict[str, dict]:
    ms = record["rounds_ms"]
    return {"ratio_two_heads_to_one": ratio_entry([b / a for a, b in zip(ms["heads_1"], ms["heads_2"], strict=True)])}


def replicas_speed(record: dict) -> dict[str, dict]:
    rates = record["value"]
    return {
        "ratio_mirrored_to_single_no_xla": {"median": round(rates["mirrored_2_no_xla"] / rates["single_no_xla"], 2)}
    }


def batch_queries(record: dict) -> dict[str, dict]:
    return {"ratio": {"median": round(record["batched_queries_per_second"] / record["single_queries_per_second"], 2)}}


def adagrad_update(record: dict) -> dict[str, dict]:
    return {
        f"{t['rows']}x{t['width']}/speedup": {
            "median": round(statistics.median(t["keras_rounds_ms"]) / statistics.median(t["fused_rounds_ms"]), 2)
        }
        for t in record["tables"]
        if "keras_rounds_ms" in t
    }


def allocator_ab(record: dict) -> dict[str, dict]:
    runs = record["runs"]
    pairs = zip(runs["defaults"], runs["tensorflow_default_4k_pages"], strict=True)
    ratios = [b["wall_s"] / a["wall_s"] for a, b in pairs]
    return {"wall_ratio": ratio_entry(ratios)}


def slot_membership(record: dict) -> dict[str, dict]:
    value = record["value"]
    return {"ratio_per_row_to_shared_search": {"median": round(value["per_row_search"] / value["shared_search"], 2)}}


def epoch_ab(record: dict) -> dict[str, dict]:
    """The ratios `bench/big_epoch_ab.py` writes, recomputed from the records it kept."""
    return {key: {"median": value} for key, value in big_epoch_ab.ratios(record["runs"]).items()}


def core_scaling_ratios(record: dict) -> dict[str, dict]:
    """The ratios `bench/core_scaling.py` writes, recomputed from the rates it kept."""
    return core_scaling.ratios(record["rates"])


def steps_per_execution_ratios(record: dict) -> dict[str, dict]:
    """The ratios `bench/steps_per_execution.py` writes, recomputed from the rates it kept."""
    return steps_per_execution.ratios(record["rates"], record["values"], record["setting"]["variants"])


DERIVE = {
    "core_scaling": core_scaling_ratios,
    "steps_per_execution": steps_per_execution_ratios,
    "slot_membership": slot_membership,
    "big_epoch_ab": epoch_ab,
    "allocator_ab": allocator_ab,
    "jobi_step_cost": jobi_step_cost,
    "train_speed": train_speed,
    "kbc_anchor": kbc_anchor,
    "eval_speed": eval_speed,
    "predict_latency": predict_latency,
    "batch_queries": batch_queries,
    "predict_latency_versions": predict_latency_versions,
    "batch_queries_sizes": batch_queries_sizes,
    "replicas_speed": replicas_speed,
    "head_scoring": head_scoring,
    "adagrad_update": adagrad_update,
}


def stored(record: dict, key: str) -> dict:
    """The ratio ``key`` (``setting/name`` or ``name/ratio``) as the raw file stores it."""
    if record["bench"] in ("eval_speed", "predict_latency", "batch_queries", "slot_membership", "replicas_speed"):
        return {"median": record[key]}
    if record["bench"] == "big_epoch_ab":
        return {"median": record["ratios"][key]}
    if record["bench"] in ("core_scaling", "steps_per_execution"):
        return record["ratios"][key]
    if record["bench"] in ("allocator_ab", "predict_latency_versions", "head_scoring"):
        return record[key]
    if record["bench"] == "batch_queries_sizes":
        size = int(key.split("/")[0].split()[1])
        return {"median": next(run["ratio"] for run in record["runs"] if run["batch_size"] == size)}
    head, name = key.split("/", 1)
    if record["bench"] in ("jobi_step_cost", "kbc_anchor"):
        return record["results"][head][name]
    if record["bench"] == "adagrad_update":
        table = next(t for t in record["tables"] if f"{t['rows']}x{t['width']}" == head)
        return {"median": table[name]}
    return {"median": record["ours"][head][name]}


#: The raw files store window rates rounded to whole positives per second, so a ratio
#: recomputed from them may differ from the stored one in its last digit.
TOLERANCE = 0.002


def _same(stored_entry: dict, derived: dict) -> bool:
    pairs = [(stored_entry.get("median"), derived["median"])]
    pairs += list(zip(stored_entry.get("per_round", []), derived.get("per_round", []), strict=False))
    return all(a is not None and abs(a - b) <= TOLERANCE for a, b in pairs)


def check(path: Path) -> dict:
    record = json.loads(path.read_text(encoding="utf-8"))
    derive = DERIVE.get(record.get("bench"))
    if derive is None:
        return {"file": str(path), "bench": record.get("bench"), "skipped": "no ratio this script re-derives"}
    ratios = derive(record)
    mismatched = [key for key, value in ratios.items() if not _same(stored(record, key), value)]
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
