"""JoBi against its baseline over seeds: mean ± sd per variant and the sd of the difference.

Run:  python bench/compare_seeds.py runs/seeds/*  [--metric mrr hits@1 hits@10] [--split test]
      python bench/compare_seeds.py docs/results/fast-seeds-fb15k-237/*.json   (raw results files)
      python bench/compare_seeds.py --by biased_chunk runs/biased-chunk/*variant-jobi*   (another setting)
      python bench/compare_seeds.py --ignore epochs --ignore biased_chunk runs/aph/fb15k-237-{baseline,jobi}-s*/run
          (accuracy-per-hour runs: the harness sets ``epochs`` per call, and JoBi's runs share
          their biased negatives, which a baseline with p 0 does not draw)
Prints a Markdown table on stdout, then one JSON line with the same numbers.

Why a script: "JoBi is ahead" needs the difference of two means stated with its own
uncertainty, ``sqrt(sd_a^2 / n_a + sd_b^2 / n_b)`` (not the sd of one run), and the two groups
must differ in nothing but the pair head (and the seed): the script checks both configs before
it reports, and refuses a comparison that is not like for like.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

from jobi_tf.config import RunConfig, variant_name
from jobi_tf.planning.presets import apply_preset

#: Fields that may differ between the runs of a comparison: what is compared, the seed,
#: and settings that do not change what is trained (the stopping rule, ``epochs`` and
#: ``patience``, is the same on both sides or the comparison is refused).
ALLOWED_TO_DIFFER = {"joint", "p", "seed", "checkpoint_steps", "first_check_steps"}
IGNORED_SECTIONS = {"eval", "distribute"}
#: Every field's value before it existed, by name (see `flat_config`): the paper's settings
#: (``--preset paper``, the defaults until the recommended sampled recipe) with the rest off.
DEFAULTS = {
    name: value
    for section, fields in apply_preset(RunConfig(), "paper").to_dict().items()
    if isinstance(fields, dict) and section not in IGNORED_SECTIONS
    for name, value in fields.items()
}


def flat_config(cfg: dict) -> dict:
    """The config's fields by name, without the sections that do not change what is trained.

    A field an older ``config.json`` lacks did not exist when it ran, so that run trained as
    the field's off value (a setting is added with the default that keeps what ran before; the
    sampler's and the schedule's defaults changed later, and ``--preset paper`` keeps the
    earlier ones): `DEFAULTS` fills it, and raw files of older runs still compare.
    """
    out = {"seed": cfg.get("seed")}
    for section, fields in cfg.items():
        if isinstance(fields, dict) and section not in IGNORED_SECTIONS:
            out.update(fields)
    return {**DEFAULTS, **out}


def variant(cfg: dict) -> str:
    return variant_name(cfg["model"]["joint"], cfg["sampler"]["p"])


def group_name(cfg: dict, by: str | None) -> str:
    """The group a run belongs to: its paper variant, or ``FIELD=value`` of the ``--by`` field."""
    if by is None:
        return variant(cfg)
    flat = flat_config(cfg)
    if by not in flat:
        raise SystemExit(f"--by {by}: no such setting in the runs' config.json")
    return f"{by}={json.dumps(flat[by])}"


def load(path: Path, split: str, by: str | None = None) -> dict:
    """A finished run folder, or a raw results file of docs/results/ (``{"config", "metrics"}``),
    or a `bench/slot_prior_weight.py` record: its test with the counts' weight it chose on validation.

    Why files too: a run folder holds gigabytes of weights and lives on one machine; the raw
    file is what is kept, so cells run on different machines and days compare from it.
    """
    if path.is_file():
        raw = json.loads(path.read_text())
        if isinstance(raw, dict) and raw.get("bench") == "slot_prior_weight":
            raw = {"config": raw["config"], "metrics": {"test": raw["test_with_counts"]}}
        if not isinstance(raw, dict) or not {"config", "metrics"} <= raw.keys():
            raise SystemExit(f"{path}: not a raw results file (needs 'config' and 'metrics')")
        metrics_path, metrics, cfg = path, raw["metrics"], raw["config"]
    else:
        metrics_path, config_path = path / "metrics.json", path / "config.json"
        for needed in (metrics_path, config_path):
            if not needed.exists():
                raise SystemExit(f"{needed}: missing (is {path} a finished run?)")
        metrics, cfg = json.loads(metrics_path.read_text()), json.loads(config_path.read_text())
    if split not in metrics:
        raise SystemExit(f"{metrics_path}: has no {split!r} metrics")
    return {
        "run": str(path),
        "config": cfg,
        "flat": flat_config(cfg),
        "variant": group_name(cfg, by),
        "metrics": metrics,
    }


def check_like_for_like(runs: list[dict], by: str | None = None, ignore: tuple[str, ...] = ()) -> None:
    """Exit with a one-line error naming the first setting (other than the allowed ones and
    those the caller names in ``ignore``) that differs."""
    first = runs[0]
    allowed = (ALLOWED_TO_DIFFER - ({"joint", "p"} if by else set())) | set(ignore)
    for run in runs[1:]:
        for key in sorted(set(first["flat"]) | set(run["flat"])):
            if key in allowed or key == by:
                continue
            if first["flat"].get(key) != run["flat"].get(key):
                raise SystemExit(
                    f"not like for like: {key} is {first['flat'].get(key)!r} in {first['run']} "
                    f"but {run['flat'].get(key)!r} in {run['run']}"
                )
    seeds: dict[str, list] = {}
    for run in runs:
        seeds.setdefault(run["variant"], []).append(run["flat"]["seed"])
    for name, values in seeds.items():
        if len(set(values)) != len(values):
            raise SystemExit(f"variant {name} lists seed {values} twice: one run per seed")
    if len({tuple(sorted(v)) for v in seeds.values()}) > 1:
        raise SystemExit(f"the variants were run with different seeds: {seeds}")


def mean_sd(values: list[float]) -> tuple[float, float]:
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else float("nan")


def compare(runs: list[dict], metrics: list[str], split: str, reference: str = "baseline") -> dict:
    """Per group: the values by seed, mean and sd; against the reference group (the baseline,
    or the first ``--by`` value): the difference and its sd."""
    groups: dict[str, list[dict]] = {}
    for run in sorted(runs, key=lambda r: r["flat"]["seed"]):
        groups.setdefault(run["variant"], []).append(run)
    out: dict = {"split": split, "variants": {}, "differences": {}}
    for name, members in groups.items():
        out["variants"][name] = {
            "seeds": [m["flat"]["seed"] for m in members],
            "best_epochs": [m["metrics"].get("best_epoch") for m in members],
            **{
                metric: dict(
                    zip(("mean", "sd"), mean_sd([m["metrics"][split][metric] for m in members]), strict=True),
                    values=[m["metrics"][split][metric] for m in members],
                )
                for metric in metrics
            },
        }
    if reference in groups:
        base = out["variants"][reference]
        for name, stats in out["variants"].items():
            if name == reference:
                continue
            diffs = {}
            for metric in metrics:
                a, b = stats[metric], base[metric]
                sd = math.sqrt(a["sd"] ** 2 / len(a["values"]) + b["sd"] ** 2 / len(b["values"]))
                diff = a["mean"] - b["mean"]
                diffs[metric] = {"difference": diff, "sd": sd, "verdict": verdict(diff, sd)}
            out["differences"][f"{name} - {reference}"] = diffs
    return out


def verdict(difference: float, sd: float) -> str:
    """``ahead``/``behind`` beyond two sds of the difference, else ``level``."""
    if math.isnan(sd) or abs(difference) <= 2 * sd:
        return "level"
    return "ahead" if difference > 0 else "behind"


def markdown(result: dict, metrics: list[str]) -> str:
    lines = [
        f"| {result['split']} | seeds | " + " | ".join(metrics) + " |",
        "|---|---|" + "---:|" * len(metrics),
    ]
    for name, stats in result["variants"].items():
        cells = [f"{stats[m]['mean']:.4f} ± {stats[m]['sd']:.4f}" for m in metrics]
        lines.append(f"| {name} | {', '.join(map(str, stats['seeds']))} | " + " | ".join(cells) + " |")
    for name, diffs in result["differences"].items():
        cells = [f"{d['difference']:+.4f} ± {d['sd']:.4f} ({d['verdict']})" for d in diffs.values()]
        lines.append(f"| **{name}** | | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "runs",
        nargs="+",
        type=Path,
        help="finished run folders (metrics.json, config.json) or raw results files ({config, metrics})",
    )
    parser.add_argument("--metric", nargs="+", default=["mrr", "hits@1", "hits@3", "hits@10"])
    parser.add_argument("--split", default="test", choices=["test", "valid"])
    parser.add_argument(
        "--by",
        help="compare the values of this setting (e.g. biased_chunk) instead of the paper's variants; "
        "the first value in sorted order is the reference",
    )
    parser.add_argument(
        "--ignore",
        action="append",
        default=[],
        metavar="FIELD",
        help="a setting allowed to differ besides the compared ones (repeat the flag for several): name "
        "only those that do not change what is compared (the record lists them)",
    )
    args = parser.parse_args(argv)
    runs = [load(folder, args.split, args.by) for folder in args.runs]
    unknown = sorted(set(args.ignore) - set(DEFAULTS))
    if unknown:
        raise SystemExit(f"--ignore: no such setting {unknown[0]!r} in RunConfig")
    check_like_for_like(runs, args.by, tuple(args.ignore))
    reference = "baseline" if args.by is None else min(r["variant"] for r in runs)
    result = compare(runs, args.metric, args.split, reference)
    print(markdown(result, args.metric))
    record = {"bench": "compare_seeds", "runs": [r["run"] for r in runs], "ignored": args.ignore, **result}
    given = sys.argv[1:] if argv is None else argv
    print(json.dumps({**record, "command": " ".join(["python", "bench/compare_seeds.py", *given])}))


if __name__ == "__main__":
    main(sys.argv[1:])
