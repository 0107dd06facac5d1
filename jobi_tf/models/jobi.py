"""`JoBiModel`: one entity table shared by a triple head and an optional pair head.

The triple head (its own relation table) learns which triples are true; the pair head (a
second relation table, only with ``joint=True``) learns whether a triple's (head,
relation) and (relation, tail) pairs both occur in training. Only the triple head is used
for evaluation and export, so JoBi adds no parameters to the final model.

``call`` returns logits; ``compute_loss`` (Keras 3's own hook and signature) turns them
into ``L_tri + alpha * L_bi``. Keras's ``train_step`` is kept as it is.
"""

from __future__ import annotations

import math

import keras
import tensorflow as tf

from jobi_tf.config import REGULARIZERS
from jobi_tf.losses import pair_loss, triple_loss
from jobi_tf.models.scorers import get_scorer
from jobi_tf.types import HEAD, RELATION, TAIL

__all__ = ["JoBiModel"]

_MASKED_LOGIT = -1e9


def _rows(table: keras.Variable, ids: tf.Tensor) -> tf.Tensor:
    """Rows ``ids`` of an embedding table, read as a sparse gather of the variable itself.

    Why not ``tf.gather(table, ids)``: that converts the Keras variable to a tensor first (a
    read of the whole table); without XLA the optimizer's later row update then finds the
    table's buffer still shared with that read and copies the whole table (seconds per step
    for a 2M-row table). Gathering from the backing ``tf.Variable`` reads only the rows.
    """
    backing = getattr(table, "value", table)
    return tf.gather(backing if isinstance(backing, tf.Variable) else table, ids)


@keras.saving.register_keras_serializable(package="jobi_tf")
class JoBiModel(keras.Model):
    """Bilinear KG embedding model with JoBi's pair head.

    Args:
        num_entities: rows of the shared entity table.
        num_relations: rows of each relation table.
        model: ``"distmult"``, ``"complex"`` or ``"simple"``.
        dim: components per part (ComplEx 200 = 200 real + 200 imaginary). Default 200.
        joint: add the pair head (JoBi). Default False (the baseline).
        alpha: weight of the pair loss. Default 0.5.
        regularization: weight of the penalty named by ``regularizer``. Default 0 (the
            paper uses none).
        regularizer: ``"l2"``: the mean over the rows a batch uses (negatives included) of
            ``||x|| / sqrt(width)``, PyKEEN's ComplEx default; ``"n3"``: the sum of the cubed
            component moduli of the positive's head, relation and tail rows (Lacroix et al.,
            2018), which damps rarely seen entities more than frequent ones.
        loss: ``"sampled-softmax"`` or ``"full-softmax"``.
        reciprocal: each relation table gets ``2 * num_relations`` rows, row ``r +
            num_relations`` being ``r``'s inverse, and a head query ``(?, r, t)`` is scored
            as the tail query ``(t, r⁻¹, ?)`` (Lacroix et al., 2018). Sampled softmax then
            needs ``positive_corrupt_tail``: a softmax must rank the answers of one query.

    Input: a feature dict from `jobi_tf.sampling` with ``triples`` int32 ``[B, 3]`` and, for
    sampled softmax, ``candidates [B, K_b]``, ``corrupt_tail [B, K_b]``, optional
    ``shared_candidates [B / C, K_u]``, ``shared_corrupt_tail [B, K_u]``, optional
    ``positive_corrupt_tail [B]`` (one side per positive: a faster path), ``valid_negative`` and
    ``pair_labels [B, K]``.

    Output: a dict of logits: ``triple [B, 1 + K]`` (column 0 is the positive) and, with
    ``joint``, ``pair [B, 1 + K]``; for full softmax ``triple_tail``/``triple_head``
    ``[B, num_entities]`` (and ``pair_tail``/``pair_head``).

    >>> m = JoBiModel(num_entities=10, num_relations=3, model="distmult", dim=4)
    >>> m.tail_queries(tf.constant([0]), tf.constant([1])).shape
    TensorShape([1, 4])
    """

    def __init__(
        self,
        num_entities: int,
        num_relations: int,
        model: str = "complex",
        dim: int = 200,
        joint: bool = False,
        alpha: float = 0.5,
        loss: str = "sampled-softmax",
        regularization: float = 0.0,
        regularizer: str = "l2",
        init: str = "table-glorot",
        reciprocal: bool = False,
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        if num_entities < 1 or num_relations < 1:
            raise ValueError(
                f"num_entities and num_relations must be >= 1. Received: num_entities={num_entities}, "
                f"num_relations={num_relations}"
            )
        if loss not in ("sampled-softmax", "full-softmax"):
            raise ValueError(f"loss must be 'sampled-softmax' or 'full-softmax'. Received: loss={loss!r}")
        self.num_entities = num_entities
        self.num_relations = num_relations
        self.model_name = model
        self.scorer = get_scorer(model)
        self.dim = dim
        self.joint = joint
        self.alpha = alpha
        if regularizer not in REGULARIZERS:
            raise ValueError(f"regularizer must be one of {REGULARIZERS}. Received: regularizer={regularizer!r}")
        self.regularization = regularization
        self.regularizer = regularizer
        self.loss_kind = loss
        self.init = init
        self.reciprocal = reciprocal
        rows = num_relations * (2 if reciprocal else 1)
        ew, rw = self.scorer.entity_width(dim), self.scorer.relation_width(dim)
        self.entity_embeddings = self.add_weight(
            shape=(num_entities, ew), initializer=_initializer(init, ew), name="entity_embeddings"
        )
        self.triple_relations = self.add_weight(
            shape=(rows, rw), initializer=_initializer(init, rw), name="triple_relations"
        )
        self.pair_relations = (
            self.add_weight(shape=(rows, rw), initializer=_initializer(init, rw), name="pair_relations")
            if joint
            else None
        )
        self._triple_loss = triple_loss()
        self._pair_loss = pair_loss()
        self.triple_loss_tracker = keras.metrics.Mean(name="triple_loss")
        self.pair_loss_tracker = keras.metrics.Mean(name="pair_loss") if joint else None
        self.built = True  # every variable exists now; no input is needed to build

    def train_step(self, data):
        """Keras's own step; across workers, its scalar logs come back as ``[1]`` vectors.

        Why: under a multi-worker strategy Keras's ``fit`` averages the replicas' logs with
        ``strategy.reduce("MEAN", value, axis=0)``, which fails on a scalar ("Invalid
        reduction dimension 0 for input with 0 dimensions"); a ``[1]`` vector reduces to the
        scalar every callback expects.
        """
        logs = super().train_step(data)
        strategy = tf.distribute.get_strategy()
        if getattr(strategy.extended, "_in_multi_worker_mode", lambda: False)():
            logs = {k: tf.reshape(v, [1]) if v.shape.rank == 0 else v for k, v in logs.items()}
        return logs

    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        """Under a strategy, Keras's ``fit`` averages the first batch over the replicas
        just to read its shapes, which fails on the sampler's bool features (``AddN`` of
        bool). This model is built in ``__init__``: only the optimizer may still need it."""
        if self.optimizer is not None and not self.optimizer.built:
            with self.distribute_strategy.scope():
                self.optimizer.build(self.trainable_variables)

    # -- queries of the triple head (evaluation and export use only these) ---------------
    def tail_queries(self, heads: tf.Tensor, relations: tf.Tensor) -> tf.Tensor:
        """``[B, W]`` queries whose dot with ``entity_embeddings[t]`` is ``s_tri(h, r, t)``."""
        return self.scorer.tail_query(_rows(self.entity_embeddings, heads), _rows(self.triple_relations, relations))

    def head_queries(self, relations: tf.Tensor, tails: tf.Tensor) -> tf.Tensor:
        """``[B, W]`` queries whose dot with ``entity_embeddings[h]`` scores ``h`` as the head:
        ``s_tri(h, r, t)``, or with ``reciprocal`` ``s_tri(t, r⁻¹, h)``."""
        tails = _rows(self.entity_embeddings, tails)
        if self.reciprocal:
            return self.scorer.tail_query(tails, _rows(self.triple_relations, self._inverse(relations)))
        return self.scorer.head_query(_rows(self.triple_relations, relations), tails)

    def _inverse(self, relations: tf.Tensor) -> tf.Tensor:
        """Row ids of the inverse relations (``reciprocal`` only)."""
        return relations + tf.constant(self.num_relations, relations.dtype)

    def score_triples(self, triples: tf.Tensor) -> tf.Tensor:
        """``[B]`` triple-head scores of int ``[B, 3]`` triples (the forward relation's, with
        ``reciprocal``: what ranks tails)."""
        return tf.reduce_sum(
            self.tail_queries(triples[:, HEAD], triples[:, RELATION]) * _rows(self.entity_embeddings, triples[:, TAIL]),
            axis=-1,
        )

    # -- training ------------------------------------------------------------------------
    def _queries(self, triples: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, dict[str, tf.Tensor]]:
        """Head and tail queries of every head in use, stacked: ``[B, S, W]`` twice.

        S is 1 (triple head) or 2 (triple and pair heads). Also returns the positive's rows
        ``head``, ``tail``, ``relation`` (triple head) and, with ``reciprocal``, ``inverse``
        (for the score of the positive and the regularizer).
        """
        h = _rows(self.entity_embeddings, triples[:, HEAD])
        t = _rows(self.entity_embeddings, triples[:, TAIL])
        tables = [self.triple_relations] + ([self.pair_relations] if self.joint else [])
        rels = [_rows(table, triples[:, RELATION]) for table in tables]
        tail_q = tf.stack([self.scorer.tail_query(h, r) for r in rels], axis=1)
        rows = {"head": h, "tail": t, "relation": rels[0]}
        if self.reciprocal:
            inverse = [_rows(table, self._inverse(triples[:, RELATION])) for table in tables]
            head_q = tf.stack([self.scorer.tail_query(t, r) for r in inverse], axis=1)
            rows["inverse"] = inverse[0]
        else:
            head_q = tf.stack([self.scorer.head_query(r, t) for r in rels], axis=1)
        return head_q, tail_q, rows

    def call(self, features: dict[str, tf.Tensor], training: bool = False) -> dict[str, tf.Tensor]:
        triples = features["triples"]
        head_q, tail_q, rows = self._queries(triples)  # [B, S, W]
        if self.loss_kind == "full-softmax":
            out = self._full_softmax_logits(head_q, tail_q)
            return self._with_penalty(out, list(rows.values()))

        pos = tf.reduce_sum(tail_q * rows["tail"][:, None, :], -1)  # [B, S]
        # With one corrupted side per positive, pick that side's query once and score every
        # candidate with it; otherwise score each candidate both ways and select per candidate.
        one_side = features.get("positive_corrupt_tail")
        if one_side is not None:
            query = tf.where(one_side[:, None, None], tail_q, head_q)
        positive_rows = [rows["head"], rows["tail"], rows["relation"]]
        if self.reciprocal:
            if one_side is None:
                raise ValueError("a reciprocal model needs `positive_corrupt_tail` (one corrupted side per positive)")
            # A head corruption is ranked by the inverse query, the positive included.
            pos = tf.reduce_sum(query * tf.where(one_side[:, None], rows["tail"], rows["head"])[:, None, :], -1)
            positive_rows[2] = tf.where(one_side[:, None], rows["relation"], rows["inverse"])
        candidate_rows = []
        parts = []
        if "candidates" in features:
            cand = _rows(self.entity_embeddings, features["candidates"])  # [B, K_b, W]
            if one_side is not None:
                parts.append(tf.einsum("bsw,bkw->bsk", query, cand))
            else:
                by_head = tf.einsum("bsw,bkw->bsk", head_q, cand)
                by_tail = tf.einsum("bsw,bkw->bsk", tail_q, cand)
                parts.append(tf.where(features["corrupt_tail"][:, None, :], by_tail, by_head))
            candidate_rows.append(cand)
        if "shared_candidates" in features:
            shared = _rows(self.entity_embeddings, features["shared_candidates"])  # [G, K_u, W]
            groups = tf.shape(shared)[0]
            shape_g = tf.concat([[groups, -1], tf.shape(head_q)[1:]], 0)  # [G, C, S, W]
            if one_side is not None:
                mixed = tf.einsum("gcsw,gkw->gcsk", tf.reshape(query, shape_g), shared)
            else:
                by_head = tf.einsum("gcsw,gkw->gcsk", tf.reshape(head_q, shape_g), shared)
                by_tail = tf.einsum("gcsw,gkw->gcsk", tf.reshape(tail_q, shape_g), shared)
                side = tf.reshape(features["shared_corrupt_tail"], [groups, -1, 1, tf.shape(shared)[1]])
                mixed = tf.where(side, by_tail, by_head)  # side: [G, C, 1, K_u]
            parts.append(tf.reshape(mixed, tf.concat([[-1], tf.shape(mixed)[2:]], 0)))
        neg = tf.concat(parts, axis=-1)  # [B, S, K]
        logits = tf.concat([pos[:, :, None], neg], axis=-1)  # [B, S, 1 + K]
        valid = tf.pad(features["valid_negative"], [[0, 0], [1, 0]], constant_values=True)
        out = {"triple": tf.where(valid, logits[:, 0], _MASKED_LOGIT)}
        if self.joint:
            out["pair"] = logits[:, 1]
        return self._with_penalty(out, positive_rows, candidate_rows)

    def _with_penalty(
        self, out: dict[str, tf.Tensor], positive_rows: list[tf.Tensor], candidate_rows: list[tf.Tensor] | None = None
    ) -> dict[str, tf.Tensor]:
        """Add ``penalty [B]``, the regularizer's value per example.

        ``positive_rows`` are the positive's head, tail and the relation rows it was scored
        with ``[B, W]``; ``candidate_rows`` the sampled candidates ``[B, K, W]`` (``l2`` only).
        """
        rows = [*positive_rows, *(candidate_rows or [])]
        if self.regularization and self.regularizer == "n3":
            out["penalty"] = tf.add_n([self.scorer.cubed_norm(x) for x in positive_rows])
        elif self.regularization:
            norms = [tf.norm(x, axis=-1) / tf.sqrt(tf.cast(tf.shape(x)[-1], x.dtype)) for x in rows]
            flat = [n if n.shape.rank == 2 else n[:, None] for n in norms]
            out["penalty"] = tf.reduce_mean(tf.concat(flat, axis=1), axis=1)
        return out

    def _full_softmax_logits(self, head_q: tf.Tensor, tail_q: tf.Tensor) -> dict[str, tf.Tensor]:
        scores_t = tf.einsum("bsw,ew->bse", tail_q, self.entity_embeddings)
        scores_h = tf.einsum("bsw,ew->bse", head_q, self.entity_embeddings)
        out = {"triple_tail": scores_t[:, 0], "triple_head": scores_h[:, 0]}
        if self.joint:
            out["pair_tail"], out["pair_head"] = scores_t[:, 1], scores_h[:, 1]
        return out

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        """``L_tri + alpha * L_bi``; also feeds the ``triple_loss`` and ``pair_loss`` trackers."""
        triples = x["triples"]
        if self.loss_kind == "full-softmax":
            tri = self._triple_loss(triples[:, TAIL], y_pred["triple_tail"]) + self._triple_loss(
                triples[:, HEAD], y_pred["triple_head"]
            )
        else:
            tri = self._triple_loss(tf.zeros_like(triples[:, 0]), y_pred["triple"])
        self.triple_loss_tracker.update_state(_unscale(tri))
        total = tri
        if self.joint:
            if self.loss_kind == "full-softmax":
                pair = self._pair_loss(x["pair_labels_tail"], y_pred["pair_tail"]) + self._pair_loss(
                    x["pair_labels_head"], y_pred["pair_head"]
                )
            else:
                labels = tf.pad(x["pair_labels"], [[0, 0], [1, 0]], constant_values=1.0)
                pair = self._pair_loss(labels, y_pred["pair"])
            self.pair_loss_tracker.update_state(_unscale(pair))
            total = total + self.alpha * pair
        if self.regularization:
            total = total + self.regularization * _scale(tf.reduce_mean(y_pred["penalty"]))
        return total

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
            "init": self.init,
            "reciprocal": self.reciprocal,
            "name": self.name,
        }


def _initializer(init: str, width: int) -> keras.initializers.Initializer | str:
    """``table-glorot``: Glorot-normal over the table (the paper's code); ``row-glorot``: N(0, 2 / width)."""
    if init == "table-glorot":
        return "glorot_normal"
    if init == "row-glorot":
        return keras.initializers.RandomNormal(stddev=math.sqrt(2.0 / width))
    raise ValueError(f"init must be 'table-glorot' or 'row-glorot'. Received: {init!r}")


def _scale(value: tf.Tensor) -> tf.Tensor:
    """A per-replica mean → its share of the global mean (what Keras losses do)."""
    return value / tf.cast(tf.distribute.get_strategy().num_replicas_in_sync, value.dtype)


def _unscale(loss: tf.Tensor) -> tf.Tensor:
    """Per-replica loss → global value for trackers (Keras divides losses by replica count)."""
    return loss * tf.cast(tf.distribute.get_strategy().num_replicas_in_sync, loss.dtype)
