"""``python -m jobi_tf.cli`` runs the ``jobi-tf`` command."""

from jobi_tf.cli.main import entry_point

entry_point()
