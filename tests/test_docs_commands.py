"""Every command the docs print beside a figure trains what made that figure.

How a printed command names its raw files (docs/testing.md, "Printed commands"):

* a table row with a ``jobi-tf train --...`` code span and links to raw files
  (``[s0](docs/results/.../x.json)``) pairs that command with those files (README's
  "Which recipe" table: every row with a command must have them);
* ``<!-- raw: results/a.json results/b.json -->`` pairs the last ``jobi-tf train`` or
  ``jobi-tf grid`` command before it on the page (in a code block or a code span) with those
  files; paths are relative to the page, as links are, and a folder stands for every raw
  file in it that records a run config (a grid's cells).

A ``jobi-tf train`` command is parsed by the command's own options and preset code
(`jobi_tf.cli.train.config_from_command`); a ``jobi-tf grid SPEC`` command gives the config of
the spec's cell that the raw file is (its ``(cell NAME`` in its command, else its file name).
The settings left to the run are chosen as a single-device run chooses them
(`jobi_tf.regimes.resolve`), and the config is compared field by field with the one the raw
file recorded (``settings_resolved``, ``settings`` or ``config``): every field but those of
`NOT_COMPARED` (the seed, where the data and run folder are, when checkpoints are written).
No training. A mismatch names the field and both values.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest
from doc_blocks import DOCS, README, ROOT

#: Raw files whose configs cannot be compared, with why; the check skips them.
HISTORY: dict[str, str] = {}

#: Fields never compared: which seed of a figure's seeds, where data and run folder live (the
#: dataset's name is compared), and when a run writes a checkpoint or takes a first look at
#: its model: not what it trains (`RunConfig.training_identity` leaves them out too; a resumed
#: run may change them), and a few seconds of writes at most.
NOT_COMPARED = {"seed", "data.dataset", "data.data_dir", "train.checkpoint_steps", "train.first_check_steps"}
#: Fields a kind of raw file (its folder) records that are not the printed command's, with why.
NOT_THE_COMMANDS = {
    "accuracy-per-hour": {
        "train.epochs": "bench/accuracy_per_hour.py trains in continuations and records the last one's "
        "--epochs target; the run ends by --patience (its --stop-after)",
    },
}
#: Fields that a loss scoring every entity does not read (no negatives are drawn), compared
#: only for sampled losses: a 1-vs-all command need not carry a ``--neg`` it does not use.
SAMPLED_ONLY = {"sampler.neg"}
#: What ``--optimizer auto`` may have chosen (by the graph's size: `jobi_tf.optimizers.choose_optimizer`).
AUTO_OPTIMIZERS = {"adam", "lazy-adam"}

COMMANDS = ("train", "grid")
COMMAND = re.compile(r"jobi-tf\s+(train|grid)\b")
#: A code span that is a command, not prose naming one ("through `jobi-tf train`").
COMMAND_SPAN = re.compile(r"jobi-tf\s+(train\s+-|grid\s+\S)")
RAW_COMMENT = re.compile(r"<!--\s*raw:\s*(.*?)\s*-->", re.S)
FENCE = re.compile(r"```[^\n]*\n(.*?)```", re.S)
SPAN = re.compile(r"`([^`\n]+)`")
RAW_LINK = re.compile(r"\]\(([^)\s]+\.json)\)")


@dataclass(frozen=True)
class Printed:
    """A printed command, where it is, and the raw files it names."""

    page: Path
    line: int
    command: str
    raws: tuple[Path, ...]

    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def _commands(text: str) -> list[tuple[int, str]]:
    """``(offset, command)`` of every ``jobi-tf train``/``grid`` command of a page: each line
    of a code block (a backslash continues a line) and each code span outside the blocks."""
    found = []
    for block in FENCE.finditer(text):
        at, start, line = block.start(1), block.start(1), ""
        for physical in block.group(1).splitlines(keepends=True):
            if not line:  # a command's offset is that of its first physical line
                start = at
            at += len(physical)
            line += physical.rstrip("\n")
            if line.endswith("\\"):  # continued on the next line
                line = line[:-1] + " "
                continue
            if match := COMMAND.search(line):
                if line.lstrip().startswith("#"):  # a command a shell comment names ("# the cell is: ...")
                    line = line[match.start() :]
                found.append((start, line))
            line = ""
    outside = FENCE.sub(lambda m: " " * len(m.group(0)), text)
    found += [(m.start(), m.group(1)) for m in SPAN.finditer(outside) if COMMAND_SPAN.search(m.group(1))]
    return sorted(found)


def printed_commands(page: Path) -> list[Printed]:
    """The command + raw-file pairs of ``page`` (module docstring)."""
    text = page.read_text(encoding="utf-8")

    def line_of(offset: int) -> int:
        return text.count("\n", 0, offset) + 1

    pairs = []
    offset = 0
    for row in text.splitlines(keepends=True):
        if row.startswith("|"):
            commands = [s for s in SPAN.findall(row) if COMMAND_SPAN.search(s)]
            raws = RAW_LINK.findall(row)
            if commands and raws:
                assert len(commands) == 1, f"{page.name}:{line_of(offset)}: one command per row with raw files"
                pairs.append(Printed(page, line_of(offset), commands[0], tuple(page.parent / r for r in raws)))
        offset += len(row)
    commands = _commands(text)
    blank = lambda m: " " * len(m.group(0))  # noqa: E731  (offsets kept)
    prose = SPAN.sub(blank, FENCE.sub(blank, text))  # a comment shown as code is an example, not a pairing
    for comment in RAW_COMMENT.finditer(prose):
        before = [c for c in commands if c[0] < comment.start()]
        assert before, f"{page.name}:{line_of(comment.start())}: a raw comment with no command before it"
        at, command = before[-1]
        raws = []
        for entry in comment.group(1).split():  # a folder: every raw file in it that records a run
            path = page.parent / entry
            raws += [f for f in sorted(path.glob("*.json")) if _records_a_run(f)] if path.is_dir() else [path]
        pairs.append(Printed(page, line_of(at), command, tuple(raws)))
    return pairs


def _records_a_run(path: Path) -> bool:
    return recorded_config(json.loads(path.read_text(encoding="utf-8"))) is not None


def _argv(command: str) -> tuple[str, list[str]]:
    """``("train" or "grid", its arguments)`` (an environment prefix, a ``# comment`` and what
    follows ``&&``, ``;`` or ``|`` left out)."""
    tokens = shlex.split(command, comments=True)
    start = next(i for i in range(len(tokens) - 1) if tokens[i].endswith("jobi-tf") and tokens[i + 1] in COMMANDS)
    argv = []
    for token in tokens[start + 2 :]:
        if token in ("&&", ";", "|", "&", "||"):
            break
        argv.append(token)
    return tokens[start + 1], argv


def resolved_config(command: str, raw: dict | None = None, raw_name: str = "") -> dict:
    """The config ``command`` trains (for a grid: the cell ``raw`` is), as ``config.json``
    records it, flattened (``{"sampler.neg": 100, ...}``); ``auto`` settings that the run
    picks when it starts stay ``auto``."""
    from jobi_tf.cli.train import config_from_command, flat_settings

    from jobi_tf import regimes
    from jobi_tf.planning.grid import load_spec

    kind, argv = _argv(command)
    if kind == "train":
        cfg = config_from_command(argv)
    else:
        spec = load_spec(ROOT / argv[0])
        said = re.search(r"\(cell ([\w.=-]+)", str((raw or {}).get("command", "")))
        name = said.group(1) if said else raw_name
        cells = {c.name: c for c in spec.cells()}
        assert name in cells, f"{argv[0]} has no cell {name!r} (cells: {', '.join(cells)})"
        cfg = cells[name].config
        rungs = spec.search.rungs(cfg.train.epochs) if spec.search.min_epochs else []
    cfg = regimes.resolve(cfg)
    flat = flat_settings(cfg.to_dict())
    flat["data.name"] = cfg.data.name
    if kind == "grid" and rungs:  # successive halving: a cell dropped at a rung trained to it
        flat["train.epochs"] = Rungs(rungs)
    return flat


class Rungs(tuple):
    """The epochs a cell of a halving search may have trained to: one of its rungs."""

    def __repr__(self) -> str:
        return f"one of the search's rungs {list(self)}"


def recorded_config(raw: dict) -> dict | None:
    """The run config a raw file recorded, flattened, or None (it recorded none)."""
    config = raw.get("settings_resolved") or raw.get("settings") or raw.get("config")
    if not isinstance(config, dict) or not isinstance(config.get("train"), dict):
        return None
    from jobi_tf.cli.train import flat_settings

    flat = flat_settings(config)
    data = config.get("data") or {}
    flat["data.name"] = data.get("dataset") or Path(data.get("data_dir") or "?").name
    return flat


def _before_the_field(dataset: str) -> dict:
    """What a run did before a setting existed: the paper's settings (the defaults then,
    `jobi_tf.planning.presets.PAPER_SETTINGS`) with every later setting off."""
    # A folder of that name: presets go by the data's name, and a name that is no benchmark (a
    # folder's, like ``bigkg``) is refused as a --dataset.
    return resolved_config(f"jobi-tf train --preset paper --data-dir {shlex.quote('/' + dataset)}")


def _samples(loss: str) -> bool:
    from jobi_tf import regimes
    from jobi_tf.contracts.objectives import SAMPLED

    return regimes.regime_of(loss).name == SAMPLED


def _has_bfloat16(machine) -> bool | None:
    """Whether the raw file's machine had bfloat16 dot products: its ``flags`` list, or its
    description (``... AVX512-BF16 ...``); None when it does not say."""
    if isinstance(machine, dict) and isinstance(machine.get("flags"), list):
        return any(f in machine["flags"] for f in ("avx512_bf16", "amx_bf16"))
    text = str(machine or "").lower().replace("-", "_")
    if "bf16" in text:
        return "no avx512_bf16" not in text
    if "no avx_512" in text or "avx2 only" in text:
        return False
    return None


def _same(field: str, printed, got, printed_config: dict, raw: dict) -> bool:
    if isinstance(printed, Rungs):
        return got in printed
    if field == "train.optimizer" and printed == "auto":
        return got in AUTO_OPTIMIZERS | {"auto"}
    if field == "train.matmul_dtype" and printed == "auto":
        native = _has_bfloat16(raw.get("machine"))
        jit = printed_config["train.jit_compile"]
        chosen = {"float32", "bfloat16"} if native is None else {"bfloat16" if native and not jit else "float32"}
        return got in chosen | {"auto"}
    numbers = (int, float)
    if isinstance(printed, float) or isinstance(got, float):
        plain = all(isinstance(v, numbers) and not isinstance(v, bool) for v in (printed, got))
        return plain and float(printed) == float(got)
    return printed == got


def mismatches(command: str, raw_path: Path) -> list[str]:
    """``field: printed X, raw file Y`` for every field where ``command`` differs from the
    config ``raw_path`` recorded."""
    raw = json.loads(raw_path.read_text(encoding="utf-8"))
    recorded = recorded_config(raw)
    if recorded is None:
        return [f"{raw_path.relative_to(ROOT)} records no run config (add it to HISTORY with the reason)"]
    printed = resolved_config(command, raw, raw_path.stem)
    before = _before_the_field(printed["data.name"])
    skip = NOT_COMPARED | set(NOT_THE_COMMANDS.get(raw_path.parent.name, {}))
    if not _samples(printed["train.loss"]):
        skip |= SAMPLED_ONLY
    out = []
    for field, value in printed.items():
        # A field the raw file lacks did not exist when it ran: it trained as the field's off value.
        got = recorded.get(field, before[field])
        if field not in skip and not _same(field, value, got, printed, raw):
            out.append(f"{field}: printed {value!r}, raw file {got!r}")
    return out


ALL = [p for page in [README, *sorted(DOCS.rglob("*.md"))] for p in printed_commands(page)]


def test_the_docs_pair_commands_with_raw_files():
    """README's recipe rows and the commands beside the headline figures are all paired."""
    assert len(ALL) >= 10
    readme = [p for p in ALL if p.page == README]
    first = "jobi-tf train --dataset fb15k-237 --joint --p 0.3"  # the recommended recipe is the defaults
    assert any(p.command == first for p in readme), f"README's first recipe row is not `{first}`"
    recipe = README.read_text(encoding="utf-8").split("## Which recipe", 1)[1].split("\n## ", 1)[0]
    for row in recipe.splitlines():
        if row.startswith("|") and any(COMMAND_SPAN.search(s) for s in SPAN.findall(row)):
            assert RAW_LINK.search(row), f"README's recipe row names no raw file: {row[:100]}"
    for p in ALL:
        assert p.raws, f"{p.where()}: a raw comment that names no file"
        for raw in p.raws:
            assert raw.is_file(), f"{p.where()}: raw file {raw} does not exist"
            assert raw.resolve().is_relative_to(ROOT / "docs" / "results"), f"{p.where()}: {raw} is not a raw file"
    for name in HISTORY:
        assert (ROOT / name).is_file(), f"HISTORY names {name}, which does not exist"


@pytest.mark.parametrize("printed", ALL, ids=lambda p: p.where())
def test_a_printed_command_trains_what_its_raw_file_recorded(printed):
    found = []
    for raw in printed.raws:
        name = str(raw.resolve().relative_to(ROOT))
        if name not in HISTORY:
            found += [f"{name}: {m}" for m in mismatches(printed.command, raw.resolve())]
    shown = "\n  ".join(found)
    assert not found, f"{printed.where()}: `{printed.command}` does not train what made its figure:\n  {shown}"


def test_the_check_finds_a_flag_that_differs_from_the_raw_file(tmp_path):
    real = ROOT / "docs" / "results" / "accuracy-per-hour" / "fb15k-237-jobi-s0.json"
    raw = os.path.relpath(real, tmp_path)
    altered = "jobi-tf train --dataset fb15k-237 --joint --p 0.3 --neg 50"
    page = tmp_path / "page.md"
    page.write_text(f"| row | `{altered}` | [s0]({raw}) |\n\n```bash\n{altered}\n```\n<!-- raw: {raw} -->\n")
    found = printed_commands(page)
    assert [(p.command, p.raws[0].resolve()) for p in found] == [(altered, real), (altered, real)]
    assert mismatches(altered, real) == ["sampler.neg: printed 50, raw file 100"]
    assert mismatches("jobi-tf train --dataset fb15k-237 --joint --p 0.3", real) == []
    assert mismatches("jobi-tf train --dataset wn18rr --joint --p 0.3", real) == [
        "data.name: printed 'wn18rr', raw file 'fb15k-237'"
    ]
    paper = mismatches("jobi-tf train --dataset fb15k-237 --joint --p 0.3 --preset paper", real)
    assert [m.split(":")[0] for m in paper] == [
        "sampler.batch_size",
        "sampler.neg",
        "sampler.shared_negatives",
        "sampler.biased_chunk",
        "train.eval_every",
        "train.patience",
        "train.monitor",
    ]
