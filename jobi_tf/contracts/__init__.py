"""What the sampler, the model and the objectives agree on, below all three.

`features`: every tensor a training batch may hold (the sampler writes them, the objectives
read them); `objectives`: what a regime asks of a model (each head's features, logits and
loss); `scored_batch`: the scores a batch's objectives share and the rows they used;
`scorer`: what every ``--model`` offers those scores. Why a stage of their own: the sampler
and the model both need them, so with them here neither imports the other.
"""
