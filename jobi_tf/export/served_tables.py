"""The lookups a jobi-tf SavedModel holds besides its embeddings, and how they are read.

Why apart from `jobi_tf.export.scorer_module`: that module is the signatures (names in, top-k out);
this one is the state they read, each piece made so that an export of any size stays
loadable and fast: vocabularies as ``tf.lookup`` tables over text assets, known facts and
slots as CSR in variables (not graph constants, so ``saved_model.pb`` stays small), a
calibration as per-relation variables, and every table read by value (`read_value`).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from jobi_tf.config import TABLE_DTYPES
from jobi_tf.contracts.scorer import Scorer, not_a_dot_product
from jobi_tf.data.index import CSR
from jobi_tf.evaluation.calibration import Calibration
from jobi_tf.models.hub_route import HubRoute
from jobi_tf.models.slot_prior import SlotPrior, SparseSlotPrior
from jobi_tf.runtime.errors import ExportError

__all__ = [
    "EntityTable",
    "KnownFacts",
    "ServedPrior",
    "calibration_variables",
    "interpolate",
    "read_value",
    "row_ids",
    "top_k",
    "vocab_table",
    "widened_scores",
]


def read_value(variable: tf.Variable) -> tf.Tensor:
    """The variable's value as a tensor, to gather from.

    Why not ``tf.gather(variable, ids)``: a gather on the variable itself (``ResourceGather``)
    puts it in copy-on-read mode, and every dense read after it (the top-k matmul) then
    copies the whole table: +2 ms per FB15k-237 query, more than the matmul itself.
    """
    return variable.value()


def vocab_table(path: str, size: int, *, to_ids: bool) -> tf.lookup.StaticHashTable:
    """name → id (default -1) or id → name (default ""), read from a one-label-per-line asset."""
    line, number = tf.lookup.TextFileIndex.WHOLE_LINE, tf.lookup.TextFileIndex.LINE_NUMBER
    if to_ids:
        init = tf.lookup.TextFileInitializer(path, tf.string, line, tf.int64, number, vocab_size=size)
        return tf.lookup.StaticHashTable(init, default_value=-1)
    init = tf.lookup.TextFileInitializer(path, tf.int64, number, tf.string, line, vocab_size=size)
    return tf.lookup.StaticHashTable(init, default_value="")


def row_ids(spans: tf.RaggedTensor) -> tf.Tensor:
    """int64 ``[n]``: the row of each of ``spans.flat_values``.

    Why not ``spans.value_rowids()``: TensorFlow builds it from a ``[rows, longest row]`` mask, so
    one long row (a well-connected entity's edges, a cell's many counts) makes every row cost as
    much; a search of the row splits costs ``log(rows)`` per value.
    """
    splits = tf.cast(spans.row_splits, tf.int64)
    return tf.searchsorted(splits[1:], tf.range(splits[-1]), side="right", out_type=tf.int64)


#: Entities per block of `top_k` (a query's scores are cut into blocks of this many).
TOP_K_BLOCK = 2048


def top_k(scores: tf.Tensor, k: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """``tf.math.top_k(scores, k)``, the same values and ids (ties: lower id first), by blocks.

    Why: TensorFlow's top-k over all of one query's 1.85M scores is a sizeable part of an exact
    query. The best ``k`` lie in the ``k`` blocks of `TOP_K_BLOCK` scores whose maxima are the
    highest (ties: lower block first, as the ids), so a block maximum (one streaming pass), a
    top-k over the maxima and one over those ``k`` blocks' scores give the same answer, several
    times faster.
    """
    rows, n = tf.shape(scores)[0], tf.shape(scores)[1]
    blocks = (n + TOP_K_BLOCK - 1) // TOP_K_BLOCK
    padded = tf.pad(scores, [[0, 0], [0, blocks * TOP_K_BLOCK - n]], constant_values=-np.inf)  # last ids: last
    grid = tf.reshape(padded, [rows, blocks, TOP_K_BLOCK])
    _, best = tf.math.top_k(tf.reduce_max(grid, axis=2), k=tf.minimum(k, blocks))
    best = tf.sort(best, axis=1)  # in id order, so ties among the candidates keep the lower id first
    candidates = tf.reshape(tf.gather(grid, best, batch_dims=1), [rows, -1])
    values, at = tf.math.top_k(candidates, k=k)
    return values, tf.gather(best, at // TOP_K_BLOCK, batch_dims=1) * TOP_K_BLOCK + at % TOP_K_BLOCK


@tf.function(jit_compile=True, autograph=False)
def widened_scores(rows: tf.Tensor, queries: tf.Tensor) -> tf.Tensor:
    """``[B, E]``: ``<query, row>`` of bfloat16 ``rows`` widened to float32 inside the product.

    Why XLA: it fuses the widening into the product, so the table streams through memory at
    2 bytes a float, on any x86-64 CPU (the widening is a shift, no bfloat16 instructions). A
    TensorFlow cast first would write a float32 copy of the whole table per query, and
    TensorFlow's own bfloat16 product is about 20x slower on CPUs without AVX512-BF16.
    """
    return tf.matmul(queries, tf.cast(rows, queries.dtype), transpose_b=True)


class EntityTable(tf.Module):
    """The served entity table: its rows ``[E, W]`` (variable ``entity_embeddings``), or, for a
    scorer whose candidates' scores are dot products, its columns ``[W, E]`` (``entity_columns``).

    Why the columns: a query's scores are then ``q @ columns``, which reads the table once, in
    order. At 1.85M x 200 floats a whole top-10 query took 47 ms this way against 55 ms for
    NumPy's ``rows @ q``; from rows, 66 ms against 49 (docs/serving.md, two runs on one core).
    An exact top-k is bounded by that read.
    A row is gathered as a column, a strided read of ``W`` floats per id: cheap for a batch's
    queries, not for the 10^5 candidates of an approximate query (``columns=False`` there).

    ``dtype="bfloat16"`` (``--table-dtype``) stores the rows rounded to bfloat16: half the
    bytes to hold and to stream per query; scores are float32 products of the rounded rows
    (`widened_scores`), so the answers are those of a slightly perturbed table.
    """

    def __init__(self, table: np.ndarray, scorer: Scorer, columns: bool = True, dtype: str = "float32") -> None:
        super().__init__(name="entity_table")
        dot = scorer.dot_product
        if dtype not in TABLE_DTYPES:
            raise ExportError(f"--table-dtype: one of {', '.join(TABLE_DTYPES)}, got {dtype!r}")
        if dtype != "float32" and not dot:
            raise ExportError(not_a_dot_product(scorer, f"--table-dtype {dtype}"))
        self.widened = dtype != "float32"
        self.by_column = columns and dot and not self.widened
        self.num_entities = len(table)
        values, name = (
            (np.ascontiguousarray(table.T), "entity_columns") if self.by_column else (table, "entity_embeddings")
        )
        self.values = tf.Variable(tf.cast(values, dtype), trainable=False, name=name)

    def rows(self, ids: tf.Tensor) -> tf.Tensor:
        """``[*ids.shape, W]``: the rows of ``ids``, float32."""
        values = read_value(self.values)
        if not self.by_column:
            return tf.cast(tf.gather(values, ids), tf.float32)
        return tf.transpose(tf.gather(values, ids, axis=1), tf.concat([tf.range(1, tf.rank(ids) + 1), [0]], 0))

    def scores(self, queries: tf.Tensor, scorer: Scorer) -> tf.Tensor:
        """``[B, E]``: every entity's score against each query, by ``scorer.score_candidates``."""
        values = read_value(self.values)
        if self.widened:
            return widened_scores(values, queries)
        return tf.matmul(queries, values) if self.by_column else scorer.score_candidates(queries, values)

    def numpy(self) -> np.ndarray:
        """The rows ``[E, W]`` as float32 NumPy."""
        values = tf.cast(self.values, tf.float32).numpy()
        return values.T if self.by_column else values


class KnownFacts(tf.Module):
    """Training facts of each query key as CSR (see `jobi_tf.data.index.CSR`), held in variables.

    Variables rather than graph constants keep ``saved_model.pb`` small (and under
    protobuf's 2 GiB limit) whatever the graph's size.
    """

    def __init__(self, csr: CSR, name: str) -> None:
        super().__init__(name=name)
        self.keys = tf.Variable(csr.keys.astype(np.int64), trainable=False, name="keys")
        self.offsets = tf.Variable(csr.offsets.astype(np.int64), trainable=False, name="offsets")
        self.values = tf.Variable(csr.values.astype(np.int32), trainable=False, name="values")  # entity ids

    @classmethod
    def optional(cls, csr: CSR | None, name: str) -> KnownFacts | None:
        """``KnownFacts(csr, name)``, or None without facts (the export leaves that lookup out)."""
        return None if csr is None else cls(csr, name)

    def mask(self, scores: tf.Tensor, query_keys: tf.Tensor) -> tf.Tensor:
        """``scores [B, E]`` with the known entities of each row's key set to ``-inf``."""
        cells = tf.stack(self.pairs(query_keys), axis=1)
        minus_inf = tf.fill(tf.shape(cells)[:1], tf.constant(-np.inf, scores.dtype))
        return tf.tensor_scatter_nd_update(scores, cells, minus_inf)

    def pairs(self, query_keys: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """``(rows, entities)``, int64: every entity listed under each row's key, with its row;
        a key's entities in increasing order (`jobi_tf.data.index.CSR` sorts them)."""
        spans = tf.ragged.range(*self.spans(query_keys))
        return row_ids(spans), tf.cast(tf.gather(read_value(self.values), spans.flat_values), tf.int64)

    def spans(self, query_keys: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """``(starts, limits)``, int64: each key's entities are ``values[starts[i]:limits[i]]``
        (empty for a key with none)."""
        keys, offsets = read_value(self.keys), read_value(self.offsets)
        last = tf.shape(keys, out_type=tf.int64)[0] - 1
        pos = tf.minimum(tf.searchsorted(keys, query_keys, out_type=tf.int64), last)
        hit = tf.gather(keys, pos) == query_keys
        return tf.where(hit, tf.gather(offsets, pos), 0), tf.where(hit, tf.gather(offsets, pos + 1), 0)

    def listed(self, scores: tf.Tensor, query_keys: tf.Tensor) -> tf.Tensor:
        """bool, shaped like ``scores [B, E]``: the entities listed under each row's key."""
        return tf.math.is_inf(self.mask(tf.zeros_like(scores), query_keys))  # -inf exactly at the listed cells


def calibration_variables(
    calibration: Calibration | None,
) -> tuple[tf.Variable | None, tf.Variable | None, tf.Variable | None]:
    """``(platt, knots, values)``: a Platt calibration's per-row ``[a, b]`` of
    ``sigma(a * score + b)``, or an isotonic one's per-row piecewise-linear map ``knots ->
    values``; None for the parts the calibration (or its absence) does not use."""
    if calibration is None:
        return None, None, None
    if calibration.method == "platt":
        ab = np.stack([calibration.a, calibration.b], 1).astype(np.float32)
        return tf.Variable(ab, trainable=False, name="platt"), None, None
    knots = tf.Variable(calibration.knots.astype(np.float32), trainable=False, name="isotonic_knots")
    values = tf.Variable(calibration.values.astype(np.float32), trainable=False, name="isotonic_values")
    return None, knots, values


def interpolate(knots: tf.Tensor, values: tf.Tensor, x: tf.Tensor) -> tf.Tensor:
    """Row-wise ``np.interp(x[i], knots[i], values[i])`` (``[B, K]``, ``[B, K]``, ``[B, k]``):
    linear between knots, constant beyond the ends; repeated knots (padding) are skipped."""
    width = tf.shape(knots)[1]
    upper = tf.clip_by_value(tf.searchsorted(knots, x, side="right"), 1, width - 1)
    x0, x1 = tf.gather(knots, upper - 1, batch_dims=1), tf.gather(knots, upper, batch_dims=1)
    y0, y1 = tf.gather(values, upper - 1, batch_dims=1), tf.gather(values, upper, batch_dims=1)
    gap = x1 - x0
    share = tf.clip_by_value(tf.math.divide_no_nan(x - x0, gap), 0.0, 1.0)
    return y0 + share * (y1 - y0)


class ServedPrior(tf.Module):
    """A model's slot prior in an export (`jobi_tf.models.slot_prior`): a 1-vs-all model's dense
    ``[2R, E]`` table (``slot_log_counts``) or a sampled model's sparse counts (``slot_keys``,
    ``slot_values``), and ``w``, with a sampled model's hub route (`jobi_tf.models.hub_route`:
    ``hub_weight`` and ``from_hub``) where it has one; `read` gives the prior over value reads,
    once per call."""

    def __init__(self, prior: SlotPrior | SparseSlotPrior, num_entities: int, num_relations: int) -> None:
        super().__init__(name="slot_prior")
        self.weight, self.num_entities, self.num_relations = prior.weight, num_entities, num_relations
        self.slot_log_counts = self.slot_keys = self.slot_values = self.from_hub = self.hub_weight = None
        if isinstance(prior, SparseSlotPrior):
            keys, values = prior.arrays()
            self.slot_keys = tf.Variable(keys, trainable=False, name="slot_keys")
            self.slot_values = tf.Variable(values, trainable=False, name="slot_values")
            if prior.route is not None:
                self.hub_weight = prior.route.hub_weight
                self.from_hub = tf.Variable(np.asarray(prior.route.from_hub, bool), trainable=False, name="from_hub")
        else:
            table = np.asarray(prior.table.numpy(), np.float32)
            self.slot_log_counts = tf.Variable(table, trainable=False, name="slot_log_counts")

    def sparse_arrays(self) -> tuple[tf.Tensor, tf.Tensor]:
        """``(keys, log counts)`` of a sampled model's sparse counts (an approximate export's)."""
        if self.slot_keys is None:
            raise ValueError("the served prior holds a dense table; build it from sparse counts")
        return read_value(self.slot_keys), read_value(self.slot_values)

    @classmethod
    def optional(cls, prior, num_entities: int, num_relations: int) -> ServedPrior | None:
        return None if prior is None else cls(prior, num_entities, num_relations)

    def read(self) -> SlotPrior | SparseSlotPrior:
        if self.slot_keys is not None:
            keys, values = read_value(self.slot_keys), read_value(self.slot_values)
            route = None if self.from_hub is None else HubRoute(self.hub_weight, read_value(self.from_hub))
            return SparseSlotPrior(self.weight, self.num_entities, self.num_relations, keys, values, route)
        return SlotPrior(read_value(self.slot_log_counts), self.weight, self.num_relations)
