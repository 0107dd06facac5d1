"""Training on several devices or machines: the `tf.distribute` strategy a run uses
(`strategy`), and parameter servers (`ps_training` over the row-sharded tables of `sharding`).
"""
