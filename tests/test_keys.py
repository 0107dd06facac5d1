"""Keys built from ids are int64 whatever the ids' dtype (FB1.9M size: 1.9M entities × 3,247 relations)."""

from __future__ import annotations

import numpy as np
import pytest

from jobi_tf.config import EvalConfig
from jobi_tf.data.index import KGIndex
from jobi_tf.data.keys import pack, sorted_contains
from jobi_tf.evaluation.ranking import FilteredEvaluator
from jobi_tf.models import JoBiModel

E, R = 1_900_000, 3_247  # E * R > 2**31: an int32 key wraps


@pytest.mark.parametrize("stride", [R, np.int32(R), np.int64(R)])
def test_pack_is_exact_int64_for_int32_ids(stride):
    heads = np.array([E - 1, E - 2, 0, 123_456], np.int32)
    rels = np.array([R - 1, 7, R - 1, 0], np.int32)
    keys = pack(heads, rels, stride)
    assert keys.dtype == np.int64
    expected = [int(h) * R + int(r) for h, r in zip(heads.tolist(), rels.tolist(), strict=True)]
    assert keys.tolist() == expected
    assert max(expected) > 2**31  # the size where an int32 product (NumPy 1.x's result) wraps


def test_sorted_contains_matches_isin():
    rng = np.random.default_rng(0)
    haystack = np.unique(rng.integers(0, 2**40, 500))
    needles = np.concatenate([haystack[::7], rng.integers(0, 2**40, 200)])
    np.testing.assert_array_equal(sorted_contains(haystack, needles), np.isin(needles, haystack))
    assert not sorted_contains(np.array([], np.int64), needles).any()


def test_filter_holds_at_fb1_9m_ids():
    """A known rival of a test triple at ids near (E, R) is filtered in both directions."""
    h, r, t, rival = E - 1, R - 1, E - 3, E - 2
    splits = {
        "train": np.array([[h, r, rival], [rival, r, t]], np.int32),  # a known tail of (h, r), head of (r, t)
        "valid": np.array([[h, r, rival]], np.int32),
        "test": np.array([[h, r, t]], np.int32),
    }
    index = KGIndex.from_ids(splits, E, R)
    model = JoBiModel(num_entities=E, num_relations=R, model="distmult", dim=1)
    entity = np.zeros((E, 1), np.float32)
    entity[[h, t, rival], 0] = [1.0, 1.0, 2.0]  # the rival outscores the true answer both ways
    model.entity_embeddings.assign(entity)
    model.triple_relations.assign(np.ones((R, 1), np.float32))
    ranks = FilteredEvaluator(index, EvalConfig(eval_batch_size=4)).ranks(model, index.test)
    # Unfiltered, the rival would rank first and push the answer to 2; every other entity scores 0.
    np.testing.assert_array_equal(ranks.get("optimistic"), [1.0, 1.0])
