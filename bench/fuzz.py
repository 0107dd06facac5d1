"""The hostile-input properties of tests/test_fuzz.py with a larger budget; counts every case.

Steps:
1. Run ``pytest tests/test_fuzz.py`` with ``JOBI_TF_FUZZ_EXAMPLES=--examples`` and
   Hypothesis's statistics on.
2. Read, per property (the triples reader, ``jobi-tf train``'s numeric flags, the exported
   signatures), how many generated cases passed and failed, from those statistics.
3. Print one JSON line: cases and failures per target, the pytest exit status and the wall
   time. Exit 1 if any case failed.

Run:  python bench/fuzz.py --examples 2000
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import emit  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TARGETS = {
    "test_reader_gives_triples_or_a_one_line_error_naming_the_file": "triples reader",
    "test_numeric_flags_are_accepted_or_refused_in_one_line_naming_the_flag": "cli numeric flags",
    "test_signatures_return_documented_shapes_or_a_clear_error": "exported signatures",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=2000, help="generated cases per property")
    args = parser.parse_args()
    env = dict(os.environ, JOBI_TF_FUZZ_EXAMPLES=str(args.examples), TF_CPP_MIN_LOG_LEVEL="3")
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--hypothesis-show-statistics",
         str(ROOT / "tests" / "test_fuzz.py")],
        capture_output=True, text=True, env=env, cwd=ROOT,
    )  # fmt: skip
    seconds = time.monotonic() - start
    counts, test = {}, None
    for line in done.stdout.splitlines():
        name = re.search(r"test_fuzz\.py::(\w+):", line)
        if name:
            test = name.group(1)
        stats = re.search(r"(\d+) passing, (\d+) failing, and (\d+) invalid", line)
        if stats and test in TARGETS and TARGETS[test] not in counts:  # the generate phase
            passing, failing, invalid = map(int, stats.groups())
            counts[TARGETS[test]] = {"cases": passing + failing, "failures": failing, "rejected_by_filters": invalid}
    emit(
        {
            "bench": "fuzz",
            "metric": "generated cases per target and how many failed",
            "value": counts,
            "examples_per_property": args.examples,
            "pytest_exit": done.returncode,
            "pytest_summary": done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-500:],
            "seconds": round(seconds, 1),
        }
    )
    sys.exit(0 if done.returncode == 0 and len(counts) == len(TARGETS) else 1)


if __name__ == "__main__":
    main()
