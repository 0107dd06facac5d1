"""Warm starts on a grown graph: carry a trained run's rows over, train on what is new.

A graph gains entities, relations and facts; retraining from scratch repeats the work the
old run already did. ``jobi-tf train --init-from RUN`` instead starts from ``RUN``'s best
weights and, when it trained with the same optimizer, its optimizer state:

* rows are matched **by name**: an entity or relation the source run knew keeps its
  vector (and its optimizer slots); a new one keeps this run's fresh initial row.
  Vocabularies stay sorted, so an old entity's *id* may change, never its vector;
* each epoch visits every training triple the source run did not train on, plus a
  ``replay`` share of the ones it did, drawn anew every epoch (`jobi_tf.sampling.pipelines.EpochRows`),
  so old facts are rehearsed without paying a full epoch for them.

Pools of biased negatives, pair labels and the ranking filter use the whole grown graph.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import numpy as np
import tensorflow as tf

from jobi_tf.config import RunConfig
from jobi_tf.config.runs import RunFolder
from jobi_tf.data.index import KGIndex
from jobi_tf.data.keys import pack, sorted_contains
from jobi_tf.data.vocab import Vocab
from jobi_tf.datasets.loading import load_index
from jobi_tf.runtime.errors import ConfigError, JobiError
from jobi_tf.runtime.types import HEAD, RELATION, TAIL

__all__ = ["GrowthPlan", "plan_growth", "carry_over", "old_rows", "MUST_MATCH"]

logger = logging.getLogger(__name__)

#: Model settings that fix the shape or meaning of a row: the source run must share them.
MUST_MATCH = (("model", "model"), ("model", "dim"), ("model", "joint"), ("model", "reciprocal"))


def old_rows(old: Vocab, new: Vocab) -> np.ndarray:
    """int64 ``(len(new),)``: each new label's id in ``old``, or -1 when it is new.

    >>> old_rows(Vocab(np.array(["a", "c"])), Vocab(np.array(["a", "b", "c"]))).tolist()
    [0, -1, 1]
    """
    if len(old) == 0:
        return np.full(len(new), -1, np.int64)
    pos = np.minimum(np.searchsorted(old.labels, new.labels), len(old) - 1)
    return np.where(old.labels[pos] == new.labels, pos, -1).astype(np.int64)


@dataclasses.dataclass(frozen=True)
class GrowthPlan:
    """What a warm start carries over and what it trains on.

    Attributes:
        source: the run folder the weights come from.
        entity_rows, relation_rows: int64, for each of this run's ids, the source run's id
            (-1: new, fresh row).
        new_triples: int64 indices into ``index.train`` of the triples the source run did
            not train on (every epoch visits them all).
        old_triples: int64 indices of the ones it did (each epoch replays a share).
    """

    source: RunFolder
    entity_rows: np.ndarray
    relation_rows: np.ndarray
    new_triples: np.ndarray
    old_triples: np.ndarray

    def summary(self) -> dict[str, int]:
        return {
            "entities_carried": int((self.entity_rows >= 0).sum()),
            "entities_new": int((self.entity_rows < 0).sum()),
            "relations_carried": int((self.relation_rows >= 0).sum()),
            "relations_new": int((self.relation_rows < 0).sum()),
            "triples_new": len(self.new_triples),
            "triples_old": len(self.old_triples),
        }


def _source_folder(cfg: RunConfig, run_dir: Path) -> RunFolder:
    source = RunFolder(cfg.train.init_from)
    if not source.config.exists():
        raise ConfigError("init_from", f"{source.path}: not a run folder (no config.json)")
    if source.path.resolve() == Path(run_dir).resolve():
        raise ConfigError("init_from", f"{source.path}: is this run's own folder (rerun without --init-from to resume)")
    if not source.best_weights.exists():
        raise ConfigError("init_from", f"{source.path}: has no best.weights.npz yet (no validation has run)")
    return source


def _check_compatible(source: RunFolder, source_cfg: RunConfig, cfg: RunConfig) -> None:
    for section, field in MUST_MATCH:
        was, now = getattr(getattr(source_cfg, section), field), getattr(getattr(cfg, section), field)
        if was != now:
            flag = "--" + field.replace("_", "-")
            raise ConfigError(
                "init_from",
                f"{source.path} was trained with {flag} {was}, this run has {flag} {now}; rows cannot be carried over",
            )


def plan_growth(cfg: RunConfig, run_dir: Path, entities: Vocab, relations: Vocab, index: KGIndex) -> GrowthPlan:
    """Match the source run's vocabularies and training triples against this run's graph.

    The source run's training triples are read from its own data (its ``config.json``
    names it); a source whose data cannot be loaded any more is refused with the reason.
    """
    source = _source_folder(cfg, run_dir)
    source_cfg = source.read_config()
    _check_compatible(source, source_cfg, cfg)
    old_entities, old_relations = source.read_vocabs()
    try:
        data_entities, data_relations, old_index = load_index(source_cfg.data, seed=source_cfg.seed)
    except JobiError as exc:
        raise ConfigError("init_from", f"{source.path}: its training data cannot be read ({exc})") from None
    if data_entities != old_entities or data_relations != old_relations:
        raise ConfigError("init_from", f"{source.path}: its data no longer matches its vocabularies")
    entity_rows, relation_rows = old_rows(old_entities, entities), old_rows(old_relations, relations)
    seen = _seen_before(old_index.train, old_entities, old_relations, entities, relations, index)
    plan = GrowthPlan(
        source=source,
        entity_rows=entity_rows,
        relation_rows=relation_rows,
        new_triples=np.flatnonzero(~seen),
        old_triples=np.flatnonzero(seen),
    )
    logger.info("warm start from %s: %s", source.path, plan.summary())
    if len(plan.new_triples) == 0:
        logger.warning(
            "%s: every training triple was already in %s; only --replay rehearses them", run_dir, source.path
        )
    return plan


def _seen_before(old_train, old_entities, old_relations, entities, relations, index) -> np.ndarray:
    """bool per row of ``index.train``: the source run trained on that triple."""
    new_entity = old_rows(entities, old_entities)  # old id -> new id (or -1 if it left the graph)
    new_relation = old_rows(relations, old_relations)
    h, r, t = new_entity[old_train[:, HEAD]], new_relation[old_train[:, RELATION]], new_entity[old_train[:, TAIL]]
    kept = (h >= 0) & (r >= 0) & (t >= 0)
    old_keys = np.sort(_triple_keys(h[kept], r[kept], t[kept], index))
    train = index.train
    return sorted_contains(old_keys, _triple_keys(train[:, HEAD], train[:, RELATION], train[:, TAIL], index))


def _triple_keys(h, r, t, index: KGIndex) -> np.ndarray:
    return pack(pack(h, r, index.num_relations), t, index.num_entities)


def carry_over(plan: GrowthPlan, model, optimizer, optimizer_name: str) -> None:
    """Assign the source run's rows to ``model`` (and optimizer slots) where names match.

    Weights come from ``best.weights.npz`` (the model the source run reported); optimizer
    slots from its ``checkpoint.npz`` when it trained with the same optimizer
    (``optimizer_name``: this run's resolved ``--optimizer``), otherwise the optimizer starts
    fresh. The iteration count is carried with the slots (Adam's bias correction then
    continues where it was); the learning rate is this run's.
    """
    kinds = _row_kinds(model)
    with np.load(plan.source.best_weights) as weights:
        counts = getattr(model, "slot_log_counts", None)
        for var in model.weights:
            if var is counts:
                continue  # the slot prior is counted from this run's graph (`jobi_tf.models.slot_prior.SlotPrior.fill`)
            key = f"model/{var.path}"
            if key not in weights.files:
                raise ConfigError("init_from", f"{plan.source.best_weights}: has no {key}; it is another kind of model")
            _carry(weights[key], var, kinds.get(var.path), plan, str(plan.source.best_weights))
    source_cfg = plan.source.read_config()
    if source_cfg.train.optimizer != optimizer_name or not plan.source.checkpoint.exists():
        logger.info("optimizer state not carried over (another optimizer, or no checkpoint): it starts fresh")
        return
    slots = {f"{var.path.replace('/', '_')}_": kinds.get(var.path) for var in model.trainable_variables}
    with np.load(plan.source.checkpoint) as checkpoint:
        for i, var in enumerate(optimizer.variables):
            key = f"optimizer/{i:04d}"
            if var.name == "learning_rate" or key not in checkpoint.files:
                continue  # this run's --lr applies
            owner = next((p for p in slots if var.name.startswith(p)), None)
            kind = slots[owner] if owner else None
            _carry(checkpoint[key], var, kind, plan, str(plan.source.checkpoint))


def _row_kinds(model) -> dict[str, str]:
    """Which tables are indexed by entity id and which by relation id (by variable path)."""
    kinds = {model.entity_embeddings.path: "entities", model.triple_relations.path: "relations"}
    if model.pair_relations is not None:
        kinds[model.pair_relations.path] = "relations"
    return kinds


#: Rows written per scatter when a table is carried over (bounds the temporary copy).
_ROWS_PER_BLOCK = 1 << 16


def _carry(stored: np.ndarray, var, kind: str | None, plan: GrowthPlan, where: str) -> None:
    """Write the source rows into ``var`` where their names now sit; new rows keep their values.

    Tables are written a block of rows at a time with a scatter into the variable itself, so a
    multi-million-row table is never copied whole (its fresh values are not even read).
    """
    if kind is None:  # a scalar or a scorer's own weights: carried as they are
        if tuple(stored.shape) != tuple(var.shape):
            raise ConfigError(
                "init_from", f"{where}: {var.path} has shape {stored.shape}, this model {tuple(var.shape)}"
            )
        var.assign(stored)
        return
    rows = plan.entity_rows if kind == "entities" else _relation_rows(plan, var.shape[0], stored.shape[0])
    if stored.shape[1:] != tuple(var.shape[1:]):
        raise ConfigError(
            "init_from", f"{where}: {var.path} has rows of {stored.shape[1:]}, this model {var.shape[1:]}"
        )
    backing = getattr(var, "value", var)  # the tf.Variable behind a Keras variable
    carried = np.flatnonzero(rows >= 0)
    for lo in range(0, len(carried), _ROWS_PER_BLOCK):
        ids = carried[lo : lo + _ROWS_PER_BLOCK]
        values = stored[rows[ids]].astype(backing.dtype.as_numpy_dtype, copy=False)
        backing.scatter_update(tf.IndexedSlices(tf.constant(values), tf.constant(ids, tf.int64)))


def _relation_rows(plan: GrowthPlan, rows_now: int, rows_before: int) -> np.ndarray:
    """Relation-table row map; with reciprocal relations row ``r + R`` is ``r``'s inverse."""
    rows = plan.relation_rows
    if rows_now == len(rows):
        return rows
    before = rows_before // 2  # the source's number of relations
    return np.concatenate([rows, np.where(rows >= 0, rows + before, -1)])
