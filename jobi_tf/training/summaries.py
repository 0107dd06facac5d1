"""What a run shows in TensorBoard: grouped scalars, HParams and named embeddings.

One event folder per run (``RUN/tensorboard``), steps counted in epochs from 1 (the epoch a
point describes), tags grouped by what they measure:

* ``loss/triple``, ``loss/pair``, ``loss/relation``, ``loss/total`` (total only when it is
  not the triple loss alone): training losses of each epoch;
* ``valid/mrr``, ``valid/hits@1|3|10``, ``valid/type_inconsistent``: each validation;
* ``best/valid_mrr``, ..., ``best/epoch``: the best validation so far (its weights are the
  ones tested), so HParams compares runs by their best epoch, not their last;
* ``test/mrr``, ..., ``test/type_inconsistent``: the best weights on test, at the best epoch;
* ``speed/positives_per_second``, ``speed/positives_per_second_median``,
  ``speed/epoch_seconds``; ``optimizer/learning_rate``.

The Projector shows the entity table (the most frequent `PROJECTOR_MAX_ENTITIES` entities
of large graphs) and the relation table, labelled with their names; Graphs shows the triple
scorer (what evaluation and the export compute: ids → queries → scores).

Why not Keras's ``TensorBoard`` callback: it writes ungrouped ``epoch_*`` tags, counts
epochs from 0 while test points would count from 1, and puts validation metrics in a second
run named "validation" whose tags never say "valid".
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import TYPE_CHECKING

import keras
import numpy as np
import tensorflow as tf

from jobi_tf.runtime.atomic import disk_errors
from jobi_tf.runtime.types import RANK_METRICS

if TYPE_CHECKING:
    from jobi_tf.training.callbacks import LoopState

__all__ = [
    "RunSummaries",
    "write_hparams",
    "write_test",
    "write_projector",
    "write_graph",
    "HPARAM_METRICS",
    "PROJECTOR_MAX_ENTITIES",
]

logger = logging.getLogger(__name__)

#: The metrics of each evaluation, as named in ``metrics.json``.
METRICS = (*RANK_METRICS, "type_inconsistent")
#: Columns of TensorBoard's HParams table (``jobi-tf grid`` declares them too).
HPARAM_METRICS = tuple(f"best/valid_{m}" for m in METRICS[:4]) + tuple(f"test/{m}" for m in METRICS)
#: Entities shown in the Projector at most (the most frequent in training); it samples
#: beyond ~100,000 points anyway, and a 2M-row copy would double a large run's folder.
PROJECTOR_MAX_ENTITIES = 50_000

_LOSSES = {"triple_loss": "loss/triple", "pair_loss": "loss/pair", "relation_loss": "loss/relation"}
_SPEED = ("positives_per_second", "positives_per_second_median", "epoch_seconds")


class RunSummaries(keras.callbacks.Callback):
    """Writes each epoch's scalars (module docstring); placed after the validation callback,
    whose ``val_*`` logs and ``state`` (best epoch, best validation) it reads.

    Args:
        log_dir: the run's ``tensorboard`` folder.
        state: the loop state the validation callback keeps (``best_epoch``, ``best_valid``).
    """

    def __init__(self, log_dir: Path, state: LoopState) -> None:
        super().__init__()
        self.log_dir = Path(log_dir)
        self.state = state
        self._writer = None

    @property
    def writer(self):
        if self._writer is None:
            self._writer = tf.summary.create_file_writer(str(self.log_dir))
        return self._writer

    def _written(self):
        """A full disk is one line; this callback runs after the epoch's checkpoint is written."""
        return disk_errors(self.log_dir, "TensorBoard events", "the last checkpoint is kept; rerun to resume")

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        with self._written():
            self._epoch_scalars(epoch + 1, logs or {})

    def _epoch_scalars(self, step: int, logs: dict) -> None:
        with self.writer.as_default(step=step):
            for key, tag in _LOSSES.items():
                if key in logs:
                    tf.summary.scalar(tag, logs[key])
            loss, triple = float(logs.get("loss", math.nan)), float(logs.get("triple_loss", math.nan))
            if not math.isnan(loss) and not math.isclose(loss, triple, rel_tol=1e-6):
                tf.summary.scalar("loss/total", loss)  # a pair loss, relation loss or penalty is added
            for key in _SPEED:
                if key in logs:
                    tf.summary.scalar(f"speed/{key}", logs[key])
            rate = keras.ops.convert_to_numpy(self.model.optimizer.learning_rate)
            tf.summary.scalar("optimizer/learning_rate", float(rate))
            if "val_mrr" in logs:
                for m in METRICS:
                    key = "val_" + m.replace("@", "_at_")
                    if key in logs:
                        tf.summary.scalar(f"valid/{m}", logs[key])
                best = self.state.best_valid
                if best:
                    for m in METRICS[:4]:
                        tf.summary.scalar(f"best/valid_{m}", best[m])
                    tf.summary.scalar("best/epoch", self.state.best_epoch)
        self.writer.flush()

    def validation_scalars(self, step: int, metrics: dict) -> None:
        """Every validation's metrics at the run's global step (``valid_by_step/*``), so that
        validations inside an epoch (``--eval-every-steps``) show as a curve of their own."""
        with self._written(), self.writer.as_default(step=step):
            for m in METRICS[:4]:
                if m in metrics:
                    tf.summary.scalar(f"valid_by_step/{m}", metrics[m])
            self.writer.flush()

    def on_train_end(self, logs: dict | None = None) -> None:
        if self._writer is not None:
            with self._written():
                self._writer.flush()


def write_hparams(log_dir: Path, hparams: dict) -> None:
    """Record the run's hyper-parameters (`jobi_tf.config.RunConfig.hparams`) for TensorBoard's
    HParams dashboard."""
    try:
        from tensorboard.plugins.hparams import api as hp
    except ImportError:  # TensorBoard not installed: scalars are still written
        return
    with (
        disk_errors(log_dir, "TensorBoard events", "nothing was trained in this session"),
        tf.summary.create_file_writer(str(log_dir)).as_default(),
    ):
        hp.hparams(hparams, trial_id=Path(log_dir).parent.name)


def write_test(log_dir: Path, test: dict, best_valid: dict, best_epoch: int) -> None:
    """The tested weights' metrics at their epoch: ``test/*``, and ``best/*`` for runs whose
    best weights were chosen without a validation callback (fewer epochs than one interval)."""
    with tf.summary.create_file_writer(str(log_dir)).as_default(step=max(best_epoch, 1)):
        for m in METRICS:
            tf.summary.scalar(f"test/{m}", test[m])
        for m in METRICS[:4]:
            tf.summary.scalar(f"best/valid_{m}", best_valid[m])
        tf.summary.scalar("best/epoch", best_epoch)


def write_projector(log_dir: Path, model, entity_labels: np.ndarray, relation_labels: np.ndarray, train: np.ndarray):
    """The entity and relation tables, with names, for TensorBoard's Projector.

    Large graphs show their `PROJECTOR_MAX_ENTITIES` most frequent training entities
    (metadata: name and training degree). A reciprocal model's inverse rows are named ``r⁻¹``.
    """
    try:
        from tensorboard.plugins import projector
    except ImportError:
        return
    log_dir = Path(log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    num_entities = int(model.entity_embeddings.shape[0])
    degree = np.bincount(train[:, 0], minlength=num_entities) + np.bincount(train[:, 2], minlength=num_entities)
    keep = np.arange(num_entities)
    if num_entities > PROJECTOR_MAX_ENTITIES:
        keep = np.sort(np.argsort(-degree, kind="stable")[:PROJECTOR_MAX_ENTITIES])
    entities = model.entity_rows(keep).numpy()  # only the rows shown: no copy of a 2M-row (or sharded) table
    relations = model.triple_relations.numpy()
    names = [str(x) for x in relation_labels]
    if len(relations) == 2 * len(names):
        names += [f"{x}⁻¹" for x in names]
    shown = zip(entity_labels[keep], degree[keep], strict=True)
    _write_metadata(log_dir / "entities.tsv", ["name", "train_degree"], shown)
    _write_metadata(log_dir / "relations.tsv", None, ((n,) for n in names))
    tables = tf.train.Checkpoint(entities=tf.Variable(entities), relations=tf.Variable(relations))
    # A manager keeps one checkpoint and a relative "checkpoint" index that the Projector finds
    # (a path in its config would be read relative to where TensorBoard was started).
    tf.train.CheckpointManager(tables, str(log_dir), max_to_keep=1, checkpoint_name="embeddings").save()
    config = projector.ProjectorConfig()
    for name, metadata in (("entities", "entities.tsv"), ("relations", "relations.tsv")):
        view = config.embeddings.add()
        view.tensor_name = f"{name}/.ATTRIBUTES/VARIABLE_VALUE"
        view.metadata_path = metadata
    projector.visualize_embeddings(str(log_dir), config)


def write_graph(log_dir: Path, model) -> None:
    """The triple scorer's graph (``score_triples`` on id triples) for TensorBoard's Graphs tab.

    Why this one: it is the test-time model; the training step's XLA graph is large and holds
    the optimizer and sampler, which tell a reader little.
    """
    scorer = tf.function(model.score_triples, input_signature=[tf.TensorSpec([None, 3], tf.int32, name="triples")])
    triple = tf.zeros([1, 3], tf.int32)
    tf.summary.trace_on(graph=True, profiler=False)
    try:
        scorer(triple)  # run once while tracing is on: its graph is recorded
        with tf.summary.create_file_writer(str(log_dir)).as_default():
            tf.summary.trace_export(name="triple_scorer", step=0)
    finally:
        tf.summary.trace_off()


def _write_metadata(path: Path, header: list[str] | None, rows) -> None:
    """A Projector metadata file: tab-separated, a header only with several columns (its format)."""
    clean = str.maketrans({"\t": " ", "\n": " ", "\r": " "})
    lines = ["\t".join(header)] if header else []
    lines += ["\t".join(str(v).translate(clean) for v in row) for row in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
