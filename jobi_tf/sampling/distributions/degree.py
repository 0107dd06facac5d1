"""In proportion to the entity's training triples (as PyTorch-BigGraph's batch negatives draw them)."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from jobi_tf.sampling.distributions import NegativeDistribution, training_ends

__all__ = ["Degree", "log_ratio"]


class Degree(NegativeDistribution):
    """A uniform pick among every training triple's two ends: each entity in proportion to its
    degree, with one table of ``2 x`` training triples int32 and one gather per negative."""

    kind = "degree"

    def __init__(self, index) -> None:
        super().__init__(index)
        self.ends = training_ends(index)
        self._ends = tf.constant(self.ends)

    def draw(self, shape, seed):
        end, _ = tf.unstack(tf.random.experimental.stateless_split(seed, num=2))
        pick = tf.random.stateless_uniform(shape, end, minval=0, maxval=tf.size(self._ends, tf.int64), dtype=tf.int64)
        return tf.gather(self._ends, pick)

    def log_q(self):
        return log_ratio(self.degree_share(), floor=1.0 / len(self.ends))

    def degree_share(self) -> np.ndarray:
        """float64 ``(E,)``: each entity's share of the ends, ``Q(e)`` of a draw by degree."""
        return np.bincount(self.ends, minlength=self.num_entities) / len(self.ends)


def log_ratio(q: np.ndarray, floor: float) -> np.ndarray:
    """float32 ``log(q * E)`` of a draw's probabilities ``q`` (``(E,)``); a ratio below ``floor``
    (an entity the draw never picks) is raised to it, so its correction stays finite."""
    return np.log(np.maximum(np.asarray(q, np.float64) * len(q), floor)).astype(np.float32)


DISTRIBUTION = Degree
