"""Flags of a tiny ``jobi-tf train`` run (a 60-entity synthetic graph), shared by the CLI tests."""

from __future__ import annotations


def tiny_flags(epochs: int) -> list[str]:
    sizes = {"synthetic-entities": 60, "synthetic-relations": 3, "synthetic-triples": 600, "dim": 8}
    sizes |= {"batch-size": 100, "neg": 8, "epochs": epochs, "eval-every": 1}
    return [part for flag, value in sizes.items() for part in (f"--{flag}", str(value))] + ["--no-jit"]
