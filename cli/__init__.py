"""The ``jobi-tf`` command-line application (installed as ``jobi_tf.cli``)."""
