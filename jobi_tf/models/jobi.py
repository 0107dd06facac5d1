"""`JoBiModel`: one entity table shared by a triple head and an optional pair head.

The triple head (its own relation table) learns which triples are true; the pair head (a
second relation table, only with ``joint=True``) learns whether a triple's (head,
relation) and (relation, tail) pairs both occur in training. Only the triple head is used
for evaluation and export, so JoBi adds no parameters to the final model.

Each head's objective (`jobi_tf.contracts.objectives`) says which logits ``call`` returns and how
``compute_loss`` (Keras 3's own hook and signature) turns them into ``L_tri + alpha * L_bi``;
the regularizer's penalty goes through ``add_loss``. Keras's ``train_step`` is kept as it is.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from jobi_tf import losses, regularizers
from jobi_tf.config import MATMUL_DTYPES, ModelConfig, TrainConfig
from jobi_tf.contracts import features as F
from jobi_tf.contracts.objectives import SAMPLED, Objective, PairBCE, RelationPrediction, reads_of, replica_share
from jobi_tf.contracts.scored_batch import ScoredBatch
from jobi_tf.models.base import DistributedModel
from jobi_tf.models.scorers import Scorer, get_scorer
from jobi_tf.models.sharding import ShardedTable
from jobi_tf.models.slot_prior import add_slot_prior
from jobi_tf.models.tables import TableQueries, make_tables
from jobi_tf.regularizers import Regularizer

__all__ = ["JoBiModel"]

#: The model's settings that live in the training section (its objectives, penalty and prior).
FROM_TRAINING = (
    "alpha", "loss", "label_smoothing", "relation_prediction", "slot_weight", "matmul_dtype",
    "regularization", "regularizer", "relation_penalty", "pair_every", "slot_prior",
)  # fmt: skip


@keras.saving.register_keras_serializable(package="jobi_tf")
class JoBiModel(TableQueries, DistributedModel):
    """Bilinear KG embedding model with JoBi's pair head.

    Args:
        num_entities: rows of the shared entity table.
        num_relations: rows of each relation table.
        model: a scorer's name (``"complex"``, ``"distmult"``, ``"simple"``, ``"tucker"``: the
            modules of ``jobi_tf/models/scorers/``), or a `jobi_tf.models.Scorer` of
            your own (it may own weights; they train with the tables and are checkpointed).
        dim: components per part (ComplEx 200 = 200 real + 200 imaginary). Default 200.
        joint: add the pair head (JoBi). Default False (the baseline).
        alpha: weight of the pair loss. Default 0.5.
        pair_every: the pair head trains on every n-th positive of a sampled batch (1: all, the
            paper's; 5 costs about a fifth of the pair head's work). Default 1.
        regularization: weight of the ``regularizer`` penalty. Default 0 (the paper uses none).
        regularizer: a name of `jobi_tf.regularizers` (``"l2"``, PyKEEN's ComplEx default;
            ``"n3"``, Lacroix et al. 2018) or a `jobi_tf.regularizers.Regularizer` of your own
            (its config then holds ``regularizer=None``: pass it again to ``from_config``).
        relation_penalty: with ``"n3"``, the factor on the relation rows' terms (`jobi_tf.config.TrainConfig`).
        loss: the triple head's objective: a name of `jobi_tf.losses` (``"sampled-softmax"``,
            ``"full-softmax"``, ...) or an `jobi_tf.contracts.objectives.Objective` of your own (its
            config then holds ``loss=None``: pass it again to ``from_config``). The pair head
            trains `jobi_tf.contracts.objectives.PairBCE` over the same candidates.
        label_smoothing: ε of the targets of the losses that take it (``full-softmax``, ``k-vs-all``).
        slot_weight: ``full-softmax`` only: extra weight of the asked slot's entities (0 = off).
        relation_prediction: weight of the auxiliary `jobi_tf.contracts.objectives.RelationPrediction` loss.
        matmul_dtype: ``"float32"`` or ``"bfloat16"``: the dtype of the products that score every entity.
        slot_prior: w > 0 adds ``w ·`` the log counts of each entity in each relation's slots to
            every triple-head score it ranks (`jobi_tf.models.slot_prior`); counted by
            ``model.prior.fill``. 1-vs-all: in its loss too, the counts saved with the weights;
            sampled: not in the loss, the counts saved beside them. 0 (default): off.
        reciprocal: row ``r + num_relations`` of each relation table is ``r``'s inverse, and a
            head query ``(?, r, t)`` is scored as the tail query ``(t, r⁻¹, ?)`` (Lacroix et
            al., 2018); sampled softmax then needs ``positive_corrupt_tail``.
        table_shards: 0 (default): the tables are Keras weights. N > 0: each is a
            `jobi_tf.models.sharding.ShardedTable` (the entity table in N row blocks) on the parameter
            servers of the ``ParameterServerStrategy`` scope, trained by `jobi_tf.distributed.ps_training`;
            sampled softmax only. Not in the config: the weights load into an unsharded model.
        table_seed: the seed of the sharded tables' initial rows (`jobi_tf.models.sharding.glorot_blocks`).
        draw_tables: False starts the tables at zero, for weights loaded next (`jobi_tf.api.run.restore_model`):
            the pooled CPU allocator keeps a draw's temporaries, twice the table, held by a loaded run that predicts.

    Input: a feature dict from `jobi_tf.sampling.pipelines` with ``triples`` int32 ``[B, 3]`` and, for
    sampled softmax, ``candidates``, ``corrupt_tail``, optional ``shared_candidates`` and
    ``shared_corrupt_tail``, ``positive_corrupt_tail``, ``valid_negative``, ``pair_labels``.

    Output: a dict of logits: ``triple [B, 1 + K]`` (column 0 is the positive) and, with
    ``joint``, ``pair [B / pair_every, 1 + K]``; for full softmax ``triple_tail``/``triple_head``
    ``[B, num_entities]`` (and ``pair_tail``/``pair_head``).

    >>> m = JoBiModel(num_entities=10, num_relations=3, model="distmult", dim=4)
    >>> m.tail_queries(tf.constant([0]), tf.constant([1])).shape
    TensorShape([1, 4])
    """

    def __init__(
        self,
        num_entities: int,
        num_relations: int,
        model: str | Scorer = "complex",
        dim: int = 200,
        joint: bool = False,
        alpha: float = 0.5,
        loss: str | Objective = "sampled-softmax",
        regularization: float = 0.0,
        regularizer: str | Regularizer = "l2",
        relation_penalty: float = 1.0,
        init: str = "table-glorot",
        reciprocal: bool = False,
        label_smoothing: float = 0.0,
        relation_prediction: float = 0.0,
        slot_weight: float = 0.0,
        matmul_dtype: str = "float32",
        table_shards: int = 0,
        table_seed: int = 0,
        pair_every: int = 1,
        slot_prior: float = 0.0,
        draw_tables: bool = True,
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        _check_arguments(num_entities, num_relations, relation_prediction, matmul_dtype)
        self.num_entities, self.num_relations, self.dim = num_entities, num_relations, dim
        self.scorer = get_scorer(model, dim)
        self.model_name = self.scorer.kind  # None for a scorer of your own
        self.joint, self.alpha, self.init, self.reciprocal = joint, alpha, init, reciprocal
        self.label_smoothing, self.slot_weight = label_smoothing, slot_weight
        self.relation_prediction, self.matmul_dtype = relation_prediction, matmul_dtype
        self.objective = losses.get(loss, label_smoothing=label_smoothing, slot_weight=slot_weight)
        self.loss_kind = losses.name_of(self.objective)
        # The pair head scores the triple head's candidates (its regime's); PairBCE refuses an ``every`` it cannot thin.
        self.pair_every = pair_every
        self.pair_objective = PairBCE(regime=self.objective.regime, every=pair_every) if joint else None
        self.relation_objective = RelationPrediction() if relation_prediction else None
        self.penalty = regularizers.get(regularizer, relation_penalty=relation_penalty)
        self.regularization, self.relation_penalty = regularization, relation_penalty
        self.regularizer = regularizer if isinstance(regularizer, str) else None  # (the config's name)
        self.table_shards, self.prior, self.neighbourhood = table_shards, None, None  # (set by whoever ranks)
        if table_shards:
            self._check_shardable(slot_prior)
        self._make_tables(table_shards, table_seed, slot_prior, draw_tables)
        self.triple_loss_tracker = keras.metrics.Mean(name="triple_loss")
        self.pair_loss_tracker = keras.metrics.Mean(name="pair_loss") if joint else None
        self.relation_loss_tracker = keras.metrics.Mean(name="relation_loss") if relation_prediction else None
        self.built = True  # every variable exists now; no input is needed to build

    @property
    def slot_prior(self) -> float:
        """``w`` of the slot prior the model ranks with now (0: none). The prior object owns it,
        so a weight moved after training (`jobi_tf.api.Run.use_slot_prior`) is what `get_config` says."""
        return self.prior.weight if self.prior is not None else 0.0

    def _make_tables(self, table_shards: int, table_seed: int, slot_prior: float, draw: bool) -> None:
        """The entity table and each head's relation table (`jobi_tf.models.tables.make_tables`);
        with ``reciprocal``, row ``r + num_relations`` of a relation table is ``r``'s inverse; and
        the slot prior's table of counts when it has a weight."""
        relation_rows = self.num_relations * (2 if self.reciprocal else 1)
        ew, rw = self.scorer.entity_width(self.dim), self.scorer.relation_width(self.dim)
        shapes = {"entity_embeddings": (self.num_entities, ew), "triple_relations": (relation_rows, rw)}
        if self.joint:
            shapes["pair_relations"] = (relation_rows, rw)
        tables = make_tables(self, shapes, self.init, table_shards, table_seed, draw)
        self.entity_embeddings = tables["entity_embeddings"]
        self.triple_relations = tables["triple_relations"]
        self.pair_relations = tables.get("pair_relations")
        self.prior = add_slot_prior(self, slot_prior) if slot_prior else None

    def _check_shardable(self, slot_prior: float) -> None:
        """Sharded tables are read a row at a time: refuse what reads a whole table."""
        if self.objective.regime != SAMPLED:
            raise ValueError(f"table_shards needs sampled softmax: loss {self.loss_kind!r} reads every entity")
        if self.relation_prediction:
            raise ValueError("table_shards: relation_prediction reads the whole relation table; set it to 0")
        if self.scorer.weights:
            raise ValueError("table_shards: a scorer with weights of its own cannot be sharded")
        if slot_prior:
            raise ValueError("table_shards: the slot prior is not built for sharded tables; set slot_prior to 0")

    @property
    def sharded_tables(self) -> list[ShardedTable]:
        """The tables held as `ShardedTable`s (none unless ``table_shards``)."""
        tables = [self.entity_embeddings, self.triple_relations, self.pair_relations]
        return [t for t in tables if isinstance(t, ShardedTable)]

    @classmethod
    def for_run(
        cls, model: ModelConfig, train: TrainConfig, num_entities: int, num_relations: int, **placement
    ) -> JoBiModel:
        """The model a run's model section and `FROM_TRAINING` settings describe, for a graph of
        this size (``placement``); named ``jobi`` so checkpoint keys do not depend on how many
        models exist."""
        return cls(
            num_entities=num_entities,
            num_relations=num_relations,
            **{name: getattr(model, name) for name in ("model", "dim", "joint", "init", "reciprocal")},
            **{name: getattr(train, name) for name in FROM_TRAINING},
            name="jobi",
            **placement,
        )

    @property
    def objectives(self) -> list[Objective]:
        """One objective per head in use (the triple head's, then the pair head's), then the
        auxiliary relation prediction if it has a weight."""
        return (
            [self.objective]
            + ([self.pair_objective] if self.joint else [])
            + ([self.relation_objective] if self.relation_objective is not None else [])
        )

    def call(self, features: dict[str, tf.Tensor] | tf.Tensor, training: bool = False) -> dict[str, tf.Tensor]:
        """Training logits of a sampler batch (a feature dict), or ``[B]`` triple-head
        scores of an int ``[B, 3]`` id tensor (what ``predict`` on triples gives)."""
        if not isinstance(features, dict):
            return self.score_triples(_checked_triples(features))
        logits, penalty = self.forward(features)
        if penalty is not None:
            self.add_loss(penalty)
        return logits

    def forward(self, features: dict[str, tf.Tensor]) -> tuple[dict[str, tf.Tensor], tf.Tensor | None]:
        """A sampler batch's training logits and the regularizer's weighted penalty (None
        without one): ``call`` without Keras's call machinery, for loops of our own."""
        self._check_features(features)
        batch = ScoredBatch(self, features, riders=self.strided_heads)
        out: dict[str, tf.Tensor] = {}
        for objective in self.objectives:
            out.update(objective.logits(batch))
        penalty = None
        if self.regularization:
            penalty = self.regularization * replica_share(tf.reduce_mean(self.penalty.penalty(batch.factors())))
        return out, penalty

    def _check_features(self, features: dict[str, tf.Tensor]) -> None:
        """The features the objectives read are there, and the pair labels have one row per pair
        positive: a batch built by hand is refused here, at its first call, not in the loss (a
        run's batches and model are checked against its `jobi_tf.sampling.batch_plan.BatchPlan` before)."""
        missing = sorted({F.TRIPLES, *reads_of(self.objectives)} - set(features))
        if missing:
            raise ValueError(
                f"the model's objectives ({', '.join(type(o).__name__ for o in self.objectives)}) read features "
                f"{missing} that the input lacks: train on batches from jobi_tf.sampling.pipelines.make_train_dataset, "
                "or pass an int [B, 3] tensor of triples to score them"
            )
        labels, batch = features.get(F.PAIR_LABELS), features[F.TRIPLES].shape[0]
        if self.joint and labels is not None and None not in (labels.shape[0], batch):
            if labels.shape[0] * self.pair_every != batch:
                raise ValueError(
                    f"pair_labels has {labels.shape[0]} rows for the pair head's {batch // self.pair_every} positives "
                    f"(every {self.pair_every}): build the batches with make_train_dataset(..., "
                    f"pair_every={self.pair_every})"
                )

    def loss_terms(self, features: dict[str, tf.Tensor], logits: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        """Each objective's loss, unweighted: ``triple_loss``, and ``pair_loss`` (``joint``) and
        ``relation_loss`` (``relation_prediction``) when in use."""
        terms = {"triple_loss": self.objective.loss(features, logits)}
        if self.joint:
            terms["pair_loss"] = self.pair_objective.loss(features, logits)
        if self.relation_objective is not None:
            terms["relation_loss"] = self.relation_objective.loss(features, logits)
        return terms

    def weighted_loss(self, terms: dict[str, tf.Tensor]) -> tf.Tensor:
        """``L_tri + alpha * L_bi + relation_prediction * L_rel`` of `loss_terms`."""
        total = terms["triple_loss"]
        if "pair_loss" in terms:
            total = total + self.alpha * terms["pair_loss"]
        if "relation_loss" in terms:
            total = total + self.relation_prediction * terms["relation_loss"]
        return total

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        """`weighted_loss` (+ the penalty added in ``call``); also feeds the ``triple_loss``,
        ``pair_loss`` and ``relation_loss`` trackers."""
        terms = self.loss_terms(x, y_pred)
        trackers = {
            "triple_loss": self.triple_loss_tracker,
            "pair_loss": self.pair_loss_tracker,
            "relation_loss": self.relation_loss_tracker,
        }
        for name, value in terms.items():
            trackers[name].update_state(_unscale(value))
        total = self.weighted_loss(terms)
        for penalty in self.losses:
            total = total + penalty
        return total

    def export(self, filepath, format="tf_saved_model", verbose=None, input_signature=None, **kwargs):
        """Keras's ``export`` with the triple scorer's input by default: int32 ``[B, 3]`` ids.

        Why: Keras infers a subclassed model's signature from a first call, and this model is
        built without one. The SavedModel's ``serve`` endpoint returns ``[B]`` triple-head
        scores of id triples; `jobi_tf.export.savedmodel` writes the name-based export for TF Serving.
        """
        if input_signature is None:
            input_signature = [tf.TensorSpec([None, 3], tf.int32, name="triples")]
        return super().export(filepath, format=format, verbose=verbose, input_signature=input_signature, **kwargs)

    def get_config(self) -> dict:
        return {
            "num_entities": self.num_entities,
            "num_relations": self.num_relations,
            "model": self.model_name,
            "dim": self.dim,
            "joint": self.joint,
            "alpha": self.alpha,
            "loss": self.loss_kind,
            "regularization": self.regularization,
            "regularizer": self.regularizer,
            "relation_penalty": self.relation_penalty,
            "init": self.init,
            "reciprocal": self.reciprocal,
            "label_smoothing": self.label_smoothing,
            "relation_prediction": self.relation_prediction,
            "slot_weight": self.slot_weight,
            "matmul_dtype": self.matmul_dtype,
            "pair_every": self.pair_every,
            "slot_prior": self.slot_prior,
            "name": self.name,
        }


def _check_arguments(num_entities: int, num_relations: int, relation_prediction: float, matmul_dtype: str) -> None:
    if num_entities < 1 or num_relations < 1:
        raise ValueError(
            f"num_entities and num_relations must be >= 1. Received: num_entities={num_entities}, "
            f"num_relations={num_relations}"
        )
    if relation_prediction < 0:
        raise ValueError(f"relation_prediction must be >= 0. Received: relation_prediction={relation_prediction!r}")
    if matmul_dtype not in MATMUL_DTYPES:
        raise ValueError(f"matmul_dtype must be one of {MATMUL_DTYPES}. Received: matmul_dtype={matmul_dtype!r}")


def _checked_triples(triples) -> tf.Tensor:
    """An int ``[B, 3]`` id tensor, or a one-line error saying what the model takes."""
    triples = tf.convert_to_tensor(triples)
    if not triples.dtype.is_integer or triples.shape.rank != 2 or triples.shape[-1] not in (3, None):
        raise ValueError(
            f"JoBiModel scores int [B, 3] (head, relation, tail) id triples; received {triples.dtype.name} "
            f"{triples.shape}. Training takes feature dicts from jobi_tf.sampling.pipelines.make_train_dataset"
        )
    return tf.cast(triples, tf.int32)


def _unscale(loss: tf.Tensor) -> tf.Tensor:
    """Per-replica loss → global value for trackers (Keras divides losses by replica count)."""
    return loss * tf.cast(tf.distribute.get_strategy().num_replicas_in_sync, loss.dtype)
