"""The steady-state measuring both sides of a speed comparison use (`bench/_steady.py`).

A wrong window would make every peer ratio wrong, so the arithmetic is checked on clocks
with known rates.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from _steady import Usage, window_rates  # noqa: E402


def test_windows_skip_the_warm_up_and_measure_each_window():
    # 544 batches of 500 (one FB15k-237 epoch): the first 20 take 1 s each (compilation),
    # then batches 20..169 take 0.1 s, 170..319 take 0.2 s, the rest 0.05 s.
    durations = [1.0] * 20 + [0.1] * 150 + [0.2] * 150 + [0.05] * 224
    ends, clock = [], 100.0
    for d in durations:
        clock += d
        ends.append(clock)
    rates = window_rates(ends, 100.0, batch_size=500)
    assert rates == pytest.approx([5000.0, 2500.0, 10000.0])  # 524 batches after warm-up: 3 full windows


def test_windows_count_positives_so_batch_sizes_compare():
    ends = [0.1 * (i + 1) for i in range(272)]  # 272 batches of 1,000 at 0.1 s
    rates = window_rates(ends, 0.0, batch_size=1000)
    assert len(rates) == 3  # 10 batches of warm-up, then windows of 75 batches
    assert rates == pytest.approx([10_000.0] * 3)


def test_too_short_a_run_gives_no_window():
    assert window_rates([0.1 * (i + 1) for i in range(100)], 0.0, batch_size=500) == []


def test_usage_counts_cpu_time_of_its_block():
    with Usage() as used:
        sum(i * i for i in range(300_000))
    assert used.user > 0 and used.wall > 0
    assert set(used.record()) == {"user_s", "system_s", "minor_faults", "system_share", "wall_s"}


def test_every_step_cost_ratio_in_the_docs_raw_files_follows_from_its_rates(tmp_path):
    """The ratios the docs quote are recomputed from the committed rates; a tampered one is caught."""
    import rederive_ratios

    speed = Path(__file__).resolve().parents[1] / "docs" / "results" / "speed"
    checked = [rederive_ratios.check(path) for path in sorted(speed.glob("*.json"))]
    assert {"jobi_step_cost", "train_speed"} <= {c["bench"] for c in checked if "ok" in c}
    assert all(c.get("ok", True) for c in checked), [c["file"] for c in checked if not c.get("ok", True)]
    record = json.loads(sorted(speed.glob("jobi-step-cost*.json"))[0].read_text())
    entry = record["results"]["1000x100 shared 1000"]["step_cost_jobi_over_baseline"]
    entry["median"] = round(entry["median"] * 0.9, 3)  # a ratio that the rates do not give
    tampered = tmp_path / "tampered.json"
    tampered.write_text(json.dumps(record))
    result = rederive_ratios.check(tampered)
    assert not result["ok"] and result["mismatched"] == ["1000x100 shared 1000/step_cost_jobi_over_baseline"]


@pytest.mark.parametrize(
    "bench",
    [
        "kbc_anchor",
        "adagrad_update",
        "eval_speed",
        "allocator_ab",
        "predict_latency",
        "batch_queries",
        "slot_membership",
        "big_epoch_ab",
        "predict_latency_versions",
        "replicas_speed",
        "head_scoring",
        "batch_queries_sizes",
        "core_scaling",
        "steps_per_execution",
    ],
)
def test_the_anchor_adagrad_and_evaluation_ratios_are_recomputed_from_their_times(tmp_path, bench):
    """Each handler recomputes its ratio from the stored times: a consistent file passes, a
    ratio the times do not give is named."""
    import rederive_ratios

    if bench == "kbc_anchor":
        seconds = {"kbc": [240.0, 250.0], "float32": [120.0, 100.0], "bfloat16": [80.0, 100.0]}
        entry = {"epoch_seconds": seconds}
        entry["kbc_over_float32"] = {"per_round": [2.0, 2.5], "median": 2.25}
        entry["kbc_over_bfloat16"] = {"per_round": [3.0, 2.5], "median": 2.75}
        entry["float32_over_bfloat16"] = {"per_round": [1.5, 1.0], "median": 1.25}
        record, key = {"bench": bench, "results": {"rank 200": entry}}, "rank 200/kbc_over_bfloat16"

        def tamper(r):
            r["results"]["rank 200"]["kbc_over_bfloat16"]["median"] = 2.5
    elif bench == "adagrad_update":
        table = {"rows": 10, "width": 4, "keras_rounds_ms": [6.0, 9.0, 7.0], "fused_rounds_ms": [2.0, 3.5, 1.0]}
        record, key = {"bench": bench, "tables": [{**table, "speedup": 3.5}]}, "10x4/speedup"

        def tamper(r):
            r["tables"][0]["speedup"] = 3.0
    elif bench == "allocator_ab":
        runs = {
            "defaults": [{"wall_s": 60.0}, {"wall_s": 50.0}],
            "tensorflow_default_4k_pages": [{"wall_s": 120.0}, {"wall_s": 75.0}],
        }
        record = {"bench": bench, "runs": runs, "wall_ratio": {"per_round": [2.0, 1.5], "median": 1.75}}
        key = "wall_ratio"

        def tamper(r):
            r["wall_ratio"]["per_round"][1] = 1.6
    elif bench == "batch_queries":
        record = {"bench": bench, "batched_queries_per_second": 3111.0, "single_queries_per_second": 218.0}
        record["ratio"], key = 14.27, "ratio"

        def tamper(r):
            r["ratio"] = 18.2
    elif bench == "slot_membership":
        value = {"no_labels": 2.0, "shared_search": 14.0, "per_row_search": 35.0}
        record, key = (
            {"bench": bench, "value": value, "ratio_per_row_to_shared_search": 2.5},
            "ratio_per_row_to_shared_search",
        )

        def tamper(r):
            r["value"]["per_row_search"] = 42.0
    elif bench == "big_epoch_ab":
        runs = {
            "before": {"epoch_seconds": 600.0},
            "after": {"epoch_seconds": 400.0},
            "baseline": {"epoch_seconds": 200.0},
        }
        ratios = {"before_over_after": 1.5, "before_over_baseline": 3.0, "after_over_baseline": 2.0}
        record, key = {"bench": bench, "runs": runs, "ratios": ratios}, "after_over_baseline"

        def tamper(r):
            r["ratios"]["after_over_baseline"] = 1.8
    elif bench == "predict_latency_versions":
        ratio = {"per_round": [1.1, 1.2], "median": 1.15}
        record = {"bench": bench, "version_1_ms": [2.0, 2.5], "version_2_ms": [2.2, 3.0], "ratio_v2_over_v1": ratio}
        key = "ratio_v2_over_v1"

        def tamper(r):
            r["version_2_ms"][0] = 2.0
    elif bench == "batch_queries_sizes":
        runs = [
            {
                "batch_size": 512,
                "batched_queries_per_second": 2600.0,
                "single_queries_per_second": 200.0,
                "ratio": 13.0,
            },
            {
                "batch_size": 128,
                "batched_queries_per_second": 2200.0,
                "single_queries_per_second": 200.0,
                "ratio": 11.0,
            },
        ]
        record, key = {"bench": bench, "runs": runs}, "batch 128/ratio"

        def tamper(r):
            r["runs"][1]["ratio"] = 12.0
    elif bench == "head_scoring":
        rounds = {"heads_1": [2.0, 2.5], "heads_2": [4.0, 4.0]}
        ratio = {"per_round": [2.0, 1.6], "median": 1.8}
        record, key = {"bench": bench, "rounds_ms": rounds, "ratio_two_heads_to_one": ratio}, "ratio_two_heads_to_one"

        def tamper(r):
            r["rounds_ms"]["heads_2"][1] = 5.0
    elif bench == "replicas_speed":
        value = {"single_xla": 14.9, "single_no_xla": 6.8, "mirrored_2_no_xla": 4.76}
        record, key = (
            {"bench": bench, "value": value, "ratio_mirrored_to_single_no_xla": 0.7},
            "ratio_mirrored_to_single_no_xla",
        )

        def tamper(r):
            r["value"]["mirrored_2_no_xla"] = 6.8
    elif bench == "core_scaling":
        modes = {"one_core": [50.0, 60.0], "both_cores": [75.0, 66.0], "two_threads": [90.0, 99.0]}
        rates = {"baseline": modes, "jobi": {m: [r / 2 for r in v] for m, v in modes.items()}}
        record = {"bench": bench, "rates": rates}
        record["ratios"] = {
            f"{v}/{top}_over_{bottom}": {"per_round": per_round, "median": (per_round[0] + per_round[1]) / 2}
            for v in rates
            for top, bottom, per_round in (
                ("both_cores", "one_core", [1.5, 1.1]),
                ("two_threads", "both_cores", [1.2, 1.5]),
                ("two_threads", "one_core", [1.8, 1.65]),
            )
        }
        key = "jobi/two_threads_over_both_cores"

        def tamper(r):
            r["ratios"][key]["per_round"][1] = 1.4
    elif bench == "steps_per_execution":
        rates = {"pbg": [80.0, 100.0], "baseline spe 1": [100.0, 120.0], "baseline spe 16": [120.0, 150.0]}
        rates |= {"jobi spe 1": [50.0, 60.0], "jobi spe 16": [55.0, 63.0]}
        record = {
            "bench": bench,
            "rates": rates,
            "values": [1, 16],
            "setting": {"variants": {"baseline": {}, "jobi": {}}},
        }
        record["ratios"] = {
            "baseline/spe_1_over_pbg": {"per_round": [1.25, 1.2], "median": 1.225},
            "baseline/spe_16_over_spe_1": {"per_round": [1.2, 1.25], "median": 1.225},
            "baseline/spe_16_over_pbg": {"per_round": [1.5, 1.5], "median": 1.5},
            "jobi/spe_1_over_pbg": {"per_round": [0.625, 0.6], "median": 0.6125},
            "jobi/spe_16_over_spe_1": {"per_round": [1.1, 1.05], "median": 1.075},
            "jobi/spe_16_over_pbg": {"per_round": [0.6875, 0.63], "median": 0.65875},
        }
        key = "baseline/spe_16_over_pbg"

        def tamper(r):
            r["ratios"][key]["median"] = 1.6
    elif bench == "predict_latency":
        record, key = {"bench": bench, "value": 1.448, "reference_ms": 0.86, "ratio": 1.68}, "ratio"

        def tamper(r):
            r["ratio"] = 1.5
    else:
        record = {"bench": bench, "value": 3.85, "reference_bare_matmuls_s": 2.95, "ratio_to_reference": 1.31}
        key = "ratio_to_reference"

        def tamper(r):
            r["ratio_to_reference"] = 1.41

    path = tmp_path / "raw.json"
    path.write_text(json.dumps(record))
    assert rederive_ratios.check(path)["ok"]
    tamper(record)
    path.write_text(json.dumps(record))
    result = rederive_ratios.check(path)
    assert not result["ok"] and result["mismatched"] == [key]


def test_popularity_ranks_match_a_brute_force_filtered_ranking():
    """Slot-popularity ranks against scoring every entity by its slot count, filtering the other
    true answers and counting those above and tied, on a random graph with many ties."""
    import popularity_ranking

    from jobi_tf.data.index import KGIndex

    rng = np.random.default_rng(0)
    e, r = 30, 3
    splits = {s: rng.integers(0, [e, r, e], size=(n, 3)) for s, n in (("train", 300), ("valid", 20), ("test", 40))}
    index = KGIndex.from_ids(splits, e, r)
    everything = np.concatenate(list(splits.values()))
    for tail in (True, False):
        answer, given = (2, 0) if tail else (0, 2)
        optimistic, pessimistic = popularity_ranking.popularity_ranks(index, index.test, tail)
        for q, triple in enumerate(index.test):
            scores = np.bincount(splits["train"][splits["train"][:, 1] == triple[1], answer], minlength=e).astype(float)
            same = (everything[:, 1] == triple[1]) & (everything[:, given] == triple[given])
            others = set(everything[same, answer]) - {triple[answer]}
            scores[list(others)] = -np.inf
            mine = scores[triple[answer]]
            assert optimistic[q] == 1 + np.sum(scores > mine)
            assert pessimistic[q] == np.sum(scores >= mine)


def test_an_isa_cap_is_recorded_in_the_machine_and_the_command(monkeypatch):
    # An AVX-512 CPU capped to AVX2 must not pass for an AVX2-only machine in a raw file.
    from _common import isa_limits, machine

    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=1")
    assert isa_limits() == {} and "isa_limits" not in machine()
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_max_isa=AVX2")
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    assert machine()["isa_limits"] == {"XLA_FLAGS": "--xla_cpu_max_isa=AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
