"""Training: a run from its config to ``metrics.json``.

`trainer.train` builds the data, model and callbacks and runs ``fit`` in the calls `fitting`
cuts it into; `callbacks`, `checkpoints`, `summaries` and `stalls` watch and save it;
`presets` names recipes, `grid`/`grid_spec` run many, `growth` warm-starts on a grown graph.
"""
