"""One finished run on a replicated graph, as a probe's raw line: its validations inside and at
the end of each epoch (with their cost), the test metrics, and the test split by answer (a hub
or a copied entity).

Why a script of its own: a probe of a training setting at 1.85M entities is a run of
``jobi-tf train`` (resumable, in the background); what the docs need from it is what the run
folder already holds plus the answer split, which `accuracy_per_hour.answer_parts` computes
from the run's best weights (one filtered test, float32).

Run:  python bench/probe_summary.py --run runs/probes/NAME --command "jobi-tf train ..."
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import emit, peak_rss_gib, provenance, versions  # noqa: E402, I001
from accuracy_per_hour import headline, replicated_hubs, run_answer_parts  # noqa: E402

from jobi_tf.config import RunConfig  # noqa: E402
from jobi_tf.datasets.loading import load_index  # noqa: E402

#: What each validation entry of the run's history keeps here.
KEPT = ("epoch", "step", "mrr", "hits@1", "hits@10", "valid_seconds", "epoch_seconds", "positives_per_second_median")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", required=True, type=Path, help="a finished run folder (metrics.json)")
    parser.add_argument("--command", required=True, help="the jobi-tf train command that made it, as run")
    args = parser.parse_args()

    metrics = json.loads((args.run / "metrics.json").read_text(encoding="utf-8"))
    cfg = RunConfig.from_dict(json.loads((args.run / "config.json").read_text(encoding="utf-8")))
    entities, _, index = load_index(cfg.data, seed=cfg.seed)
    hub = replicated_hubs(cfg.data.data_dir, entities)
    record = {
        "bench": "probe_summary",
        "metric": "filtered test MRR, whole and by answer, of the run's best weights",
        "run": str(args.run),
        "training_command": args.command,
        "config": json.loads((args.run / "config.json").read_text(encoding="utf-8")),
        "test": headline(metrics["test"]),
        "best_valid_sample": headline(metrics["valid"]),
        "best_epoch": metrics["best_epoch"],
        "best_step": metrics.get("best_step"),
        "train_seconds": metrics["train_seconds"],
        "validations": [{k: h[k] for k in KEPT if k in h} for h in metrics["history"]],
    }
    if hub is not None:
        record["test"]["parts"] = run_answer_parts(args.run, cfg, index, hub)
    record.update(peak_rss_gib=round(peak_rss_gib(), 2), **provenance(__file__), versions=versions())
    emit(record)


if __name__ == "__main__":
    main()
