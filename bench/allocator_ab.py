"""README's quickstart with jobi-tf's memory defaults against TensorFlow's: wall, CPU and
system time of the whole command, same run.

jobi-tf starts TensorFlow with its pooled CPU allocator and glibc's huge pages
(`jobi_tf.runtime`); ``TF_CPU_ALLOCATOR_USE_BFC=false JOBI_TF_HUGE_PAGES=0`` turns both
off. Where TensorFlow's default allocator maps its large temporaries afresh every step, the
kernel's page faults take as much CPU as training; on other machines the two are level. This
measures which kind of machine this is, on the command a user runs first.

Steps: ``--rounds`` rounds, each running ``jobi-tf train ARGS --out TMP/RUN`` once with the
defaults and once with both off (the order alternates by round), every run in a fresh
folder; per run the wall seconds, the child's user and system CPU seconds
(``getrusage(RUSAGE_CHILDREN)`` deltas), its peak RSS and its test MRR. Ratio = the opt-out's
wall / the defaults' wall, per round and median (`rederive_ratios.py` recomputes it).

Run:  JOBI_TF_DATA_DIR=../shared/datasets taskset -c 0 python bench/allocator_ab.py --rounds 2 \\
          -- --joint --p 0.3
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import emit, machine  # noqa: E402

#: The ``jobi-tf`` of this interpreter's environment (a virtualenv need not be activated).
JOBI_TF = str(Path(sys.executable).with_name("jobi-tf"))
OPT_OUT = {"TF_CPU_ALLOCATOR_USE_BFC": "false", "JOBI_TF_HUGE_PAGES": "0"}


def clean_environment() -> dict:
    """This process's environment without what importing jobi_tf (via ``_common``) set in it,
    so each child chooses its allocator and pages itself, as a user's shell would."""
    env = {k: v for k, v in os.environ.items() if k not in (*OPT_OUT, "TF_CPU_BFC_MEM_LIMIT_IN_MB")}
    tunables = [t for t in env.pop("GLIBC_TUNABLES", "").split(":") if t and not t.startswith("glibc.malloc.hugetlb")]
    return env | ({"GLIBC_TUNABLES": ":".join(tunables)} if tunables else {})


def run_once(train_args: list[str], env: dict, out: Path) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(
        [JOBI_TF, "train", *train_args, "--out", str(out)], env=env, capture_output=True, text=True, check=False
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        sys.exit(f"jobi-tf train failed ({done.returncode}): {done.stderr.strip().splitlines()[-1:]}")
    metrics = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    return {
        "wall_s": round(wall, 2),
        "user_s": round(after.ru_utime - before.ru_utime, 2),
        "system_s": round(after.ru_stime - before.ru_stime, 2),
        "peak_rss_gib_max_child": round(after.ru_maxrss / 2**20, 2),
        "test_mrr": round(metrics["test"]["mrr"], 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("train_args", nargs="*", help="after --: the jobi-tf train flags (--out is set here)")
    args = parser.parse_args()
    sides = {"defaults": {}, "tensorflow_default_4k_pages": OPT_OUT}
    runs: dict[str, list[dict]] = {name: [] for name in sides}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            order = list(sides) if r % 2 == 0 else list(sides)[::-1]
            for name in order:
                env = clean_environment() | sides[name]
                runs[name].append(run_once(args.train_args, env, Path(tmp) / f"{name}-{r}"))
                print(f"round {r + 1} {name}: {runs[name][-1]}", file=sys.stderr, flush=True)
    pairs = zip(runs["defaults"], runs["tensorflow_default_4k_pages"], strict=True)
    ratios = [b["wall_s"] / a["wall_s"] for a, b in pairs]
    emit(
        {
            "bench": "allocator_ab",
            "metric": "wall seconds of `jobi-tf train ARGS`; "
            "ratio = TensorFlow's allocator with 4 KiB pages / jobi-tf's defaults",
            "train_args": args.train_args,
            "opt_out_env": OPT_OUT,
            "runs": runs,
            "wall_ratio": {"per_round": [round(x, 3) for x in ratios], "median": round(statistics.median(ratios), 3)},
            "rounds": args.rounds,
            "affinity": sorted(os.sched_getaffinity(0)),
            "machine": machine(),
            "command": " ".join(["python", *sys.argv]),
        }
    )


if __name__ == "__main__":
    main()
