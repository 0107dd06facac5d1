"""A run that has not started to learn says so, in one line and in ``metrics.json``.

Why: a 1-vs-all run on a sparse graph of 78,339 entities ended its first epoch at a triple
loss of 22.538, which is ``2 ln N``: the softmax was still uniform, validation MRR 0.0001, and
nothing told the user (the 19 minutes of that epoch were lost, and the next ones would have
been too). Two signs, each cheap, are read:

* the validation MRR is no better than a random ranking's (`chance_bound`): ``H_N / N``
  (`chance_mrr`, the expected reciprocal rank of an answer placed at random among ``N``
  entities, before filtering, which only raises it) plus two standard errors of a random
  ranking's MRR over the queries asked, so that a small sample's luck is not taken for
  learning. This holds for every regime, the sampled ones included;
* the training loss is at the objective's uniform value: the loss when every candidate
  scores the same (`jobi_tf.contracts.objectives.Objective.uniform_loss`; ``2 ln N`` for the full
  softmax, whose ``triple_loss`` sums a triple's tail and head softmaxes). The loss compared
  is ``triple_loss``, the triple head's own: the regularizer's penalty, the pair loss and
  relation prediction are logged apart and left out. It counts from `UNIFORM_SHARE` of the
  uniform value up (within 1% below it, or anywhere above).

At an epoch's end either sign is a stall. It was measured on the configuration the presets
name as stalling (WN18RR, ``--preset kbc-fast`` with ``--relation-penalty 1``): its first epoch
ended at a triple loss of 21.233 against ``2 ln N`` = 21.240, and warned, although its
validation MRR, 0.078, was far above a random ranking's 0.0003 (tiny differences between near-
equal scores still rank); the same preset with the penalty it sets learns (loss 8.3 after two
epochs, MRR 0.44). Early in the first epoch (`FirstCheck`) only the MRR is a sign, for the
loss of a learning run is still at the uniform value there: FB15k-237 with
``--preset kbc-fast`` was within 0.2% of ``2 ln N`` after 60 steps (19.146 against 19.169)
while the MRR of 500 validation triples was 0.0169, 24 times a random ranking's; its first
epoch ended at a loss of 13.04 and a validation MRR of 0.29. So the early check catches a
run whose ranking has not moved (the user's: MRR 0.0001), not one whose ranking moved a little
while its softmax stays flat (the WN18RR one above: MRR 0.030 after 50 steps); that one is told
at its epoch's end. Where the uniform value is not defined (sampled softmax and BCE, k-vs-all, a
full softmax with ``slot_weight``: it depends on the data or on the common score there, and a
stalled k-vs-all run sits at ``N ln 2`` where a learning one starts too) only the MRR is read.

`StallCheck` applies the rule at every epoch's end (called by
`jobi_tf.training.callbacks.EvaluationCallback` before it writes the checkpoint, so a resumed run keeps
the warnings); `FirstCheck` applies it once, early in the first epoch
(``--first-check-steps``), on a fixed sample of validation triples. A warning is one logged
line and an entry of ``LoopState.warnings``, which ``metrics.json`` lists as ``warnings``.

Not read: the slot-popularity floor (bench/popularity_ranking.py). A model early in training
ranks mostly by popularity, so sitting at that floor after one epoch is no stall, and the
floor is a per-query loop over the validation split, not a cheap vectorized check.
"""

from __future__ import annotations

import logging
import math
import sys
from typing import TYPE_CHECKING

import keras
import numpy as np

from jobi_tf.config import TrainConfig
from jobi_tf.evaluation.ranking import FilteredEvaluator, rank_metrics
from jobi_tf.models.slot_prior import untrained_loss
from jobi_tf.runtime import plugins

if TYPE_CHECKING:
    from jobi_tf.training.callbacks import LoopState, StopGuard

__all__ = [
    "chance_mrr",
    "chance_bound",
    "StallCheck",
    "FirstCheck",
    "UNIFORM_SHARE",
    "MRR_MIN_STEPS",
    "FIRST_CHECK_TRIPLES",
]

logger = logging.getLogger(__name__)

#: A loss from this share of the uniform value up counts as the uniform value ("within 1%").
UNIFORM_SHARE = 0.99
#: At an epoch's end the MRR sign is read only from this many trained steps on: a run that starts
#: slowly is no stall (the built-in synthetic graph's quickstart, 36 steps an epoch at batch
#: 1000, was still at a random ranking's MRR after its first epoch and learned from the next).
#: The loss sign needs no such wait: a softmax still uniform after a whole epoch is a stall.
MRR_MIN_STEPS = 200
#: Validation triples `FirstCheck` ranks at most (a fixed sample; both directions are asked).
FIRST_CHECK_TRIPLES = 500
#: Seed of that sample: the same triples for every run of a graph.
FIRST_CHECK_SEED = 0


def chance_mrr(num_entities: int) -> float:
    """``H_N / N``: the expected reciprocal rank of an answer ranked at random among ``N``."""
    n = int(num_entities)
    if n < 1000:
        return math.fsum(1.0 / k for k in range(1, n + 1)) / n
    harmonic = math.log(n) + 0.5772156649015329 + 1.0 / (2 * n) - 1.0 / (12 * n * n)  # error below 1e-13
    return harmonic / n


def chance_bound(num_entities: int, queries: int) -> float:
    """`chance_mrr` plus two standard errors of a random ranking's MRR over ``queries`` queries.

    Why: one answer a random ranking puts at rank 1 among 78,339 entities adds 0.001 to the
    MRR of 1,000 queries, seven times the mean; the bound keeps such luck below it.
    """
    n = int(num_entities)
    if n < 1000:
        second = math.fsum(1.0 / (k * k) for k in range(1, n + 1)) / n
    else:
        second = (math.pi**2 / 6 - 1.0 / n + 1.0 / (2 * n * n)) / n  # sum of 1/k^2, error below 1e-9
    mean = chance_mrr(n)
    return mean + 2.0 * math.sqrt(max(second - mean * mean, 0.0) / max(int(queries), 1))


class StallCheck:
    """The stall rule (module docstring): which sign a point in training shows, and the warning.

    Args:
        train: the run's training settings (the suggestions name only flags that would change something).
        num_entities: ``N``.
        uniform_loss: the triple objective's loss when the tables add nothing: at a uniform
            softmax, or with a slot prior that prior's own loss (None: not defined).
        steps: batches per epoch (named in the likely cause).
        state: where warnings are recorded (``LoopState.warnings``).
        valid_queries: queries of a validation at an epoch's end (both directions of each triple).
    """

    def __init__(
        self,
        train: TrainConfig,
        num_entities: int,
        uniform_loss: float | None,
        steps: int,
        state: LoopState,
        valid_queries: int = 1,
        prior: bool = False,
    ) -> None:
        self.train, self.num_entities, self.uniform_loss = train, num_entities, uniform_loss
        self.prior = prior  # `uniform_loss` is the slot prior's own loss (`for_model`)
        self.steps, self.state, self.valid_queries = steps, state, valid_queries
        self.chance = chance_mrr(num_entities)

    @classmethod
    def for_model(
        cls, model, train: TrainConfig, evaluator: FilteredEvaluator, steps: int, state: LoopState
    ) -> StallCheck:
        """The check of ``model``'s triple objective (any model without one: MRR only)."""
        index = evaluator.index
        objective = getattr(model, "objective", None)
        uniform = objective.uniform_loss(index.num_entities) if objective is not None else None
        prior = uniform is not None and getattr(getattr(model, "prior", None), "in_loss", False)
        if prior:  # the untrained model ranks by the counts: its loss is the prior's, not 2 ln N
            uniform = untrained_loss(model.slot_log_counts.numpy(), index.train, model.slot_prior)
        return cls(train, index.num_entities, uniform, steps, state, valid_queries=2 * len(index.valid), prior=prior)

    def at_uniform(self, loss: float | None) -> bool:
        return self.uniform_loss is not None and loss is not None and loss >= UNIFORM_SHARE * self.uniform_loss

    def epoch_end(self, epoch: int, logs: dict) -> dict | None:
        """`check` of an epoch's logs (``triple_loss``, and ``val_mrr`` when it was validated)."""
        loss, mrr = logs.get("triple_loss"), logs.get("val_mrr")
        loss, mrr = (None if v is None else float(v) for v in (loss, mrr))
        if epoch * self.steps < MRR_MIN_STEPS:
            mrr = None
        return self.check(epoch, loss, mrr, self.valid_queries)

    def check(
        self, epoch: int, loss: float | None, mrr: float | None, queries: int = 0, step: int | None = None
    ) -> dict | None:
        """Warn (one line) and record if ``loss`` or ``mrr`` shows a stall; the record, or None.

        ``epoch`` counts from 1; ``step`` is the step of that epoch for a check inside it
        (None: at its end). ``loss`` is the triple loss (None: not known), ``mrr`` the
        validation MRR over ``queries`` queries (None: no validation here).
        """
        bound = chance_bound(self.num_entities, queries)
        flat, chance = self.at_uniform(loss), mrr is not None and mrr <= bound
        where = f"epoch {epoch}" + (f", step {step}," if step is not None else "")
        if not (flat or chance):
            return None
        signs = []
        if flat:
            side = "above" if loss > (2 - UNIFORM_SHARE) * self.uniform_loss else "at"
            if self.prior:
                signs.append(
                    f"{side} the slot prior's own loss (triple loss {loss:.3f} vs {self.uniform_loss:.3f}: "
                    "the tables add nothing to the counts yet)"
                )
            else:
                signs.append(
                    f"{side} a uniform softmax (triple loss {loss:.3f} vs {self.uniform_loss:.3f} = 2*ln(N), "
                    f"N = {self.num_entities:,} entities)"
                )
        if chance:
            signs.append(
                f"at validation MRR {mrr:.4f}, no better than a random ranking (MRR {self.chance:.4f}, "
                f"up to {bound:.4f} on {queries:,} queries)"
            )
        message = (
            f"{where} {'ended' if step is None else 'is'} {' and '.join(signs)}: the model has not started "
            f"to learn; likely cause: {self._cause()} for this graph's {self.steps:,} steps per epoch; "
            f"try {self._remedies()}"
        )
        logger.warning("%s", message)
        record = {
            "epoch": epoch,
            **({"step": step} if step is not None else {}),
            "kind": "stall",
            **({"triple_loss": float(loss), "uniform_loss": self.uniform_loss} if flat else {}),
            **({"val_mrr": float(mrr), "chance_mrr": self.chance, "chance_bound": bound} if chance else {}),
            "message": message,
        }
        if self.state.warnings is None:
            self.state.warnings = []
        self.state.warnings.append(record)
        return record

    def _damped_adagrad(self) -> bool:
        """The run's optimizer has accumulators (it takes ``initial_accumulator_value``) started above 0."""
        train = self.train
        if train.optimizer not in plugins.names("optimizer"):  # ``auto``: Adam, which has none
            return False
        options = getattr(plugins.load("optimizer", train.optimizer), "options", ())
        return "initial_accumulator_value" in options and train.initial_accumulator_value > 0

    def _cause(self) -> str:
        # Measured (docs/studies/adagrad-start.md): accumulators started above 0 damp every
        # first step whose gradient is below about their square root. A 1-vs-all gradient on an
        # entity row starts near 1e-6 (against 1e-5 from 1e-10), while N3's pull on the relation
        # rows is larger; from 0 the thinned FB15k-237's first epoch ended above the count floor.
        if self._damped_adagrad():
            start = self.train.initial_accumulator_value
            return f"Adagrad's first steps, damped (its accumulators start at {start:g}), too slow"
        return "a regularizer (N3 on the relation rows above all) too strong"

    def _remedies(self) -> str:
        """What to try, naming only the flags that would change something in this run."""
        train = self.train
        tries = []
        if self._damped_adagrad():
            tries.append("--initial-accumulator-value 0 (undamped first steps)")
        # Measured (docs/studies/one-vs-all-stall.md): N3 on the few relation rows every batch
        # hits pulls them to zero faster than training pushes them out; a small relation
        # penalty, no regularizer, a higher lr or more steps each ended the stall on both graphs
        # there, larger initial rows (row-glorot) on one of them only.
        if train.regularization > 0 and train.relation_penalty > 0.02:
            tries.append("--relation-penalty 0.02 (N3 on the relation rows)")
        if train.regularization > 0:
            tries.append("--regularization 0")
        tries.append("a higher --lr or a smaller --batch-size (more steps)")
        if train.loss == "full-softmax" and not train.slot_prior:
            # Measured (docs/studies/slot-prior.md): the run then starts at what counting slot
            # frequencies ranks, and its first epoch ends above that floor on the thinned graphs.
            tries.append("--slot-prior 1 (start from the slot counts)")
        if not train.first_check_steps:
            tries.append("--first-check-steps N to see this sooner")
        return ", ".join(tries[:-1]) + " or " + tries[-1] if len(tries) > 1 else tries[0]


class FirstCheck(keras.callbacks.Callback):
    """Once, ``at`` steps into the first epoch: rank a fixed sample of validation triples and
    apply `StallCheck` to their MRR; the triple loss of the steps since half-way is shown and
    recorded, not judged (module docstring: a learning run's loss is still at the uniform
    value this early).

    Why the loss since half-way and not Keras's running mean: that mean includes the first
    steps, which every run spends at the uniform value. Nothing is written or changed: the
    result goes to ``LoopState.first_check`` (``metrics.json``'s ``first_check``), and a
    stall to `StallCheck`'s warning; a run resumed past that step does not check again.
    Runs after `jobi_tf.training.callbacks.StopGuard` in the callback list (it reads its position).

    Args:
        at: the step of the first epoch after which to check.
        evaluator: the run's evaluator (its graph, filter and tie rule).
        stalls: the run's `StallCheck`.
        guard: the run's `StopGuard`.
        announce: print the result (one line to stderr) when it shows no stall.
    """

    def __init__(
        self, at: int, evaluator: FilteredEvaluator, stalls: StallCheck, guard: StopGuard, announce: bool = True
    ) -> None:
        super().__init__()
        self.at, self.evaluator, self.stalls, self.guard, self.announce = at, evaluator, stalls, guard, announce
        self._start = guard.step
        self._marks: list[tuple[int, float]] = []  # (steps since this fit's epoch began, running mean)

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        self._start = self.guard.step  # runs after the guard's own on_epoch_begin
        self._marks = [(0, 0.0)]

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        guard = self.guard
        if guard.epoch != 0 or self._start >= self.at:
            return
        loss = (logs or {}).get("triple_loss")
        if loss is not None:
            self._marks.append((guard.step - self._start, float(loss)))
        if guard.step < self.at or guard.step >= guard.steps or guard.cut_short:
            return  # not yet; or the epoch's end (its own check) or a stop
        self._start = self.at  # once
        self.check(guard.step)

    def recent_loss(self) -> float | None:
        """Mean triple loss of the steps from half-way to now, from the running means."""
        if len(self._marks) < 2:
            return None
        n, mean_n = self._marks[-1]
        h, mean_h = max((m for m in self._marks if m[0] <= n // 2), key=lambda m: m[0])
        return (mean_n * n - mean_h * h) / (n - h)

    def sample(self) -> np.ndarray:
        valid = self.evaluator.index.valid
        rng = np.random.default_rng(FIRST_CHECK_SEED)
        rows = rng.choice(len(valid), size=min(FIRST_CHECK_TRIPLES, len(valid)), replace=False)
        return valid[np.sort(rows)]

    def check(self, step: int) -> dict:
        triples = self.sample()
        ranks = self.evaluator.ranks(self.model, triples)
        mrr = rank_metrics(ranks.get(self.evaluator.cfg.rank_type))["mrr"]
        loss = self.recent_loss()
        queries = len(ranks.get(self.evaluator.cfg.rank_type))
        bound = chance_bound(self.stalls.num_entities, queries)
        result = {"epoch": 1, "step": step, "triples": len(triples), "mrr": mrr, "chance_mrr": self.stalls.chance}
        result["chance_bound"] = bound
        if loss is not None:
            result["triple_loss"] = loss
        if self.stalls.uniform_loss is not None:
            result["uniform_loss"] = self.stalls.uniform_loss
        self.stalls.state.first_check = result
        if self.stalls.check(1, None, mrr, queries, step=step) is None:
            shown = f"; triple loss {loss:.3f}" if loss is not None else ""
            if loss is not None and self.stalls.uniform_loss is not None:
                untrained = "the slot prior's alone" if self.stalls.prior else "a uniform softmax's"
                shown += f" ({untrained}: {self.stalls.uniform_loss:.3f})"
            line = (
                f"epoch 1, step {step}: validation MRR {mrr:.4f} on a sample of {len(triples)} triples, above a "
                f"random ranking's (MRR {self.stalls.chance:.4f}, up to {bound:.4f}){shown}: the ranking has moved "
                "(the epoch's end checks the loss)"
            )
            logger.info("%s", line)
            if self.announce:
                print(line, file=sys.stderr)
        return result
