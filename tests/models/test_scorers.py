"""Scorers against NumPy references of the papers' formulas, on random inputs, and the
contract every scorer of the folder keeps (a new scorer brings its own reference test)."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from jobi_tf.config import MODELS
from jobi_tf.models.scorers import SCORERS, Scorer, get_scorer

BUILT_IN = ("complex", "distmult", "simple")


def _numpy_score(name: str, h: np.ndarray, r: np.ndarray, t: np.ndarray) -> np.ndarray:
    if name == "distmult":
        return np.einsum("bd,bd,bd->b", h, r, t)
    if name == "complex":
        d = h.shape[1] // 2
        hc, rc, tc = (x[:, :d] + 1j * x[:, d:] for x in (h, r, t))
        return np.real(np.sum(hc * rc * np.conj(tc), axis=1))
    if name == "simple":
        d = h.shape[1] // 2
        h_head, h_tail, t_head, t_tail = h[:, :d], h[:, d:], t[:, :d], t[:, d:]
        r_fwd, r_inv = r[:, :d], r[:, d:]
        return 0.5 * (np.einsum("bd,bd,bd->b", h_head, r_fwd, t_tail) + np.einsum("bd,bd,bd->b", t_head, r_inv, h_tail))
    raise AssertionError(name)


def _rows(scorer: Scorer, dim: int, rng: np.random.Generator, n: int = 8) -> tuple[np.ndarray, ...]:
    ew, rw = scorer.entity_width(dim), scorer.relation_width(dim)
    return rng.normal(size=(n, ew)), rng.normal(size=(n, rw)), rng.normal(size=(n, ew))


@pytest.mark.parametrize("name", BUILT_IN)
def test_score_and_all_three_queries_match_numpy(name):
    rng = np.random.default_rng(0)
    scorer = get_scorer(name)
    dim = 5
    ew, rw = scorer.entity_width(dim), scorer.relation_width(dim)
    h, t = rng.normal(size=(8, ew)), rng.normal(size=(8, ew))
    r = rng.normal(size=(8, rw))
    expected = _numpy_score(name, h, r, t)
    as_tf = [tf.constant(x, tf.float64) for x in (h, r, t)]
    np.testing.assert_allclose(scorer.score(*as_tf).numpy(), expected, rtol=1e-10)
    tail_q = scorer.tail_query(as_tf[0], as_tf[1]).numpy()
    head_q = scorer.head_query(as_tf[1], as_tf[2]).numpy()
    np.testing.assert_allclose(np.sum(tail_q * t, axis=1), expected, rtol=1e-10)
    np.testing.assert_allclose(np.sum(head_q * h, axis=1), expected, rtol=1e-10)
    relation_q = scorer.relation_query(as_tf[0], as_tf[2]).numpy()
    np.testing.assert_allclose(np.sum(relation_q * r, axis=1), expected, rtol=1e-10)


def test_widths_follow_the_papers_code():
    # ComplEx 200 = 200 real + 200 imaginary; SimplE 200 = head + tail role of 200 each.
    assert get_scorer("complex").entity_width(200) == 400
    assert get_scorer("simple").relation_width(200) == 400
    assert get_scorer("distmult").entity_width(200) == 200


def test_complex_is_antisymmetric_but_distmult_is_not():
    rng = np.random.default_rng(1)
    h, t = rng.normal(size=(4, 6)), rng.normal(size=(4, 6))
    r = rng.normal(size=(4, 6))
    c, d = get_scorer("complex"), get_scorer("distmult")
    assert not np.allclose(c.score(h, r, t).numpy(), c.score(t, r, h).numpy())
    np.testing.assert_allclose(d.score(h, r, t).numpy(), d.score(t, r, h).numpy())


def test_unknown_model_names_the_argument():
    with pytest.raises(ValueError, match="model="):
        get_scorer("transe")


@pytest.mark.parametrize("name", sorted(SCORERS))
def test_every_scorer_keeps_the_query_contract(name):
    """``score_candidates`` of each query against the missing part's rows gives the triple's
    score, for every scorer; a dot-product scorer's queries are also dotted with the rows, and
    its relation query (when it has one) keeps the same numbers."""
    dim = 4
    scorer = get_scorer(name, dim)
    h, r, t = (tf.constant(x, tf.float32) for x in _rows(scorer, dim, np.random.default_rng(2)))
    score = scorer.score(h, r, t).numpy()
    for query, row in ((scorer.tail_query(h, r), t), (scorer.head_query(r, t), h)):
        every = scorer.score_candidates(query, row).numpy()  # [8, 8]: each query x every candidate
        np.testing.assert_allclose(np.diag(every), score, rtol=1e-4, atol=1e-5)
        if scorer.dot_product:
            np.testing.assert_allclose(tf.reduce_sum(query * row, axis=-1).numpy(), score, rtol=1e-4, atol=1e-5)
    if scorer.has_relation_query():
        relation = scorer.relation_query(h, t)
        np.testing.assert_allclose(np.diag(scorer.score_candidates(relation, r).numpy()), score, rtol=1e-4, atol=1e-5)


def test_a_scorer_overriding_score_candidates_is_not_taken_as_a_dot_product():
    class Far(Scorer):
        def score_candidates(self, queries, rows):
            return -tf.norm(queries[..., None, :] - rows, axis=-1)

    class Scaled(Scorer):
        dot_product = True  # declared: its own matmul, still a dot product

        def score_candidates(self, queries, rows):
            return 2.0 * super().score_candidates(queries, rows)

    assert not Far.dot_product and Scaled.dot_product and Scorer.dot_product
    assert not Far.has_relation_query() and get_scorer("complex").has_relation_query()


def test_score_goes_through_score_candidates_when_not_a_dot_product():
    class Far(Scorer):
        def entity_width(self, dim):
            return dim

        def relation_width(self, dim):
            return dim

        def tail_query(self, h, r):
            return h + r

        def score_candidates(self, queries, rows):  # [B, W] against their own [B, 1, W]
            return -tf.norm(queries[..., None, :] - rows, axis=-1)

    rng = np.random.default_rng(3)
    h, r, t = (rng.normal(size=(6, 3)) for _ in range(3))
    expected = -np.linalg.norm(h + r - t, axis=1)
    np.testing.assert_allclose(Far().score(h, r, t).numpy(), expected, rtol=1e-10)


def test_a_scorer_without_relation_query_says_so_in_one_line():
    with pytest.raises(NotImplementedError, match="the RotatE scorer has no relation_query"):
        get_scorer("rotate", 2).relation_query(tf.ones([1, 4]), tf.ones([1, 4]))


@pytest.mark.parametrize("name", sorted(SCORERS))
def test_every_scorer_is_named_by_its_module(name):
    assert SCORERS[name].kind == name and SCORERS[name].__module__.endswith("." + name.replace("-", "_"))
    assert name in MODELS
