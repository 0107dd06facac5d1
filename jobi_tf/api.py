"""The Python API: load a graph, train, evaluate, ask top-k by name, export.

Everything the CLI does, from Python, without reading internal modules::

    import jobi_tf

    data = jobi_tf.load_dataset("fb15k-237")            # a name, a folder, or in-memory triples
    run = jobi_tf.train(data, joint=True, p=0.3, epochs=50)
    run.metrics["test"]["mrr"]
    run.predict_tails("/m/02mjmr", "/people/person/nationality", k=5)
    run = jobi_tf.load_run(run.path)                  # later, from the run folder alone

A `Run` is a run folder (`jobi_tf.runs.RunFolder`) with its model loaded. Predictions go
through the export's `jobi_tf.scorer_module.TripleScorerModule`, so Python and TensorFlow Serving
answer with the same code. Errors name the config field (``batch_size``), not a CLI flag.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from jobi_tf.config import DataConfig, EvalConfig, ExportConfig, RunConfig, with_settings
from jobi_tf.data.index import KGIndex, build_index
from jobi_tf.data.triples import write_triples
from jobi_tf.data.vocab import Vocab
from jobi_tf.errors import ConfigError, DatasetFormatError, JobiError
from jobi_tf.presets import apply_preset
from jobi_tf.runs import RunFolder
from jobi_tf.types import SPLITS

__all__ = ["Dataset", "Embeddings", "Run", "load_dataset", "train", "load_run"]

#: Names `load_dataset` resolves itself; anything else must be a folder.
_SYNTHETIC = "synthetic"


@contextlib.contextmanager
def _python_errors() -> Iterator[None]:
    """Config errors raised inside name the field a Python caller passed, not its CLI flag."""
    try:
        yield
    except ConfigError as exc:
        raise exc.for_python() from None


@dataclasses.dataclass(frozen=True)
class Dataset:
    """A knowledge graph with its vocabularies and id-encoded splits, ready to train on.

    Attributes:
        entities, relations: the vocabularies (id = position).
        index: the id-encoded splits and lookup tables (`jobi_tf.data.index.KGIndex`).
        data: how to load it again (recorded in a run's ``config.json``); None for triples
            given in memory, which `train` writes into the run folder instead.
        splits: the label triples given in memory, else None.
    """

    entities: Vocab
    relations: Vocab
    index: KGIndex
    data: DataConfig | None
    splits: Mapping[str, np.ndarray] | None = None

    @property
    def num_entities(self) -> int:
        return self.index.num_entities

    @property
    def num_relations(self) -> int:
        return self.index.num_relations

    def triples(self, split: str) -> np.ndarray:
        """The labels of a split as a str ``(N, 3)`` array."""
        ids = self.index.split(split)
        return np.stack(
            [self.entities.labels[ids[:, 0]], self.relations.labels[ids[:, 1]], self.entities.labels[ids[:, 2]]], axis=1
        )

    def __repr__(self) -> str:
        sizes = ", ".join(f"{s}={len(self.index.split(s))}" for s in SPLITS)
        return f"Dataset({self.num_entities} entities, {self.num_relations} relations, {sizes})"


def load_dataset(
    source: str | os.PathLike[str] | Mapping[str, Any] | DataConfig = _SYNTHETIC,
    *,
    data_dir: str | os.PathLike[str] | None = None,
    seed: int = 0,
) -> Dataset:
    """Load a graph.

    Args:
        source: a benchmark name (``"fb15k-237"``, ``"wn18rr"``, ...: downloaded once through
            TensorFlow Datasets, or read offline from ``data_dir`` or ``$JOBI_TF_DATA_DIR``),
            ``"synthetic"`` (the built-in typed graph), a folder with ``train.txt``,
            ``valid.txt``, ``test.txt``, a `DataConfig`, or in-memory triples
            ``{"train": [(head, relation, tail), ...], "valid": ..., "test": ...}``.
        data_dir: with a benchmark name, its local copy.
        seed: the synthetic graph's seed.
    """
    from jobi_tf.datasets import NAMES
    from jobi_tf.loading import load_index

    if isinstance(source, Mapping):
        return _from_triples(source)
    with _python_errors():
        if isinstance(source, DataConfig):
            cfg = source
        elif str(source).strip().lower().replace("_", "-") in (*NAMES, _SYNTHETIC):
            name = str(source).strip().lower().replace("_", "-")
            cfg = DataConfig(dataset=name, data_dir=None if data_dir is None else str(data_dir))
        elif Path(source).is_dir():
            cfg = DataConfig(dataset=None, data_dir=str(source))
        else:
            raise JobiError(
                f"{source}: neither a known dataset ({', '.join((*NAMES, _SYNTHETIC))}) nor a folder "
                "with train.txt, valid.txt, test.txt"
            )
        entities, relations, index = load_index(cfg, seed=seed)
    return Dataset(entities, relations, index, cfg)


def _from_triples(splits: Mapping[str, Any]) -> Dataset:
    missing = [s for s in SPLITS if s not in splits]
    if missing:
        raise DatasetFormatError("triples", f"lacks the split(s) {', '.join(missing)}; give train, valid and test")
    arrays = {}
    for split in SPLITS:
        rows = np.asarray(splits[split], dtype=str)
        if rows.size == 0:
            rows = rows.reshape(0, 3)
        if rows.ndim != 2 or rows.shape[1] != 3:
            raise DatasetFormatError(
                f"triples[{split!r}]", f"must be (head, relation, tail) rows; got shape {rows.shape}"
            )
        odd = rows == ""
        for char in "\t\n\r":  # a label the run folder's text files could not hold
            odd |= np.char.find(rows, char) >= 0
        bad = np.flatnonzero(odd.any(axis=1))
        if len(bad):
            raise DatasetFormatError(
                f"triples[{split!r}]", f"row {bad[0]}: a label is empty or holds a tab or line break: {rows[bad[0]]}"
            )
        arrays[split] = rows
    if len(arrays["train"]) == 0:
        raise DatasetFormatError("triples['train']", "is empty")
    entities, relations, index = build_index(arrays, "triples")
    return Dataset(entities, relations, index, None, arrays)


def train(
    data: Dataset | str | os.PathLike[str] | Mapping[str, Any] | DataConfig = _SYNTHETIC,
    *,
    model: str | None = None,
    dim: int | None = None,
    joint: bool | None = None,
    p: float | None = None,
    run_dir: str | os.PathLike[str] | None = None,
    config: RunConfig | None = None,
    preset: str | None = None,
    verbose: int = 0,
    **settings: Any,
) -> Run:
    """Train (or resume, or reload when finished) a run and return it.

    Args:
        data: a `Dataset`, or anything `load_dataset` takes.
        model, dim, joint, p: the scorer, its size, JoBi's pair head and the share of biased
            negatives (``joint=True, p=0.3`` is JoBi); unset ones keep ``config``'s values.
        run_dir: the run folder; None makes a new temporary folder (kept after the run,
            so `load_run` can read it later: its path is ``Run.path``). An existing
            folder of the same run resumes it.
        config: a full `RunConfig` to start from (its ``data`` is replaced by ``data``).
        preset: a named recipe (`jobi_tf.presets.PRESETS`, e.g. ``"kbc"``, with its settings
            for the named dataset) applied to ``config``; the settings given here win over it.
        verbose: Keras's progress output (0 silent, 1 a bar, 2 one line per epoch).
        **settings: any other field of the run's config by name: ``epochs``, ``batch_size``,
            ``neg``, ``loss``, ``reciprocal``, ``regularizer``, ``lr``, ``seed``, ...

    The caller's global random states (Python, NumPy, TensorFlow, Keras) are left as they were.
    """
    from jobi_tf import regimes
    from jobi_tf.training import train as train_run

    dataset = data if isinstance(data, Dataset) else load_dataset(data)
    named = {"model": model, "dim": dim, "joint": joint, "p": p}
    settings = {**{k: v for k, v in named.items() if v is not None}, **settings}
    with _python_errors():
        base = config or RunConfig()
        if preset is not None:
            name = dataset.data.name if dataset.data is not None else None
            base = apply_preset(base, preset, explicit=set(settings), dataset=name)
        cfg = with_settings(base, settings)  # checked before any folder is made
        regimes.check(cfg)
        folder = RunFolder(tempfile.mkdtemp(prefix="jobi-tf-run-") if run_dir is None else run_dir)
        cfg = dataclasses.replace(cfg, data=_data_config(dataset, folder))
        train_run(cfg, folder.path, verbose=verbose, data=(dataset.entities, dataset.relations, dataset.index))
    return load_run(folder.path, data=dataset)


def _data_config(dataset: Dataset, folder: RunFolder) -> DataConfig:
    """Where the run's config says its data is; in-memory triples are written into the folder."""
    if dataset.data is not None:
        return dataset.data
    folder.data.mkdir(parents=True, exist_ok=True)
    for split in SPLITS:
        path = folder.data / f"{split}.txt"
        write_triples(path, dataset.index.split(split), dataset.entities.labels, dataset.relations.labels)
    return DataConfig(dataset=None, data_dir=str(folder.data.resolve()))


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


class Run:
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
        if isinstance(split_or_triples, str):
            return evaluator.evaluate(self.model, split_or_triples, tails_only=tails_only, progress=progress)
        ids = self._encode_triples(split_or_triples)
        return evaluator.metrics_from_ranks(evaluator.ranks(self.model, ids, tails_only=tails_only))

    def evaluate_relations(self, split: str = "test", *, eval_config: EvalConfig | None = None) -> dict:
        """Filtered MRR and Hits@1/3/10 of relation prediction: the true relation of each
        ``(h, ?, t)`` of a split ranked among all relations, other known ones removed."""
        return self.evaluator(eval_config).relation_metrics(self.model, split)

    def evaluator(self, eval_config: EvalConfig | None = None, rank_type: str | None = None):
        """The `jobi_tf.evaluation.FilteredEvaluator` over the run's data (one per setting)."""
        from jobi_tf.evaluation import FilteredEvaluator

        cfg = eval_config or self.config.eval
        if rank_type is not None:
            with _python_errors():
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
        if filter_known not in self._scorers:
            from jobi_tf.export import known_facts
            from jobi_tf.scorer_module import scorer_module

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
        writes (`jobi_tf.export.export_run`), the run's calibration included.

        ``export_settings``: ``version``, ``force``, ``filter_known``, ``typed``, ``pair_head``
        (`ExportConfig`).
        """
        from jobi_tf.export import export_run

        with _python_errors():
            cfg = ExportConfig(**export_settings)
        train_triples = self.data.index.train if cfg.filter_known or cfg.typed else None
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
    return Run(folder, config, folder.restore_model(config), data)
