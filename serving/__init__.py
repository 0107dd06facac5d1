"""TensorFlow Serving client for exported jobi-tf models (installed as ``jobi_tf.serving``).

Importing this package never imports TensorFlow, so clients run on any machine.
"""
