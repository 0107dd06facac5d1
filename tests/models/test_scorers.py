"""Scorers against NumPy references of the papers' formulas, on random inputs."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from jobi_tf.models.scorers import SCORERS, get_scorer


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


@pytest.mark.parametrize("name", sorted(SCORERS))
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
