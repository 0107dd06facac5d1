"""Click options built from the config dataclasses, so each flag's default, choices and help live once.

`jobi_tf.config.setting` puts a field's help, choices and click extras in its metadata;
`config_options` turns a section's fields into options (in field order), and
`config_from_flags` turns the parsed flags back into the `RunConfig`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable

import click

from jobi_tf.config import SECTIONS, DataConfig, EvalConfig, RunConfig, flag_name

__all__ = [
    "config_options",
    "config_from_flags",
    "eval_options",
    "graph_options",
    "prior_weight_option",
    "chosen_prior_weight",
]
__all__ += ["TRAIN_SECTIONS", "SectionedCommand", "SectionOption"]

#: The sections ``jobi-tf train`` exposes, in the order its help lists them.
TRAIN_SECTIONS = ("data", "sampler", "model", "train", "eval", "distribute")


#: ``--help``'s heading of each config section's options (`SectionedCommand`).
SECTION_TITLES = {
    None: "Run",
    "data": "Data",
    "sampler": "Negatives and batches",
    "model": "Model",
    "train": "Training",
    "eval": "Evaluation",
    "distribute": "Devices",
}


class SectionOption(click.Option):
    """An option that knows its config section, so `SectionedCommand` lists it under it."""

    def __init__(self, *args, section: str | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.section = section


class SectionedCommand(click.Command):
    """A command whose ``--help`` lists its options section by section (`SECTION_TITLES`):
    ``jobi-tf train`` has some sixty."""

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        groups: dict[str, list[tuple[str, str]]] = {}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is not None:
                title = SECTION_TITLES.get(getattr(param, "section", None), SECTION_TITLES[None])
                groups.setdefault(title, []).append(record)
        for title in [t for t in SECTION_TITLES.values() if t in groups]:
            with formatter.section(f"{title} options"):
                formatter.write_dl(groups[title])


def _section_name(section: type) -> str | None:
    return next((name for name, cls in SECTIONS.items() if cls is section), None)


def _option(section: type, field: dataclasses.Field) -> Callable:
    meta = field.metadata
    name = flag_name(section, field.name)
    help_text = meta.get("help") or ""
    if meta.get("bounds") is not None:  # the range the config checks (`jobi_tf.config.fields.Bounds`)
        help_text = f"{help_text} Range: {meta['bounds'].words()}.".strip()
    kwargs: dict = {"default": field.default, "help": help_text or None, "cls": SectionOption}
    kwargs["section"] = _section_name(section)
    if isinstance(field.default, bool):
        decls = [f"{name}/--no-{name[2:]}", field.name]
    else:
        decls = [name, field.name]
        if meta.get("choices"):
            kwargs["type"] = click.Choice(meta["choices"])
        elif meta.get("path"):
            kwargs["type"] = click.Path(file_okay=False)
        elif "type" in meta:
            kwargs["type"] = meta["type"]
        elif field.default is not None:
            kwargs["type"] = type(field.default)
        if "metavar" in meta:
            kwargs["metavar"] = meta["metavar"]
    # A default chosen when the run starts (None in the config) shows as its name ("auto").
    kwargs["show_default"] = meta.get("shown_default", field.default is not None)
    return click.option(*decls, **kwargs)


def _fields(sections: Iterable[str]) -> list[tuple[type, dataclasses.Field]]:
    pairs = [(SECTIONS[s], f) for s in sections for f in dataclasses.fields(SECTIONS[s])]
    return [(cls, f) for cls, f in pairs if f.metadata.get("cli", True)]


def config_options(*sections: str, seed: bool = False) -> Callable:
    """A decorator adding one option per field of ``sections`` (and ``--seed``)."""

    def decorate(fn: Callable) -> Callable:
        fields = _fields(sections)
        if seed:
            fields.append((RunConfig, next(f for f in dataclasses.fields(RunConfig) if f.name == "seed")))
        for cls, field in reversed(fields):  # click lists options in decoration order, innermost last
            fn = _option(cls, field)(fn)
        return fn

    return decorate


def config_from_flags(flags: dict) -> RunConfig:
    """The `RunConfig` the flags of `config_options` (``TRAIN_SECTIONS``, ``seed``) describe."""
    sections = {
        s: SECTIONS[s](**{f.name: flags[f.name] for f in dataclasses.fields(SECTIONS[s]) if f.name in flags})
        for s in TRAIN_SECTIONS
    }
    return RunConfig(**sections, seed=flags["seed"])


def graph_options(fn: Callable) -> Callable:
    """``--dataset`` and ``--data-dir``, as ``jobi-tf train`` has them (without the synthetic graph's sizes)."""
    for field in reversed([f for f in dataclasses.fields(DataConfig) if f.name in ("dataset", "data_dir")]):
        fn = _option(DataConfig, field)(fn)
    return fn


def eval_options(fn: Callable) -> Callable:
    """``--eval-batch-size``, ``--chunk-size`` and ``--rank-type`` (filtered evaluation)."""
    return config_options("eval")(fn)


def eval_config(flags: dict) -> EvalConfig:
    return EvalConfig(**{f.name: flags[f.name] for f in dataclasses.fields(EvalConfig)})


def prior_weight_option(purpose: str) -> Callable:
    """``--prior-weight W`` of `evaluate` and `export`: a sampled run's weight of the slot counts in
    place of its own ``--slot-prior`` (`jobi_tf.api.Run.use_slot_prior`, which checks it), and
    ``--neighbourhood V``, its neighbourhood term's (`jobi_tf.api.Run.use_neighbourhood`), and
    ``--hub-weight W``, the counts' weight of the queries asked from a hub (`jobi_tf.api.Run.use_hub_weight`);
    ``purpose`` is the verb, "rank" or "serve". ``--slot-prior``, its older spelling, still works
    (hidden): commands printed in the docs' raw files use it."""

    def decorate(command: Callable) -> Callable:
        command = click.option("--slot-prior", "older_prior_weight", type=float, default=None, hidden=True)(command)
        helps = {
            "--hub-weight W": f"A sampled run: {purpose} the queries asked from a hub (an entity of over 2,000 "
            "neighbours, or in no training triple) with W x the counts, every other query with --prior-weight's "
            "(or the run's).",
            "--neighbourhood V": f"A sampled run: {purpose} with V x the neighbourhood term in place of the one it "
            "chose or trained with (0: without it); exports serve it as ranked.",
            "--prior-weight W": f"A sampled run: {purpose} with W x the slot counts in place of the --slot-prior it "
            "trained with (0: the tables alone; W >= 0). Its loss left them out, so any W fits its tables: choose W "
            "with jobi-tf evaluate --split valid.",
        }
        for flag, text in helps.items():  # (listed in reverse: click shows the last added first)
            name, metavar = flag.split()
            command = click.option(name, type=float, default=None, metavar=metavar, help=text)(command)
        return command

    return decorate


def chosen_prior_weight(prior_weight: float | None, older_prior_weight: float | None) -> float | None:
    """``--prior-weight``, else its older spelling ``--slot-prior``, else None (the run's own)."""
    return prior_weight if prior_weight is not None else older_prior_weight
