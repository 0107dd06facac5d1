"""Training: a run from its config to ``metrics.json``.

`trainer.train` builds the data, model and callbacks and runs ``fit`` in the calls `fitting`
cuts it into; `callbacks`, `checkpoints`, `summaries` and `stalls` watch and save it; `resume`
picks what a run goes on from. What to train (presets, grids, advice) is `jobi_tf.planning`'s;
a warm start on a grown graph is `jobi_tf.growth`'s.
"""
