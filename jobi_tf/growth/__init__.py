"""Growth: a run that starts from another run's rows on a grown graph (``--init-from``,
`warm_start`). Below the training loop, which asks it for the plan and the carried rows."""
