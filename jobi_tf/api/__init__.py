"""The Python API: load a graph, train, evaluate, ask top-k by name, export.

Everything the CLI does, from Python, without reading internal modules::

    import jobi_tf

    data = jobi_tf.load_dataset("fb15k-237")            # a name, a folder, or in-memory triples
    run = jobi_tf.train(data, joint=True, p=0.3, epochs=50)
    run.metrics["test"]["mrr"]
    run.predict_tails("/m/02mjmr", "/people/person/nationality", k=5)
    run = jobi_tf.load_run(run.path)                  # later, from the run folder alone
    jobi_tf.advise(data, hours=1).command             # 1-vs-all or sampled JoBi, for this CPU

A `Run` is a run folder (`jobi_tf.config.runs.RunFolder`) with its model loaded. Predictions go
through the export's `jobi_tf.export.scorer_module.TripleScorerModule`, so Python and TensorFlow Serving
answer with the same code. Errors name the config field (``batch_size``), not a CLI flag.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from collections.abc import Mapping
from typing import Any

from jobi_tf.api.data import SYNTHETIC, Dataset, load_dataset, python_errors
from jobi_tf.api.run import Embeddings, Run, load_run
from jobi_tf.config import DataConfig, RunConfig, with_settings
from jobi_tf.config.runs import RunFolder
from jobi_tf.data.triples import write_triples
from jobi_tf.planning.advice import Advice
from jobi_tf.planning.presets import apply_preset
from jobi_tf.runtime.tf_settings import start_tensorflow
from jobi_tf.runtime.types import SPLITS

__all__ = ["Dataset", "Embeddings", "Run", "load_dataset", "train", "train_from_config", "load_run", "advise", "Advice"]


def train(
    data: Dataset | str | os.PathLike[str] | Mapping[str, Any] | DataConfig = SYNTHETIC,
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
        model: the scorer (``complex``, ``distmult``, ``simple``, ``tucker``); unset: ``config``'s.
        dim: its size (components per part); unset: ``config``'s.
        joint: JoBi's pair head (``joint=True, p=0.3`` is JoBi); unset: ``config``'s.
        p: the share of biased negatives; unset: ``config``'s.
        run_dir: the run folder; None makes a new temporary folder (kept after the run,
            so `load_run` can read it later: its path is ``Run.path``). An existing
            folder of the same run resumes it.
        config: a full `RunConfig` to start from (its ``data`` is replaced by ``data``).
        preset: a named recipe (`jobi_tf.planning.presets.PRESETS`, e.g. ``"kbc"``, with its settings
            for the named dataset) applied to ``config``; the settings given here win over it.
        verbose: Keras's progress output (0 silent, 1 a bar, 2 one line per epoch).
        **settings: any other field of the run's config by name: ``epochs``, ``batch_size``,
            ``neg``, ``loss``, ``reciprocal``, ``regularizer``, ``lr``, ``seed``, ...

    The defaults are ``jobi-tf train``'s: the recommended sampled recipe (1000 x 100 negatives
    shared by the batch, biased ones by runs of 10, validation MRR every epoch, patience 10);
    ``preset="paper"`` gives the paper's settings.

    The caller's global random states (Python, NumPy, TensorFlow, Keras) are left as they were.
    """
    dataset = data if isinstance(data, Dataset) else load_dataset(data)
    named = {"model": model, "dim": dim, "joint": joint, "p": p}
    settings = {**{k: v for k, v in named.items() if v is not None}, **settings}
    with python_errors():
        cfg = _run_config(config or RunConfig(), preset, settings, dataset)  # checked before any folder is made
        folder = RunFolder(tempfile.mkdtemp(prefix="jobi-tf-run-") if run_dir is None else run_dir)
        cfg = dataclasses.replace(cfg, data=_data_config(dataset, folder))
        train_from_config(cfg, folder.path, verbose=verbose, data=dataset)
    return load_run(folder.path, data=dataset)


def train_from_config(
    config: RunConfig,
    run_dir: str | os.PathLike[str],
    *,
    verbose: int | None = 0,
    data: Dataset | None = None,
) -> dict[str, Any]:
    """Train (or resume, or reread when finished) the run a whole `RunConfig` describes, and
    return its metrics: what ``jobi-tf train`` and each cell of ``jobi-tf grid`` do.

    Why beside `train`: a command line and a grid hold a finished config, not keywords, and
    they need the metrics rather than a loaded model (loading a 1.9M-entity table only to
    print MRR would double the memory). A worker of a multi-worker cluster that is not the
    chief writes nothing and gets its own progress only: no ``"test"`` key.

    Errors are `jobi_tf.runtime.errors.ConfigError`s naming the config field; the CLI names the flag.

    Args:
        config: the run; its ``data`` says which graph, unless ``data`` is given.
        run_dir: the run folder; rerunning with the same folder resumes.
        verbose: Keras's progress output (0 silent, 1 a bar, 2 a line per epoch; None lets
            Keras choose).
        data: the graph ``config.data`` names, already loaded.
    """
    start_tensorflow()  # quietly, before the trainer imports it
    from jobi_tf.training.trainer import train as train_run

    loaded = None if data is None else (data.entities, data.relations, data.index)
    return train_run(config, run_dir, verbose=verbose, data=loaded).metrics


def advise(
    data: Dataset | str | os.PathLike[str] | Mapping[str, Any] | DataConfig,
    hours: float,
    *,
    rank: int = 200,
    matmul_dtype: str = "auto",
    epoch_seconds: float | None = None,
) -> Advice:
    """Which regime to train ``data`` with in ``hours`` on this CPU: 1-vs-all (``--preset
    kbc-fast``) or sampled JoBi (``--joint --p 0.3``), with the command and the reason.

    Why: on the graphs measured here with 2 or more training triples per entity, 1-vs-all
    passed sampled JoBi's converged model within 2 to 4 epochs, but its epoch scores every
    entity for every query; whether those epochs fit depends on this CPU, so a few kbc-fast
    training steps are timed here on a stand-in graph of up to 20,000 entities and scaled to
    the graph's epoch (`jobi_tf.planning.advice`, with the measurements behind the rule).

    Args:
        data: a `Dataset`, or anything `load_dataset` takes.
        hours: the training budget.
        rank: ComplEx's rank (``--dim``).
        matmul_dtype: ``auto`` (as training chooses: bfloat16 products where the CPU has
            bfloat16 dot products), ``float32`` or ``bfloat16``.
        epoch_seconds: one 1-vs-all epoch's seconds to decide with instead of timing steps.

    Returns:
        An `Advice`: ``.regime``, ``.command``, ``.reason``, ``.epoch_seconds``, ``.probe``;
        ``.to_dict()`` for all of it.
    """
    start_tensorflow()
    from jobi_tf.planning.advice import advise as advise_graph

    dataset = data if isinstance(data, Dataset) else load_dataset(data)
    with python_errors():
        return advise_graph(
            dataset.index, hours, data=dataset.data, rank=rank, matmul_dtype=matmul_dtype, epoch_seconds=epoch_seconds
        )


def _run_config(base: RunConfig, preset: str | None, settings: dict[str, Any], dataset: Dataset) -> RunConfig:
    """``base`` with the ``preset`` (for the dataset's name) and then the ``settings`` applied,
    checked as its regime requires."""
    from jobi_tf import regimes

    if preset is not None:
        name = dataset.data.name if dataset.data is not None else None
        base = apply_preset(base, preset, explicit=set(settings), dataset=name)
    cfg = with_settings(base, settings)
    regimes.check(cfg)
    return cfg


def _data_config(dataset: Dataset, folder: RunFolder) -> DataConfig:
    """Where the run's config says its data is; in-memory triples are written into the folder."""
    if dataset.data is not None:
        return dataset.data
    folder.data.mkdir(parents=True, exist_ok=True)
    for split in SPLITS:
        path = folder.data / f"{split}.txt"
        write_triples(path, dataset.index.split(split), dataset.entities.labels, dataset.relations.labels)
    return DataConfig(dataset=None, data_dir=str(folder.data.resolve()))
