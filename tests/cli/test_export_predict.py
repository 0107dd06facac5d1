"""``jobi-tf export`` and ``jobi-tf predict``: outputs, versions, exit codes, one-line errors."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest
from click.testing import CliRunner
from jobi_tf.cli.main import main
from tiny_cli import tiny_flags

TINY_RUN = [*tiny_flags(1), "--joint"]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    run = tmp_path_factory.mktemp("cli-export") / "run"
    result = CliRunner().invoke(main, ["-q", "train", *TINY_RUN, "--out", str(run)])
    assert result.exit_code == 0, result.output
    return run


def _one_error_line(result) -> str:
    lines = [line for line in result.output.splitlines() if line.startswith("Error")]
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    return lines[0]


def test_export_prints_what_it_wrote_and_refuses_to_overwrite(run_dir, tmp_path):
    runner = CliRunner()
    base = tmp_path / "exports"
    result = runner.invoke(main, ["-q", "export", str(run_dir), "--out", str(base)])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["export_dir"] == str(base / "1") and summary["version"] == 1
    # ComplEx dim 8: (entities + relations) x 16 floats x 4 bytes; the checkpoint also holds
    # the pair head and Adam's two moments of every table.
    rows = sum(len((run_dir / f).read_text().splitlines()) for f in ("entities.txt", "relations.txt"))
    assert summary["table_bytes"] == rows * 16 * 4
    assert summary["checkpoint_bytes"] > 3 * summary["table_bytes"]

    again = runner.invoke(main, ["-q", "export", str(run_dir), "--out", str(base), "--version", "1"])
    assert again.exit_code == 1
    assert "version 1 exists; use --force" in _one_error_line(again)
    forced = runner.invoke(main, ["-q", "export", str(run_dir), "--out", str(base), "--version", "1", "--force"])
    assert forced.exit_code == 0, forced.output
    following = runner.invoke(main, ["-q", "export", str(run_dir), "--out", str(base), "--filter-known"])
    assert json.loads(following.stdout)["version"] == 2
    assert sorted(p.name for p in base.iterdir()) == ["1", "2"]


def test_export_errors(run_dir, tmp_path):
    runner = CliRunner()
    bad_version = runner.invoke(main, ["export", str(run_dir), "--out", str(tmp_path / "e"), "--version", "0"])
    assert bad_version.exit_code == 2 and "--version" in bad_version.output
    not_a_run = runner.invoke(main, ["export", str(tmp_path), "--out", str(tmp_path / "e")])
    assert not_a_run.exit_code == 1 and "not a run folder" in _one_error_line(not_a_run)
    assert not (tmp_path / "e").exists()


def test_predict_locally_as_table_and_json(run_dir, tmp_path):
    runner = CliRunner()
    base = tmp_path / "exports"
    assert runner.invoke(main, ["-q", "export", str(run_dir), "--out", str(base)]).exit_code == 0
    head = (run_dir / "entities.txt").read_text().splitlines()[0]
    relation = (run_dir / "relations.txt").read_text().splitlines()[1]
    query = ["--head", head, "--relation", relation, "-k", "4"]

    as_json = runner.invoke(main, ["-q", "predict", "--model", str(base / "1"), *query, "--json"])
    assert as_json.exit_code == 0, as_json.output
    answer = json.loads(as_json.stdout)
    assert answer["signature"] == "predict_tail" and answer["found"] is True
    assert answer["head"] == head and answer["tail"] is None and len(answer["entities"]) == 4
    assert answer["scores"] == sorted(answer["scores"], reverse=True)

    table = runner.invoke(main, ["-q", "predict", "--model", str(base), *query])  # the base: latest version
    assert table.exit_code == 0, table.output
    lines = table.stdout.strip().splitlines()
    assert lines[0] == f"({head}, {relation}, ?): top 4 tails"
    assert [line.split()[1] for line in lines[2:]] == answer["entities"]

    best = answer["entities"][0]
    scored = runner.invoke(
        main, ["-q", "predict", "--model", str(base), "--head", head, "--relation", relation, "--tail", best, "--json"]
    )
    assert json.loads(scored.stdout)["scores"][0] == pytest.approx(answer["scores"][0], rel=1e-5)
    heads = runner.invoke(main, ["-q", "predict", "--model", str(base), "--relation", relation, "--tail", best])
    assert heads.exit_code == 0 and "top 10 heads" in heads.stdout

    # Which relations link head to best: in a fresh process, through the loaded SavedModel.
    ask = [sys.executable, "-m", "jobi_tf.cli", "-q", "predict", "--model", str(base), "--head", head, "--tail", best]
    done = subprocess.run([*ask, "-k", "2", "--json"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    relations = json.loads(done.stdout)
    assert relations["signature"] == "predict_relation" and relations["relation"] is None
    assert len(relations["entities"]) == 2 and set(relations["entities"]) <= set(
        (run_dir / "relations.txt").read_text().splitlines()
    )
    table = runner.invoke(main, ["-q", "predict", "--model", str(base), "--head", head, "--tail", best, "-k", "2"])
    assert table.exit_code == 0 and table.stdout.startswith(f"({head}, ?, {best}): top 2 relations")

    unknown = runner.invoke(main, ["-q", "predict", "--model", str(base), "--head", "nobody", "--relation", relation])
    assert unknown.exit_code == 1
    assert _one_error_line(unknown) == "Error: unknown name: head='nobody' is not in the export's vocabulary"
    for args, named in [
        (["--head", head, "--relation", "no-such-relation"], "relation='no-such-relation' is"),
        (["--head", "nobody", "--relation", relation, "--tail", "no-one"], "head='nobody', tail='no-one' are"),
    ]:
        unknown = runner.invoke(main, ["-q", "predict", "--model", str(base), *args])
        assert _one_error_line(unknown) == f"Error: unknown name: {named} not in the export's vocabulary"


def test_predict_errors(tmp_path):
    runner = CliRunner()
    with socket.socket() as sock:  # bound, not listening: the connection is refused
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        down = runner.invoke(main, ["predict", "--server", url, "--head", "a", "--relation", "r", "--timeout", "2"])
    assert down.exit_code == 1 and "cannot reach" in _one_error_line(down)
    not_export = runner.invoke(main, ["predict", "--model", str(tmp_path), "--head", "a", "--relation", "r"])
    assert not_export.exit_code == 1 and "not a SavedModel" in _one_error_line(not_export)
    for args in (
        ["--head", "a", "--relation", "r"],  # neither --model nor --server
        ["--model", str(tmp_path), "--server", "http://x:8501", "--head", "a", "--relation", "r"],
        ["--server", "ftp://x", "--head", "a", "--relation", "r"],
        ["--model", str(tmp_path), "--relation", "r"],  # no head and no tail
        ["--model", str(tmp_path), "--head", "a"],  # no relation and no tail
        ["--model", str(tmp_path / "missing"), "--head", "a", "--relation", "r"],
    ):
        assert runner.invoke(main, ["predict", *args]).exit_code == 2, args


@pytest.mark.parametrize("command", ["export", "predict"])
def test_help_does_not_import_tensorflow(command):
    code = (
        "import sys\nfrom click.testing import CliRunner\nfrom jobi_tf.cli.main import main\n"
        f"assert CliRunner().invoke(main, ['{command}', '--help']).exit_code == 0\nprint('tensorflow' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


@pytest.fixture(scope="module")
def export_dir(run_dir, tmp_path_factory):
    base = tmp_path_factory.mktemp("batch") / "exports"
    assert CliRunner().invoke(main, ["-q", "export", str(run_dir), "--out", str(base)]).exit_code == 0
    return base


def test_a_queries_file_is_answered_in_order_like_single_queries(run_dir, export_dir, tmp_path):
    entities = (run_dir / "entities.txt").read_text().splitlines()
    relations = (run_dir / "relations.txt").read_text().splitlines()
    rows = [(entities[i], relations[i % len(relations)]) for i in range(7)] + [("nobody", relations[0])]
    queries = tmp_path / "q.tsv"
    queries.write_text("head\trelation\n" + "".join(f"{h}\t{r}\n" for h, r in rows))
    runner = CliRunner()
    args = ["-q", "predict", "--model", str(export_dir), "--queries", str(queries), "-k", "3", "--batch-size", "3"]
    result = runner.invoke(main, args)
    assert result.exit_code == 0, result.output
    answers = [json.loads(line) for line in result.stdout.splitlines()]
    assert [a["line"] for a in answers] == list(range(2, 10))  # file order, header is line 1
    assert answers[-1] == {
        "line": 9,
        "head": "nobody",
        "relation": relations[0],
        "found": False,
        "answers": [],
        "scores": [],
    }
    for answer, (head, relation) in zip(answers[:3], rows, strict=False):
        single = runner.invoke(
            main,
            ["-q", "predict", "--model", str(export_dir), "--head", head, "--relation", relation, "-k", "3", "--json"],
        )
        expected = json.loads(single.stdout)
        assert answer["answers"] == expected["entities"]
        assert answer["scores"] == pytest.approx(expected["scores"], rel=1e-5)
    out = tmp_path / "answers.tsv"
    assert runner.invoke(main, [*args, "--tsv", "--out", str(out)]).exit_code == 0
    lines = out.read_text().splitlines()
    assert len(lines) == 8 and lines[0].split("\t")[:4] == ["2", rows[0][0], rows[0][1], "found"]
    assert lines[-1].split("\t")[3] == "unknown"


def test_a_bad_queries_file_is_a_one_line_error_and_writes_nothing(export_dir, tmp_path):
    runner = CliRunner()
    cases = {
        "head\trelation\na\tb\nc\n": "q.tsv:3: expected 2 non-empty tab-separated fields (head, relation), found 1",
        "subject\tverb\na\tb\n": "q.tsv:1: header 'subject\\tverb' names no query",
        "": "q.tsv: empty",
    }
    for text, message in cases.items():
        queries = tmp_path / "q.tsv"
        queries.write_text(text)
        out = tmp_path / "out.jsonl"
        result = runner.invoke(
            main, ["predict", "--model", str(export_dir), "--queries", str(queries), "--out", str(out)]
        )
        assert result.exit_code == 2 and message in result.output, result.output
        assert not out.exists()
    mixed = runner.invoke(main, ["predict", "--model", str(export_dir), "--queries", str(queries), "--head", "a"])
    assert mixed.exit_code == 2 and "not both" in mixed.output


def test_typed_predictions_need_a_typed_export(run_dir, export_dir, tmp_path):
    runner = CliRunner()
    entities = (run_dir / "entities.txt").read_text().splitlines()
    relation = (run_dir / "relations.txt").read_text().splitlines()[0]
    query = ["--head", entities[0], "--relation", relation, "-k", "3", "--typed"]
    plain = runner.invoke(main, ["predict", "--model", str(export_dir), *query])
    assert plain.exit_code == 1 and "no predict_tail_typed signature (export the run with --typed)" in plain.output
    typed_base = tmp_path / "typed"
    made = runner.invoke(main, ["-q", "export", str(run_dir), "--out", str(typed_base), "--typed"])
    assert made.exit_code == 0 and json.loads(made.stdout)["typed"] is True, made.output
    answer = runner.invoke(main, ["-q", "predict", "--model", str(typed_base), *query, "--json"])
    assert answer.exit_code == 0, answer.output
    assert json.loads(answer.stdout)["signature"] == "predict_tail_typed"


def test_soft_typed_predictions_from_the_cli(run_dir, export_dir, tmp_path):
    runner = CliRunner()
    entities = (run_dir / "entities.txt").read_text().splitlines()
    relation = (run_dir / "relations.txt").read_text().splitlines()[0]
    query = ["--head", entities[0], "--relation", relation, "-k", "3", "--min-pair-probability", "0.5"]
    plain = runner.invoke(main, ["predict", "--model", str(export_dir), *query])
    assert plain.exit_code == 1 and "no predict_tail_soft_typed signature (export a --joint run" in plain.output
    no_typed = runner.invoke(main, ["export", str(run_dir), "--out", str(tmp_path / "x"), "--pair-head"])
    assert no_typed.exit_code == 2 and "--pair-head: needs --typed" in no_typed.output  # a bad flag: usage error
    assert not (tmp_path / "x").exists()
    soft_base = tmp_path / "soft"
    made = runner.invoke(main, ["-q", "export", str(run_dir), "--out", str(soft_base), "--typed", "--pair-head"])
    assert made.exit_code == 0 and json.loads(made.stdout)["pair_head"] is True, made.output
    # In a fresh process, through the loaded SavedModel.
    ask = [sys.executable, "-m", "jobi_tf.cli", "-q", "predict", "--model", str(soft_base), *query, "--json"]
    done = subprocess.run(ask, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    answer = json.loads(done.stdout)
    assert answer["signature"] == "predict_tail_soft_typed" and len(answer["entities"]) == 3
    table = runner.invoke(main, ["-q", "predict", "--model", str(soft_base), *query])
    assert table.exit_code == 0 and "top" in table.output, table.output
    bad = runner.invoke(main, ["predict", "--model", str(soft_base), *query[:-1], "1.5"])
    assert bad.exit_code == 2 and "--min-pair-probability" in bad.output


def test_soft_slot_evaluation_needs_a_joint_run(run_dir, tmp_path):
    runner = CliRunner()
    soft = runner.invoke(main, ["-q", "evaluate", str(run_dir), "--restrict", "soft-slots", "--pair-threshold", "0.4"])
    assert soft.exit_code == 0, soft.output
    assert 0 <= json.loads(soft.stdout)["mrr"] <= 1
    base = tmp_path / "base"
    trained = runner.invoke(main, ["-q", "train", *tiny_flags(1), "--out", str(base)])
    assert trained.exit_code == 0, trained.output
    refused = runner.invoke(main, ["evaluate", str(base), "--restrict", "soft-slots"])
    assert refused.exit_code == 2 and "Traceback" not in refused.output
    assert "--restrict: 'soft-slots' needs a model with a pair head" in refused.output


def test_approximate_predictions_from_the_cli(run_dir, export_dir, tmp_path):
    """``--probe`` asks the approximate signature; probing every cell gives the exact answers."""
    runner = CliRunner()
    entities = (run_dir / "entities.txt").read_text().splitlines()
    relation = (run_dir / "relations.txt").read_text().splitlines()[0]
    query = ["--head", entities[0], "--relation", relation, "-k", "5", "--json"]
    plain = runner.invoke(main, ["predict", "--model", str(export_dir), *query, "--probe", "2"])
    assert (
        plain.exit_code == 1
        and "no predict_tail_approximate signature (export the run with --cells auto)" in plain.output
    )
    both = runner.invoke(main, ["predict", "--model", str(export_dir), *query, "--probe", "2", "--typed"])
    assert both.exit_code == 2 and "--probe" in both.output
    base = tmp_path / "cells"
    made = runner.invoke(main, ["-q", "export", str(run_dir), "--out", str(base), "--cells", "3"])
    assert made.exit_code == 0 and json.loads(made.stdout)["cells"] == 3, made.output
    exact = json.loads(runner.invoke(main, ["-q", "predict", "--model", str(base), *query]).stdout)
    every = runner.invoke(main, ["-q", "predict", "--model", str(base), *query, "--probe", "3"])
    assert every.exit_code == 0, every.output
    answer = json.loads(every.stdout)
    assert answer["signature"] == "predict_tail_approximate" and answer["entities"] == exact["entities"]
    table = runner.invoke(main, ["-q", "predict", "--model", str(base), *query[:-1], "--probe", "1"])
    assert table.exit_code == 0 and "top 5 tails" in table.output
