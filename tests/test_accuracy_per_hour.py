"""The time ledger and the point rule of `bench/accuracy_per_hour.py`.

A point is only as good as the training seconds under it: epochs lost to a kill must not
count, both parts of an epoch split by SIGTERM must, and a point whose first-crossing weights
were overwritten must say so. Checked on hand-written run folders (checkpoint state and
TensorBoard events), without training.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import accuracy_per_hour as aph  # noqa: E402

BATCH, STEPS = 100, 10  # positives per step, steps per epoch


def write_state(run: Path, epoch: int, step: int = 0, history=(), best_epoch: int = 0) -> None:
    state = {"epoch": epoch, "step": step, "history": list(history), "best_epoch": best_epoch}
    np.savez(run / "checkpoint.npz", __state__=np.frombuffer(json.dumps(state).encode(), dtype=np.uint8))


def write_session_events(run: Path, epochs: list[tuple[int, float, int]]) -> None:
    """One session's event file: ``(epoch, seconds, steps)`` as `Throughput` logs them."""
    import tensorflow as tf

    writer = tf.summary.create_file_writer(str(run / "tensorboard"))
    with writer.as_default():
        for epoch, seconds, steps in epochs:
            tf.summary.scalar("speed/epoch_seconds", seconds, step=epoch)
            tf.summary.scalar("speed/positives_per_second", steps * BATCH / seconds, step=epoch)
    writer.close()


def session(run: Path, start: tuple[int, int]) -> dict:
    return {"start": list(start), "files_before": [p.name for p in aph.event_files(run)], "end": None}


def test_epochs_a_kill_lost_are_not_counted(tmp_path):
    run = tmp_path / "run"
    (run / "tensorboard").mkdir(parents=True)
    first = session(run, (0, 0))
    write_session_events(run, [(1, 3.0, STEPS), (2, 1.0, STEPS), (3, 1.1, STEPS)])
    write_state(run, 2)  # killed after epoch 3's event, before its checkpoint
    aph.settle(first, run, BATCH, "killed")
    assert first["end"] == [2, 0] and set(first["epochs"]) == {"1", "2"}
    second = session(run, (2, 0))
    write_session_events(run, [(3, 2.5, STEPS), (4, 1.0, STEPS)])  # epoch 3 again, then 4
    write_state(run, 4)
    aph.settle(second, run, BATCH, "finished")
    table = aph.epoch_seconds([first, second], 4, STEPS, [], BATCH)
    assert [table[e]["seconds"] for e in (1, 2, 3, 4)] == pytest.approx([3.0, 1.0, 2.5, 1.0])
    assert aph.cumulative(table)[4] == pytest.approx(7.5)
    assert [e for e, t in table.items() if t["first"]] == [1, 3]
    assert not any(t["estimated"] for t in table.values())


def test_both_parts_of_an_epoch_split_by_sigterm_count(tmp_path):
    run = tmp_path / "run"
    (run / "tensorboard").mkdir(parents=True)
    first = session(run, (0, 0))
    write_session_events(run, [(1, 3.0, STEPS), (2, 0.4, 4)])  # stopped after 4 steps of epoch 2
    write_state(run, 1, step=4)
    aph.settle(first, run, BATCH, "stopped")
    second = session(run, (1, 4))
    write_session_events(run, [(2, 2.6, 6), (3, 1.0, STEPS)])
    write_state(run, 3)
    aph.settle(second, run, BATCH, "finished")
    table = aph.epoch_seconds([first, second], 3, STEPS, [], BATCH)
    assert table[2]["steps"] == STEPS and table[2]["seconds"] == pytest.approx(3.0)
    assert not table[2]["estimated"]


def test_untimed_steps_are_charged_at_the_steady_rate(tmp_path):
    # Killed inside epoch 3 after a --checkpoint-steps checkpoint at step 5: those 5 steps have no event.
    sessions = [
        {
            "start": [0, 0],
            "end": [2, 5],
            "epochs": {"1": {"seconds": 3.0, "steps": 10}, "2": {"seconds": 1.0, "steps": 10}},
        },
        {
            "start": [2, 5],
            "end": [4, 0],
            "epochs": {"3": {"seconds": 2.5, "steps": 5}, "4": {"seconds": 1.0, "steps": 10}},
        },
    ]
    table = aph.epoch_seconds(sessions, 4, STEPS, [], BATCH)
    assert table[3]["estimated"] and table[3]["seconds"] == pytest.approx(2.5 + 5 * 0.1)


def test_a_continuation_aims_short_of_the_budget():
    table = {e: {"seconds": 1.0, "steps": STEPS, "estimated": False, "first": e == 1} for e in range(1, 21)}
    table[1]["seconds"] = 4.0  # the first epoch of a call holds 3 s of start-up
    cum = aph.cumulative(table)
    state = {"epoch": 20, "step": 0, "history": [{"epoch": e} for e in range(1, 21)]}
    # 23 s so far; 100 s budget: room 100 - 23 - 3 = 74 s of 1.1 s epochs
    assert aph.plan_target(100.0, state, table, cum, STEPS, every=1) == 20 + 67
    assert aph.plan_target(100.0, state, table, cum, STEPS, every=5) == 20 + 65
    assert aph.plan_target(24.0, state, table, cum, STEPS, every=1) == 21  # too close: one interval
    assert aph.plan_target(20.0, state, table, cum, STEPS, every=1) == 20  # crossed before a kill: test only
    early = {1: table[1]}  # one epoch measured, the first of its call (4 s): aimed by it, at most GROWTH on
    assert aph.plan_target(100.0, {"epoch": 1, "step": 0, "history": []}, early, aph.cumulative(early), STEPS, 1) == 5
    assert aph.plan_target(12.0, {"epoch": 1, "step": 0, "history": []}, early, aph.cumulative(early), STEPS, 1) == 2
    # nothing measured: one validation interval, so that a first epoch past several budgets keeps their weights
    assert aph.plan_target(100.0, {"epoch": 0, "step": 0, "history": []}, {}, {}, STEPS, every=2) == 2


def test_a_point_is_late_when_the_best_weights_moved_past_the_first_crossing():
    table = {e: {"seconds": 1.0, "steps": STEPS, "estimated": False, "first": e == 1} for e in range(1, 11)}
    history = [{"epoch": e, "mrr": 0.1 * e, "hits@1": 0.0, "hits@3": 0.0, "hits@10": 0.0} for e in range(1, 11)]
    metrics = {"epochs": 10, "best_epoch": 10, "valid": dict(history[-1]), "test": {m: 0.5 for m in aph.RANK_METRICS}}
    progress = {"points": [], "sessions": [{"start": [0, 0], "end": [10, 0]}]}
    state = {"epoch": 10, "step": 0, "history": history}
    aph.jobi_points(progress, metrics, state, table, STEPS, [6.0, 20.0], "mrr")
    (point,) = progress["points"]  # 20 s is not reached
    assert not point["exact"] and point["epochs"] == 10 and point["train_seconds"] == 10.0
    assert point["intended"]["epochs"] == 6 and point["intended"]["best_epoch"] == 6

    progress["points"] = []
    metrics["best_epoch"] = 5  # the best stayed at epoch 5: the held weights are those of epoch 6
    aph.jobi_points(progress, metrics, state, table, STEPS, [6.0], "mrr")
    (point,) = progress["points"]
    assert point["exact"] and point["epochs"] == 6 and point["over_budget_s"] == 0.0


def test_budgets_past_a_converged_stop_repeat_its_point():
    progress = {"points": [{"budget_s": 60.0, "train_seconds": 61.0}], "sessions": []}
    stop = {"train_seconds": 130.0, "epochs": 26, "best_epoch": 16, "test": {"mrr": 0.3}}
    aph.converged_points(progress, [60.0, 300.0, 900.0], stop, stop_after=10)
    first, *later = progress["points"]
    assert first == {"budget_s": 60.0, "train_seconds": 61.0}  # a budget crossed before the stop keeps its point
    assert [p["budget_s"] for p in later] == [300.0, 900.0]
    assert all(p["epochs"] == 26 and p["test"] == {"mrr": 0.3} and p["exact"] for p in later)
    assert [p["over_budget_s"] for p in later] == [-170.0, -770.0]
    assert later[0]["stop"] == "converged: no better validation in the last 10"


def test_the_saved_file_states_the_current_status_not_an_earlier_sessions():
    """Resuming reads the state back from the file it writes: a stale "unfinished" must not win."""
    earlier = {"status": "unfinished: 1 budget(s) to go", "command": "old", "sessions": [{"start": [0, 0]}]}
    progress = {**earlier, "identity": {"seed": 0}, "points": [{"budget_s": 60.0}], "train_seconds_reached": 61.0}
    summary = {"status": "finished", "command": "new", "sessions": 1, "points": progress["points"]}
    written = aph.saved(summary, progress)
    assert written["status"] == "finished" and written["command"] == "new"
    assert written["sessions"] == [{"start": [0, 0]}] and written["points"] == [{"budget_s": 60.0}]
    assert written["identity"] == {"seed": 0} and written["train_seconds_reached"] == 61.0


def test_a_validated_model_is_freed_at_once():
    """`freed_after` frees the model it evaluated before returning, though a Keras model sits
    in reference cycles (without it, each PBG validation kept its entity table alive)."""
    import gc
    import weakref

    from jobi_tf.models import JoBiModel
    from jobi_tf.runtime.types import RANK_METRICS

    built = []

    class Evaluator:
        def evaluate(self, model, split):
            return {k: model.num_entities / 100 for k in RANK_METRICS} | {"split": split}

    def build():
        model = JoBiModel(7, 2, model="complex", dim=4, reciprocal=True, name="pbg")
        built.append(weakref.ref(model))
        return model

    gc.disable()  # only the helper's own collection may free it
    try:
        metrics = aph.freed_after(build, Evaluator(), "valid")
        assert built[0]() is None
    finally:
        gc.enable()
    assert metrics == {k: 0.07 for k in RANK_METRICS}


def test_answer_parts_of_a_replicated_graph_recombine_into_the_whole_test_metrics(tmp_path):
    """On a graph with ``replicate.json`` (hubs: labels without ``#``), the hub-answer and
    copied-answer parts rank every test query once: their counts add up to the run's, and
    their count-weighted MRR and Hits@10 are the run's own. Elsewhere: no parts."""
    from jobi_tf.config import DataConfig, ModelConfig, RunConfig, SamplerConfig, TrainConfig
    from jobi_tf.training.trainer import load_data, train

    rng = np.random.default_rng(0)
    labels = [f"hub{i}" for i in range(4)] + [f"e{i}#{k}" for i in range(12) for k in range(2)]
    triples = {
        (labels[h], f"r{r}", labels[t])
        for h, r, t in zip(*rng.integers(0, 28, (2, 400)), rng.integers(0, 3, 400), strict=False)
        if h != t
    }
    triples = sorted(triples)
    for split, rows in {"train": triples[40:], "valid": triples[:20], "test": triples[20:40]}.items():
        (tmp_path / f"{split}.txt").write_text("".join("\t".join(t) + "\n" for t in rows))
    cfg = RunConfig(
        data=DataConfig(data_dir=str(tmp_path)),
        sampler=SamplerConfig(batch_size=50, neg=8, p=0.0),
        model=ModelConfig(model="complex", dim=8, joint=False),
        train=TrainConfig(epochs=2, eval_every=1, jit_compile=False),
    )
    entities, relations, index = load_data(cfg)
    whole = train(cfg, tmp_path / "run", verbose=0, data=(entities, relations, index)).metrics["test"]
    assert aph.replicated_hubs(str(tmp_path), entities) is None  # no replicate.json yet
    (tmp_path / "replicate.json").write_text("{}")
    hubs = aph.replicated_hubs(str(tmp_path), entities)
    assert hubs.any() and all(("#" not in str(label)) == hub for label, hub in zip(entities.labels, hubs, strict=True))
    parts = aph.run_answer_parts(tmp_path / "run", cfg, index, hubs)
    hub, copied = parts["hub answers"], parts["copied answers"]
    assert hub["count"] > 0 and copied["count"] > 0
    assert hub["count"] + copied["count"] == whole["count"]
    for metric in ("mrr", "hits@10"):
        combined = (hub[metric] * hub["count"] + copied[metric] * copied["count"]) / whole["count"]
        assert combined == pytest.approx(whole[metric], abs=1e-6)
