"""Half and half: a coin per negative between uniform and by degree."""

from __future__ import annotations

import tensorflow as tf

from jobi_tf.sampling.distributions.degree import Degree, log_ratio

__all__ = ["Mix"]


class Mix(Degree):
    """``Q = (uniform + degree) / 2``: popular entities drawn more often, every entity still drawn."""

    kind = "mix"

    def draw(self, shape, seed):
        _, coin = tf.unstack(tf.random.experimental.stateless_split(seed, num=2))
        by_degree = super().draw(shape, seed)
        return tf.where(tf.random.stateless_uniform(shape, coin) < 0.5, self.uniform(shape, seed), by_degree)

    def log_q(self):
        share = self.degree_share()
        return log_ratio(0.5 / len(share) + 0.5 * share, floor=1.0 / len(self.ends))


DISTRIBUTION = Mix
