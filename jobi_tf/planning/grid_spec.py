"""A grid spec: which settings vary, which are fixed, and the cells that makes
(`jobi_tf.planning.grid` runs them; its docstring describes the spec's keys)."""

from __future__ import annotations

import dataclasses
import itertools
import json
import random
from pathlib import Path
from typing import Any

from jobi_tf.config import SECTIONS, VARIANTS, DataConfig, RunConfig, variant_name
from jobi_tf.planning.presets import preset_settings
from jobi_tf.runtime.errors import ConfigError, GridSpecError
from jobi_tf.runtime.types import RANK_METRICS

__all__ = ["GridSpec", "Cell", "Search", "load_spec", "SELECT_METRICS"]

# Every RunConfig field, by its (unique) name: where a flat spec key belongs.
_FIELD_SECTION = {f.name: section for section, cls in SECTIONS.items() for f in dataclasses.fields(cls)}
_FIELD_SECTION["seed"] = None

SELECT_METRICS = RANK_METRICS


@dataclasses.dataclass(frozen=True)
class Cell:
    """One point of the grid: its settings, its config and its folder name."""

    settings: dict[str, Any]
    config: RunConfig
    name: str

    @property
    def variant(self) -> str:
        return variant_name(self.config.model.joint, self.config.sampler.p)

    def key(self, field: str) -> Any:
        """A grouping key: ``variant``, ``dataset`` or any config field."""
        if field == "variant":
            return self.variant
        if field == "dataset":
            return self.config.data.name
        return _get(self.config, field)


@dataclasses.dataclass(frozen=True)
class Search:
    """A budget over the grid: a random subset of ``trials`` cells, and successive halving
    from ``min_epochs`` by ``eta`` when ``min_epochs`` is set (module docstring)."""

    trials: int | None = None
    seed: int = 0
    min_epochs: int | None = None
    eta: int = 2

    @classmethod
    def parse(cls, raw: Any, source: str) -> Search:
        if raw is None:
            return cls()
        if not isinstance(raw, dict) or set(raw) - {"trials", "seed", "halving"}:
            raise GridSpecError(f"{source}: 'search' is an object with 'trials', 'seed' and 'halving'")
        halving = raw.get("halving") or {}
        if not isinstance(halving, dict) or set(halving) - {"min_epochs", "eta"}:
            raise GridSpecError(f"{source}: 'search.halving' is an object with 'min_epochs' and 'eta'")
        search = cls(raw.get("trials"), raw.get("seed", 0), halving.get("min_epochs"), halving.get("eta", 2))
        for name, value, low in (
            ("trials", search.trials, 1),
            ("min_epochs", search.min_epochs, 1),
            ("eta", search.eta, 2),
        ):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < low):
                raise GridSpecError(f"{source}: search {name} must be an integer >= {low}. Received: {value!r}")
        return search

    def rungs(self, epochs: int) -> list[int]:
        """Epoch budgets of the rungs up to ``epochs``: ``min_epochs * eta**k``, then ``epochs``."""
        if self.min_epochs is None:
            return [epochs]
        out, budget = [], self.min_epochs
        while budget < epochs:
            out.append(budget)
            budget *= self.eta
        return [*out, epochs]


@dataclasses.dataclass(frozen=True)
class GridSpec:
    """A parsed, validated grid spec (see the module docstring)."""

    fixed: dict[str, Any]
    grid: dict[str, list[Any]] | list[dict[str, list[Any]]]
    select: str = "hits@10"
    group_by: tuple[str, ...] = ("dataset", "model", "variant")
    source: str = "spec"
    search: Search = Search()

    def __post_init__(self) -> None:
        grids = self._grids()
        if not grids:
            raise GridSpecError(f"{self.source}: 'grid' must be an object, or a non-empty list of objects")
        for key in [*self.fixed, *(k for g in grids for k in g)]:
            if key not in _FIELD_SECTION and key not in ("variant", "preset"):
                raise GridSpecError(
                    f"{self.source}: unknown setting {key!r} (use the flag names: batch_size, neg, p, ...)"
                )
        for grid in grids:
            for key, values in grid.items():
                if not isinstance(values, list) or not values:
                    raise GridSpecError(f"{self.source}: {key!r} must be a non-empty list. Received: {values!r}")
                if key in self.fixed:
                    raise GridSpecError(f"{self.source}: {key!r} is both fixed and varied")
                if len({json.dumps(v) for v in values}) != len(values):
                    raise GridSpecError(f"{self.source}: {key!r} lists a value twice: {values!r}")
            bad = [v for v in grid.get("variant", []) + [self.fixed.get("variant")] if v and v not in VARIANTS]
            if bad:
                choices = ", ".join(VARIANTS)
                raise GridSpecError(f"{self.source}: variant must be one of {choices}. Received: {bad[0]!r}")
        if self.select not in SELECT_METRICS:
            raise GridSpecError(f"{self.source}: select must be one of {', '.join(SELECT_METRICS)}")
        for key in self.group_by:
            if key not in _FIELD_SECTION and key not in ("variant", "dataset"):
                raise GridSpecError(f"{self.source}: cannot group by {key!r}")
        cells = self.cells()  # every cell must be a valid RunConfig before anything runs
        if self.search.min_epochs is not None:
            if len({c.config.train.epochs for c in cells}) > 1:
                raise GridSpecError(f"{self.source}: successive halving needs one 'epochs' for every cell")
            for cell in cells:
                every = cell.config.train.eval_every
                if any(r % every for r in self.search.rungs(cell.config.train.epochs)[:-1]):
                    raise GridSpecError(
                        f"{self.source}: halving rungs {self.search.rungs(cell.config.train.epochs)} must be "
                        f"multiples of eval_every ({every}) so that each rung ends with a validation"
                    )

    def _grids(self) -> list[dict[str, list[Any]]]:
        grids = self.grid if isinstance(self.grid, list) else [self.grid]
        return grids if all(isinstance(g, dict) for g in grids) else []

    def cells(self) -> list[Cell]:
        """Every cell in grid order; a cell listed by two sub-grids runs once."""
        from jobi_tf import regimes  # (imports TensorFlow: the losses' and regimes' own checks)

        out: dict[str, Cell] = {}
        for grid in self._grids():
            keys = list(grid)
            for values in itertools.product(*(grid[k] for k in keys)):
                varied = dict(zip(keys, values, strict=True))
                try:
                    settings = _apply_variant(_apply_preset({**self.fixed, **varied}))
                    config = _config(settings)
                    regimes.check(config)
                except ConfigError as err:
                    raise GridSpecError(f"{self.source}: cell {varied}: {err}") from None
                cell = Cell(settings, config, _cell_name(varied))
                if cell.name in out and out[cell.name].config != config:
                    raise GridSpecError(
                        f"{self.source}: two different cells would share the folder {cell.name!r} "
                        "(vary the same settings in every sub-grid)"
                    )
                out.setdefault(cell.name, cell)
        cells = list(out.values())
        if self.search.trials is None:
            return cells
        groups: dict[str, list[int]] = {}
        for i, cell in enumerate(cells):
            groups.setdefault(json.dumps({k: str(cell.key(k)) for k in self.group_by}, sort_keys=True), []).append(i)
        rng = random.Random(self.search.seed)
        chosen = set()
        for members in groups.values():  # the same budget for every group, so they compare fairly
            chosen.update(rng.sample(members, min(self.search.trials, len(members))))
        return [cells[i] for i in sorted(chosen)]  # grid order kept


def load_spec(path: str | Path) -> GridSpec:
    """Read a JSON (or, with PyYAML installed, YAML) grid spec; errors name the file."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    if path.suffix in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError:
            raise GridSpecError(f"{path}: YAML specs need PyYAML (pip install pyyaml); or write JSON") from None
        try:
            raw = yaml.safe_load(text)
        except yaml.YAMLError as err:
            raise GridSpecError(f"{path}: not valid YAML: {str(err).splitlines()[0]}") from None
    else:
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as err:
            raise GridSpecError(f"{path}:{err.lineno}: not valid JSON: {err.msg}") from None
    if not isinstance(raw, dict) or "grid" not in raw:
        raise GridSpecError(f"{path}: a spec is an object with a 'grid' (and optional 'fixed', 'select')")
    unknown = set(raw) - {"fixed", "grid", "select", "group_by", "description", "search"}
    if unknown:
        raise GridSpecError(f"{path}: unknown top-level key(s) {sorted(unknown)}")
    return GridSpec(
        fixed=dict(raw.get("fixed") or {}),
        grid=raw["grid"],
        select=raw.get("select", "hits@10"),
        group_by=tuple(raw.get("group_by", ("dataset", "model", "variant"))),
        source=str(path),
        search=Search.parse(raw.get("search"), str(path)),
    )


def _apply_preset(settings: dict[str, Any]) -> dict[str, Any]:
    """Expand a ``preset`` setting into its settings for the cell's dataset; the spec's own win."""
    if "preset" not in settings:
        return settings
    settings = dict(settings)
    name = settings.pop("preset")
    dataset = DataConfig(dataset=settings.get("dataset"), data_dir=settings.get("data_dir")).name
    return {**preset_settings(name, explicit=set(settings), dataset=dataset), **settings}


def _apply_variant(settings: dict[str, Any]) -> dict[str, Any]:
    """Turn a ``variant`` setting into its ``joint`` and ``p`` (biased p: the spec's, else 0.3)."""
    if "variant" not in settings:
        return settings
    settings = dict(settings)
    index = VARIANTS.index(settings.pop("variant"))
    biased_p = settings.get("p") or 0.3
    settings["joint"] = index >= 2
    settings["p"] = biased_p if index % 2 else 0.0
    return settings


def _config(settings: dict[str, Any]) -> RunConfig:
    sections: dict[str, dict[str, Any]] = {name: {} for name in SECTIONS}
    seed = 0
    for key, value in settings.items():
        if _FIELD_SECTION[key] is None:
            seed = value
        else:
            sections[_FIELD_SECTION[key]][key] = value
    if sections["data"].get("data_dir") and "dataset" not in sections["data"]:
        sections["data"]["dataset"] = None
    return RunConfig(seed=seed, **{name: SECTIONS[name](**kw) for name, kw in sections.items()})


def _get(config: RunConfig, field: str) -> Any:
    section = _FIELD_SECTION[field]
    return config.seed if section is None else getattr(getattr(config, section), field)


def _cell_name(varied: dict[str, Any]) -> str:
    """``model-complex_joint-1_p-0.3``: the varied settings only, readable and filesystem-safe."""
    if not varied:
        return "cell"
    parts = []
    for key, value in varied.items():
        text = str(int(value)) if isinstance(value, bool) else f"{value:g}" if isinstance(value, float) else str(value)
        parts.append(f"{key}-{text.replace('/', '_')}")
    return "_".join(parts)
