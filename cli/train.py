"""``jobi-tf train``: flags → `RunConfig` → `jobi_tf.api.train_from_config` → metrics on stdout."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import click
from jobi_tf.cli._errors import progress_to_stderr, reports_errors, start_tensorflow
from jobi_tf.cli.options import TRAIN_SECTIONS, SectionedCommand, config_from_flags, config_options

from jobi_tf.config import DataConfig, RunConfig
from jobi_tf.planning.presets import PRESETS, preset_settings
from jobi_tf.runtime.types import RANK_METRICS

__all__ = [
    "train",
    "config_from_flags_given",
    "config_from_command",
    "default_run_folder",
    "changed_settings",
    "flat_settings",
]


def default_run_folder(cfg: RunConfig, preset: str | None = None) -> Path:
    """``runs/<dataset>[-<preset>]-<model>-<base|jobi>[-reciprocal]-p<p>-seed<seed>[-<digest>]``.

    Why the preset is in the name: ``kbc``, ``kbc-rp`` and ``kbc-fast`` all train reciprocal
    ComplEx baselines, and a second preset sent to the first one's folder would be refused
    (its config differs) instead of getting a folder of its own. Why the digest: the same goes
    for any other setting (``--dim``, ``--neg``, ``--lr``); the name gets six hex digits of the
    settings it does not already say (`changed_settings`), and none when there are none, so
    the same command always finds its folder again and resumes.
    """
    source = cfg.data.name + (f"-{preset}" if preset else "")
    kind = ("jobi" if cfg.model.joint else "base") + ("-reciprocal" if cfg.model.reciprocal else "")
    name = f"{source}-{cfg.model.model}-{kind}-p{cfg.sampler.p:g}-seed{cfg.seed}"
    changed = changed_settings(cfg, preset)
    if changed:
        name += "-" + hashlib.sha256(json.dumps(changed, sort_keys=True).encode()).hexdigest()[:6]
    return Path("runs") / name


#: Settings the folder's name spells out, so they need no digest.
_NAMED = {"data.dataset", "data.data_dir", "model.model", "model.joint", "model.reciprocal", "sampler.p", "seed"}


def changed_settings(cfg: RunConfig, preset: str | None = None) -> dict[str, object]:
    """``{"section.field": value}`` of the settings a resumed run must keep
    (`RunConfig.training_identity`) where ``cfg`` differs from the preset's (or the defaults)
    for its data, leaving out those the folder's name spells out."""
    argv = ["--data-dir", cfg.data.data_dir] if cfg.data.data_dir else []
    argv += ["--dataset", cfg.data.dataset] if cfg.data.dataset else []
    base = flat_settings(config_from_command(argv + (["--preset", preset] if preset else [])).training_identity())
    mine = flat_settings(cfg.training_identity())
    return {key: value for key, value in mine.items() if key not in _NAMED and base.get(key) != value}


def flat_settings(config: dict) -> dict[str, object]:
    """A config dict (``config.json``'s shape) as ``{"section.field": value}``; ``seed`` stays ``seed``."""
    out = {}
    for section, fields in config.items():
        if isinstance(fields, dict):
            out.update({f"{section}.{name}": value for name, value in fields.items()})
        else:
            out[section] = fields
    return out


def _first_clause(text: str) -> str:
    """``text`` up to its first ``;`` outside parentheses: a preset's summary for ``--help``."""
    depth = 0
    for i, c in enumerate(text):
        depth += {"(": 1, ")": -1}.get(c, 0)
        if c == ";" and depth == 0:
            return text[:i]
    return text.rstrip(".")


@click.command(cls=SectionedCommand)
@click.option(
    "--preset",
    type=click.Choice(list(PRESETS)),
    default=None,
    help="A named recipe; flags given explicitly win over it (each in full: docs/training-options.md). "
    + " ".join(f"{name}: {_first_clause(preset.about)}." for name, preset in PRESETS.items()),
)
@config_options(*TRAIN_SECTIONS, seed=True)
@click.option(
    "--out",
    type=click.Path(file_okay=False),
    default=None,
    help="Run folder (rerun the same command to resume). Default: runs/<dataset>[-<preset>]-<model>-..., "
    "ending in a digest of the other settings that differ from the preset's or the defaults.",
)
@click.pass_context
@reports_errors
def train(ctx: click.Context, **flags) -> None:
    """Train JoBi (--joint --p 0.3) or a baseline, then print test metrics as JSON.

    Example: jobi-tf train --dataset fb15k-237 --joint --p 0.3
    """
    cfg = config_from_flags_given(ctx, flags)
    out = Path(flags["out"]) if flags["out"] else default_run_folder(cfg, flags["preset"])
    from jobi_tf.api import load_dataset, train_from_config  # TensorFlow loads when training starts

    # A data folder is read (NumPy only) before TensorFlow starts: a missing or malformed file is
    # reported in a second, not after TensorFlow's start-up.
    data = load_dataset(cfg.data, seed=cfg.seed) if cfg.data.dataset is None else None
    start_tensorflow()
    with progress_to_stderr():
        metrics = train_from_config(cfg, out, verbose=0 if ctx.obj["quiet"] else None, data=data)
    if "test" not in metrics:  # a worker of a cluster that is not the chief: it wrote nothing
        click.echo(json.dumps({"run_dir": None, "chief": False, **metrics}))
        return
    summary = {
        "run_dir": str(out),
        "test": {k: metrics["test"][k] for k in RANK_METRICS},
        "valid": {k: metrics["valid"][k] for k in RANK_METRICS},
        "epochs": metrics["epochs"],
        "train_seconds": metrics["train_seconds"],
        **{k: metrics[k] for k in ("warm_start", "final_weights_sha256", "first_check", "warnings") if k in metrics},
    }
    click.echo(json.dumps(summary))


def config_from_flags_given(ctx: click.Context, flags: dict) -> RunConfig:
    """The `RunConfig` of ``jobi-tf train``'s parsed ``flags``: the preset's settings for the
    dataset merged in where no flag was given (``ctx`` says which were), then the config.

    Settings left to the run (``None``, ``auto``) stay so here; the run chooses them when it
    starts (`jobi_tf.regimes.resolve`, `jobi_tf.training.trainer`) and ``config.json`` records the choice.
    """
    flags = dict(flags)
    if flags["preset"] is not None:
        given = {name for name in flags if ctx.get_parameter_source(name) is not click.core.ParameterSource.DEFAULT}
        data = DataConfig(dataset=flags["dataset"], data_dir=flags["data_dir"])
        flags.update(preset_settings(flags["preset"], explicit=given, dataset=data.name))
    return config_from_flags(flags)


def config_from_command(argv: list[str]) -> RunConfig:
    """The `RunConfig` ``jobi-tf train ARGV`` would train, parsed by this command's own options
    and preset code without training (nor importing TensorFlow).

    Why: a command printed in the docs can be checked against the config its figure's raw
    file recorded (tests/test_docs_commands.py). Raises `click.UsageError` for a bad flag and
    `jobi_tf.runtime.errors.ConfigError` for a bad value, as the command would.
    """
    ctx = train.make_context("jobi-tf train", list(argv))
    return config_from_flags_given(ctx, ctx.params)
