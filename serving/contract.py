"""The serving contract of a jobi-tf export: its signatures and their input and output names.

Plain data, no TensorFlow: the export (`jobi_tf.export.savedmodel`) builds its SavedModel signatures
from these names and the clients (`jobi_tf.serving.client`) build and read requests with
them, so the two cannot drift (tests/test_export.py compares a written export with them).

signature          inputs                                   outputs
score              head, relation, tail ``[B]``              score, found ``[B]``
predict_tail       head, relation ``[B]``; k scalar          tails, scores ``[B, k]``; found ``[B]``
predict_head       relation, tail ``[B]``; k scalar          heads, scores ``[B, k]``; found ``[B]``
predict_relation   head, tail ``[B]``; k scalar              relations, scores ``[B, k]``; found ``[B]``

``*_typed`` (an export made with ``typed``) answer among the entities seen in the slot;
``*_soft_typed`` (``typed`` and ``pair_head``) also among those the pair head places there
with probability at least ``min_pair_probability``. ``*_approximate`` (an export made
with ``cells``) rank only the rows of the ``probe`` cells nearest the query
(`jobi_tf.export.cells`). A calibrated export adds
`OPTIONAL_OUTPUTS`.
"""

from __future__ import annotations

__all__ = [
    "SIGNATURES",
    "TYPED_SIGNATURES",
    "SOFT_TYPED_SIGNATURES",
    "APPROXIMATE_SIGNATURES",
    "DEFAULT_SIGNATURE",
    "INPUTS",
    "OUTPUTS",
    "OPTIONAL_OUTPUTS",
    "STRING_INPUTS",
    "FLOAT_INPUTS",
    "METADATA_FILE",
]

#: Every export's signatures.
SIGNATURES = ("score", "predict_tail", "predict_head", "predict_relation")
#: Added by a ``typed`` export.
TYPED_SIGNATURES = ("predict_tail_typed", "predict_head_typed")
#: Added by a ``typed`` export with the pair head.
SOFT_TYPED_SIGNATURES = ("predict_tail_soft_typed", "predict_head_soft_typed")
#: Added by an export with cells (``--cells``): top-k among the rows of the ``probe`` best cells.
APPROXIMATE_SIGNATURES = ("predict_tail_approximate", "predict_head_approximate")
#: What ``serving_default`` is.
DEFAULT_SIGNATURE = "predict_tail"

#: Input names of each signature, in the order a query reads them.
INPUTS: dict[str, tuple[str, ...]] = {
    "score": ("head", "relation", "tail"),
    "predict_tail": ("head", "relation", "k"),
    "predict_head": ("relation", "tail", "k"),
    "predict_relation": ("head", "tail", "k"),
    "predict_tail_typed": ("head", "relation", "k"),
    "predict_head_typed": ("relation", "tail", "k"),
    "predict_tail_soft_typed": ("head", "relation", "k", "min_pair_probability"),
    "predict_head_soft_typed": ("relation", "tail", "k", "min_pair_probability"),
    "predict_tail_approximate": ("head", "relation", "k", "probe"),
    "predict_head_approximate": ("relation", "tail", "k", "probe"),
}
#: Output names of each signature (a calibrated export adds `OPTIONAL_OUTPUTS`).
OUTPUTS: dict[str, tuple[str, ...]] = {
    "score": ("score", "found"),
    "predict_tail": ("tails", "scores", "found"),
    "predict_head": ("heads", "scores", "found"),
    "predict_relation": ("relations", "scores", "found"),
    "predict_tail_typed": ("tails", "scores", "found"),
    "predict_head_typed": ("heads", "scores", "found"),
    "predict_tail_soft_typed": ("tails", "scores", "found"),
    "predict_head_soft_typed": ("heads", "scores", "found"),
    "predict_tail_approximate": ("tails", "scores", "found"),
    "predict_head_approximate": ("heads", "scores", "found"),
}
#: Outputs of a calibrated export (``jobi-tf calibrate``): in ``score``, the others.
OPTIONAL_OUTPUTS = ("probability", "probabilities")
#: Inputs that are ``[B]`` string names; ``k`` and ``probe`` are int32 scalars, these a float32 scalar:
STRING_INPUTS = ("head", "relation", "tail")
FLOAT_INPUTS = ("min_pair_probability",)
#: Extra file of a version folder TensorFlow Serving ignores: what was exported, from where, how.
METADATA_FILE = "assets.extra/jobi_tf.json"
