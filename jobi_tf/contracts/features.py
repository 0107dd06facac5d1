"""The sampler → model contract: every tensor a training batch may hold, named once.

A training batch is a dict (what ``tf.data``, Keras's ``fit`` and ``tf.distribute`` carry),
but its keys are the `Feature` constants below, each stating its dtype, its shape, which rows
it has and who writes it; `jobi_tf.sampling.batch_plan.BatchPlan` says which of them a run's batches
hold. So the shape promise lives here, not in two files that must be read side by side.

Why a ``str`` subclass and not a dataclass of tensors: Keras splits a batch across replicas
and traces it as a nested structure of tensors; a dict of plain-string-equal keys is one
such structure everywhere (a ``Feature`` is the string ``"triples"``, so batches built by hand
with plain strings keep working), while the attributes travel with the key.

Shapes use ``B`` (positives in the batch), ``K`` (negatives per positive), ``K_b`` and
``K_u`` (biased and uniform negatives per positive when uniform ones are shared), ``C``
(``--shared-negatives``), ``C_b`` (``--biased-chunk``), ``n`` (``--pair-every``) and ``E``
(entities).
"""

from __future__ import annotations

__all__ = [
    "Feature",
    "FEATURES",
    "POSITIVE",
    "CHUNK",
    "BIASED_RUN",
    "PAIR_ROW",
    "TRIPLES",
    "CANDIDATES",
    "CORRUPT_TAIL",
    "BIASED",
    "VALID_NEGATIVE",
    "PAIR_LABELS",
    "POSITIVE_CORRUPT_TAIL",
    "SHARED_CANDIDATES",
    "SHARED_CORRUPT_TAIL",
    "CHUNK_CANDIDATES",
    "CHUNK_CORRUPT_TAIL",
    "PAIR_LABELS_TAIL",
    "PAIR_LABELS_HEAD",
    "NEGATIVE_LOG_Q",
    "NEGATIVE_PRIOR",
    "QUERY_IS_TAIL",
    "ANSWER_LABELS",
    "QUERY_PAIR_LABELS",
]

#: What one row of a feature stands for (its first dimension): a positive (``B`` rows), a
#: chunk of ``C`` positives (``B / C``), a run of ``C_b`` positives (``B / C_b``) or a
#: positive the pair head trains on (``B / n``).
POSITIVE, CHUNK, BIASED_RUN, PAIR_ROW = "positive", "chunk", "biased run", "pair row"


class Feature(str):
    """One tensor of a training batch: its key, dtype, shape and writer.

    Args:
        key: the dict key (the feature *is* this string).
        dtype: ``"int32"``, ``"bool"`` or ``"float32"``.
        shape: the symbolic shape, e.g. ``("B", "K")`` (see the module docstring).
        rows: what a row is (`POSITIVE`, `CHUNK`, `BIASED_RUN` or `PAIR_ROW`); a head trained
            on every n-th positive strides `POSITIVE` features and keeps the others whole.
        writer: the function that writes it.
        doc: what a value means.
    """

    dtype: str
    shape: tuple[str | int, ...]
    rows: str
    writer: str
    doc: str

    def __new__(cls, key: str, dtype: str, shape: tuple, rows: str, writer: str, doc: str) -> Feature:
        feature = super().__new__(cls, key)
        feature.dtype, feature.shape, feature.rows, feature.writer, feature.doc = dtype, shape, rows, writer, doc
        return feature

    def __reduce__(self):  # pickles (and deep-copies) as the plain key
        return (str, (str(self),))


_SAMPLER = "jobi_tf.sampling.negatives.NegativeSampler"
_SLOTS = "jobi_tf.sampling.negatives.NegativeSampler.dense_pair_labels"
_QUERIES = "jobi_tf.sampling.pipelines.make_query_dataset"

TRIPLES = Feature(
    "triples",
    "int32",
    ("B", 3),
    POSITIVE,
    "jobi_tf.sampling.pipelines",
    "the positives (head, relation, tail); with --biased-chunk sorted by relation, then corrupted side",
)
CANDIDATES = Feature(
    "candidates", "int32", ("B", "K"), POSITIVE, _SAMPLER, "each positive's own negatives (K_b of them when shared)"
)
CORRUPT_TAIL = Feature("corrupt_tail", "bool", ("B", "K"), POSITIVE, _SAMPLER, "a candidate replaces the tail")
BIASED = Feature(
    "biased", "bool", ("B", "K"), POSITIVE, _SAMPLER, "a candidate came from its slot (provenance=True only)"
)
VALID_NEGATIVE = Feature(
    "valid_negative", "bool", ("B", "K"), POSITIVE, _SAMPLER, "False where a candidate equals the entity it replaces"
)
PAIR_LABELS = Feature(
    "pair_labels",
    "float32",
    ("B / n", "K"),
    PAIR_ROW,
    _SAMPLER,
    "1 where a candidate was seen in its slot in train; the pair head's positives' rows only",
)
POSITIVE_CORRUPT_TAIL = Feature(
    "positive_corrupt_tail", "bool", ("B",), POSITIVE, _SAMPLER, "the side of a positive (--corrupt-side per-positive)"
)
SHARED_CANDIDATES = Feature(
    "shared_candidates", "int32", ("B / C", "K_u"), CHUNK, _SAMPLER, "uniform negatives shared by a chunk"
)
SHARED_CORRUPT_TAIL = Feature(
    "shared_corrupt_tail", "bool", ("B", "K_u"), POSITIVE, _SAMPLER, "the side each shared negative replaces"
)
CHUNK_CANDIDATES = Feature(
    "chunk_candidates", "int32", ("B / C_b", "K_b"), BIASED_RUN, _SAMPLER, "biased negatives shared by a run"
)
CHUNK_CORRUPT_TAIL = Feature(
    "chunk_corrupt_tail", "bool", ("B", "K_b"), POSITIVE, _SAMPLER, "the side each shared biased negative replaces"
)
NEGATIVE_LOG_Q = Feature(
    "negative_log_q",
    "float32",
    ("B", "K"),
    POSITIVE,
    _SAMPLER,
    "log of each candidate's draw probability over a uniform draw's (0 for biased ones): --logq-correction",
)
NEGATIVE_PRIOR = Feature(
    "negative_prior",
    "float32",
    ("B", "K"),
    POSITIVE,
    _SAMPLER,
    "W x (the slot log counts of each candidate's triple minus the positive's): --slot-prior-in-loss",
)
PAIR_LABELS_TAIL = Feature(
    "pair_labels_tail", "float32", ("B", "E"), POSITIVE, _SLOTS, "1 where an entity was seen as the relation's tail"
)
PAIR_LABELS_HEAD = Feature(
    "pair_labels_head", "float32", ("B", "E"), POSITIVE, _SLOTS, "1 where an entity was seen as the relation's head"
)
QUERY_IS_TAIL = Feature("query_is_tail", "bool", ("B",), POSITIVE, _QUERIES, "the query asks for the tail")
ANSWER_LABELS = Feature("answer_labels", "float32", ("B", "E"), POSITIVE, _QUERIES, "1 at every training answer")
QUERY_PAIR_LABELS = Feature(
    "query_pair_labels", "float32", ("B", "E"), POSITIVE, _QUERIES, "1 where an entity was seen in the asked slot"
)

#: Every feature, by key.
FEATURES: dict[str, Feature] = {
    f: f
    for f in (
        TRIPLES,
        CANDIDATES,
        CORRUPT_TAIL,
        BIASED,
        VALID_NEGATIVE,
        PAIR_LABELS,
        POSITIVE_CORRUPT_TAIL,
        SHARED_CANDIDATES,
        SHARED_CORRUPT_TAIL,
        CHUNK_CANDIDATES,
        CHUNK_CORRUPT_TAIL,
        NEGATIVE_LOG_Q,
        NEGATIVE_PRIOR,
        PAIR_LABELS_TAIL,
        PAIR_LABELS_HEAD,
        QUERY_IS_TAIL,
        ANSWER_LABELS,
        QUERY_PAIR_LABELS,
    )
}
