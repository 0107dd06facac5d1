"""A longer run trains longer: more --epochs (or --patience after early stopping) on a finished
run continue it from its last checkpoint; otherwise the run says in one line why nothing was
trained, and config.json stays as the training it describes (`jobi_tf.training.resume.why_finished`)."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest

from jobi_tf.config import DataConfig, ModelConfig, RunConfig, SamplerConfig, TrainConfig
from jobi_tf.training.trainer import train


def _cfg(epochs: int, patience: int = 10) -> RunConfig:
    return RunConfig(
        data=DataConfig(dataset="synthetic", synthetic_entities=80, synthetic_relations=4, synthetic_triples=800),
        sampler=SamplerConfig(batch_size=100, neg=8, p=0.3),
        model=ModelConfig(model="complex", dim=8, joint=True),
        train=TrainConfig(epochs=epochs, eval_every=1, patience=patience, jit_compile=False, lr=0.3),
        seed=3,
    )


def _final(metrics: dict) -> dict:
    return {split: {k: metrics[split][k] for k in ("mrr", "hits@10")} for split in ("valid", "test")}


def _notes(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith("jobi_tf")]


@pytest.fixture(scope="module")
def short_run(tmp_path_factory) -> Path:
    """A finished 2-epoch run."""
    run = tmp_path_factory.mktemp("short") / "run"
    train(_cfg(2), run, verbose=0)
    return run


def test_more_epochs_continue_a_finished_run_and_end_like_the_longer_run(tmp_path, short_run):
    straight = train(_cfg(4), tmp_path / "straight", verbose=0).metrics
    run = tmp_path / "run"
    shutil.copytree(short_run, run)
    longer = train(_cfg(4), run, verbose=0).metrics
    assert [h["epoch"] for h in longer["history"]] == [1, 2, 3, 4]
    assert longer["epochs"] == 4 and _final(longer) == _final(straight)
    assert json.loads((run / "config.json").read_text())["train"]["epochs"] == 4


@pytest.mark.parametrize("epochs", [2, 1])
def test_a_finished_run_says_it_trained_nothing_and_keeps_its_config(tmp_path, short_run, caplog, epochs):
    run = tmp_path / "run"
    shutil.copytree(short_run, run)
    config, metrics = (run / "config.json").read_bytes(), (run / "metrics.json").read_bytes()
    with caplog.at_level(logging.WARNING):
        again = train(_cfg(epochs), run, verbose=0).metrics
    assert _notes(caplog) == [f"{run}: finished after 2 epochs, nothing trained; a --epochs above 2 trains it further"]
    assert (run / "config.json").read_bytes() == config and (run / "metrics.json").read_bytes() == metrics
    assert again["epochs"] == 2


def test_a_run_ended_by_early_stopping_names_the_flag_that_continues_it(tmp_path, caplog):
    run = tmp_path / "run"
    stopped = train(_cfg(12, patience=1), run, verbose=0).metrics
    assert stopped["epochs"] < 12  # early stopping ended it
    config = (run / "config.json").read_bytes()
    with caplog.at_level(logging.WARNING):
        train(_cfg(20, patience=1), run, verbose=0)
    assert _notes(caplog) == [
        f"{run}: finished after {stopped['epochs']} epochs, nothing trained: early stopping ended it "
        "(1 validation without a better mrr); a --patience above 1 trains it further"
    ]
    assert (run / "config.json").read_bytes() == config  # --epochs 20 trained nothing, so it is not recorded
    longer = train(_cfg(12, patience=3), run, verbose=0).metrics
    assert longer["epochs"] > stopped["epochs"]
    assert json.loads((run / "config.json").read_text())["train"]["patience"] == 3
