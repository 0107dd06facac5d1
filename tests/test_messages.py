"""Messages name the thing: the unknown dataset (with ``synthetic`` among the known ones),
before TensorFlow loads, and what happens to test triples whose relation train never saw."""

from __future__ import annotations

import logging
import subprocess
import sys

import numpy as np

from jobi_tf.data.index import build_index


def test_an_unknown_dataset_is_refused_naming_the_flag_and_listing_synthetic_before_tensorflow_loads():
    code = (
        "import sys\nfrom click.testing import CliRunner\nfrom jobi_tf.cli.main import main\n"
        "result = CliRunner().invoke(main, ['train', '--dataset', 'nope', '--out', 'never'])\n"
        "print(result.exit_code)\nprint(result.output.strip().splitlines()[-1])\nprint('tensorflow' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == [
        "2",
        "Error: --dataset: unknown dataset 'nope'; known: fb15k-237, fb15k, wn18rr, yago3-10, kinship, umls, "
        "nations, synthetic",
        "False",
    ]


def test_test_triples_with_a_relation_unseen_in_train_are_said_to_be_ranked_and_counted(caplog):
    train = np.array([[f"e{i}", "r0", f"e{(i + 1) % 6}"] for i in range(6)] + [["e0", "r1", "e3"]])
    valid = np.array([["e1", "r1", "e4"]])
    test = np.array([["e2", "r0", "e4"], ["e2", "r9", "e5"]])  # r9: never in train
    with caplog.at_level(logging.WARNING):
        entities, relations, index = build_index({"train": train, "valid": valid, "test": test}, source="tiny")
    warned = [r.getMessage() for r in caplog.records if "relation never seen" in r.getMessage()]
    assert warned == [
        "tiny/test: 1 triples use a relation never seen in train; ranked with its untrained embedding and counted "
        "in the metrics (remove them from the file to leave them out)"
    ]
    assert len(index.test) == 2  # kept: the message says what the metrics count
