"""Combine `big_epoch.py` records of the same graph into one raw file with same-run epoch ratios.

Why: a speed change is shown by one full epoch before and after it (and the baseline's, for
the JoBi-to-baseline ratio), each a separate `big_epoch.py` process run one after another on
the same core; this keeps the three records side by side with the ratios of their epoch
seconds, which `rederive_ratios.py` recomputes.

Run:  python bench/big_epoch_ab.py --before B.json --after A.json --baseline BASE.json \\
          --commands "..." > docs/results/speed/NAME.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def ratios(runs: dict[str, dict]) -> dict[str, float]:
    """Epoch-seconds ratios: before / after (the speed-up), and each JoBi run / the baseline."""
    sec = {name: run["epoch_seconds"] for name, run in runs.items()}
    return {
        "before_over_after": round(sec["before"] / sec["after"], 2),
        "before_over_baseline": round(sec["before"] / sec["baseline"], 2),
        "after_over_baseline": round(sec["after"] / sec["baseline"], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name in ("before", "after", "baseline"):
        parser.add_argument(f"--{name}", type=Path, required=True)
    parser.add_argument("--commands", required=True, help="how the three records were made, in order")
    parser.add_argument("--note", default="", help="what else ran on the machine meanwhile")
    args = parser.parse_args()
    runs = {}
    for name in ("before", "after", "baseline"):
        path = getattr(args, name)
        try:
            runs[name] = json.loads(path.read_text(encoding="utf-8").strip().splitlines()[-1])
        except (OSError, ValueError, IndexError) as error:
            raise SystemExit(f"--{name} {path}: not a big_epoch.py record ({error})") from None
        if runs[name].get("bench") != "big_epoch":
            raise SystemExit(f"--{name} {path}: not a big_epoch.py record (bench={runs[name].get('bench')!r})")
    record = {
        "bench": "big_epoch_ab",
        "metric": "seconds of one full training epoch (big_epoch.py's epoch_seconds), three processes in turn "
        "on one core; ratios of those seconds",
        "epoch_seconds": {name: run["epoch_seconds"] for name, run in runs.items()},
        "positives_per_second": {name: run["value"] for name, run in runs.items()},
        "ratios": ratios(runs),
        "commands": args.commands,
        "note": args.note,
        "runs": runs,
    }
    print(json.dumps(record))


if __name__ == "__main__":
    main()
