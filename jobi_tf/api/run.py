"""`Run` and `load_run`: a trained run as an object: evaluate, ask top-k by name, export.

A `Run` is a run folder (`jobi_tf.config.runs.RunFolder`) with its model loaded. Predictions go
through the export's `jobi_tf.export.scorer_module.TripleScorerModule`, so Python and TensorFlow
Serving answer with the same code.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from jobi_tf.api.data import Dataset, load_dataset, python_errors
from jobi_tf.api.ranking_weights import RankingWeights
from jobi_tf.config import EvalConfig, ExportConfig, RunConfig
from jobi_tf.config.runs import RunFolder
from jobi_tf.runtime.atomic import disk_errors
from jobi_tf.runtime.errors import JobiError
from jobi_tf.runtime.tf_settings import start_tensorflow

__all__ = ["Run", "Embeddings", "Answers", "load_run", "restore_model"]


@dataclasses.dataclass(frozen=True)
class Embeddings:
    """Rows of an embedding table with their names: ``vectors[i]`` belongs to ``names[i]``."""

    names: list[str]
    vectors: np.ndarray

    def __getitem__(self, name: str) -> np.ndarray:
        if "_rows" not in self.__dict__:  # built on first use: a name lookup, not a scan
            object.__setattr__(self, "_rows", {n: i for i, n in enumerate(self.names)})
        return self.vectors[self.__dict__["_rows"][name]]


#: Top-k answers: ``(name, score)`` pairs, best first.
Answers = list[tuple[str, float]]


class Run(RankingWeights):
    """A trained run: its folder, config, model (best weights) and metrics.

    Get one from `train` or `load_run`. Evaluation and ``filter_known`` predictions need the
    run's data, loaded on first use from where ``config.json`` says (or pass ``data=`` to
    `load_run`); scoring, top-k without filtering, embeddings and export need only the folder.
    """

    def __init__(self, folder: RunFolder, config: RunConfig, model, data: Dataset | None = None) -> None:
        self.folder = folder
        self.config = config
        self.model = model
        self._entities, self._relations = folder.read_vocabs()
        self._data = data
        self._scorers: dict[bool, Any] = {}
        self._evaluators: dict[Any, Any] = {}  # one per eval config: each compiles its own ranking step
        self._neighbourhood_weight: float | None = None  # `use_neighbourhood`'s, else the run's own

    def __repr__(self) -> str:
        mrr = (self.metrics or {}).get("test", {}).get("mrr")
        return f"Run({str(self.path)!r}, {self.config.model.model} dim {self.config.model.dim}, test mrr {mrr})"

    @property
    def path(self) -> Path:
        return self.folder.path

    @property
    def metrics(self) -> dict | None:
        """``metrics.json`` (validation and test metrics, history), or None while unfinished."""
        return self.folder.read_metrics()

    @property
    def entities(self) -> list[str]:
        return self._entities.labels.tolist()

    @property
    def relations(self) -> list[str]:
        return self._relations.labels.tolist()

    @property
    def data(self) -> Dataset:
        """The run's graph, loaded once (from the folder, name or copy its config names)."""
        if self._data is None:
            try:
                data = load_dataset(self.config.data, seed=self.config.seed)
            except (JobiError, OSError) as exc:
                raise JobiError(
                    f"{self.path}: the run's data cannot be loaded ({exc}); pass it as load_run(path, data=...)"
                ) from None
            self.folder.check_vocabs(data.entities, data.relations)
            self._data = data
        return self._data

    # -- evaluation -----------------------------------------------------------------------
    def evaluate(
        self,
        split_or_triples: str | Sequence[Sequence[str]] = "test",
        *,
        rank_type: str | None = None,
        eval_config: EvalConfig | None = None,
        tails_only: bool = False,
        progress: bool = False,
    ) -> dict:
        """Filtered MRR and Hits@1/3/10 (both directions, per direction, per relation) of a
        split (``"valid"``, ``"test"``) or of ``(head, relation, tail)`` name triples,
        filtered against every known fact of the run's data (the paper's protocol).

        ``eval_config``: evaluation settings in place of the run's (`EvalConfig`);
        ``rank_type`` alone replaces that one setting; ``tails_only`` ranks tails only.
        """
        evaluator = self.evaluator(eval_config, rank_type)
        self._attach_neighbourhood()
        if isinstance(split_or_triples, str):
            return evaluator.evaluate(self.model, split_or_triples, tails_only=tails_only, progress=progress)
        ids = self._encode_triples(split_or_triples)
        return evaluator.metrics_from_ranks(evaluator.ranks(self.model, ids, tails_only=tails_only))

    def evaluate_relations(self, split: str = "test", *, eval_config: EvalConfig | None = None) -> dict:
        """Filtered MRR and Hits@1/3/10 of relation prediction: the true relation of each
        ``(h, ?, t)`` of a split ranked among all relations, other known ones removed."""
        return self.evaluator(eval_config).relation_metrics(self.model, split)

    def evaluator(self, eval_config: EvalConfig | None = None, rank_type: str | None = None):
        """The `jobi_tf.evaluation.ranking.FilteredEvaluator` over the run's data (one per setting)."""
        from jobi_tf.evaluation.ranking import FilteredEvaluator

        cfg = eval_config or self.config.eval
        if rank_type is not None:
            with python_errors():
                cfg = dataclasses.replace(cfg, rank_type=rank_type)
        if cfg not in self._evaluators:
            self._evaluators[cfg] = FilteredEvaluator(self.data.index, cfg, relation_labels=self._relations.labels)
        return self._evaluators[cfg]

    def _encode_triples(self, triples: Sequence[Sequence[str]]) -> np.ndarray:
        rows = np.asarray(triples, dtype=str)
        if rows.ndim != 2 or rows.shape[1] != 3:
            raise JobiError(f"triples must be (head, relation, tail) name rows; got shape {rows.shape}")
        columns = []
        for col, vocab, what in (
            (0, self._entities, "entity"),
            (1, self._relations, "relation"),
            (2, self._entities, "entity"),
        ):
            try:
                columns.append(vocab.encode(rows[:, col]))
            except KeyError as exc:
                line = int(np.flatnonzero(rows[:, col] == exc.args[0])[0])
                raise JobiError(f"triples row {line}: unknown {what} {exc.args[0]!r}") from None
        return np.stack(columns, axis=1)

    # -- predictions (the export's code) ----------------------------------------------------
    def _scorer(self, filter_known: bool):
        """The export's `TripleScorerModule` over this run's tables (one per filter setting)."""
        self._attach_neighbourhood()  # served as ranked
        if filter_known not in self._scorers:
            from jobi_tf.export.savedmodel import known_facts
            from jobi_tf.export.scorer_module import scorer_module

            sizes = (len(self._relations), len(self._entities))
            known = known_facts(self.data.index.train, *sizes) if filter_known else (None, None, None)
            self._scorers[filter_known] = scorer_module(
                self.model, str(self.folder.entities), str(self.folder.relations), known
            )
        return self._scorers[filter_known]

    def score(self, triples: Sequence[Sequence[str]]) -> np.ndarray:
        """float32 ``[N]`` triple-head scores of ``(head, relation, tail)`` name rows (higher = more plausible)."""
        import tensorflow as tf

        rows = np.asarray(triples, dtype=str).reshape(-1, 3)
        self._encode_triples(rows)  # one-line error naming an unknown name's row
        out = self._scorer(False).score(*(tf.constant(rows[:, i]) for i in range(3)))
        return out["score"].numpy()

    def predict_tails(self, head: str, relation: str, k: int = 10, *, filter_known: bool = True) -> Answers:
        """The ``k`` best tails of ``(head, relation, ?)`` with their scores, best first.

        ``filter_known`` leaves out the tails already true in training (new facts only).
        """
        return self._top_k("predict_tail", "tails", head=head, relation=relation, k=k, filter_known=filter_known)

    def predict_heads(self, relation: str, tail: str, k: int = 10, *, filter_known: bool = True) -> Answers:
        """The ``k`` best heads of ``(?, relation, tail)`` with their scores, best first."""
        return self._top_k("predict_head", "heads", relation=relation, tail=tail, k=k, filter_known=filter_known)

    def predict_relations(self, head: str, tail: str, k: int = 10, *, filter_known: bool = True) -> Answers:
        """The ``k`` relations most likely to link ``head`` to ``tail``, with their scores, best first
        (``filter_known``: relations already linking them in training are left out)."""
        return self._top_k("predict_relation", "relations", head=head, tail=tail, k=k, filter_known=filter_known)

    def _top_k(self, signature: str, answer: str, *, k: int, filter_known: bool, **names: str) -> Answers:
        import tensorflow as tf

        for role, name in names.items():
            vocab = self._relations if role == "relation" else self._entities
            try:
                vocab.encode(np.array([name]))
            except KeyError:
                raise JobiError(f"unknown {'relation' if role == 'relation' else 'entity'} {name!r} ({role})") from None
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise JobiError(f"k must be an integer >= 1. Received: {k!r}")
        inputs = {role: tf.constant([name]) for role, name in names.items()}
        out = getattr(self._scorer(filter_known), signature)(**inputs, k=tf.constant(k, tf.int32))
        labels = [x.decode("utf-8") for x in out[answer].numpy()[0]]
        return [(label, float(s)) for label, s in zip(labels, out["scores"].numpy()[0], strict=True) if label]

    # -- tables and export ----------------------------------------------------------------
    def entity_embeddings(self) -> Embeddings:
        """The entity table with the entities' names (ComplEx: real parts, then imaginary)."""
        return Embeddings(self.entities, np.asarray(self.model.entity_embeddings.numpy()))

    def relation_embeddings(self) -> Embeddings:
        """The triple head's relation table with the relations' names (reciprocal runs add
        ``<name>⁻¹`` rows for the inverses)."""
        names = self.relations + ([f"{r}⁻¹" for r in self.relations] if self.config.model.reciprocal else [])
        return Embeddings(names, np.asarray(self.model.triple_relations.numpy()))

    def export(self, path: str | os.PathLike[str], **export_settings: Any):
        """A SavedModel for TensorFlow Serving in ``path/<version>``: what ``jobi-tf export``
        writes (`jobi_tf.export.savedmodel.export_run`), the run's calibration included.

        ``export_settings``: ``version``, ``force``, ``filter_known``, ``typed``, ``pair_head``, ``cells``,
        ``table_dtype`` (`ExportConfig`).
        """
        from jobi_tf.export.savedmodel import export_run

        self._attach_neighbourhood()
        with python_errors():
            cfg = ExportConfig(**export_settings)
        train_triples = self.data.index.train if cfg.filter_known or cfg.typed else None
        with disk_errors(path, "the SavedModel", "its earlier versions are intact"):  # the staging folder is removed
            return export_run(self.path, path, cfg, model=self.model, train_triples=train_triples)


def load_run(path: str | os.PathLike[str], *, data: Dataset | None = None) -> Run:
    """A finished (or validated at least once) run, from its folder alone.

    Args:
        path: the run folder.
        data: the run's graph, if it is not where ``config.json`` says any more (only
            evaluation and ``filter_known`` predictions need it).
    """
    folder = RunFolder(path)
    config = folder.read_config()
    if data is not None:
        folder.check_vocabs(data.entities, data.relations)
    start_tensorflow()  # quietly, before the model imports it
    return Run(folder, config, restore_model(folder, config), data)


def restore_model(folder: RunFolder, cfg: RunConfig | None = None):
    """The run's `JoBiModel` with its best weights, built from the folder alone.

    Why here and not on `RunFolder`: the folder sits with the config, below the model;
    loading weights into a model needs the model and the checkpoint format, above it.
    """
    from jobi_tf.models import JoBiModel
    from jobi_tf.training.checkpoints import load_weights  # imports TensorFlow

    cfg = cfg or folder.read_config()
    if not folder.best_weights.exists():
        raise JobiError(f"{folder.path}: no best.weights.npz yet (no validation has run)")
    entities, relations = folder.read_vocabs()
    # No initial draw: the weights overwrite it, and its temporaries would stay pooled (twice the table).
    model = JoBiModel.for_run(cfg.model, cfg.train, len(entities), len(relations), draw_tables=False)
    load_weights(folder.best_weights, model)
    if getattr(model, "prior", None) is not None and not model.prior.in_loss:
        model.prior.load(folder.slot_counts)  # sparse counts live beside the weights, with their weight
        kept = model.prior.weight or model.prior.route is not None  # --choose-slot-prior may have chosen 0
        model.prior = model.prior if kept else None
    return model
