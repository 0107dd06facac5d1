"""The positive against sampled (biased) negatives; an epoch visits every training triple once."""

from __future__ import annotations

from jobi_tf.contracts.objectives import SAMPLED
from jobi_tf.regimes import Regime

__all__ = ["Sampled", "REGIME"]


class Sampled(Regime):
    name = SAMPLED
    options = ("pair_every", "slot_prior", "slot_prior_in_loss", "choose_slot_prior", "neighbourhood")
    samples_negatives = True


REGIME = Sampled
