"""Type-inconsistent top-1 predictions of two finished runs, overall and by relation.

Run:  python bench/type_inconsistency.py runs/base runs/jobi [--top 8] [--min-queries 50]

Reads each run's ``metrics.json`` (test split): ``type_inconsistent`` is the share of
queries whose filtered top-1 entity never occurs in that slot of that relation in training
(`jobi_tf.evaluation.ranking`); the "true answers" column is the same share for the test answers
themselves, what a perfect model would score. Prints a Markdown table of the overall and
per-direction shares, then the relations where the second run's share is most below and most above the first's,
and one JSON line.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def _test(run: Path) -> dict:
    test = json.loads((run / "metrics.json").read_text())["test"]
    if "type_inconsistent" not in test:
        raise SystemExit(f"{run}/metrics.json: no type_inconsistent (rerun `jobi-tf evaluate {run}`)")
    return test


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a", type=Path)
    parser.add_argument("b", type=Path)
    parser.add_argument("--top", type=int, default=8)
    parser.add_argument("--min-queries", type=int, default=50, help="skip relations with fewer test queries")
    args = parser.parse_args()
    a, b = _test(args.a), _test(args.b)
    print(f"| part | {args.a.name} | {args.b.name} | true answers |\n|---|---:|---:|---:|")
    overall = {}
    for part in ("all", "head", "tail"):
        pa, pb = (a, b) if part == "all" else (a[part], b[part])
        answers = pa.get("type_inconsistent_answers", float("nan"))
        overall[part] = [pa["type_inconsistent"], pb["type_inconsistent"], answers]
        print(f"| {part} | {pa['type_inconsistent']:.3f} | {pb['type_inconsistent']:.3f} | {answers:.3f} |")
    rows = []
    for rel, ma in a["per_relation"].items():
        mb = b["per_relation"].get(rel)
        if mb is None or ma["count"] < args.min_queries:
            continue
        rows.append((ma["type_inconsistent"] - mb["type_inconsistent"], rel, ma, mb))
    rows.sort(key=lambda r: -r[0])
    na, nb = args.a.name, args.b.name
    top = {}
    for title, chosen in (("lower", rows[: args.top]), ("higher", rows[::-1][: args.top])):
        print(f"\n{nb} {title} than {na}:\n")
        print(f"| relation (both directions) | queries | TI {na} | TI {nb} | H@1 {na} | H@1 {nb} |")
        print("|---|---:|---:|---:|---:|---:|")
        top[title] = []
        for _, rel, ma, mb in chosen:
            print(
                f"| `{rel}` | {ma['count']} | {ma['type_inconsistent']:.3f} | {mb['type_inconsistent']:.3f} "
                f"| {ma['hits@1']:.3f} | {mb['hits@1']:.3f} |"
            )
            top[title].append(
                {"relation": rel, "queries": ma["count"], "a": ma["type_inconsistent"], "b": mb["type_inconsistent"]}
            )
    report = {"bench": "type_inconsistency", "a": str(args.a), "b": str(args.b), "overall": overall, "top": top}
    print(json.dumps(report))


if __name__ == "__main__":
    main()
