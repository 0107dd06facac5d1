"""Cubed moduli of the positive's head, relation and tail rows (N3: Lacroix et al., 2018; kbc's)."""

from __future__ import annotations

import tensorflow as tf

from jobi_tf.contracts.scored_batch import Factors
from jobi_tf.regularizers import Regularizer

__all__ = ["N3"]


class N3(Regularizer):
    """The sum of the cubed component moduli of the positive's head and tail rows and of
    the relation rows its scores used (with 1-vs-all and ``reciprocal``, the forward and the
    inverse row; with k-vs-all, those of each query's representative triple).

    Why cubes: they damp rarely seen entities more than frequent ones (a row is penalised
    each time it is used), which is what lets kbc's 1-vs-all reach its accuracy.

    Args:
        relation_penalty: the factor on the relation rows' terms (1: as entity rows; 0:
            entity rows only). On WN18RR (11 relations) the full penalty drives the relation
            rows to zero and training stalls; a small factor regularises better.
    """

    options = ("relation_penalty",)

    def __init__(self, relation_penalty: float = 1.0) -> None:
        super().__init__(relation_penalty=relation_penalty)
        self.relation_penalty = relation_penalty

    def penalty(self, factors: Factors) -> tf.Tensor:
        cubed = factors.scorer.cubed_norm
        terms = [cubed(factors.head), cubed(factors.tail)]
        if self.relation_penalty:  # (x 1 is exact: runs from before the factor train the same)
            terms += [self.relation_penalty * cubed(x) for x in factors.relations]
        return tf.add_n(terms)


REGULARIZER = N3
