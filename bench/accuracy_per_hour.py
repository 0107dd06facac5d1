"""Accuracy per hour: filtered test MRR / Hits@1/3/10 against training seconds at equal wall-clock
budgets, for one training system on one graph (jobi-tf sampled baseline, sampled JoBi,
1-vs-all, or PyTorch-BigGraph), resumable over hours.

The rule, the same for every system (`RULE`; docs/accuracy-per-hour.md). Training time is the
system's own training seconds summed over its epochs (`TIME_NOTE`: jobi-tf's ``epoch_seconds``,
first-epoch tracing and compiling included; PBG's ``Processed N edges in X s``, its workers
started before the clock). At budget T the point is the first validation (every
``--eval-every`` epochs) whose cumulative seconds reach T; the model held there is the best on
validation (``--monitor``, earliest on ties) so far, and its filtered test metrics are the
point (``over_budget_s``: how far past T). ``--stop-after N`` stops a run converged at the N-th
validation in a row without a better one; every later budget gets that point.

jobi-tf (``baseline``: ``--no-joint --p 0``; ``jobi``: ``--joint --p 0.3``; ``one-vs-all``:
``--preset kbc-fast``; then ``--flags``): ``OUT/run`` is an ordinary run folder trained by
``jobi_tf.training.trainer.train`` in continuations that raise ``epochs`` (as ``jobi-tf grid``'s
halving does), each sized by the epoch times so far to stop just short of the next budget, then
one validation interval at a time; the run's ``metrics.json`` then holds the point. Each call is
a session in ``OUT/accuracy_per_hour.json``; its epochs' seconds are read from the TensorBoard
events it wrote, counting only epochs that survived in the checkpoint (a kill loses at most the
epochs since the last one; steps no event timed are charged at the steady rate and named in
``estimated_seconds_epochs``). A call that crossed T and then changed its best weights has lost
T's model: that point is taken at the call's end (``exact: false``, ``intended``). Each call
re-traces the step inside its first epoch (``sessions``, ``restart_overhead_s_est``).

``pbg`` (``--flags`` are `bench/pbg_vs_jobi.py`'s, ``--dim`` in jobi-tf terms):
``bench/peer_pbg.py --mode epochs`` in ``--peer-python`` trains PBG in ``OUT/pbg``, exporting
every ``--eval-every``-th epoch; each export, in order, is read into a reciprocal-ComplEx
``JoBiModel`` (`pbg_vs_jobi.pbg_model`, ``mapping_check`` once) and validated; the best is kept,
and ranked on test when a budget is reached (always ``exact``).

Resuming: rerun the same command (``OUT/.lock``: one process per folder); finished budgets are
kept, new ones may be added beyond the training done. One JSON line at the end (also the top of
``OUT/accuracy_per_hour.json``, written atomically after every step). Plot several with
`bench/plot.py accuracy-per-hour`.

Run:  JOBI_TF_DATA_DIR=../shared/datasets python bench/accuracy_per_hour.py --system jobi \\
          --dataset fb15k-237 --budgets 5 15 45 120 --out runs/aph-fb15k-237-jobi \\
          --flags "--shared-negatives 50 --biased-chunk 5"
      ... --system pbg --dataset fb15k-237 --budgets 5 15 45 120 --out runs/aph-fb15k-237-pbg \\
          --peer-python /tmp/pbgvenv/bin/python
"""

from __future__ import annotations

import argparse
import dataclasses
import fcntl
import functools
import gc
import json
import logging
import math
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).parent))
from _common import data_dir, emit, machine, versions  # noqa: E402, I001
import pbg_vs_jobi  # noqa: E402

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from jobi_tf.runtime.atomic import write_json_atomic  # noqa: E402
from jobi_tf.config import DataConfig, EvalConfig, RunConfig  # noqa: E402
from jobi_tf.runtime.errors import JobiError, TrainingStopped  # noqa: E402
from jobi_tf.runtime.types import RANK_METRICS  # noqa: E402

PROGRESS = "accuracy_per_hour.json"
SYSTEMS = ("baseline", "jobi", "one-vs-all", "pbg")
SYSTEM_FLAGS = {
    "baseline": ["--no-joint", "--p", "0"],
    "jobi": ["--joint", "--p", "0.3"],
    "one-vs-all": ["--preset", "kbc-fast"],
}
LABELS = {
    "baseline": "jobi-tf baseline (sampled)",
    "jobi": "jobi-tf JoBi (sampled)",
    "one-vs-all": "jobi-tf 1-vs-all (kbc-fast)",
    "pbg": "PyTorch-BigGraph",
}
#: jobi-tf flags the harness sets itself (refused in ``--flags``).
RESERVED = {"--epochs", "--eval-every", "--patience", "--monitor", "--seed", "--out", "--dataset", "--data-dir",
            "--init-from", "--replay"}  # fmt: skip
NEVER = 10**9  # patience without --stop-after: never stop before the largest budget
#: A continuation aims this much short of the budget (epoch times vary on a shared machine).
MARGIN = 1.1
#: ... and trains at most this many times the steady epochs measured so far.
GROWTH = 4
RULE = (
    "at budget T: the first validation whose cumulative training seconds (validation, evaluation, checkpoints, "
    "process start-up and data loading excluded) reach T; the model held there is the best on validation "
    "(monitor; earliest on ties) among the validations so far; its filtered test metrics are the point. Stops are "
    "at epoch ends (validations), so a point lies up to one validation interval past T (train_seconds, "
    "over_budget_s)."
)
TIME_NOTE = {
    "jobi-tf": "jobi-tf's own epoch_seconds (training steps of each epoch, as Throughput logs them and TensorBoard "
    "shows speed/epoch_seconds), summed over the epochs that survived in the checkpoint; each continuation's first "
    "epoch includes re-tracing (and XLA compiling) the step (sessions, restart_overhead_s_est)",
    "pbg": "PBG's own per-epoch 'Processed N edges in X s' (the Hogwild pass; worker start-up and checkpoint writes "
    "excluded), summed over the epochs that survived in PBG's checkpoint",
}

log = logging.getLogger("accuracy_per_hour")


# -- shared -------------------------------------------------------------------------------------
def headline(metrics: dict) -> dict:
    out = {k: round(float(metrics[k]), 6) for k in RANK_METRICS}
    for side in ("head", "tail"):
        if side in metrics:
            out[side] = {k: round(float(metrics[side][k]), 6) for k in RANK_METRICS}
    return out


def freed_after(build, evaluator, split: str, hub: np.ndarray | None = None) -> dict:
    """`headline` metrics on ``split`` of the model ``build()`` returns, the model freed at once;
    with ``hub`` (a replicated graph's hubs) also its `answer_parts` as ``parts``.

    Why: a Keras model sits in reference cycles, which only Python's cyclic collector frees, and
    that runs on counts of objects, not bytes: each validation of a PBG export left its entity
    table in memory (1.5 GB on the FB1.9M-size graph, where the harness once ran out of 24 GB).
    """
    model = build()
    try:
        if hub is None:
            return headline(evaluator.evaluate(model, split))
        ranks = evaluator.ranks(model, evaluator.index.split(split))
        return {
            **headline(evaluator.metrics_from_ranks(ranks)),
            "parts": answer_parts(ranks, evaluator.cfg.rank_type, hub),
        }
    finally:
        del model
        gc.collect()


def replicated_hubs(folder, entities) -> np.ndarray | None:
    """bool per entity id: a hub, on a graph of `replicate_kg.py` (its folder has
    ``replicate.json``); None on any other graph."""
    from popularity_ranking import hub_entities

    return hub_entities(entities.labels, Path(folder), asked=False) if folder else None


def answer_parts(ranks, rank_type: str, hub: np.ndarray) -> dict:
    """Rank metrics of the queries whose answer is a hub and of those whose answer is a copied
    entity. Counting slot frequencies gets most hub answers right; the copied answers are where
    a graph's size bites (docs/replicated-graph.md)."""
    from jobi_tf.evaluation.ranking import rank_metrics

    values, answer_is_hub = ranks.get(rank_type), hub[ranks.targets]
    parts = {"hub answers": values[answer_is_hub], "copied answers": values[~answer_is_hub]}
    return {name: {**rank_metrics(v), "count": int(len(v))} for name, v in parts.items()}


def best_so_far(validations: list[dict], monitor: str, upto: int) -> dict | None:
    """The validation with the highest ``monitor`` among epochs ≤ ``upto`` (earliest on ties)."""
    best = None
    for v in validations:
        if v["epoch"] <= upto and (best is None or v[monitor] > best[monitor]):
            best = v
    return best


def recorded(progress: dict) -> set[float]:
    return {p["budget_s"] for p in progress["points"]}


def add_point(progress: dict, point: dict) -> None:
    progress["points"] = sorted([*progress["points"], point], key=lambda p: p["budget_s"])
    log.info(
        "budget %g min: %.1f s of training, epoch %d (best %d): test mrr %.4f%s",
        point["budget_min"],
        point["train_seconds"],
        point["epochs"],
        point["best_epoch"],
        point["test"]["mrr"],
        "" if point["exact"] else " (taken late: see 'intended')",
    )


def budget_point(budget: float, at: dict, **rest) -> dict:
    """A point at ``budget``: where the run was (``at``: train_seconds, epochs, best_epoch, ...)
    and how far past the budget."""
    return {"budget_min": round(budget / 60, 6), "budget_s": budget, **at,
            "over_budget_s": round(at["train_seconds"] - budget, 2), **rest}  # fmt: skip


def converged_points(progress: dict, budgets: list[float], at: dict, stop_after: int) -> None:
    """Points for every budget not reached when the run stopped converged: ``at`` is the stop
    (epochs, train_seconds, best_epoch, validations, valid, test, sessions, ...)."""
    stop = f"converged: no better validation in the last {stop_after}"
    for budget in budgets:
        if budget not in recorded(progress):
            add_point(progress, budget_point(budget, at, exact=True, stop=stop))


def median_or_none(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


# -- jobi-tf systems ----------------------------------------------------------------------------
def jobi_config(args, dataset_flags: list[str]) -> RunConfig:
    """The `RunConfig` ``jobi-tf train`` builds from the system's flags, ``--flags`` and ours
    (its own parser and preset code: `jobi_tf.cli.train.config_from_command`)."""
    import click
    from jobi_tf.cli.train import config_from_command

    extra = shlex.split(args.flags)
    clash = sorted({t.split("=", 1)[0] for t in extra if t.split("=", 1)[0] in RESERVED})
    if clash:
        sys.exit(f"--flags: {', '.join(clash)} are set by this script (use its own flags)")
    argv = [
        *dataset_flags,
        *SYSTEM_FLAGS[args.system],
        *extra,
        "--eval-every", str(args.eval_every),
        "--patience", str(args.stop_after or NEVER),
        "--monitor", args.monitor,
        "--seed", str(args.seed),
        "--epochs", str(args.eval_every),
    ]  # fmt: skip
    try:
        return config_from_command(argv)
    except click.ClickException as exc:
        sys.exit(f"--flags: {exc.format_message()}")
    except JobiError as exc:
        sys.exit(f"--flags: {exc}")


def read_state(run: Path) -> dict:
    """The loop state in ``RUN/checkpoint.npz`` (epoch, step, history, best_epoch, ...), without the weights."""
    path = run / "checkpoint.npz"
    if not path.exists():
        return {"epoch": 0, "step": 0, "history": [], "best_epoch": 0}
    with np.load(path) as data:
        return json.loads(data["__state__"].tobytes().decode("utf-8"))


def event_files(run: Path) -> list[Path]:
    return sorted((run / "tensorboard").glob("events.out.tfevents.*"))


def speed_by_epoch(path: Path) -> dict[int, dict]:
    """``{epoch: {"epoch_seconds", "positives_per_second"}}`` of one TensorBoard event file."""
    out: dict[int, dict] = {}
    try:
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            for value in event.summary.value:
                if value.tag not in ("speed/epoch_seconds", "speed/positives_per_second"):
                    continue
                v = float(tf.make_ndarray(value.tensor)) if value.HasField("tensor") else value.simple_value
                out.setdefault(int(event.step), {})[value.tag.split("/", 1)[1]] = v
    except tf.errors.DataLossError:  # a record cut by a kill: keep what was read
        pass
    return out


def settle(session: dict, run: Path, batch_size: int, how: str) -> None:
    """Close a session: its surviving epochs' seconds and steps, from the event file it wrote."""
    state = read_state(run)
    end_epoch, end_step = state["epoch"], state["step"]
    start_epoch, start_step = session["start"]
    epochs, files = {}, []
    for path in event_files(run):
        if path.name in session["files_before"]:
            continue
        speeds = speed_by_epoch(path)
        if speeds:
            files.append(path.name)
        for epoch, v in speeds.items():
            if "epoch_seconds" not in v:
                continue
            first = start_epoch + 1
            survived = epoch <= end_epoch or (end_step and epoch == end_epoch + 1)
            if epoch >= first and survived:
                steps = v.get("positives_per_second", 0.0) * v["epoch_seconds"] / batch_size
                epochs[str(epoch)] = {"seconds": v["epoch_seconds"], "steps": int(round(steps))}
    session.update(end=[end_epoch, end_step], epochs=epochs, files=files, ended=how)
    session.pop("files_before", None)  # attributed: the list is not needed any more


def epoch_seconds(sessions: list[dict], upto: int, steps: int, history: list[dict], batch_size: int) -> dict:
    """Per epoch 1..``upto``: seconds, whether any of it was estimated, whether it opened a session."""
    table = {e: {"seconds": 0.0, "steps": 0, "estimated": False, "first": False} for e in range(1, upto + 1)}
    for s in sessions:
        if s.get("end") is None:
            continue
        for i, (epoch, v) in enumerate(sorted(s["epochs"].items(), key=lambda kv: int(kv[0]))):
            e = int(epoch)
            if e in table:
                table[e]["seconds"] += v["seconds"]
                table[e]["steps"] += v["steps"]
                table[e]["first"] |= i == 0
    by_epoch = {h["epoch"]: h for h in history}
    rates = [t["seconds"] / t["steps"] for t in table.values() if t["steps"] == steps and not t["first"]]
    for e, t in table.items():
        if t["steps"] == 0 and e in by_epoch and "epoch_seconds" in by_epoch[e]:
            # validated, but its event was never written (killed between the checkpoint and TensorBoard)
            h = by_epoch[e]
            t["seconds"] = h["epoch_seconds"]
            t["steps"] = int(round(h.get("positives_per_second", 0.0) * h["epoch_seconds"] / batch_size))
        missing = steps - t["steps"]
        if missing > 0:  # charged at the steady rate (the epoch's own part holds a start-up)
            rate = median_or_none(rates)
            if rate is None:
                rate = median_or_none([x["seconds"] / x["steps"] for x in table.values() if x["steps"]]) or 0.0
            t["seconds"] += missing * rate
            t["estimated"] = True
    return table


def cumulative(table: dict) -> dict[int, float]:
    out, total = {0: 0.0}, 0.0
    for e in sorted(table):
        total += table[e]["seconds"]
        out[e] = total
    return out


def pace(table: dict, steps: int) -> tuple[float | None, float, int]:
    """(steady seconds per epoch, a new session's extra seconds in its first epoch, how many
    steady epochs were measured), or ``(None, 0, 0)`` before any full epoch that did not open a
    session. Steady: the upper quartile of the last 10 such epochs (a shared machine's epochs
    vary; aiming short costs one more call, aiming long may cost the exact point); extra: the
    largest excess of a first epoch over it."""
    steady = sorted([t["seconds"] for _, t in sorted(table.items()) if t["steps"] == steps and not t["first"]][-10:])
    if not steady:
        return None, 0.0, 0
    est = steady[int(0.75 * (len(steady) - 1))]
    extra = [t["seconds"] - est for t in table.values() if t["first"] and t["steps"] == steps]
    samples = sum(1 for t in table.values() if t["steps"] == steps and not t["first"])
    return est, max([0.0, *extra]), samples


def restart_overhead(table: dict, steps: int, upto: int) -> float:
    """Seconds the calls after the first spent in their first epoch beyond a steady epoch (estimate)."""
    steady = [t["seconds"] for t in table.values() if t["steps"] == steps and not t["first"]]
    est = median_or_none(steady)
    if est is None:
        return 0.0
    firsts = [e for e, t in sorted(table.items()) if t["first"] and e <= upto]
    return round(sum(max(0.0, table[e]["seconds"] - est * table[e]["steps"] / steps) for e in firsts[1:]), 2)


def plan_target(budget: float, state: dict, table: dict, cum: dict, steps: int, every: int) -> int:
    """The epoch count to train to next, for the first budget not yet reached: just short of it
    by the pace so far (at most `GROWTH` times the steady epochs measured), or one validation
    interval when the budget is that close."""
    epoch = state["epoch"]
    next_validation = (epoch // every + 1) * every
    crossed = [h["epoch"] for h in state["history"] if cum.get(h["epoch"], 0.0) >= budget]
    if crossed:  # crossed before a kill: only the test evaluation is missing
        return epoch if state["step"] == 0 else next_validation
    est, extra, samples = pace(table, steps)
    if est is None:
        # No steady epoch yet. Nothing measured: one interval (an epoch of a large 1-vs-all run
        # can pass several budgets, and a longer call would lose their weights). A call's first
        # epochs measured: aim by the slowest of them (tracing included, so short of the budget).
        firsts = [t["seconds"] for t in table.values() if t["steps"] == steps]
        if not firsts:
            return next_validation
        est, samples = max(firsts), 1
    room = budget - cum.get(epoch, 0.0) - extra
    n = min(math.floor(room / (MARGIN * est)), GROWTH * samples)  # no long jump on a few measured epochs
    return max(next_validation, epoch + n // every * every)


def ledger(progress: dict, table: dict, steps: int, at: int) -> dict:
    """A jobi-tf point's account of its time up to epoch ``at``: the calls, their re-tracing, and
    the epochs whose seconds were partly estimated."""
    return {
        "sessions": sum(1 for s in progress["sessions"] if s["start"][0] < at and s.get("end")),
        "restart_overhead_s_est": restart_overhead(table, steps, at),
        "estimated_seconds_epochs": [e for e in range(1, at + 1) if table[e]["estimated"]],
    }


def jobi_points(progress: dict, metrics: dict, state: dict, table: dict, steps: int, budgets: list[float], monitor):
    """Points for the budgets the finished call crossed (``metrics.json``: the best weights on test)."""
    cum = cumulative(table)
    end = metrics["epochs"]
    validations = [h for h in state["history"] if h["epoch"] <= end]
    for budget in budgets:
        if budget in recorded(progress):
            continue
        first = next((h["epoch"] for h in validations if cum[h["epoch"]] >= budget), None)
        if first is None:
            break
        exact = metrics["best_epoch"] <= first
        at = first if exact else end
        where = {
            "train_seconds": round(cum[at], 2),
            "epochs": at,
            "best_epoch": metrics["best_epoch"],
            "validations": sum(1 for h in validations if h["epoch"] <= at),
            "valid": headline(metrics["valid"]),
            "test": headline(metrics["test"]),
        }
        point = budget_point(budget, where, exact=exact, stop="epoch end (validation)")
        point.update(ledger(progress, table, steps, at))
        if not exact:
            intended = best_so_far(validations, monitor, first)
            point["intended"] = {
                "epochs": first,
                "train_seconds": round(cum[first], 2),
                "best_epoch": intended["epoch"],
                "valid": {k: round(intended[k], 6) for k in RANK_METRICS},
                "why_not": "the best weights changed after this validation, inside the same call",
            }
        add_point(progress, point)


def run_answer_parts(run: Path, cfg, index, hub: np.ndarray) -> dict:
    """`answer_parts` of the test set under the run folder's best weights."""
    from jobi_tf.api.run import restore_model
    from jobi_tf.config.runs import RunFolder
    from jobi_tf.evaluation.ranking import FilteredEvaluator

    ran = RunConfig.from_dict(json.loads((run / "config.json").read_text(encoding="utf-8")))  # "auto" resolved

    def best():  # with a sampled run's --slot-prior counts, as the run ranked
        return restore_model(RunFolder(run), ran)

    return freed_after(best, FilteredEvaluator(index, cfg.eval), "test", hub)["parts"]


def call_points(args, run: Path, progress: dict, state: dict, table: dict, steps: int, part) -> None:
    """The points a finished call gives (``metrics.json``: the best weights on test): the budgets
    it crossed and, stopped converged, every budget after; ``part`` adds the answer parts."""
    metrics = json.loads((run / "metrics.json").read_text(encoding="utf-8"))
    if metrics["epochs"] != state["epoch"] or state["step"] != 0:
        return
    budgets = [60 * b for b in args.budgets]
    known = recorded(progress)
    jobi_points(progress, metrics, state, table, steps, budgets, args.monitor)
    if args.stop_after and state["wait"] >= args.stop_after:
        at = state["epoch"]
        where = {
            "train_seconds": round(cumulative(table)[at], 2),
            "epochs": at,
            "best_epoch": metrics["best_epoch"],
            "validations": len(state["history"]),
            "valid": headline(metrics["valid"]),
            "test": headline(metrics["test"]),
            **ledger(progress, table, steps, at),
            "sessions": sum(1 for s in progress["sessions"] if s.get("end")),
        }
        converged_points(progress, budgets, where, args.stop_after)
    new = [p for p in progress["points"] if p["budget_s"] not in known and p["exact"]]
    if new and part is not None:
        parts = part()
        for point in new:  # this call's points: the model its run holds now
            point["test"]["parts"] = parts


def start_session(progress: dict, run: Path, state: dict, target: int) -> dict:
    session = {
        "start": [state["epoch"], state["step"]],
        "target": target,
        "files_before": [p.name for p in event_files(run)],
        "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "end": None,
    }
    progress["sessions"].append(session)
    return session


def run_jobi(args, out: Path, progress: dict, save, dataset_flags: list[str]) -> dict:
    from jobi_tf.sampling.pipelines import TrainingQueries, query_steps_per_epoch, steps_per_epoch
    from jobi_tf.training.trainer import load_data, train

    cfg = jobi_config(args, dataset_flags)
    entities, relations, index = load_data(cfg)
    hub = replicated_hubs(cfg.data.data_dir, entities)
    batch, run = cfg.sampler.batch_size, out / "run"
    if cfg.train.loss == "k-vs-all":
        steps = query_steps_per_epoch(TrainingQueries.from_index(index), batch)
    else:
        steps = steps_per_epoch(index, batch)
    part = None if hub is None else functools.partial(run_answer_parts, run, cfg, index, hub)
    for s in progress["sessions"]:
        if s.get("end") is None:
            settle(s, run, batch, "killed")
            log.info("settled a session cut by a kill: trained to epoch %d, step %d", *s["end"])
    save()
    while True:
        state = read_state(run)
        table = epoch_seconds(progress["sessions"], state["epoch"], steps, state["history"], batch)
        cum = cumulative(table)
        if (run / "metrics.json").exists():
            call_points(args, run, progress, state, table, steps, part)
        for point in progress["points"]:  # later epochs refine the steady epoch time
            if point["epochs"] <= state["epoch"]:
                point["restart_overhead_s_est"] = restart_overhead(table, steps, point["epochs"])
        progress["curve"] = [
            {"epoch": h["epoch"], "train_seconds": round(cum.get(h["epoch"], 0.0), 2), args.monitor: h[args.monitor]}
            for h in state["history"]
        ]
        progress["train_seconds_reached"] = round(cum.get(state["epoch"], 0.0), 2)
        if (run / "config.json").exists():
            progress["settings_resolved"] = json.loads((run / "config.json").read_text(encoding="utf-8"))
        save()
        pending = [60 * b for b in args.budgets if 60 * b not in recorded(progress)]
        if not pending:
            return progress
        target = plan_target(pending[0], state, table, cum, steps, args.eval_every)
        (run / "metrics.json").unlink(missing_ok=True)  # a finished call: continue the same run (grid's halving)
        session = start_session(progress, run, state, target)
        save()
        log.info("training epochs %d..%d (%.1f s so far, next budget %.0f s)", state["epoch"] + 1, target,
                 cum.get(state["epoch"], 0.0), pending[0])  # fmt: skip
        call = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, epochs=target))
        try:
            train(call, run, verbose=0, data=(entities, relations, index))
        except TrainingStopped as exc:
            settle(session, run, batch, "stopped")
            save()
            print(f"Error: {exc}", file=sys.stderr)
            raise SystemExit(exc.exit_code) from None
        settle(session, run, batch, "finished")
        keras.backend.clear_session()
        save()


# -- PBG ----------------------------------------------------------------------------------------
def pbg_flags(flags: str) -> argparse.Namespace:
    """`bench/pbg_vs_jobi.py`'s PBG flags (``--dim`` in jobi-tf terms: PBG's D is twice it)."""
    parser = argparse.ArgumentParser(prog="--flags (pbg)", allow_abbrev=False)
    pbg_vs_jobi.add_pbg_flags(parser)
    parser.add_argument("--loss", default="softmax")
    parser.add_argument("--init-scale", type=float)
    parser.add_argument("--keep-versions", action="store_true")
    try:
        return parser.parse_args(shlex.split(flags))
    except SystemExit:
        sys.exit(f"--flags {flags!r}: not PBG flags of this script (see pbg_flags in {__file__})")


def driver_command(args, p, folder: Path, work: Path, epochs: int) -> list[str]:
    command = [args.peer_python, str(Path(__file__).parent / "peer_pbg.py"), "--mode", "epochs",
               "--data-dir", str(folder), "--out", str(work), "--epochs", str(epochs), "--loss", p.loss,
               "--comparator", "dot", "--export-every", str(args.eval_every),
               *pbg_vs_jobi.peer_flags(p, args.seed)]  # fmt: skip
    if p.init_scale is not None:
        command += ["--init-scale", str(p.init_scale)]
    if p.keep_versions:
        command.append("--keep-versions")
    return command


class PbgRun:
    """PBG's side of the harness: its epochs' seconds, its validated exports and its points, kept
    in ``progress["pbg"]`` (``OUT/pbg`` is PBG's own folder, driven by `peer_pbg.py --mode epochs`)."""

    def __init__(self, args, out: Path, progress: dict, p, graph) -> None:
        self.args, self.progress, self.p, self.work = args, progress, p, out / "pbg"
        self.entities, self.relations, self.evaluator, self.hub = graph
        self.budgets = [60 * b for b in args.budgets]
        empty = {"epochs_done": 0, "epoch_seconds": [], "validated": [], "best": None, "calls": [], "first_of_call": []}
        self.st = progress.setdefault("pbg", empty)

    def export_dir(self, epoch: int) -> Path:
        return self.work / "exports" / f"epoch-{epoch}"

    def cum_at(self, epoch: int) -> float:
        return float(sum(self.st["epoch_seconds"][:epoch]))

    def model_at(self, epoch: int):
        """PBG's export of that epoch as our model."""
        return pbg_vs_jobi.pbg_model(self.export_dir(epoch), self.entities, self.relations, self.p.dim)[0]

    def metrics_at(self, epoch: int, split: str) -> dict:
        return freed_after(functools.partial(self.model_at, epoch), self.evaluator, split,
                           self.hub if split == "test" else None)  # fmt: skip

    def cleanup(self) -> None:
        """Delete every validated export but the best one."""
        keep = self.st["best"]["epoch"] if self.st["best"] else None
        for v in self.st["validated"]:
            if v["epoch"] != keep and self.export_dir(v["epoch"]).exists():
                shutil.rmtree(self.export_dir(v["epoch"]))

    def new_exports(self) -> list[int]:
        path = self.work / "exported.json"
        exported = json.loads(path.read_text()) if path.exists() else []
        seen = {v["epoch"] for v in self.st["validated"]}
        due = [e for e in exported if e not in seen and e <= self.st["epochs_done"] and e % self.args.eval_every == 0]
        return sorted(due)

    def check_mapping(self, epoch: int) -> None:
        """Once: our scores of PBG's checked triples against PBG's own (`pbg_vs_jobi.check_mapping`)."""
        if "mapping_check" in self.progress or not (self.export_dir(epoch) / "check_triples.json").exists():
            return
        model, pbg_to_ours, missing = pbg_vs_jobi.pbg_model(self.export_dir(epoch), self.entities, self.relations,
                                                            self.p.dim)  # fmt: skip
        check = pbg_vs_jobi.check_mapping(model, self.export_dir(epoch), self.entities, self.relations, pbg_to_ours)
        del model  # freed with the next validation's collection (`freed_after`)
        self.progress["mapping_check"] = {k: check[k] for k in ("max_abs_diff", "max_abs_score", "ok")}
        self.progress["not_in_pbg"] = missing
        if not check["ok"]:
            sys.exit(f"PBG's scores and ours differ: {check['max_abs_diff']}")

    def validate(self, epoch: int) -> None:
        start = time.perf_counter()
        valid = self.metrics_at(epoch, "valid")
        self.st["validated"].append({"epoch": epoch, "train_seconds": round(self.cum_at(epoch), 3),
                                     "valid_s": round(time.perf_counter() - start, 2),
                                     **{k: valid[k] for k in RANK_METRICS}})  # fmt: skip
        if self.st["best"] is None or valid[self.args.monitor] > self.st["best"]["valid"][self.args.monitor]:
            self.st["best"] = {"epoch": epoch, "valid": valid}

    def where(self, epoch: int) -> dict:
        """A point's account at ``epoch``: the best export so far and, for its test, its metrics."""
        best, firsts = self.st["best"], [e for e in self.st["first_of_call"] if e <= epoch]
        return {
            "train_seconds": round(self.cum_at(epoch), 2),
            "epochs": epoch,
            "best_epoch": best["epoch"],
            "validations": sum(1 for v in self.st["validated"] if v["epoch"] <= epoch),
            "valid": best["valid"],
            "test": self.metrics_at(best["epoch"], "test"),
            "sessions": len(firsts),
        }

    def points(self, epoch: int) -> None:
        """The budgets this validated epoch reached; stopped converged, every budget after."""
        seconds = self.st["epoch_seconds"]
        for budget in self.budgets:
            if budget in recorded(self.progress) or self.cum_at(epoch) < budget:
                continue
            firsts = [e for e in self.st["first_of_call"] if e <= epoch]
            est = median_or_none([s for e, s in enumerate(seconds[:epoch], 1) if e not in firsts][-10:])
            overhead = sum(max(0.0, seconds[e - 1] - est) for e in firsts[1:]) if est else 0.0
            point = budget_point(budget, self.where(epoch), exact=True, stop="epoch end (validation)")
            add_point(self.progress, {**point, "restart_overhead_s_est": round(overhead, 2),
                                      "estimated_seconds_epochs": []})  # fmt: skip
        since_best = sum(1 for v in self.st["validated"] if v["epoch"] > self.st["best"]["epoch"])
        stop_after = self.args.stop_after
        if stop_after and since_best >= stop_after and any(b not in recorded(self.progress) for b in self.budgets):
            at = {**self.where(epoch), "validations": len(self.st["validated"])}
            converged_points(self.progress, self.budgets, {**at, "restart_overhead_s_est": None,
                                                           "estimated_seconds_epochs": []}, stop_after)  # fmt: skip

    def call(self, budget: float, folder: Path) -> None:
        """Train PBG on, sized to reach ``budget`` by the steady epoch time so far (at most one
        patience window with ``--stop-after``), and take in what the driver reports."""
        st, every, done = self.st, self.args.eval_every, self.st["epochs_done"]
        steady = [s for e, s in enumerate(st["epoch_seconds"], 1) if e not in st["first_of_call"]]
        est = median_or_none(steady[-10:]) or (max(st["epoch_seconds"]) if st["epoch_seconds"] else None)
        n = max(1, math.ceil((budget - self.cum_at(done)) / est)) if est else 1
        if self.args.stop_after:  # a call past the stop would be wasted
            n = min(n, self.args.stop_after * every)
        target = math.ceil((done + n) / every) * every
        command = driver_command(self.args, self.p, folder, self.work, target)
        log.info("PBG: training epochs %d..%d (%.1f s so far, next budget %.0f s)", done + 1, target,
                 self.cum_at(done), budget)  # fmt: skip
        started = time.perf_counter()
        result = subprocess.run(command, stdout=subprocess.PIPE, text=True)
        lines = result.stdout.strip().splitlines()
        if result.returncode or not lines:
            sys.exit(f"PBG's driver failed (exit {result.returncode}): {shlex.join(command)}")
        peer = json.loads(lines[-1])
        if None in peer["epoch_seconds"]:
            sys.exit(f"PBG's driver reported no seconds for some epoch: {peer['epoch_seconds']}")
        before = peer["epochs_before"]
        if peer["epochs_done"] > before and (before + 1) not in st["first_of_call"]:
            st["first_of_call"].append(before + 1)
        st["epochs_done"], st["epoch_seconds"] = peer["epochs_done"], peer["epoch_seconds"]
        st["calls"].append({"epochs": [before, peer["epochs_done"]], "wall_s": round(time.perf_counter() - started, 1),
                            "train_wall_s": peer["train_wall_s"], "warm_workers": peer["warm_workers"]})  # fmt: skip
        self.progress["settings_resolved"] = {
            "pbg_config": peer["pbg_config"],
            "overrides_of_pbg_defaults": peer["overrides_of_pbg_defaults"],
        }
        self.progress["peer_versions"] = peer["versions"]
        self.progress["peer_command"] = shlex.join(command)


def run_pbg(args, out: Path, progress: dict, save, name: str, folder: Path) -> dict:
    from jobi_tf.datasets.loading import load_index
    from jobi_tf.evaluation.ranking import FilteredEvaluator

    if not args.peer_python:
        sys.exit("--system pbg needs --peer-python (a virtualenv with torchbiggraph)")
    p = pbg_flags(args.flags)
    # Ids straight from the folder: string arrays of an FB1.9M-size graph's labels need tens of GiB.
    entities, relations, index = load_index(DataConfig(data_dir=str(folder)))
    evaluator = FilteredEvaluator(index, EvalConfig(), relation_labels=relations.labels)
    pbg = PbgRun(args, out, progress, p, (entities, relations, evaluator, replicated_hubs(folder, entities)))
    progress["harness_flags"] = vars(p)
    progress["jobi_tf_match"] = pbg_vs_jobi.jobi_tf_match(p)
    pbg.cleanup()
    while True:
        for epoch in pbg.new_exports():
            pbg.check_mapping(epoch)
            pbg.validate(epoch)
            pbg.points(epoch)
            progress["curve"] = [
                {"epoch": v["epoch"], "train_seconds": v["train_seconds"], args.monitor: v[args.monitor]}
                for v in pbg.st["validated"]
            ]
            save()
            pbg.cleanup()
        pending = [b for b in pbg.budgets if b not in recorded(progress)]
        progress["train_seconds_reached"] = round(pbg.cum_at(pbg.st["epochs_done"]), 2)
        save()
        if not pending:
            return progress
        pbg.call(pending[0], folder)
        save()


# -- main ---------------------------------------------------------------------------------------
def saved(summary: dict, progress: dict) -> dict:
    """What ``OUT/accuracy_per_hour.json`` holds: the summary (status, command, machine, ...)
    first, then the run's state. Why the summary wins over the state's copies of its fields:
    the state is read back from the same file on resuming, so an earlier session's status
    ("unfinished") would otherwise outlive the point that finished the run. ``sessions`` and
    ``points`` stay the state's full lists, which resuming reads."""
    state = {k: v for k, v in progress.items() if k not in summary}
    return {**summary, **state, "sessions": progress["sessions"], "points": progress["points"]}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--system", required=True, choices=SYSTEMS)
    parser.add_argument("--dataset", help="a name (its folder under $JOBI_TF_DATA_DIR)")
    parser.add_argument("--data-dir", help="a folder with train.txt, valid.txt, test.txt (instead of --dataset)")
    parser.add_argument("--budgets", type=float, nargs="+", required=True, help="training minutes, e.g. 5 15 45 120")
    parser.add_argument("--out", type=Path, required=True, help="working folder (rerun the same command to resume)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--flags",
        default="",
        help="extra jobi-tf train flags (jobi-tf systems), or PBG flags of bench/pbg_vs_jobi.py (pbg)",
    )
    parser.add_argument("--eval-every", type=int, default=1, help="validate every this many epochs")
    parser.add_argument("--monitor", default="mrr", choices=list(RANK_METRICS), help="validation metric of the rule")
    parser.add_argument("--peer-python", help="python of a virtualenv with torchbiggraph (--system pbg)")
    parser.add_argument(
        "--stop-after",
        type=int,
        help="stop converged after this many validations without a better --monitor; later budgets get that point",
    )
    args = parser.parse_args()
    if bool(args.dataset) == bool(args.data_dir):
        parser.error("give --dataset NAME or --data-dir FOLDER")
    if args.eval_every < 1 or min(args.budgets) <= 0:
        parser.error("--eval-every and --budgets must be positive")
    args.budgets = sorted(set(args.budgets))
    return args


def resumed(args, out: Path) -> dict:
    """The measurement ``OUT`` holds (refused if it is another one, or if a new budget is already
    passed), or a fresh one."""
    identity = {
        "system": args.system,
        "dataset": args.dataset,
        "data_dir": None if args.dataset else str(Path(args.data_dir).resolve()),
        "seed": args.seed,
        "flags": args.flags,
        "eval_every": args.eval_every,
        "monitor": args.monitor,
        **({"stop_after": args.stop_after} if args.stop_after else {}),
    }
    path = out / PROGRESS
    progress = json.loads(path.read_text(encoding="utf-8")) if path.exists() else None
    if progress is not None and progress["identity"] != identity:
        diff = {k: (progress["identity"].get(k), v) for k, v in identity.items() if progress["identity"].get(k) != v}
        sys.exit(f"{out}: holds another measurement {diff}; use another --out or the same flags")
    if progress is None:
        progress = {"identity": identity, "points": [], "sessions": [], "train_seconds_reached": 0.0}
    reached = progress.get("train_seconds_reached", 0.0)
    late = [b for b in args.budgets if 60 * b <= reached and 60 * b not in recorded(progress)]
    if late:
        sys.exit(f"--budgets {late}: already passed ({reached:.0f} s trained) without a point; use another --out")
    return progress


def summary(args, name: str, out: Path, progress: dict) -> dict:
    """The one JSON line (also the top of ``OUT/accuracy_per_hour.json``)."""
    pending = [b for b in args.budgets if 60 * b not in recorded(progress)]
    pbg = args.system == "pbg"
    peer = {k: progress[k] for k in ("harness_flags", "jobi_tf_match", "mapping_check", "not_in_pbg") if k in progress}
    return {
        "bench": "accuracy_per_hour",
        "system": args.system,
        "label": LABELS[args.system],
        "dataset": name,
        "status": "finished" if not pending else f"unfinished: {len(pending)} budget(s) to go",
        "budgets_min": args.budgets,
        "points": progress["points"],
        "rule": RULE,
        "time": TIME_NOTE["pbg" if pbg else "jobi-tf"],
        "monitor": args.monitor,
        "eval_every": args.eval_every,
        "stop_after": args.stop_after,
        "train_seconds_reached": progress.get("train_seconds_reached"),
        "settings": progress.get("settings_resolved"),
        **peer,
        "curve": progress.get("curve", []),
        "sessions": len(progress.get("pbg", {}).get("calls", [])) if pbg else len(progress["sessions"]),
        "machine": machine(),
        "versions": {**versions(), **{f"peer_{k}": v for k, v in progress.get("peer_versions", {}).items()}},
        "command": shlex.join([sys.executable, *sys.argv]),
        **({"peer_command": progress["peer_command"]} if "peer_command" in progress else {}),
        "out": str(out),
    }


def main() -> None:
    args = parse_args()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s: %(message)s")
    name = args.dataset or Path(args.data_dir).name
    folder = data_dir(name, args.data_dir)
    dataset_flags = ["--dataset", args.dataset] if args.dataset else ["--data-dir", str(folder)]
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    lock = open(out / ".lock", "w")  # held until exit (a killed process's lock goes with it)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        sys.exit(f"{out}: another accuracy_per_hour process is working in this folder")
    progress = resumed(args, out)

    def save() -> None:
        write_json_atomic(out / PROGRESS, saved(summary(args, name, out, progress), progress))

    save()
    if args.system == "pbg":
        run_pbg(args, out, progress, save, name, folder)
    else:
        run_jobi(args, out, progress, save, dataset_flags)
    save()
    emit(summary(args, name, out, progress))


if __name__ == "__main__":
    main()
