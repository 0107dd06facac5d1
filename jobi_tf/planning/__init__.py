"""Planning: what to train, before a run starts.

`presets` names recipes, `grid`/`grid_spec` lay out and run many runs, `advice` (with
`regime_rule` and `step_probe`) chooses a regime for a graph, a CPU and a budget. A stage
above `jobi_tf.training`: a grid and a step probe train through it.
"""
