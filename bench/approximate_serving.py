"""What an export's approximate top-k serves, against its exact top-k: recall, MRR, latency, throughput.

Asks one split's queries, tails and heads (``(h, r, ?)`` and ``(?, r, t)`` of each triple), of an
export made with ``--cells`` (and ``--filter-known``):

* **recall@k** at each ``--probes``, ``--slacks`` and ``--count-slacks``: the share of the exact signature's top k
  (``predict_tail``/``predict_head``: every entity, the slot counts included when the model ranks
  with them) that the approximate one returns. Tune probe and slacks on ``--split valid``.
* **MRR through the export** (``--mrr``): each answer ranked in the signature's top ``--mrr-k``
  list, the split's other known answers removed (the export leaves out training facts): fully
  filtered, 0 beyond the list. Exact and approximate alike; the exact one checks the export
  against the run's evaluated test MRR.
* **latency** of single queries (p50, p99) at the first probe and slack, and **queries per
  second** with ``--clients`` threads asking single queries at once (TensorFlow releases the
  interpreter lock inside its ops).

Pin it to one core (``taskset -c N``) for one core's figures.

    python bench/approximate_serving.py --export EXPORT/1 --data-dir /work/data/replicated/K137 \\
        --split valid --queries 500 --probes 40,80,160 --slacks 0.25,0.5,1 --count-slacks 0.5,1
"""

from __future__ import annotations

import argparse
import concurrent.futures
import itertools
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import emit, peak_rss_gib, percentiles, provenance, versions  # noqa: E402, I001  (first: TensorFlow's allocator)

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

SIDES = ("tail", "head")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--export", required=True, help="a version folder (EXPORT_BASE/N) made with --cells")
    parser.add_argument("--data-dir", required=True, help="the graph folder (train/valid/test.txt)")
    parser.add_argument("--split", default="valid", choices=("valid", "test"))
    parser.add_argument("--queries", type=int, default=500, help="triples of the split asked (0: all)")
    parser.add_argument("--probes", default="40,80,160")
    parser.add_argument("--slacks", default="", help="cell slacks swept (comma-separated; default: the export's)")
    parser.add_argument(
        "--count-slacks", default="", help="count slacks swept, for an export serving the counts (default: its own)"
    )
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--batch", type=int, default=50, help="queries per request for recall and MRR")
    parser.add_argument("--mrr", action="store_true", help="also the MRR through the exact and approximate signatures")
    parser.add_argument("--mrr-k", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--timed", type=int, default=300, help="single queries timed per side")
    parser.add_argument("--timed-sides", default="tail,head", help="the sides whose single queries are timed")
    args = parser.parse_args()
    if not set(args.timed_sides.split(",")) <= set(SIDES):
        parser.error(f"--timed-sides: give tail, head or both, not {args.timed_sides!r}")

    loaded = tf.saved_model.load(args.export)
    triples = _triples(Path(args.data_dir) / f"{args.split}.txt", args.queries)
    probes = [int(p) for p in args.probes.split(",")]
    slacks = [float(s) for s in args.slacks.split(",") if s] or [float(loaded.cells.slack.numpy())]
    count_slacks = _count_slacks(loaded, args.count_slacks, parser)
    asker = Asker(loaded, triples, args.batch, tuple(args.timed_sides.split(",")))
    depth = max(args.k, args.mrr_k if args.mrr else 0)
    exact = {side: asker.lists(side, depth) for side in SIDES}
    record = {
        "bench": "approximate_serving",
        "metric": f"recall@{args.k} of the approximate signatures against the exact ones, {args.split} queries",
        "export": args.export,
        "split": args.split,
        "triples": len(triples),
        "slot_counts_served": getattr(loaded, "slot_cells", None) is not None,
        "recall": {},
        "timed_sides": asker.timed_sides,
    }
    from_hub = _asked_from_hub(loaded, Path(args.export), triples)
    if from_hub is not None:
        record["queries_from_hub"] = {side: int(sum(from_hub[side])) for side in SIDES}
    for slack, count_slack, probe in itertools.product(slacks, count_slacks, probes):
        _set_slacks(loaded, slack, count_slack)
        found = {side: asker.lists(side, depth, probe) for side in SIDES}
        entry = {side: _recall(found[side], exact[side], args.k) for side in SIDES}
        entry["both"] = round((entry["tail"] + entry["head"]) / 2, 4)
        for side in SIDES if from_hub is not None else ():
            for group, flag in (("from_hub", True), ("reached", False)):
                kept = [i for i, hub in enumerate(from_hub[side]) if hub == flag]
                found_kept, exact_kept = [found[side][i] for i in kept], [exact[side][i] for i in kept]
                entry[f"{side}_{group}"] = _recall(found_kept, exact_kept, args.k) if kept else None
        if args.mrr:
            entry["mrr"] = _mrr(found, triples, Path(args.data_dir))
        record["recall"][_setting(slack, count_slack, probe)] = entry
    if args.mrr:
        record["mrr_exact"] = _mrr(exact, triples, Path(args.data_dir))
        record["mrr_k"] = args.mrr_k
    _set_slacks(loaded, slacks[0], count_slacks[0])
    record["latency"] = {
        _setting(slacks[0], count_slacks[0], probes[0]): asker.latency(probes[0], args.timed),
        "exact": asker.latency(None, min(args.timed, 50)),
    }
    record["clients"] = {"clients": args.clients, **asker.throughput(probes[0], args.clients, args.timed)}
    record["peak_rss_gib"] = round(peak_rss_gib(), 2)
    emit({**record, **provenance(__file__), "versions": versions()})


class Asker:
    """The split's tail and head queries, asked of the export's exact or approximate signatures."""

    def __init__(self, loaded, triples: list[tuple[str, str, str]], batch: int, timed_sides=SIDES) -> None:
        self.loaded, self.triples, self.batch, self.timed_sides = loaded, triples, batch, timed_sides

    def _call(self, side: str, rows: list[tuple[str, str, str]], k: int, probe: int | None):
        name = f"predict_{side}" + ("" if probe is None else "_approximate")
        names = {"relation": tf.constant([r for _, r, _ in rows])}
        names["head" if side == "tail" else "tail"] = tf.constant([h if side == "tail" else t for h, _, t in rows])
        extra = {} if probe is None else {"probe": tf.constant(probe, tf.int32)}
        return self.loaded.signatures[name](**names, k=tf.constant(k, tf.int32), **extra)[f"{side}s"].numpy()

    def lists(self, side: str, k: int, probe: int | None = None) -> list[list[str]]:
        """Each query's answer names, best first (``probe``: the approximate signature's)."""
        out = []
        for start in range(0, len(self.triples), self.batch):
            answers = self._call(side, self.triples[start : start + self.batch], k, probe)
            out += [[a.decode() for a in row if a] for row in answers.tolist()]
        return out

    def latency(self, probe: int | None, count: int) -> dict:
        """p50 and p99 ms of single top-10 queries of the timed sides, each asked once first (timed
        apart as ``first_pass_*``: an approximate signature compiles one XLA program per size
        class of candidates, on the first query of that class)."""
        first, times = [], []
        for timed in (first, times):
            for side in self.timed_sides:
                for i in range(min(count, len(self.triples))):
                    started = time.perf_counter()
                    self._call(side, [self.triples[i]], 10, probe)
                    timed.append(1000 * (time.perf_counter() - started))
        return {**percentiles(times), **{f"first_pass_{key}": value for key, value in percentiles(first).items()}}

    def throughput(self, probe: int, clients: int, count: int) -> dict:
        """Single top-10 queries per second with ``clients`` threads asking at once."""
        work = [(side, i) for i in range(min(count, len(self.triples))) for side in self.timed_sides]

        def ask(item):
            side, i = item
            self._call(side, [self.triples[i]], 10, probe)

        with concurrent.futures.ThreadPoolExecutor(clients) as pool:
            list(pool.map(ask, work[: 4 * clients]))  # warm-up
            started = time.perf_counter()
            list(pool.map(ask, work))
            seconds = time.perf_counter() - started
        return {"queries": len(work), "seconds": round(seconds, 2), "queries_per_second": round(len(work) / seconds, 1)}


def _asked_from_hub(loaded, export: Path, triples) -> dict[str, list[bool]] | None:
    """Each query's group, for an export whose counts have a second weight for the queries asked
    from a hub (`jobi_tf.models.hub_route`): ``{side: [bool]}``, the given entity's flag; else None."""
    prior = getattr(loaded, "slot_prior", None)
    if prior is None or getattr(prior, "from_hub", None) is None:
        return None
    flags = prior.from_hub.numpy()
    names = (export / "assets" / "entities.txt").read_text(encoding="utf-8").splitlines()
    asks = dict(zip(names, flags.tolist(), strict=True))  # (a name the export lacks: no answers, not counted)
    return {"tail": [asks.get(h, False) for h, _, _ in triples], "head": [asks.get(t, False) for _, _, t in triples]}


def _count_slacks(loaded, given: str, parser) -> list[float | None]:
    """The count slacks to sweep: ``given``, or the export's own; ``[None]`` without served counts."""
    cells = getattr(loaded, "slot_cells", None)
    if cells is None or not hasattr(cells, "slack"):
        if given:
            parser.error("--count-slacks: this export serves no slot counts (or predates the count slack)")
        return [None]
    return [float(s) for s in given.split(",") if s] or [float(cells.slack.numpy())]


def _set_slacks(loaded, slack: float, count_slack: float | None) -> None:
    loaded.cells.slack.assign(slack)
    if count_slack is not None:
        loaded.slot_cells.slack.assign(count_slack)


def _setting(slack: float, count_slack: float | None, probe: int) -> str:
    """A record's key: ``slack S, probe P``, with ``count slack C`` between when the export has one."""
    counts = "" if count_slack is None else f"count slack {count_slack}, "
    return f"slack {slack}, {counts}probe {probe}"


def _triples(path: Path, count: int) -> list[tuple[str, str, str]]:
    rows = [tuple(line.split("\t")) for line in path.read_text(encoding="utf-8").splitlines() if line]
    return rows[:count] if count else rows


def _recall(found: list[list[str]], exact: list[list[str]], k: int) -> float:
    shares = [len(set(f[:k]) & set(e[:k])) / len(e[:k]) for f, e in zip(found, exact, strict=True) if e]
    return round(float(np.mean(shares)), 4)


def _mrr(found: dict[str, list[list[str]]], triples, data_dir: Path) -> float:
    """Mean reciprocal rank of each query's answer in its list, the split's other true answers
    (valid and test; the export leaves out training ones) removed first; 0 beyond the list."""
    known = {"tail": {}, "head": {}}
    for split in ("valid", "test"):
        for h, r, t in _triples(data_dir / f"{split}.txt", 0):
            known["tail"].setdefault((h, r), set()).add(t)
            known["head"].setdefault((r, t), set()).add(h)
    ranks = []
    for side in SIDES:
        for (h, r, t), answers in zip(triples, found[side], strict=True):
            key, truth = ((h, r), t) if side == "tail" else ((r, t), h)
            others = known[side][key] - {truth}
            kept = [a for a in answers if a not in others]
            ranks.append(1.0 / (kept.index(truth) + 1) if truth in kept else 0.0)
    return round(float(np.mean(ranks)), 4)


if __name__ == "__main__":
    main()
