"""The served object with approximate top-k signatures: `TripleScorerModule` plus a `CellIndex`.

Why a subclass: the exact signatures stay as they are; an export made with ``--cells`` adds
``predict_tail_approximate`` and ``predict_head_approximate``, which rank only the rows of the
``probe`` cells whose centroids score highest against the query (`jobi_tf.export.cells`).
Each candidate's score is the model's exact score, and known facts are filtered as in the exact
signatures, so the answers differ from the exact ones only by the rows never looked at.
``probe`` is an input, so a client trades recall for latency per request, without a new export.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from jobi_tf.contracts.scorer import Scorer
from jobi_tf.export.cells import CellIndex, Cells
from jobi_tf.export.scorer_module import _K, _NAMES, TripleScorerModule
from jobi_tf.runtime.errors import ExportError

__all__ = ["ApproximateScorerModule"]


class ApproximateScorerModule(TripleScorerModule):
    """`TripleScorerModule` with the two approximate signatures.

    Args:
        *args, **kwargs: `TripleScorerModule`'s.
        cells: `jobi_tf.export.cells.Cells`, from `jobi_tf.export.cells.kmeans_cells`.

    Raises:
        ExportError: a scorer that is not a dot product of a query and a row, or a model with a
            slot prior (its offsets are per entity, not per row of a cell).
    """

    def __init__(self, *args, cells: Cells, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if type(self._scorer).score_candidates is not Scorer.score_candidates:
            raise ExportError(
                f"--cells: the {type(self._scorer).__name__} scorer is not a dot product of query and row"
            )
        if self.slot_log_counts is not None:
            raise ExportError("--cells: a model trained with --slot-prior cannot be served from cells")
        self.cells = CellIndex(cells)

    @tf.function(input_signature=[_NAMES, _NAMES, _K, _K], autograph=False)
    def predict_tail_approximate(
        self, head: tf.Tensor, relation: tf.Tensor, k: tf.Tensor, probe: tf.Tensor
    ) -> dict[str, tf.Tensor]:
        """Top-k tails of each (head, relation) row among the rows of its ``probe`` best cells."""
        return self._approximate("tail", k, probe, head=head, relation=relation)

    @tf.function(input_signature=[_NAMES, _NAMES, _K, _K], autograph=False)
    def predict_head_approximate(
        self, relation: tf.Tensor, tail: tf.Tensor, k: tf.Tensor, probe: tf.Tensor
    ) -> dict[str, tf.Tensor]:
        """Top-k heads of each (relation, tail) row among the rows of its ``probe`` best cells."""
        return self._approximate("head", k, probe, relation=relation, tail=tail)

    def _approximate(self, side: str, k: tf.Tensor, probe: tf.Tensor, **names: tf.Tensor) -> dict[str, tf.Tensor]:
        found, ids = self._ids(**names)
        anchor, r = ids if side == "tail" else ids[::-1]
        queries = self._queries(self.triple_relations)
        query = queries.tail(anchor, r) if side == "tail" else queries.head(r, anchor)  # [B, W]
        candidates = self.cells.candidates(query, probe)  # entity ids [B, (n)]
        rows = self.entities.rows(candidates.flat_values)
        flat = tf.reduce_sum(rows * tf.gather(query, candidates.value_rowids()), axis=-1)  # <query, row>
        known = self.known_tails if side == "tail" else self.known_heads
        if known is not None:
            keys = anchor * self.num_relations + r
            flat = tf.where(known.contains(keys, candidates), tf.constant(-np.inf, flat.dtype), flat)
        scores = candidates.with_flat_values(flat).to_tensor(default_value=-np.inf)  # [B, n_max]
        best, position = tf.math.top_k(scores, k=tf.clip_by_value(k, 0, tf.shape(scores)[1]))
        chosen = tf.gather(candidates.to_tensor(default_value=-1), position, batch_dims=1)
        answers = tf.where(tf.math.is_inf(best), "", self.entity_names.lookup(tf.cast(chosen, tf.int64)))
        return {
            f"{side}s": tf.where(found[:, None], answers, ""),
            "scores": tf.where(found[:, None], best, np.nan),
            "found": found,
        }
