"""Export: the triple scorer as a versioned SavedModel for TensorFlow Serving (`savedmodel`);
what it serves (`scorer_module`) and the lookups it reads (`served_tables`).
"""
