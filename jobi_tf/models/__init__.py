"""Bilinear scorers and the JoBi Keras model."""

from jobi_tf.models.jobi import JoBiModel
from jobi_tf.models.scorers import SCORERS, Scorer, get_scorer

__all__ = ["JoBiModel", "SCORERS", "Scorer", "get_scorer"]
