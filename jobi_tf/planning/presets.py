"""Named recipes: settings that one flag (``jobi-tf train --preset NAME``) or argument
(``jobi_tf.train(..., preset=NAME)``) applies at once.

Why: the strongest recipes here differ from the paper's defaults in eight or more settings
(loss, reciprocal relations, regularizer and its weight, optimizer, learning rate, batch,
schedule). A preset writes them down once, with where they come from and what they measured
on this machine, so a user runs them without copying a long command. Settings given
explicitly win over the preset's, and the preset's over the defaults; ``config.json`` records
the resolved values, as for any run. Published recipes are tuned per dataset (kbc trains
WN18RR with batch 100 and a stronger N3 than FB15k-237), so a preset may hold settings for
a named dataset that replace its general ones when that dataset is trained.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from jobi_tf.config import RunConfig, with_settings
from jobi_tf.runtime.errors import ConfigError

__all__ = ["Preset", "PRESETS", "PAPER_SETTINGS", "apply_preset", "preset_settings"]


@dataclasses.dataclass(frozen=True)
class Preset:
    """A recipe: config fields by name, and a one-line account of it (shown by ``--help``).

    ``for_dataset`` maps a dataset name (``wn18rr``) to the settings that replace the general
    ones when that dataset is trained.
    """

    settings: dict[str, Any]
    about: str
    for_dataset: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)

    def settings_for(self, dataset: str | None) -> dict[str, Any]:
        """The general settings, overridden by those of ``dataset`` (matched without case)."""
        return {**self.settings, **self.for_dataset.get((dataset or "").lower(), {})}


#: The paper's sampler and schedule (Balkir et al., 2019): the defaults until the recommended
#: sampled recipe (1000 x 100, shared negatives, validation MRR every epoch, patience 10)
#: replaced them. Every run before that change used these unless its flags said otherwise.
PAPER_SETTINGS: dict[str, Any] = {
    "batch_size": 500,
    "neg": 50,
    "shared_negatives": 0,
    "biased_chunk": 0,
    "eval_every": 5,
    "patience": 3,
    "monitor": "hits@10",
}

PRESETS: dict[str, Preset] = {
    "paper": Preset(
        PAPER_SETTINGS,
        "the paper's: sampled softmax, 500 x 50 per-triple negatives, Adam 0.001, dim 200, validation Hits@10 "
        "every 5 epochs, patience 3 (the defaults before the recommended recipe; add --joint --p 0.3 for JoBi).",
    ),
    "kbc": Preset(
        {
            # Read by no 1-vs-all step; kept at its old default so that the preset's config (and a
            # run of it from before the defaults changed, which it resumes) stays the same.
            "neg": 50,
            "loss": "full-softmax",
            "reciprocal": True,
            "regularizer": "n3",
            "regularization": 0.1,
            "optimizer": "adagrad",
            "lr": 0.1,
            "batch_size": 1000,
            "dim": 200,
            "epochs": 100,
            "eval_every": 2,
            "patience": 5,
            "monitor": "mrr",
        },
        "1-vs-all with reciprocal relations and N3, Adagrad 0.1, batch 1000, rank 200 (Lacroix et al., 2018); "
        "FB15k-237 test MRR 0.353 (docs/results.md); on WN18RR kbc's batch and N3: batch 50, N3 0.2 on "
        "entity rows only.",
        for_dataset={"wn18rr": {"batch_size": 50, "regularization": 0.2, "relation_penalty": 0.0}},
    ),
}
# Chen et al.'s settings in our loss's scale. kbc's code trains on the rows of a training set
# doubled by the reciprocal copies, so its batch of 1000 rows is 500 of our triples (each
# asks both of its queries), and its per-row mean halves every weight against our per-triple
# sum: N3 0.05 is our 0.1. Relation prediction asks both copies here too, so its weight is
# theirs (4 on FB15k-237, 0.05 on WN18RR). On WN18RR N3 weighs the relation rows at 0.02: its
# 11 relations' rows shrank to zero under the full penalty and training stalled, and with none
# the penalty is dodged by growing them (validation 0.467 after 12 epochs against 0.470 after 6
# at 0.02; docs/results.md).
PRESETS["kbc-rp"] = Preset(
    {
        **PRESETS["kbc"].settings,
        "dim": 1000,
        "batch_size": 500,
        "relation_prediction": 4.0,
        "jit_compile": False,  # TensorFlow's own matmuls beat XLA's CPU dot on this step (docs/performance.md)
    },
    "Chen et al.'s (2021) recipe: kbc's at rank 1000, batch 500 (kbc's 1000 rows), plus relation "
    "prediction, weight 4, without XLA; FB15k-237 test MRR 0.371 after 30 epochs, still rising (docs/results.md); "
    "on WN18RR their setting (batch 50, N3 0.2, relation prediction 0.05) with N3 at 0.02 of its weight on the "
    "relation rows (at full weight training stalled at a uniform softmax here).",
    for_dataset={
        "wn18rr": {"batch_size": 50, "regularization": 0.2, "relation_prediction": 0.05, "relation_penalty": 0.02}
    },
)

# The winner of a search (bench/grids/fb15k-237-rp-search.json: relation-prediction weight x N3
# weight, successive halving on validation MRR) at its own budget: rank 200, 8 epochs. Fast
# starters win such a search, so it is the quick model, not the best one (kbc-rp). Adagrad's
# accumulators start at 0, not 1e-10 as in the search: from 1e-10 the entity rows' first steps
# are damped to a few percent of lr, and a sparse graph's first epoch ended at a uniform softmax
# (FB15k-237 thinned to 13%: validation MRR 0.048; from 0: 0.163, above the count floor); on
# FB15k-237 from 0 is level in test MRR over 3 seeds (docs/studies/adagrad-start.md).
PRESETS["kbc-fast"] = Preset(
    {
        **PRESETS["kbc-rp"].settings,
        "dim": 200,
        "relation_prediction": 0.0,
        "regularization": 0.05,
        "epochs": 8,
        "initial_accumulator_value": 0.0,
    },
    "the winner of a search on FB15k-237 at its budget (rank 200, 8 epochs): kbc-rp's batch 500 and no XLA, "
    "N3 0.05, no relation prediction, Adagrad's accumulators from 0 (1e-10 on WN18RR); FB15k-237 test MRR 0.345 "
    "after 7 minutes of training with --matmul-dtype bfloat16 (README); searched on FB15k-237 only.",
    # The full penalty stalls on WN18RR; 0 as kbc (kbc-rp's 0.02 is not measured at this budget).
    # WN18RR keeps the damped start: from 0 its first epoch fell from 0.336 to 0.256 and its 8th
    # ended 0.0095 lower (docs/studies/adagrad-start.md). Not a patch against a stall: the general
    # settings learn on WN18RR from epoch 1, 0.008 lower at the end (3 seeds); a graph like it
    # (WN18RR thinned to 1.3 triples per entity) also did better from 1e-10, by 0.004.
    for_dataset={"wn18rr": {"relation_penalty": 0.0, "initial_accumulator_value": 1e-10}},
)


# Issue 69's sampled recipe for a graph of millions of entities, where 1-vs-all does not fit
# (`jobi-tf advise`): Adagrad 0.1 from 0 (kbc's optimizer; Adam at 0.001 overfit there after one
# or two epochs), DURA 0.05 (Zhang et al., 2020: it kept the runs learning and gave the copied
# entities' answers most), and the slot counts at W = 1 added to every ranked score (the sampled
# loss leaves them out; they rank the hubs as counting does, which sampled tables did not learn),
# their weight chosen on validation after training (`jobi_tf.training.prior_weight`).
# The sampler stays the recommended one (1000 x 100 shared). Measured at 1.85M entities, K = 8,
# FB15k-237 and WN18RR: docs/replicated-graph.md#large-graph-probes; grid:
# bench/grids/large-recipe-seeds.json. Add --joint --p 0.3 for JoBi.
PRESETS["large-graph"] = Preset(
    {
        "optimizer": "adagrad",
        "lr": 0.1,
        "initial_accumulator_value": 0.0,
        "regularizer": "dura",
        "regularization": 0.05,
        "slot_prior": 1.0,
        "choose_slot_prior": True,
    },
    "sampled softmax for graphs too large for 1-vs-all: Adagrad 0.1 from 0, DURA 0.05, the slot counts added to "
    "every ranked score (--slot-prior 1 while training, not in the loss; the weight then chosen on validation); "
    "at 1.85M entities JoBi on it passed the count's floor (docs/replicated-graph.md). Add --joint --p 0.3 for "
    "JoBi, and on such a graph --valid-sample 1000 --eval-every-steps N.",
)


def preset_settings(name: str, explicit: set[str] = frozenset(), dataset: str | None = None) -> dict[str, Any]:
    """The preset's settings for ``dataset`` by config field name, except those named in
    ``explicit`` (given by the user).

    The CLI merges them into its flags before building the config, so a setting that is only
    valid with the preset's (``--matmul-dtype bfloat16`` needs the preset's 1-vs-all loss) is
    checked against the preset's values, not the defaults'.
    """
    if name not in PRESETS:
        raise ConfigError("preset", f"must be one of {', '.join(PRESETS)}. Received: {name!r}")
    return {k: v for k, v in PRESETS[name].settings_for(dataset).items() if k not in explicit}


def apply_preset(base: RunConfig, name: str, explicit: set[str] = frozenset(), dataset: str | None = None) -> RunConfig:
    """``base`` with the preset's settings for ``dataset``, except those named in ``explicit``."""
    return with_settings(base, preset_settings(name, explicit, dataset))
