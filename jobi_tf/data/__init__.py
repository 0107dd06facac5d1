"""Dataset files → vocabularies → integer index arrays (all NumPy, no TensorFlow)."""
