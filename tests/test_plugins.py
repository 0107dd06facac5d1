"""`jobi_tf.runtime.plugins`: a folder's modules that bind the kind's attribute are its choices,
read without imports."""

from __future__ import annotations

import dataclasses

import pytest

from jobi_tf.config import RunConfig, TrainConfig
from jobi_tf.runtime import plugins
from jobi_tf.runtime.errors import ConfigError


def test_every_kind_lists_its_folder_and_skips_helper_modules():
    assert {"complex", "distmult", "simple"} <= set(plugins.names("scorer"))
    assert "base" not in plugins.names("scorer")  # a helper: it binds no SCORER
    assert set(plugins.names("optimizer")) >= {"adam", "lazy-adam", "adagrad", "row-adagrad"}
    for kind in plugins.KINDS:
        names = plugins.names(kind)
        assert names == tuple(sorted(names)) and names


def test_a_module_is_a_plug_in_when_it_binds_the_attribute(tmp_path):
    (tmp_path / "yes.py").write_text("X: type = int\n")
    (tmp_path / "no.py").write_text("def f():\n    X = 1\n")
    assert plugins._binds(tmp_path / "yes.py", "X") and not plugins._binds(tmp_path / "no.py", "X")


def test_load_names_the_choices():
    with pytest.raises(ValueError, match=r"scorer must be one of \[.*'complex'.*\]. Received: scorer='transe'"):
        plugins.load("scorer", "transe")
    assert plugins.load("scorer", "complex").kind == "complex"


def test_about_reads_each_first_docstring_line():
    text = plugins.about("optimizer")
    assert text.startswith("adagrad: adagrad as PyTorch's") and "row-adagrad: " in text


def test_check_all_refuses_a_setting_the_choice_does_not_take():
    cfg = RunConfig(train=TrainConfig(loss="sampled-softmax", label_smoothing=0.1))
    with pytest.raises(ConfigError, match="--label-smoothing: needs --loss full-softmax or k-vs-all"):
        plugins.check_all(cfg)
    plugins.check_all(dataclasses.replace(cfg, train=TrainConfig(optimizer="auto")))  # auto: resolved later
