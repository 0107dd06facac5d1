"""`bench/compare_seeds.py`: the seeds comparison's arithmetic and its like-for-like check.

JoBi's gain under the best recipe is stated with the sd of a difference of two means; a wrong
formula or a comparison of runs that differ in more than the pair head would misreport it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import compare_seeds  # noqa: E402

from jobi_tf import regimes
from jobi_tf.config import RunConfig, with_settings


def _run(root: Path, name: str, mrr: float, **settings) -> Path:
    folder = root / name
    folder.mkdir()
    cfg = regimes.resolve(with_settings(RunConfig(), {"loss": "full-softmax", "reciprocal": True, **settings}))
    (folder / "config.json").write_text(json.dumps(cfg.to_dict()))
    test = {"mrr": mrr, "hits@1": mrr - 0.1, "hits@3": mrr + 0.05, "hits@10": mrr + 0.2}
    (folder / "metrics.json").write_text(json.dumps({"test": test, "valid": test, "best_epoch": 4}))
    return folder


def test_means_sds_and_the_sd_of_the_difference_match_numpy(tmp_path, capsys):
    rng = np.random.default_rng(0)
    base, jobi = 0.35 + 0.003 * rng.standard_normal(3), 0.352 + 0.002 * rng.standard_normal(3)
    folders = [_run(tmp_path, f"b{s}", float(v), seed=s) for s, v in enumerate(base)]
    folders += [_run(tmp_path, f"j{s}", float(v), seed=s, joint=True) for s, v in enumerate(jobi)]
    compare_seeds.main([str(f) for f in folders])
    result = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert result["variants"]["baseline"]["mrr"]["mean"] == pytest.approx(base.mean())
    assert result["variants"]["baseline"]["mrr"]["sd"] == pytest.approx(base.std(ddof=1))
    diff = result["differences"]["joint - baseline"]["mrr"]
    assert diff["difference"] == pytest.approx(jobi.mean() - base.mean())
    assert diff["sd"] == pytest.approx(np.sqrt(jobi.var(ddof=1) / 3 + base.var(ddof=1) / 3))
    assert diff["verdict"] == ("level" if abs(diff["difference"]) <= 2 * diff["sd"] else "ahead")


def test_a_clear_gain_is_ahead_and_a_small_one_level():
    assert compare_seeds.verdict(0.028, 0.0014) == "ahead"
    assert compare_seeds.verdict(-0.010, 0.002) == "behind"
    assert compare_seeds.verdict(0.003, 0.002) == "level"


@pytest.mark.parametrize(
    ("other", "message"),
    [
        ({"seed": 0, "joint": True, "lr": 0.05}, "not like for like: lr is 0.1"),
        ({"seed": 0, "joint": True, "patience": 9}, "not like for like: patience is 10"),
        ({"seed": 1, "joint": True}, "the variants were run with different seeds"),
        ({"seed": 0}, "variant baseline lists seed [0, 0] twice"),
    ],
)
def test_runs_that_differ_in_more_than_the_pair_head_are_refused(tmp_path, other, message):
    first = _run(tmp_path, "a", 0.35, seed=0, lr=0.1)
    second = _run(tmp_path, "b", 0.36, **{"lr": 0.1, **other})
    with pytest.raises(SystemExit, match=message.replace("[", r"\[").replace("]", r"\]")):
        compare_seeds.main([str(first), str(second)])


def test_raw_results_files_compare_like_their_run_folders(tmp_path, capsys):
    """A docs/results/ file ({command, config, metrics}) stands for its run folder, and mixes with folders."""
    rng = np.random.default_rng(1)
    values = {"b": 0.35 + 0.003 * rng.standard_normal(3), "j": 0.36 + 0.003 * rng.standard_normal(3)}
    folders = [_run(tmp_path, f"{v}{s}", float(values[v][s]), seed=s, joint=v == "j") for v in values for s in range(3)]
    compare_seeds.main([str(f) for f in folders])
    from_folders = json.loads(capsys.readouterr().out.splitlines()[-1])
    raw = tmp_path / "raw"
    raw.mkdir()
    mixed = []
    for folder in folders:
        if folder.name.endswith("2"):  # the last seed stays a folder
            mixed.append(folder)
            continue
        doc = {"command": "jobi-tf grid ...", "config": json.loads((folder / "config.json").read_text())}
        doc["metrics"] = json.loads((folder / "metrics.json").read_text())
        (raw / f"{folder.name}.json").write_text(json.dumps(doc))
        mixed.append(raw / f"{folder.name}.json")
    compare_seeds.main([str(p) for p in mixed])
    from_files = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert from_files["variants"] == from_folders["variants"]
    assert from_files["differences"] == from_folders["differences"]


def test_a_slot_prior_weight_record_compares_its_test_at_the_chosen_weight(tmp_path, capsys):
    """bench/slot_prior_weight.py's record: its ``test_with_counts`` is what is compared, not the run's own test."""
    chosen = {"b": [0.30, 0.31, 0.32], "j": [0.34, 0.36, 0.35]}
    records = []
    for v, values in chosen.items():
        for s, value in enumerate(values):
            folder = _run(tmp_path, f"{v}{s}", 0.1, seed=s, joint=v == "j")  # the run's own test: 0.1
            record = {"bench": "slot_prior_weight", "config": json.loads((folder / "config.json").read_text())}
            record |= {"test_with_counts": {"mrr": value}, "test_without_counts": {"mrr": 0.05}, "chosen_weight": 0.5}
            path = tmp_path / f"{v}{s}.json"
            path.write_text(json.dumps(record))
            records.append(path)
    compare_seeds.main([*map(str, records), "--metric", "mrr"])
    out = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert out["variants"]["joint"]["mrr"]["values"] == chosen["j"]
    assert out["variants"]["baseline"]["mrr"]["mean"] == pytest.approx(np.mean(chosen["b"]))


def test_a_file_without_config_and_metrics_is_refused_in_one_line(tmp_path):
    bad = tmp_path / "summary.json"
    bad.write_text(json.dumps({"metrics": {"test": {"mrr": 0.3}}}))
    with pytest.raises(SystemExit, match=r"summary.json: not a raw results file \(needs 'config' and 'metrics'\)"):
        compare_seeds.main([str(bad)])


def test_by_compares_the_values_of_another_setting_and_refuses_a_second_difference(tmp_path, capsys):
    """``--by biased_chunk``: shared against per-triple biased negatives, JoBi on both sides."""
    common = {"loss": "sampled-softmax", "reciprocal": False, "joint": True, "p": 0.3, "batch_size": 1000}
    common.update(neg=100, shared_negatives=1000)
    per_triple = [_run(tmp_path, f"t{s}", 0.30 + 0.001 * s, seed=s, biased_chunk=0, **common) for s in range(3)]
    shared = [_run(tmp_path, f"s{s}", 0.31 + 0.002 * s, seed=s, biased_chunk=5, **common) for s in range(3)]
    compare_seeds.main(["--by", "biased_chunk", *map(str, per_triple + shared)])
    result = json.loads(capsys.readouterr().out.splitlines()[-1])
    diff = result["differences"]["biased_chunk=5 - biased_chunk=0"]["mrr"]
    assert diff["difference"] == pytest.approx(0.011)
    odd = _run(tmp_path, "odd", 0.3, seed=0, biased_chunk=5, **{**common, "joint": False})
    with pytest.raises(SystemExit, match="not like for like: joint"):
        compare_seeds.main(["--by", "biased_chunk", str(per_triple[1]), str(odd)])


def test_a_field_an_older_config_lacks_counts_as_its_default(tmp_path, capsys):
    """Raw files of runs made before a setting existed compare with newer runs at its default."""
    new = [_run(tmp_path, f"new{s}", 0.35 + 0.001 * s, seed=s, regularizer="dura") for s in range(3)]
    old = [_run(tmp_path, f"old{s}", 0.34 + 0.001 * s, seed=s, regularizer="n3") for s in range(3)]
    for folder in old:
        cfg = json.loads((folder / "config.json").read_text())
        del cfg["sampler"]["biased_chunk"]  # the field came later; its default, 0, is what ran
        (folder / "config.json").write_text(json.dumps(cfg))
    compare_seeds.main(["--by", "regularizer", *map(str, new + old)])
    result = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert result["differences"]['regularizer="n3" - regularizer="dura"']["mrr"]["difference"] == pytest.approx(-0.01)
    cfg = json.loads((old[0] / "config.json").read_text())
    cfg["sampler"]["biased_chunk"] = 5  # a value other than the default still differs
    (old[0] / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(SystemExit, match="not like for like: biased_chunk"):
        compare_seeds.main(["--by", "regularizer", *map(str, new + old)])


def test_ignore_lets_only_the_named_settings_differ_and_is_recorded(tmp_path, capsys):
    """Accuracy-per-hour runs differ in ``epochs`` (the harness plans it per call): named with
    ``--ignore`` they compare, and the record says so; any other difference is still refused."""
    base = [_run(tmp_path, f"b{s}", 0.30 + 0.001 * s, seed=s, epochs=60 + s) for s in range(2)]
    jobi = [_run(tmp_path, f"j{s}", 0.33 + 0.001 * s, seed=s, joint=True, epochs=50) for s in range(2)]
    folders = [str(f) for f in base + jobi]
    with pytest.raises(SystemExit, match="not like for like: epochs"):
        compare_seeds.main(folders)
    compare_seeds.main(["--ignore", "epochs", *folders])
    result = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert result["ignored"] == ["epochs"]
    assert result["command"] == " ".join(["python", "bench/compare_seeds.py", "--ignore", "epochs", *folders])
    assert result["differences"]["joint - baseline"]["mrr"]["difference"] == pytest.approx(0.03)
    odd = _run(tmp_path, "j2", 0.33, seed=2, joint=True, epochs=50, lr=0.5)
    with pytest.raises(SystemExit, match="not like for like: lr"):
        compare_seeds.main(["--ignore", "epochs", str(base[0]), str(odd)])
    with pytest.raises(SystemExit, match="--ignore: no such setting 'epoch'"):
        compare_seeds.main(["--ignore", "epoch", *folders])
