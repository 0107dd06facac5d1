"""What every stage shares: errors, constants, the run folder (`runs`, `runlock`), atomic
writes, random states, process-wide TensorFlow settings (`tf_settings`) and the plug-in
folders' registry (`plugins`). Nothing here imports another stage.
"""
