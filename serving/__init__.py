"""Client for jobi-tf exports (installed as ``jobi_tf.serving``): TF Serving REST/gRPC, or in-process.

Importing this package never imports TensorFlow, so REST clients run on any machine;
see `jobi_tf.serving.client`.
"""
