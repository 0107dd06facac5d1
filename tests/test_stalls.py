"""A run that has not started to learn says so (`jobi_tf.training.stalls`): one line per stalled epoch,
``warnings`` in ``metrics.json``, and ``--first-check-steps`` early in the first epoch."""

from __future__ import annotations

import json
import logging
import math
import os
import subprocess
import sys
import types

import numpy as np
import pytest
import tensorflow as tf

from jobi_tf.config import DataConfig, EvalConfig, ModelConfig, RunConfig, SamplerConfig, TrainConfig
from jobi_tf.losses.full_softmax import FullSoftmax
from jobi_tf.losses.k_vs_all import KvsAll
from jobi_tf.losses.sampled_softmax import SampledSoftmax
from jobi_tf.training import stalls
from jobi_tf.training.callbacks import LoopState, StopGuard
from jobi_tf.training.stalls import FirstCheck, StallCheck, chance_bound, chance_mrr
from jobi_tf.training.trainer import load_data, train

#: A 1-vs-all run (kbc's recipe in small) that cannot move: the learning rate is 1e-12 (Adagrad
#: from 0, so that the line names the regularizer, not the accumulators).
STALLED = dict(lr=1e-12, init="table-glorot", regularization=0.05, initial_accumulator_value=0.0)
#: The same run with rows large enough and a rate high enough to learn in its first epoch.
LEARNING = dict(lr=0.5, init="row-glorot", regularization=0.0)


def _cfg(lr: float, init: str, regularization: float, epochs: int = 1, **train_kw) -> RunConfig:
    return RunConfig(
        data=DataConfig(dataset="synthetic", synthetic_entities=200, synthetic_relations=4, synthetic_triples=3000),
        sampler=SamplerConfig(batch_size=50),
        model=ModelConfig(model="complex", dim=16, reciprocal=True, init=init),
        train=TrainConfig(
            epochs=epochs,
            eval_every=1,
            loss="full-softmax",
            optimizer="adagrad",
            lr=lr,
            regularizer="n3",
            regularization=regularization,
            jit_compile=False,
            **train_kw,
        ),
        seed=3,
    )


def _stall_lines(caplog) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if r.name == "jobi_tf.training.stalls" and r.levelno == logging.WARNING
    ]


@pytest.fixture(scope="module")
def entities() -> int:
    return load_data(_cfg(**STALLED))[2].num_entities


# -- the uniform value and the chance MRR --------------------------------------------------------
def test_the_full_softmax_at_a_uniform_softmax_is_two_ln_n():
    """Both directions of each triple are summed, so a uniform softmax costs ``2 ln N`` a triple,
    label smoothing included (its uniform term is ``ln N`` there too)."""
    n = 37
    triples = tf.constant([[0, 0, 1], [2, 1, 3], [5, 0, 4]])
    flat = tf.fill([3, n], 0.25)
    for smoothing in (0.0, 0.3):
        objective = FullSoftmax(label_smoothing=smoothing)
        loss = objective.loss({"triples": triples}, {"triple_tail": flat, "triple_head": flat})
        assert float(loss) == pytest.approx(2 * math.log(n), rel=1e-6)
        assert objective.uniform_loss(n) == pytest.approx(2 * math.log(n))


def test_objectives_whose_uniform_value_depends_on_more_than_n_have_none():
    assert FullSoftmax(slot_weight=1.0).uniform_loss(50) is None
    assert KvsAll().uniform_loss(50) is None
    assert SampledSoftmax().uniform_loss(50) is None


def test_chance_mrr_is_the_mean_reciprocal_rank_of_a_random_ranking():
    for n in (1, 2, 10, 999, 1000, 5000):
        assert chance_mrr(n) == pytest.approx(np.mean(1.0 / np.arange(1, n + 1)), rel=1e-12)


@pytest.mark.parametrize(("entities", "queries"), [(169, 100), (5000, 1000)])
def test_a_random_ranking_stays_under_the_chance_bound_but_rarely(entities, queries):
    """Two standard errors: a random ranking's MRR passes the bound in a few percent of samples."""
    ranks = np.random.default_rng(0).integers(1, entities + 1, size=(2000, queries))
    over = np.mean(np.mean(1.0 / ranks, axis=1) > chance_bound(entities, queries))
    assert 0.0 < over < 0.06
    assert chance_bound(entities, 10**12) == pytest.approx(chance_mrr(entities), rel=1e-4)


def test_at_an_epochs_end_either_sign_is_a_stall():
    """WN18RR, --preset kbc-fast --relation-penalty 1: epoch 1 ended at 21.233 against
    2 ln N = 21.240 with a validation MRR of 0.078, far above chance; it was stalled."""
    check = StallCheck(_cfg(**STALLED).train, 40_943, 2 * math.log(40_943), 173, LoopState())
    assert check.check(1, 21.233, 0.078, 2 * 3034)["triple_loss"] == 21.233
    assert check.check(2, 8.33, 0.0002, 2 * 3034)["val_mrr"] == 0.0002  # the loss moved, the ranking did not
    assert check.check(3, 8.33, None) is None and check.check(4, 8.33, 0.44, 2 * 3034) is None
    assert [w["epoch"] for w in check.state.warnings] == [1, 2]
    assert "val_mrr" not in check.state.warnings[0] and "triple_loss" not in check.state.warnings[1]


class _Ranks:
    def __init__(self, values):
        self.values = values

    def get(self, rank_type):
        return self.values


def test_early_in_the_first_epoch_only_the_mrr_is_a_sign(caplog):
    """FB15k-237, --preset kbc-fast, after 60 steps: the loss was within 0.2% of 2 ln N while
    the sample's MRR was 24 times a random ranking's; the run was learning (0.29 after the epoch)."""
    entities, uniform = 14_541, 2 * math.log(14_541)
    index = types.SimpleNamespace(valid=np.zeros((3034, 3), np.int32), num_entities=entities)
    for ranks, stalled in ((np.full(1000, 60.0), False), (np.full(1000, entities / 2), True)):
        evaluator = types.SimpleNamespace(
            index=index, cfg=EvalConfig(), ranks=lambda model, triples, r=ranks: _Ranks(r)
        )
        stall = StallCheck(_cfg(**STALLED).train, entities, uniform, 544, LoopState())
        check = FirstCheck(60, evaluator, stall, StopGuard(544), announce=False)
        check._marks = [(0, 0.0), (30, 19.16), (60, 19.153)]  # steps 31-60: 19.146
        result = check.check(60)
        assert result["triple_loss"] == pytest.approx(19.146) and result["triples"] == 500
        assert (stall.state.warnings is not None) == stalled
        if stalled:
            assert "triple_loss" not in stall.state.warnings[0]  # only the MRR is judged this early


# -- at each epoch's end -------------------------------------------------------------------------
def test_the_mrr_sign_waits_for_enough_steps():
    """A slow start is no stall: the synthetic quickstart (36 steps an epoch) was at a random
    ranking's MRR after epoch 1 and learned from epoch 2; the sign counts from MRR_MIN_STEPS."""
    check = StallCheck(_cfg(**STALLED).train, 2000, None, 36, LoopState())
    at_chance = {"val_mrr": chance_mrr(2000)}
    first_read = -(-stalls.MRR_MIN_STEPS // 36)  # the first epoch with that many steps
    assert all(check.epoch_end(e, at_chance) is None for e in range(1, first_read))
    assert check.epoch_end(first_read, at_chance)["epoch"] == first_read


def test_a_stalled_epoch_prints_one_line_and_records_it(tmp_path, caplog, entities, monkeypatch):
    monkeypatch.setattr(stalls, "MRR_MIN_STEPS", 0)  # this tiny graph's epoch has few steps
    caplog.set_level(logging.WARNING)
    result = train(_cfg(**STALLED), tmp_path / "run", verbose=0)
    lines = _stall_lines(caplog)
    assert len(lines) == 1, lines
    uniform = 2 * math.log(entities)
    assert lines[0].startswith("epoch 1 ended at a uniform softmax (triple loss ")
    assert f"vs {uniform:.3f} = 2*ln(N), N = {entities} entities)" in lines[0]
    assert "the model has not started to learn" in lines[0]
    assert "try --relation-penalty 0.02 (N3 on the relation rows), --regularization 0, a higher --lr" in lines[0]
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics == result.metrics
    [warning] = metrics["warnings"]
    assert warning["epoch"] == 1 and warning["kind"] == "stall" and warning["message"] == lines[0]
    assert warning["uniform_loss"] == pytest.approx(uniform)
    assert warning["triple_loss"] == pytest.approx(metrics["history"][0]["triple_loss"])
    assert abs(warning["triple_loss"] - uniform) < 0.01 * uniform
    assert warning["val_mrr"] == pytest.approx(metrics["history"][0]["mrr"])
    assert warning["chance_mrr"] == pytest.approx(chance_mrr(entities))
    assert warning["val_mrr"] <= warning["chance_bound"] == pytest.approx(chance_bound(entities, 2 * 50))


def _sparse_cfg(initial_accumulator_value: float) -> RunConfig:
    """``--preset kbc-fast``'s loss, optimizer, rate, N3 and init on a sparse graph: 3,365
    entities with 1.65 training triples each, 27 steps an epoch."""
    return RunConfig(
        data=DataConfig(dataset="synthetic", synthetic_entities=5000, synthetic_relations=20, synthetic_triples=6000),
        sampler=SamplerConfig(batch_size=200),
        model=ModelConfig(model="complex", dim=32, reciprocal=True, init="table-glorot"),
        train=TrainConfig(
            epochs=1,
            loss="full-softmax",
            optimizer="adagrad",
            lr=0.1,
            regularizer="n3",
            regularization=0.05,
            initial_accumulator_value=initial_accumulator_value,
            jit_compile=False,
        ),
        seed=3,
    )


def test_damped_adagrad_stalls_a_sparse_graph_and_the_line_says_so(tmp_path, caplog):
    """The stall of the thinned FB15k-237 in small (docs/studies/one-vs-all-stall.md): from
    accumulators of 1e-10 the first epoch ends at a uniform softmax and the line names them;
    from 0 (kbc's) the same run learns in that epoch and nothing is said."""
    caplog.set_level(logging.WARNING)
    damped = train(_sparse_cfg(1e-10), tmp_path / "damped", verbose=0).metrics
    [line] = _stall_lines(caplog)
    assert line.startswith("epoch 1 ended at a uniform softmax (triple loss ")
    assert "N = 3,365 entities): the model has not started to learn; likely cause: Adagrad's first steps, " in line
    assert "damped (its accumulators start at 1e-10), too slow for this graph's 27 steps per epoch; " in line
    assert "try --initial-accumulator-value 0 (undamped first steps), --relation-penalty 0.02" in line
    assert damped["warnings"][0]["message"] == line
    caplog.clear()
    undamped = train(_sparse_cfg(0.0), tmp_path / "undamped", verbose=0).metrics
    assert _stall_lines(caplog) == [] and "warnings" not in undamped
    uniform = 2 * math.log(3365)
    assert damped["history"][0]["triple_loss"] > 0.99 * uniform > undamped["history"][0]["triple_loss"] + 0.5
    assert undamped["history"][0]["mrr"] > 5 * damped["history"][0]["mrr"]


def test_a_learning_run_prints_no_stall_line(tmp_path, caplog):
    caplog.set_level(logging.WARNING)
    result = train(_cfg(**LEARNING), tmp_path / "run", verbose=0)
    assert _stall_lines(caplog) == []
    assert "warnings" not in result.metrics


def test_a_resumed_run_keeps_the_warnings_of_the_epochs_before(tmp_path, caplog):
    """The warning is recorded before the epoch's checkpoint, so it survives the resume."""
    train(_cfg(**STALLED, epochs=1), tmp_path / "run", verbose=0)
    (tmp_path / "run" / "metrics.json").unlink()  # as if stopped after epoch 1's checkpoint
    result = train(_cfg(**STALLED, epochs=2), tmp_path / "run", verbose=0)
    assert [w["epoch"] for w in result.metrics["warnings"]] == [1, 2]


# -- early in the first epoch (--first-check-steps) -----------------------------------------------
def test_the_first_check_warns_of_a_stall_before_the_epoch_ends(tmp_path, caplog):
    caplog.set_level(logging.WARNING)
    result = train(_cfg(**STALLED, first_check_steps=5), tmp_path / "run", verbose=0)
    lines = _stall_lines(caplog)
    assert len(lines) == 2 and lines[0].startswith("epoch 1, step 5, is at validation MRR ")
    assert lines[1].startswith("epoch 1 ended at a uniform softmax")
    first, end = result.metrics["warnings"]
    assert first["step"] == 5 and "step" not in end
    check = result.metrics["first_check"]
    assert check["step"] == 5 and check["triples"] == 50  # the whole validation split: it is smaller than 500
    assert check["mrr"] <= check["chance_bound"]


def test_the_first_check_of_a_learning_run_says_so_and_warns_of_nothing(tmp_path, caplog, capsys):
    caplog.set_level(logging.WARNING)
    result = train(_cfg(**LEARNING, first_check_steps=10), tmp_path / "run", verbose=2)
    assert _stall_lines(caplog) == []
    check = result.metrics["first_check"]
    assert check["step"] == 10 and check["mrr"] > 2 * check["chance_mrr"]
    assert check["triple_loss"] < 0.99 * check["uniform_loss"]
    printed = [line for line in capsys.readouterr().err.splitlines() if line.startswith("epoch 1, step 10:")]
    assert printed == [
        f"epoch 1, step 10: validation MRR {check['mrr']:.4f} on a sample of 50 triples, above a random ranking's "
        f"(MRR {check['chance_mrr']:.4f}, up to {check['chance_bound']:.4f}); triple loss {check['triple_loss']:.3f} "
        f"(a uniform softmax's: {check['uniform_loss']:.3f}): the ranking has moved (the epoch's end checks the loss)"
    ]


def test_the_first_check_changes_no_training_number(tmp_path):
    plain = train(_cfg(**LEARNING, epochs=2), tmp_path / "plain", verbose=0).metrics
    checked = train(_cfg(**LEARNING, epochs=2, first_check_steps=7), tmp_path / "checked", verbose=0).metrics
    assert "first_check" in checked
    assert checked["test"] == plain["test"] and checked["valid"] == plain["valid"]
    timing = {"epoch_seconds", "positives_per_second", "positives_per_second_median", "valid_seconds"}
    assert [{k: v for k, v in h.items() if k not in timing} for h in checked["history"]] == [
        {k: v for k, v in h.items() if k not in timing} for h in plain["history"]
    ]


def test_the_first_check_runs_once_and_not_in_a_session_resumed_past_it():
    """A session resumed at step 8 of the first epoch does not check at step 5 again; one
    resumed at step 2 checks at step 5, once."""
    for resumed_at, expected in ((8, []), (2, [5])):
        guard = StopGuard(20, first=(0, resumed_at))
        check = FirstCheck(5, evaluator=None, stalls=None, guard=guard)
        done = []
        check.check = done.append
        guard.on_epoch_begin(0)
        check.on_epoch_begin(0)
        for batch in range(20 - resumed_at):
            guard.on_train_batch_end(batch, {"triple_loss": 1.0})
            check.on_train_batch_end(batch, {"triple_loss": 1.0})
        assert done == expected


# -- as the command line shows it ------------------------------------------------------------------
def test_the_command_line_prints_the_stall_line_on_stderr(tmp_path):
    flags = ["--synthetic-entities", "200", "--synthetic-relations", "4", "--synthetic-triples", "3000"]
    flags += ["--batch-size", "50", "--dim", "16", "--epochs", "1", "--eval-every", "1", "--no-jit", "--seed", "3"]
    flags += ["--loss", "full-softmax", "--reciprocal", "--optimizer", "adagrad", "--lr", "1e-12"]
    flags += ["--regularizer", "n3", "--regularization", "0.05"]
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    done = subprocess.run(
        [sys.executable, "-m", "jobi_tf.cli", "train", *flags, "--out", str(tmp_path / "run")],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [line for line in done.stderr.splitlines() if "has not started to learn" in line]
    assert len(lines) == 1 and lines[0].startswith(
        "WARNING jobi_tf.training.stalls: epoch 1 ended at a uniform softmax"
    )
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert [w["epoch"] for w in summary["warnings"]] == [1]
