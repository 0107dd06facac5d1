"""Evaluation: the paper's filtered ranking (`ranking`, counted a block of entities at a time
by `block_ranking`), and scores turned into probabilities (`calibration`).
"""
