"""Versioned SavedModel of the triple scorer, for TensorFlow Serving.

What is served is `jobi_tf.export.scorer_module.TripleScorerModule` (its docstring: names in and
out, unknown names, top-k); its signatures are `jobi_tf.serving.contract`'s. This module
checks the weights and vocabularies, picks what the export holds (``filter_known``,
``typed``, ``pair_head``, a calibration) and writes it.

Writing is atomic: the SavedModel goes to ``<base>/<version>.incomplete-*`` (not a number,
so TensorFlow Serving ignores it) and is renamed to ``<base>/<version>`` when complete.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import secrets
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import tensorflow as tf

from jobi_tf.config import ExportConfig
from jobi_tf.config.runs import RunFolder
from jobi_tf.data.index import CSR, heads_by_query, relations_by_pair, slot_sets, tails_by_query
from jobi_tf.data.vocab import Vocab, write_labels
from jobi_tf.datasets.loading import load_index
from jobi_tf.evaluation.calibration import Calibration
from jobi_tf.export.approximate import ApproximateScorerModule
from jobi_tf.export.cells import Cells, cell_order, default_cells, kmeans_cells
from jobi_tf.export.scorer_module import TripleScorerModule, scorer_module
from jobi_tf.models import JoBiModel
from jobi_tf.models.slot_prior import SparseSlotPrior
from jobi_tf.runtime.errors import ExportError
from jobi_tf.serving.contract import (
    APPROXIMATE_SIGNATURES,
    DEFAULT_SIGNATURE,
    METADATA_FILE,
    SIGNATURES,
    SOFT_TYPED_SIGNATURES,
    TYPED_SIGNATURES,
)

__all__ = ["ExportResult", "known_facts", "export_saved_model", "export_run", "directory_bytes"]

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class ExportResult:
    """What an export wrote.

    Attributes:
        path: the version folder ``<base>/<version>``.
        version: its number.
        export_bytes: size on disk of the whole SavedModel.
        table_bytes: size of the two float32 tables it serves (entity + triple relation).
    """

    path: Path
    version: int
    export_bytes: int
    table_bytes: int


def directory_bytes(path: str | os.PathLike[str]) -> int:
    """Total size of the files under ``path``."""
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


def _next_version(base: Path) -> int:
    versions = [int(p.name) for p in base.iterdir() if p.is_dir() and p.name.isdigit()] if base.is_dir() else []
    return max(versions, default=0) + 1


def known_facts(train: np.ndarray, num_relations: int, num_entities: int) -> tuple[CSR, CSR, CSR]:
    """The training facts a ``filter_known`` export masks: tails keyed by ``h * R + r``, heads
    keyed by ``t * R + r``, relations keyed by ``h * E + t`` (`jobi_tf.data.index`'s lookups)."""
    return (
        tails_by_query(train, num_relations),
        heads_by_query(train, num_relations),
        relations_by_pair(train, num_entities),
    )


def _signatures(cfg: ExportConfig, scorer) -> tuple[str, ...]:
    optional = (
        (TYPED_SIGNATURES, cfg.typed),
        (SOFT_TYPED_SIGNATURES, cfg.pair_head),
        (APPROXIMATE_SIGNATURES, cfg.cells),
    )
    served = tuple(s for s in SIGNATURES if s != "predict_relation" or scorer.has_relation_query())  # it may have none
    return served + tuple(name for names, wanted in optional if wanted for name in names)


def export_saved_model(
    model: JoBiModel,
    entities: Vocab,
    relations: Vocab,
    base_dir: str | os.PathLike[str],
    cfg: ExportConfig | None = None,
    *,
    train_triples: np.ndarray | None = None,
    metadata: dict | None = None,
    calibration: Calibration | None = None,
) -> ExportResult:
    """Write the triple scorer of ``model`` as ``<base_dir>/<version>``.

    Args:
        model: a built `JoBiModel` (any scorer; its pair head is left out).
        entities, relations: the run's vocabularies (line number = id).
        base_dir: the folder TensorFlow Serving watches (created if missing).
        cfg: version, force and known-facts filter; default `ExportConfig()`.
        train_triples: int ``(N, 3)`` training ids; required with ``cfg.filter_known`` or ``cfg.typed``.
        metadata: extra JSON-able facts for ``assets.extra/jobi_tf.json`` (e.g. the run folder).
        calibration: a `jobi_tf.evaluation.calibration.Calibration`: the signatures also return probabilities.

    Returns:
        An `ExportResult`.

    Raises:
        ExportError: non-finite weights, vocabularies that do not match the tables, or an
            existing version without ``force``. Nothing is written then.
    """
    cfg = cfg or ExportConfig()
    base = Path(base_dir)
    entity_table = np.asarray(model.entity_embeddings.numpy(), np.float32)
    relation_table = np.asarray(model.triple_relations.numpy(), np.float32)
    reciprocal = bool(getattr(model, "reciprocal", False))
    _check_inputs(entity_table, relation_table, entities, relations, cfg, train_triples, reciprocal)
    version, final = _version_folder(base, cfg)
    entity_table, entity_labels, train_triples, cells, numbered = _with_cells(
        cfg, entity_table, entities.labels, train_triples, model
    )
    tables = (entity_table, relation_table)
    module = _module_factory(model, tables, len(relations), cfg, train_triples, calibration, cells, numbered)
    info = {**_metadata(model, len(entities), len(relations), cfg, calibration), **(metadata or {})}
    _write_version(module, entity_labels, relations, _signatures(cfg, model.scorer), info, final)
    logger.info("exported %s", final)
    entity_bytes = entity_table.size * (2 if cfg.table_dtype == "bfloat16" else 4)
    return ExportResult(final, version, directory_bytes(final), entity_bytes + relation_table.nbytes)


def _version_folder(base: Path, cfg: ExportConfig) -> tuple[int, Path]:
    """The version to write (``cfg.version``, else the next number) and its folder, refused
    when it exists without ``cfg.force``."""
    version = cfg.version if cfg.version is not None else _next_version(base)
    final = base / str(version)
    if final.exists() and not cfg.force:
        raise ExportError(f"{final}: version {version} exists; use --force to replace it or --version for another")
    return version, final


def _module_factory(
    model: JoBiModel,
    tables: tuple[np.ndarray, np.ndarray],
    num_relations: int,
    cfg: ExportConfig,
    train_triples: np.ndarray | None,
    calibration: Calibration | None,
    cells: Cells | None,
    numbered: dict | None = None,
) -> Callable[[Path], TripleScorerModule]:
    """What the export holds, as ``vocab_dir -> module``: the served object over the vocabulary
    files written to ``vocab_dir``, with the facts, slots, pair table and cells ``cfg`` asks for.
    ``tables``: the entity and triple-relation tables, already checked against the vocabularies."""
    num_entities = len(tables[0])
    known = known_facts(train_triples, num_relations, num_entities) if cfg.filter_known else (None, None, None)
    slots = slot_sets(train_triples, num_relations) if cfg.typed else None  # (`jobi_tf.data.index`)
    pair_table = _pair_table(model) if cfg.pair_head else None
    extra = {"table_dtype": cfg.table_dtype}
    if cells is not None:
        extra |= {"module_class": ApproximateScorerModule, "cells": cells, **numbered}

    def module(vocab_dir: Path) -> TripleScorerModule:
        return scorer_module(
            model,
            str(vocab_dir / "entities.txt"),
            str(vocab_dir / "relations.txt"),
            known,
            tables=tables,
            slots=slots,
            calibration=calibration,
            pair_relations=pair_table,
            **extra,
        )

    return module


def _with_cells(cfg: ExportConfig, entity_table: np.ndarray, labels: np.ndarray, train_triples, model) -> tuple:
    """``(entity rows, names, training triples, cells, numbered)`` as the export holds them: with ``cfg.cells``,
    the k-means cells and every entity renumbered cell by cell (`jobi_tf.export.cells.cell_order`), ``numbered``
    the model's slot counts (sparse) and neighbourhood graph so renumbered; else unchanged, and no cells."""
    if not cfg.cells:
        return entity_table, labels, train_triples, None, None
    count = _cells(cfg, len(labels))
    logger.info("k-means: %d cells over %d entity rows", count, len(labels))
    order, cells = cell_order(kmeans_cells(entity_table, count))
    new_id = np.empty(len(order), np.int64)
    new_id[order] = np.arange(len(order))
    if train_triples is not None:
        train_triples = np.asarray(train_triples).copy()
        train_triples[:, [0, 2]] = new_id[train_triples[:, [0, 2]]]
    prior, near = getattr(model, "prior", None), getattr(model, "neighbourhood", None)
    prior = None if prior is None else SparseSlotPrior.of(prior, len(labels)).renumbered(new_id)
    numbered = {"slot_prior": prior, "neighbourhood": None if near is None else near.renumbered(new_id)}
    return entity_table[order], labels[order], train_triples, cells, numbered


def _metadata(model: JoBiModel, num_entities: int, num_relations: int, cfg: ExportConfig, calibration) -> dict:
    """What `METADATA_FILE` says about the export."""
    return {
        "model": model.model_name,
        "dim": model.dim,
        "num_entities": num_entities,
        "num_relations": num_relations,
        "reciprocal": bool(getattr(model, "reciprocal", False)),
        "filter_known": cfg.filter_known,
        "typed": cfg.typed,
        "pair_head": cfg.pair_head,
        "cells": _cells(cfg, num_entities),
        "entity_ids": "cell by cell (see entities.txt)" if cfg.cells else "the run's",
        "table_dtype": cfg.table_dtype,
        "calibrated": calibration is not None,
        "calibration": None if calibration is None else calibration.method,
        "signatures": {"serving_default": DEFAULT_SIGNATURE, **{s: s for s in _signatures(cfg, model.scorer)}},
    }


def _cells(cfg: ExportConfig, num_entities: int) -> int:
    """The number of cells an export's approximate signatures read (0: none)."""
    return default_cells(num_entities) if cfg.cells == "auto" else int(cfg.cells)


def _pair_table(model: JoBiModel) -> np.ndarray:
    """The pair head's relation table, for soft typed answers (refused without one)."""
    if getattr(model, "pair_relations", None) is None:
        raise ExportError("--pair-head: this run has no pair head (it was trained without --joint)")
    table = np.asarray(model.pair_relations.numpy(), np.float32)
    if not np.isfinite(table).all():
        raise ExportError("pair_relations holds NaN or Inf; nothing was exported")
    return table


def _write_version(
    module, entity_labels: np.ndarray, relations: Vocab, names: tuple[str, ...], info: dict, final: Path
) -> None:
    """Write the SavedModel of ``module(vocab_dir)`` with its signatures ``names`` and the
    metadata ``info`` to a staging folder, then move it to ``final`` (nothing is left on failure).
    ``entity_labels``: the names in the export's id order (a vocabulary's, or cell by cell)."""
    staging = final.parent / f"{final.name}.incomplete-{secrets.token_hex(4)}"
    final.parent.mkdir(parents=True, exist_ok=True)
    try:
        with tempfile.TemporaryDirectory() as vocab_dir:
            write_labels(Path(vocab_dir) / "entities.txt", entity_labels)
            relations.save(Path(vocab_dir) / "relations.txt")
            served = module(Path(vocab_dir))
            signatures = {name: getattr(served, name) for name in names}
            signatures["serving_default"] = signatures[DEFAULT_SIGNATURE]
            tf.saved_model.save(served, str(staging), signatures=signatures)
        (staging / METADATA_FILE).parent.mkdir(exist_ok=True)
        (staging / METADATA_FILE).write_text(json.dumps(info, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        _move_into_place(staging, final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _check_inputs(
    entity_table: np.ndarray,
    relation_table: np.ndarray,
    entities: Vocab,
    relations: Vocab,
    cfg: ExportConfig,
    train_triples: np.ndarray | None,
    reciprocal: bool = False,
) -> None:
    for name, table in (("entity_embeddings", entity_table), ("triple_relations", relation_table)):
        if not np.all(np.isfinite(table)):
            raise ExportError(
                f"{name}: {np.sum(~np.isfinite(table))} non-finite weights (NaN/Inf): the run diverged; "
                "nothing exported (retrain, e.g. with a lower --lr)"
            )
    relation_rows = len(relations) * (2 if reciprocal else 1)  # a reciprocal model adds the inverses
    if len(entities) != len(entity_table) or relation_rows != len(relation_table):
        raise ExportError(
            f"vocabularies ({len(entities)} entities, {len(relations)} relations) do not match the tables "
            f"({len(entity_table)}, {len(relation_table)} rows{', reciprocal' if reciprocal else ''})"
        )
    if (cfg.filter_known or cfg.typed) and train_triples is None:
        raise ExportError("filter_known and typed need the training triples (train_triples)")


def _move_into_place(staging: Path, final: Path) -> None:
    """Rename the complete export to its version; an existing one (``force``) is swapped out first."""
    if not final.exists():
        try:
            os.rename(staging, final)
        except OSError:  # another export took this version meanwhile; never write into it
            raise ExportError(f"{final}: appeared while exporting; export again to take the next version") from None
        return
    old = final.with_name(f"{final.name}.replaced-{secrets.token_hex(4)}")
    os.rename(final, old)
    try:
        os.rename(staging, final)
    except OSError:
        os.rename(old, final)  # put the previous version back
        raise
    shutil.rmtree(old, ignore_errors=True)


def export_run(
    run_dir: str | os.PathLike[str],
    base_dir: str | os.PathLike[str],
    cfg: ExportConfig | None = None,
    *,
    model: JoBiModel,
    train_triples: np.ndarray | None = None,
) -> ExportResult:
    """Export the best weights of a run folder, with its calibration if it has one: what
    ``jobi-tf export`` and `jobi_tf.api.Run.export` both write.

    Only the run folder is read, unless ``cfg.filter_known`` or ``cfg.typed`` asks for the
    training facts: then the run's data is loaded too (and must still be where
    ``config.json`` says), unless ``train_triples`` gives them. ``model``: the run's model,
    restored by the caller (`jobi_tf.api.run.restore_model`: loading weights sits above export).
    """
    cfg = cfg or ExportConfig()
    folder = RunFolder(run_dir)
    run_cfg = folder.read_config()
    entities, relations = folder.read_vocabs()
    if (cfg.filter_known or cfg.typed) and train_triples is None:
        data_entities, data_relations, index = load_index(run_cfg.data, seed=run_cfg.seed)
        folder.check_vocabs(data_entities, data_relations)
        train_triples = index.train
    return export_saved_model(
        model,
        entities,
        relations,
        base_dir,
        cfg,
        train_triples=train_triples if cfg.filter_known or cfg.typed else None,
        metadata={"run_dir": str(folder.path.resolve())},
        calibration=Calibration.load(folder.calibration) if folder.calibration.exists() else None,
    )
