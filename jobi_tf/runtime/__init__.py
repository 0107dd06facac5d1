"""What every stage shares: errors, constants, the run lock (`runlock`), atomic writes, random
states, process-wide TensorFlow settings (`tf_settings`) and the plug-in folders' registry
(`plugins`). Nothing here imports another stage (the run folder, which holds a `RunConfig`,
is `jobi_tf.config.runs`).
"""
