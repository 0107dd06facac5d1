"""The large-graph summary's reading of its records (`bench/serving_truth.py`).

The summary says whether the lever's goal is met; a wrong reading would say so of figures that
miss it, so each part of the served goal is checked to fail on its own.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from serving_truth import chosen_test, served_approximate, served_goal_met  # noqa: E402


def _served(**changes) -> dict:
    served = {
        "test_mrr": 0.2122,
        "evaluated_test_mrr": 0.2124,
        "recall_at_10": {"tail": 0.996, "head": 0.954, "both": 0.975},
        "p50_ms": [6.2, 6.5],
        "p99_ms": [10.4, 11.4],
    }
    return {**served, **changes}


def test_the_served_goal_holds_only_when_every_part_does():
    assert served_goal_met(_served())
    assert not served_goal_met(_served(test_mrr=0.2070))  # 0.0054 from the evaluated one
    assert not served_goal_met(_served(recall_at_10={"tail": 0.996, "head": 0.949, "both": 0.9725}))
    assert not served_goal_met(_served(recall_at_10={"tail": 0.949, "head": 0.996, "both": 0.9725}))
    assert not served_goal_met(_served(p50_ms=[6.2, 10.1]))  # one round over is over
    assert not served_goal_met(_served(p99_ms=[25.5, 11.4]))


def test_a_routed_record_gives_each_group_its_weight():
    routed = {
        "routed_by_reach": {
            "reached": [0.375, 1.0],
            "from_hub": [2.0, 0.0],
            "test": {"mrr": 0.2124},
            "parts": {"hub answers": {"mrr": 0.506}, "copied answers": {"mrr": 0.064}},
        },
        "test_with_counts": {"mrr": 0.2082, "parts": {}},
        "chosen_weight": 0.5,
    }
    test = chosen_test(routed)
    assert (test["mrr"], test["weight"], test["neighbourhood"], test["hub_weight"]) == (0.2124, 0.375, 1.0, 2.0)
    single = chosen_test({"test_with_counts": {"mrr": 0.2082, "parts": {}}, "chosen_weight": 0.5})
    assert (single["mrr"], single["weight"], single["neighbourhood"]) == (0.2082, 0.5, 0.0)
    assert "hub_weight" not in single


@pytest.mark.parametrize("side", ["tail", "head"])
def test_recall_exactly_at_the_goal_meets_it(side):
    recall = {"tail": 0.996, "head": 0.996, "both": 0.973}
    recall[side] = 0.95
    assert served_goal_met(_served(recall_at_10=recall))


def _records(tmp_path, served_recall: dict | None):
    """The records `served_approximate` reads (the 10-deep one when ``served_recall`` is given),
    written as files; returns its arguments."""
    setting = "slack 0.25, count slack 0.5, probe 200"
    files = {
        "mrr": {"recall": {setting: {"tail": 0.9963, "head": 0.9539, "both": 0.9751, "mrr": 0.2122}}, "mrr_k": 1000},
        "model": {"test": {"mrr": 0.21237}},
        "timed": {"latency": {setting: {"p50_ms": 6.2, "p99_ms": 10.4}}, "clients": {"queries_per_second": 127.0}},
    }
    if served_recall is not None:
        files["recall"] = {"recall": served_recall}
    paths = {}
    for name, record in files.items():
        paths[name] = tmp_path / f"{name}.json"
        paths[name].write_text(json.dumps(record), encoding="utf-8")
    return argparse.Namespace(
        served_mrr=str(paths["mrr"]),
        served_recall=str(paths["recall"]) if "recall" in paths else None,
        served_model=str(paths["model"]),
        timed=[str(paths["timed"])],
    )


def test_recall_comes_from_the_lists_asked_as_served(tmp_path):
    setting = "slack 0.25, count slack 0.5, probe 200"
    as_served = {"tail": 0.9959, "head": 0.9536, "both": 0.9748, "head_from_hub": 0.903, "head_reached": 0.9985}
    served = served_approximate(_records(tmp_path, {setting: as_served, "slack 0.25, count slack 1.0, probe 200": {}}))
    assert served["recall_at_10"] == {"tail": 0.9959, "head": 0.9536, "both": 0.9748}
    assert served["recall_at_10_by_group"] == {"head_from_hub": 0.903, "head_reached": 0.9985}
    assert (served["test_mrr"], served["evaluated_test_mrr"]) == (0.2122, 0.2124)
    assert served["recall_lists"] == "asked 10 deep, as served"
    deep = served_approximate(_records(tmp_path, None))
    assert deep["recall_at_10"]["tail"] == 0.9963 and "1000 deep" in deep["recall_lists"]


def test_a_recall_record_without_the_served_setting_is_refused(tmp_path):
    with pytest.raises(SystemExit, match="--served-recall: .* has no 'slack 0.25, count slack 0.5, probe 200' entry"):
        served_approximate(_records(tmp_path, {"slack 0.25, count slack 1.0, probe 200": {}}))
