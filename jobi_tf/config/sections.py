"""The sections of a run's config, one frozen dataclass per stage: data, sampler, model,
training, evaluation (`jobi_tf.config.RunConfig` composes them; the sampler's lives in
`jobi_tf.config.sampler`, evaluation's in `jobi_tf.config.evaluation`, where it runs in
`jobi_tf.config.distribution`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from jobi_tf.config.evaluation import EvalConfig
from jobi_tf.config.fields import (
    AT_LEAST_0,
    AT_LEAST_1,
    INITS,
    LAZY_MIN_ROWS,
    LOSSES,
    MATMUL_DTYPE_CHOICES,
    MODELS,
    MONITORS,
    NOT_NEGATIVE,
    OPTIMIZERS,
    POSITIVE,
    REGULARIZERS,
    SHARE,
    Bounds,
    _choice,
    check_bounds,
    setting,
)
from jobi_tf.config.sampler import AUTO_BIASED_CHUNK, SamplerConfig
from jobi_tf.runtime import plugins
from jobi_tf.runtime.errors import ConfigError
from jobi_tf.runtime.types import BENCHMARK_NAMES, DATASET_NAMES, benchmark_key

__all__ = ["DataConfig", "SamplerConfig", "ModelConfig", "TrainConfig", "EvalConfig", "AUTO_BIASED_CHUNK"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class DataConfig:
    """Where triples come from: a named dataset, a folder, or the synthetic generator.

    Attributes:
        dataset: a registered name (``fb15k-237``, ``wn18rr``, ..., ``synthetic``), or None:
            the folder ``data_dir`` when it is given, else ``synthetic``.
        data_dir: a folder with ``train.txt``, ``valid.txt``, ``test.txt``; with a named
            benchmark it is used as the offline manual copy.
        synthetic_*: size of the synthetic typed KG.
    """

    dataset: str | None = setting(
        None,
        "fb15k-237, fb15k, wn18rr, yago3-10, kinship, umls, nations, or synthetic "
        "(the default when --data-dir is not given either).",
        metavar="NAME",
    )
    data_dir: str | None = setting(
        None, "Folder with train.txt, valid.txt, test.txt; with --dataset, its offline local copy.", path=True
    )
    synthetic_entities: int = setting(2000, "Entities of the synthetic graph.", bounds=Bounds(integer=True, low=10))
    synthetic_relations: int = setting(24, "Relations of the synthetic graph.", bounds=AT_LEAST_1)
    synthetic_triples: int = setting(
        40000, "Triples of the synthetic graph (all splits).", bounds=Bounds(integer=True, low=100)
    )
    synthetic_types: int = setting(6, "Entity types of the synthetic graph.", bounds=AT_LEAST_1)

    def __post_init__(self) -> None:
        check_bounds(self)
        # Neither given: the built-in synthetic graph. A folder alone is that folder (it used
        # to fall back to the synthetic graph silently).
        if self.dataset is None and self.data_dir is None:
            object.__setattr__(self, "dataset", "synthetic")
        # A name no dataset has is refused here, naming the flag, before TensorFlow loads.
        if self.dataset not in (None, "synthetic") and benchmark_key(self.dataset) not in BENCHMARK_NAMES:
            raise ConfigError("dataset", f"unknown dataset {self.dataset!r}; known: {', '.join(DATASET_NAMES)}")
        if self.dataset == "synthetic" and self.data_dir is not None:
            raise ConfigError("data_dir", f"has no meaning with the synthetic dataset. Received: {self.data_dir!r}")

    @property
    def name(self) -> str:
        """The dataset's name, or its folder's: what runs, grids and presets call the data."""
        return self.dataset or Path(self.data_dir).name


@dataclasses.dataclass(frozen=True, kw_only=True)
class ModelConfig:
    """The scorer and the JoBi heads.

    Attributes:
        model: ``distmult``, ``complex`` or ``simple``.
        dim: components per part (ComplEx 200 = 200 real + 200 imaginary).
        joint: add the pair head (JoBi); False is the plain baseline.
        init: ``table-glorot`` draws each table from Glorot-normal over the whole table
            (std ``sqrt(2 / (rows + width))``, as the paper's code); ``row-glorot`` uses
            ``N(0, 2 / width)`` per component (PyKEEN's ``xavier_normal``), much larger
            for big entity tables.
        reciprocal: give each relation an inverse (a second row in every relation table)
            and answer head queries ``(?, r, t)`` as tail queries ``(t, r⁻¹, ?)``, as
            Lacroix et al. (2018) and LibKGE's tuned models do; needs one corrupted side
            per positive (``corrupt_side="per-positive"``) or the full softmax.
    """

    model: str = setting("complex", plugins.about("scorer"), choices=MODELS)
    dim: int = setting(200, "Components per part (ComplEx 200 = 200 real + 200 imaginary).", bounds=AT_LEAST_1)
    joint: bool = setting(False, "Add JoBi's pair head.")
    init: str = setting(
        "table-glorot",
        "Embedding init: Glorot-normal over each table (the paper's code) or N(0, 2/width) per row (PyKEEN's).",
        choices=INITS,
    )
    reciprocal: bool = setting(
        False, "Give each relation an inverse and rank heads of (?, r, t) as tails of (t, r^-1, ?)."
    )

    def __post_init__(self) -> None:
        check_bounds(self)
        _choice("model", self.model, MODELS)
        _choice("init", self.init, INITS)


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """Loss, optimiser and schedule.

    Attributes:
        loss: the triple head's loss, a module of `jobi_tf.losses` (``sampled-softmax``, the
            paper's; ``full-softmax``, 1-vs-all; ``k-vs-all``; ...); it also picks the
            training regime (`jobi_tf.regimes`).
        label_smoothing: ε of the ``full-softmax`` / ``k-vs-all`` targets: ``1 - ε`` on the true entity, ε
            spread over all (0 = none).
        slot_weight: with ``full-softmax``, the entities seen in the asked slot count
            ``1 + slot_weight`` times in the training softmax (0 = off).
        slot_prior: ``w > 0`` adds ``w ·`` the log counts of each entity in the relation's slots
            in training to every score the model ranks or serves (`jobi_tf.models.slot_prior`).
            ``full-softmax``: in training too, so an untrained model ranks as counting does and
            the tables learn what the counts miss. Sampled losses: at ranking (validation
            included) and serving only, from counts stored sparse, so at any graph size (0 = off).
        slot_prior_in_loss: with ``sampled-softmax`` and ``slot_prior``: the counts join the
            training logits too (each candidate's offset over the positive's, drawn with the
            batch), so the tables learn the residual of the counts instead of relearning them
            (logit adjustment; docs/replicated-graph.md measures it at 1.85M entities).
        choose_slot_prior: with a sampled loss and ``slot_prior``: after training, the weight of the
            counts is chosen among `jobi_tf.training.prior_weight.WEIGHTS` by the best weights'
            validation MRR (the loss left the counts out, so any weight fits the tables); the
            test, ``load_run`` and the export use it. Why: the best weight fell as the tables
            learned more (0.25 on FB15k-237, 0.5 at 1.85M entities; docs/replicated-graph.md).
        neighbourhood: sampled: ``v > 0`` adds ``v · log(1 + 10 · RA(h, t))`` to every score ranked
            (`jobi_tf.models.neighbourhood`); ``choose_slot_prior`` chooses 0 or ``v``. 0 = off.
        relation_prediction: weight of the auxiliary relation-prediction loss, a softmax over
            the relations for ``(h, ?, t)`` (Chen et al., 2021; 0 = off).
        alpha: weight of the pair loss (only with ``joint``).
        pair_every: with ``joint``, the pair head trains on every n-th positive of a sampled batch
            (1: all, the paper's objective); about 1/n of its cost (docs/performance.md).
        regularization: weight of the ``regularizer`` penalty (0 = none, the paper's setting;
            ``l2`` 0.01 is PyKEEN's ComplEx default).
        regularizer: a module of `jobi_tf.regularizers` (``l2``: normalised L2 norm of every
            row a batch uses, PyKEEN's; ``n3``: cubed moduli of the positive's head, relation
            and tail rows, Lacroix et al. 2018; ...).
        relation_penalty: with ``n3``, the factor on the relation rows' terms (1 = as entity rows).
            Why: on WN18RR the full penalty drives every score to zero (training stalls), while 0
            is dodged by growing the relation rows; a small factor (0.02, `kbc-rp`'s) works.
        lr: learning rate.
        initial_accumulator_value: with ``adagrad`` and ``row-adagrad``, the accumulators' start
            (`jobi_tf.optimizers.LazyAdagrad`). Why it matters: a 1-vs-all step's gradients
            shrink with the batch, the rows and the number of entities; below about
            ``sqrt(value)`` an update is damped, and on a sparse graph the first epoch then ends
            at a uniform softmax (docs/studies/adagrad-start.md). 0 (kbc's) is scale-free.
        optimizer: ``adam`` (exact dense Adam, the paper's: `FusedAdam`), ``lazy-adam`` (updates only
            the rows a batch uses), ``adagrad`` (sparse-aware, same updates as dense), ``row-adagrad``
            (one accumulator per entity row: `jobi_tf.optimizers.RowAdagrad`), or ``auto``: dense Adam
            below `LAZY_MIN_ROWS` entities, lazy above; a run records the optimizer ``auto`` chose.
        epochs: upper bound; early stopping usually ends sooner.
        eval_every_steps: also validate every this many steps inside an epoch (0: off).
        eval_every: validate (and checkpoint) every this many epochs (default 1, with ``patience``
            10 and ``monitor`` ``mrr``: the recommended recipe's; the paper's 5, 3 and ``hits@10``
            are ``--preset paper``'s).
        checkpoint_steps: also checkpoint every this many steps inside an epoch (0: never).
        first_check_steps: after this many steps of the first epoch, validate a fixed sample of
            validation triples and warn if the model has not started to learn
            (`jobi_tf.training.stalls.FirstCheck`; 0: never). Why: on a large graph the first epoch's
            end, and its validation, may be an hour away.
        patience: stop after this many validations without a better ``monitor``.
        monitor: the validation metric that picks the best weights and stops the run: ``mrr`` (the
            default), ``hits@10`` (the paper's) or ``hits@1``/``hits@3`` (on FB15k-237 Hits@10 creeps up
            for longer).
        jit_compile: compile the train step with XLA (explicit, never Keras's "auto").
        steps_per_execution: steps per call of the compiled step (Keras's own): a call's round trip
            was a fifth of a sampled step (docs/performance.md). Each epoch is its own ``fit``.
        matmul_dtype: dtype of the products that score every entity in training (``full-softmax``,
            ``k-vs-all``; ``bfloat16`` for those products only: docs/performance.md); ``auto``
            picks ``bfloat16`` when the step runs without XLA on a CPU with bfloat16 dot products
            (``avx512_bf16`` or ``amx_bf16``), else ``float32``, when the run starts (recorded).
        init_from: a run folder whose weights (and optimizer state) start this run, matched by
            entity and relation name (`jobi_tf.growth.warm_start`); None: fresh tables.
        replay: with ``init_from``, the share of the source run's training triples each epoch
            visits again (drawn anew every epoch) beside all the new ones; 1 (the default) =
            all of them: on FB15k-237 any lower share cost old facts more than it saved.
    """

    loss: str = setting("sampled-softmax", plugins.about("loss"), choices=LOSSES)
    label_smoothing: float = setting(
        0.0,
        "With --loss full-softmax or k-vs-all: put 1-EPS on the true entities and spread EPS over all of them.",
        metavar="EPS",
    )
    slot_weight: float = setting(
        0.0,
        "With --loss full-softmax: entities seen in the asked slot of the relation count 1+W times in the training "
        "softmax (biased negatives' counterpart for 1-vs-all; 0 = off).",
        metavar="W",
        bounds=NOT_NEGATIVE,
    )
    slot_prior: float = setting(
        0.0,
        "Add W x log(1 + how often the entity fills the relation's slot in training) to every score the model "
        "ranks or serves: with --loss full-softmax in training too (it starts from what counting ranks); with a "
        "sampled loss at validation, test and serving only, at any graph size (0 = off).",
        metavar="W",
        bounds=NOT_NEGATIVE,  # the prior's weight: `slot_prior_weight`, the same rule
    )
    slot_prior_in_loss: bool = setting(
        False,
        "With --loss sampled-softmax and --slot-prior W: add the counts to the training logits too, so the tables "
        "learn what the counts miss rather than who fills a slot often.",
    )
    choose_slot_prior: bool = setting(
        False,
        "With a sampled loss and --slot-prior: after training, choose the counts' weight among 0, 0.25, 0.5, 1 "
        "and 2 by the validation MRR; the test and the export use it.",
    )
    neighbourhood: float = setting(
        0.0,
        "With a sampled loss: add V x log(1 + 10 x RA(h, t)) to every score ranked, RA being resource allocation "
        "over the undirected training graph; --choose-slot-prior then chooses 0 or V on validation; "
        "exports serve it (0 = off).",
        metavar="V",
        bounds=NOT_NEGATIVE,
    )
    relation_prediction: float = setting(
        0.0,
        "Weight of the auxiliary relation-prediction loss, a softmax over relations for (h, ?, t) "
        "(Chen et al., 2021; 0 = off).",
        metavar="W",
        bounds=NOT_NEGATIVE,
    )
    alpha: float = setting(0.5, "Weight of the pair loss.", bounds=NOT_NEGATIVE)
    pair_every: int = setting(
        1,
        "With --joint: train the pair head on every N-th positive of a batch (1 = all, the paper's).",
        metavar="N",
        bounds=AT_LEAST_1,
    )
    regularization: float = setting(
        0.0, "Weight of the --regularizer penalty (PyKEEN's ComplEx default: l2 0.01).", bounds=NOT_NEGATIVE
    )
    regularizer: str = setting("l2", plugins.about("regularizer"), choices=REGULARIZERS)
    relation_penalty: float = setting(
        1.0,
        "With --regularizer n3: factor on the relation rows' share of the penalty (1: as entity rows, "
        "Lacroix et al.; 0: entity rows only). WN18RR's relation rows shrink to zero under the full penalty; "
        "--preset kbc-rp uses 0.02 there.",
        metavar="F",
        bounds=NOT_NEGATIVE,
    )
    lr: float = setting(0.001, "Learning rate.", bounds=POSITIVE)
    initial_accumulator_value: float = setting(
        1e-10,
        "With --optimizer adagrad or row-adagrad: the accumulators' start (PyTorch's and kbc's: 0). Above 0, "
        "gradients below about its square root take smaller first steps, which stalls 1-vs-all on sparse graphs.",
        metavar="G0",
        bounds=NOT_NEGATIVE,
    )
    optimizer: str = setting(
        "auto",
        f"{plugins.about('optimizer')[:-1]}; auto: adam below {LAZY_MIN_ROWS:,} entities, lazy-adam from there on.",
        choices=OPTIMIZERS,
    )
    epochs: int = setting(200, "Maximum epochs.", bounds=AT_LEAST_1)
    eval_every: int = setting(1, "Validate every N epochs.", bounds=AT_LEAST_1)
    eval_every_steps: int = setting(
        0,
        "Also validate every N steps inside an epoch (0: off), with early stopping and best weights on these "
        "validations too; for large graphs, whose best model can come within the first epoch. Pair it with "
        "--valid-sample.",
        metavar="N",
        bounds=AT_LEAST_0,
    )
    checkpoint_steps: int = setting(
        0,
        "Also checkpoint every N steps inside an epoch (0: only at validations), so a crash loses at most N "
        "steps; for epochs that take hours.",
        metavar="N",
        bounds=AT_LEAST_0,
    )
    first_check_steps: int = setting(
        0,
        "After N steps of the first epoch, validate a fixed sample of up to 500 validation triples and warn if "
        "the model is still at chance (0: off); for large graphs, whose first epoch takes long.",
        metavar="N",
        bounds=AT_LEAST_0,
    )
    patience: int = setting(10, "Stop after this many validations without a better --monitor.", bounds=AT_LEAST_1)
    monitor: str = setting(
        "mrr", "Validation metric for early stopping and best weights (the paper's: hits@10).", choices=MONITORS
    )
    jit_compile: bool = setting(True, "Compile the train step with XLA.", flag="jit")
    steps_per_execution: int = setting(
        1, "Steps per compiled call (faster; progress moves N at once).", metavar="N", bounds=AT_LEAST_1
    )
    matmul_dtype: str = setting(
        "float32",
        "With --loss full-softmax or k-vs-all: dtype of the products that score every entity in training "
        "(bfloat16: faster with --no-jit on CPUs with AVX512-BF16, about 20x slower on CPUs without bfloat16 dot "
        "products; weights and evaluation stay float32). auto: bfloat16 with --no-jit on a CPU with avx512_bf16 "
        "or amx_bf16, else float32 (the run records the choice).",
        choices=MATMUL_DTYPE_CHOICES,
    )
    init_from: str | None = setting(
        None,
        "Start from this run's weights and optimizer state (matched by name; new entities and relations get "
        "fresh rows) and train on the triples it did not see, plus a --replay share of the ones it did.",
        metavar="RUN",
        path=True,
    )
    replay: float = setting(
        1.0,
        "With --init-from: share of the source run's training triples revisited each epoch (lower is faster "
        "but forgets old facts).",
        metavar="SHARE",
        bounds=SHARE,
    )

    def __post_init__(self) -> None:
        check_bounds(self)
        # Which loss, regularizer and regime read which field is checked by jobi_tf.regimes.checks.
        _choice("loss", self.loss, LOSSES)
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ConfigError("label_smoothing", f"must be in [0, 1). Received: {self.label_smoothing!r}")
        if self.slot_prior_in_loss and not self.slot_prior:
            raise ConfigError(
                "slot_prior_in_loss", "needs --slot-prior W > 0 (the weight the loss adds the counts with)"
            )
        if self.choose_slot_prior and not self.slot_prior:
            raise ConfigError("choose_slot_prior", "needs --slot-prior W > 0 (the weight validation ranks with)")
        _choice("matmul_dtype", self.matmul_dtype, MATMUL_DTYPE_CHOICES)
        _choice("regularizer", self.regularizer, REGULARIZERS)
        _choice("optimizer", self.optimizer, OPTIMIZERS)
        _choice("monitor", self.monitor, MONITORS)
        if self.init_from is not None and not str(self.init_from).strip():
            raise ConfigError("init_from", "must name a run folder. Received: ''")
