"""`bench/replicate_kg.py`: a real graph grown by copying its non-hub entities.

Checked on a small source graph written here (no dataset files), from the written files:
hubs stay single, every grown triple is a source triple of its own split in one copy, the
held-out splits are filtered, the JSON line counts what was written, and a seed gives the
same graph.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import replicate_kg  # noqa: E402

SPLITS = ("train", "valid", "test")
COPIES, HUB_DEGREE = 3, 30


def _read(folder: Path) -> dict[str, list[tuple[str, str, str]]]:
    return {s: [tuple(line.split("\t")) for line in (folder / f"{s}.txt").read_text().splitlines()] for s in SPLITS}


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    """40 entities of skewed degree (a few hubs), 4 relations; held-out triples not in train."""
    rng = np.random.default_rng(1)
    weights = 1.0 / np.arange(1, 41)
    ends = rng.choice(40, size=(900, 2), p=weights / weights.sum())
    triples = {(f"/m/e{h}", f"/r/{r}", f"/m/e{t}") for (h, t), r in zip(ends, rng.integers(0, 4, 900), strict=True)}
    triples = sorted(triples)
    order = rng.permutation(len(triples))
    folder = tmp_path_factory.mktemp("source")
    parts = {"valid": order[:60], "test": order[60:120], "train": order[120:]}
    for split, rows in parts.items():
        (folder / f"{split}.txt").write_text("".join("\t".join(triples[i]) + "\n" for i in rows))
    return folder


def _grow(source: Path, out: Path, capsys, monkeypatch, seed: int = 0, copies: int = COPIES) -> dict:
    """The script's ``main`` as the command line runs it; its JSON line."""
    argv = ["--source", str(source), "--copies", str(copies), "--keep", "0.6", "--hub-degree", str(HUB_DEGREE)]
    monkeypatch.setattr(
        sys, "argv", ["replicate_kg.py", *argv, "--heldout", "25", "--seed", str(seed), "--out", str(out)]
    )
    replicate_kg.main()
    return json.loads(capsys.readouterr().out)


def _strip(label: str) -> tuple[str, int | None]:
    name, _, copy = label.partition("#")
    return name, int(copy) if copy else None


def test_grown_triples_are_source_triples_of_their_split_in_one_copy(source, tmp_path, capsys, monkeypatch):
    record = _grow(source, tmp_path / "g", capsys, monkeypatch)
    src, grown = _read(source), _read(tmp_path / "g")
    degree = Counter(e for h, _, t in src["train"] for e in (h, t))
    hubs = {e for e, d in degree.items() if d >= HUB_DEGREE}
    assert 0 < len(hubs) < 10
    for split in SPLITS:
        for h, r, t in grown[split]:
            (h0, hk), (t0, tk) = _strip(h), _strip(t)
            assert (h0, r, t0) in set(src[split])  # its own split's triple
            assert (hk is None) == (h0 in hubs) and (tk is None) == (t0 in hubs)  # hubs single, others copied
            assert hk is None or tk is None or hk == tk  # both ends copied: the same copy
            assert all(k is None or 0 <= k < COPIES for k in (hk, tk))
        assert len(set(grown[split])) == len(grown[split])
    train = set(grown["train"])
    assert (
        not train & set(grown["valid"])
        and not train & set(grown["test"])
        and not set(grown["valid"]) & set(grown["test"])
    )
    seen = {e for h, _, t in train for e in (h, t)}
    assert all(h in seen and t in seen for s in ("valid", "test") for h, _, t in grown[s])
    hub_pairs = [x for x in grown["train"] if "#" not in x[0] + x[2]]
    assert len(hub_pairs) == len(set(hub_pairs)) > 0  # hub-to-hub facts once

    sizes = record["sizes"]
    assert [sizes[s] for s in SPLITS] == [len(grown[s]) for s in SPLITS] and sizes["valid"] == 25
    assert sizes["entities"] == len(seen) and sizes["relations"] == len({r for _, r, _ in train})
    assert sizes["hubs"] == len(hubs) and record["command"].startswith("python bench/replicate_kg.py --source")
    share = record["hub_answer_share"]["test"]
    assert share["tail queries"] == pytest.approx(np.mean(["#" not in t for _, _, t in grown["test"]]), abs=1e-4)
    assert share["head queries"] == pytest.approx(np.mean(["#" not in h for h, _, _ in grown["test"]]), abs=1e-4)
    meta = json.loads((tmp_path / "g" / "replicate.json").read_text())
    assert set(meta["hubs"]["labels"]) == hubs and meta["settings"]["copies"] == COPIES
    assert meta["source"]["files"]["train"]["lines"] == len(src["train"])


def test_a_seed_gives_the_same_graph_and_smaller_graphs_are_the_first_copies(source, tmp_path, capsys, monkeypatch):
    for name, seed, copies in (("a", 0, COPIES), ("b", 0, COPIES), ("c", 1, COPIES), ("two", 0, 2)):
        _grow(source, tmp_path / name, capsys, monkeypatch, seed=seed, copies=copies)
    a, b, c, two = (_read(tmp_path / n) for n in ("a", "b", "c", "two"))
    assert a == b and a["train"] != c["train"]

    smaller = {x for x in a["train"] if _copies(x) and max(_copies(x)) < 2}
    assert smaller and smaller == {x for x in two["train"] if _copies(x)}


def _copies(triple: tuple[str, str, str]) -> set[int]:
    return {k for k in (_strip(triple[0])[1], _strip(triple[2])[1]) if k is not None}


def test_one_copy_thins_the_source():
    """K = 1: the source's own ids, every training triple kept with probability S (hub-to-hub ones too)."""
    rng = np.random.default_rng(0)
    train = np.unique(rng.integers(0, [300, 5, 300], size=(20_000, 3)), axis=0)
    hub = np.arange(300) < 30
    grown = replicate_kg.grow_train(train, hub, copies=1, keep=0.55, rng=rng)
    assert set(map(tuple, grown)) <= set(map(tuple, train))
    both_hubs = hub[grown[:, 0]] & hub[grown[:, 2]]
    assert len(grown) == pytest.approx(0.55 * len(train), rel=0.03)
    assert both_hubs.sum() == pytest.approx(0.55 * np.sum(hub[train[:, 0]] & hub[train[:, 2]]), rel=0.25)


def test_the_popularity_floor_splits_queries_by_their_answer(tmp_path):
    """`popularity_ranking.py` on a replicated graph: queries answered by a hub and by a copy."""
    import popularity_ranking

    labels = np.array(["/m/a", "/m/b#0", "/m/b#1", "/m/c"])
    assert popularity_ranking.hub_entities(labels, tmp_path, asked=False) is None  # no replicate.json
    (tmp_path / "replicate.json").write_text("{}")
    hub = popularity_ranking.hub_entities(labels, tmp_path, asked=False)
    assert hub.tolist() == [True, False, False, True]
    queries = np.array([[1, 0, 0], [2, 0, 1], [0, 1, 3]])  # tails: hub, copy, hub; heads: copy, copy, hub
    ranks = {"tail": np.array([1.0, 2.0, 4.0]), "head": np.array([10.0, 5.0, 1.0])}
    out = popularity_ranking.split_metrics(queries, ranks, hub)
    assert out["hub answers"]["count"] == 3 and out["hub answers"]["mrr"] == pytest.approx((1 + 1 / 4 + 1) / 3)
    assert out["copied answers"]["count"] == 3 and out["copied answers"]["hits@3"] == pytest.approx(1 / 3)
    assert out["both"]["count"] == 6 and out["tail queries"]["count"] == 3
