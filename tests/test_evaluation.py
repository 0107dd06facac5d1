"""FilteredEvaluator against a brute-force NumPy filtered ranking."""

from __future__ import annotations

import numpy as np
import pytest

from jobi_tf.config import EvalConfig
from jobi_tf.data.index import KGIndex
from jobi_tf.evaluation.ranking import FilteredEvaluator, Ranks, rank_metrics
from jobi_tf.models import JoBiModel
from jobi_tf.runtime.errors import ConfigError
from jobi_tf.runtime.types import SPLITS

E, R, DIM = 30, 4, 3
MODELS = ("distmult", "complex", "simple")


# -- references ----------------------------------------------------------------------------


def _all_scores(name: str, ent: np.ndarray, rel: np.ndarray) -> np.ndarray:
    """float64 ``[E, R, E]`` score of every (h, r, t), from the papers' formulas."""
    ent, rel = ent.astype(np.float64), rel.astype(np.float64)
    if name == "distmult":
        return np.einsum("hd,rd,td->hrt", ent, rel, ent)
    d = ent.shape[1] // 2
    if name == "complex":
        ec = ent[:, :d] + 1j * ent[:, d:]
        rc = rel[:, :d] + 1j * rel[:, d:]
        return np.real(np.einsum("hd,rd,td->hrt", ec, rc, np.conj(ec)))
    if name == "simple":
        e_head, e_tail = ent[:, :d], ent[:, d:]
        r_fwd, r_inv = rel[:, :d], rel[:, d:]
        forward = np.einsum("hd,rd,td->hrt", e_head, r_fwd, e_tail)  # <h_head, r, t_tail>
        inverse = np.einsum("td,rd,hd->hrt", e_head, r_inv, e_tail)  # <t_head, r_inv, h_tail>
        return 0.5 * (forward + inverse)
    raise AssertionError(name)


def _brute_force_ranks(scores: np.ndarray, splits: dict, triples: np.ndarray, tails_only=False, filtered=True):
    """(optimistic, pessimistic, tail_query, relations), head queries first, like the evaluator."""
    known = {tuple(x) for s in SPLITS for x in splits[s].tolist()}
    opt, pes, is_tail, rels = [], [], [], []
    for direction in (True,) if tails_only else (False, True):
        for h, r, t in triples.tolist():
            cand = scores[h, r, :] if direction else scores[:, r, t]
            target = t if direction else h
            keep = np.ones(len(cand), bool)
            keep[target] = False
            if filtered:
                for e in range(len(cand)):
                    if ((h, r, e) if direction else (e, r, t)) in known:
                        keep[e] = False
            greater = int(np.sum(cand[keep] > cand[target]))
            equal = int(np.sum(cand[keep] == cand[target]))
            opt.append(1 + greater)
            pes.append(1 + greater + equal)
            is_tail.append(direction)
            rels.append(r)
    return np.array(opt, float), np.array(pes, float), np.array(is_tail), np.array(rels)


def _random_kg(seed: int, n=(80, 20, 20)):
    rng = np.random.default_rng(seed)
    # Heads and tails from a 12-entity core most of the time, so (h, r) and (r, t) often have
    # several known answers and filtering matters.
    every = np.stack(np.meshgrid(np.arange(E), np.arange(R), np.arange(E), indexing="ij"), -1).reshape(-1, 3)
    weight = np.where((every[:, 0] < 12) & (every[:, 2] < 12), 10.0, 1.0)
    chosen = every[rng.choice(len(every), size=sum(n), replace=False, p=weight / weight.sum())]
    splits = {"train": chosen[: n[0]], "valid": chosen[n[0] : n[0] + n[1]], "test": chosen[n[0] + n[1] :]}
    return splits, KGIndex.from_ids(splits, E, R)


def _model(name: str, ent: np.ndarray, rel: np.ndarray) -> JoBiModel:
    dim = ent.shape[1] if name == "distmult" else ent.shape[1] // 2
    model = JoBiModel(num_entities=E, num_relations=R, model=name, dim=dim)
    model.entity_embeddings.assign(ent.astype(np.float32))
    model.triple_relations.assign(rel.astype(np.float32))
    return model


def _random_weights(name: str, seed: int, dim: int = DIM):
    rng = np.random.default_rng(seed)
    width = dim if name == "distmult" else 2 * dim
    return rng.normal(size=(E, width)).astype(np.float32), rng.normal(size=(R, width)).astype(np.float32)


def _assert_well_separated(scores, triples, tails_only=False):
    """No score is within float32 rounding of its target's without being exactly equal to it."""
    for h, r, t in triples.tolist():
        for cand, target in ((scores[h, r, :], scores[h, r, t]), (scores[:, r, t], scores[h, r, t])):
            gap = np.abs(cand - target)
            assert not np.any((gap > 0) & (gap < 1e-4 * (1 + abs(target)))), "near-tie: pick another seed"


def _assert_ranks_equal(got: Ranks, expected):
    opt, pes, is_tail, rels = expected
    np.testing.assert_array_equal(got.optimistic, opt)
    np.testing.assert_array_equal(got.pessimistic, pes)
    np.testing.assert_array_equal(got.get("realistic"), (opt + pes) / 2)
    np.testing.assert_array_equal(got.get("optimistic"), opt)
    np.testing.assert_array_equal(got.get("pessimistic"), pes)
    np.testing.assert_array_equal(got.tail_query, is_tail)
    np.testing.assert_array_equal(got.relations, rels)


# -- filtered ranks ------------------------------------------------------------------------


@pytest.mark.parametrize("name", MODELS)
def test_ranks_match_brute_force(name):
    splits, index = _random_kg(0)
    ent, rel = _random_weights(name, 1)
    scores = _all_scores(name, ent, rel)
    _assert_well_separated(scores, splits["test"])
    model = _model(name, ent, rel)
    # The model's own scores are the reference formula's.
    np.testing.assert_allclose(
        model.score_triples(splits["test"].astype(np.int32)).numpy(),
        scores[splits["test"][:, 0], splits["test"][:, 1], splits["test"][:, 2]],
        rtol=1e-5,
        atol=1e-5,
    )
    got = FilteredEvaluator(index).ranks(model, splits["test"])
    expected = _brute_force_ranks(scores, splits, splits["test"])
    _assert_ranks_equal(got, expected)
    # The test is sensitive to filtering: unfiltered ranks differ somewhere.
    unfiltered = _brute_force_ranks(scores, splits, splits["test"], filtered=False)
    assert not np.array_equal(unfiltered[0], expected[0])
    assert expected[0].max() > 3  # not all trivially first


@pytest.mark.parametrize("name", MODELS)
def test_chunking_and_batching_do_not_change_ranks(name):
    splits, index = _random_kg(2)
    ent, rel = _random_weights(name, 3)
    model = _model(name, ent, rel)
    whole = FilteredEvaluator(index, EvalConfig(eval_batch_size=1000, chunk_size=100_000)).ranks(model, splits["valid"])
    small = FilteredEvaluator(index, EvalConfig(eval_batch_size=5, chunk_size=7)).ranks(model, splits["valid"])
    odd = FilteredEvaluator(index, EvalConfig(eval_batch_size=3, chunk_size=1)).ranks(model, splits["valid"])
    for other in (small, odd):
        for field in ("optimistic", "pessimistic", "tail_query", "relations"):
            np.testing.assert_array_equal(getattr(other, field), getattr(whole, field), err_msg=field)
    scores = _all_scores(name, ent, rel)
    _assert_well_separated(scores, splits["valid"])
    _assert_ranks_equal(small, _brute_force_ranks(scores, splits, splits["valid"]))


def _dyadic_weights(name: str, seed: int):
    """Weights in {-1, -0.5, 0, 0.5, 1}: every float32 score is exact, so ties are exact in any order."""
    rng = np.random.default_rng(seed)
    width = DIM if name == "distmult" else 2 * DIM
    values = np.array([-1.0, -0.5, 0.0, 0.5, 1.0], np.float32)
    ent = values[rng.integers(5, size=(E, width))]
    rel = values[rng.integers(5, size=(R, width))]
    ent[5:10] = ent[0]  # duplicate rows: every query involving entity 0 ties with 5..9
    ent[12] = ent[11]
    return ent, rel


@pytest.mark.parametrize("name", MODELS)
def test_ties_with_exact_arithmetic(name):
    splits, index = _random_kg(4)
    ent, rel = _dyadic_weights(name, 5)
    test = np.concatenate([splits["test"], splits["valid"]])
    scores = _all_scores(name, ent, rel)
    expected = _brute_force_ranks(scores, splits, test)
    assert np.sum(expected[0] != expected[1]) >= 5, "the fixture must produce ties"
    for cfg in (EvalConfig(), EvalConfig(eval_batch_size=5, chunk_size=7)):
        _assert_ranks_equal(FilteredEvaluator(index, cfg).ranks(_model(name, ent, rel), test), expected)


@pytest.mark.parametrize("name", MODELS)
def test_copies_of_the_true_entity_tie_with_it(name):
    """Random (non-dyadic) weights: entities whose row equals the target's have exactly its score."""
    splits, index = _random_kg(6)
    ent, rel = _random_weights(name, 7, dim=16)  # long rows: many float32 roundings
    known = {tuple(x) for s in SPLITS for x in splits[s].tolist()}
    got_ranks, want_ranks = [], []
    for h, r, t in splits["test"].tolist():
        # Every entity that is neither filtered nor the head becomes a copy of the true tail.
        copies = [e for e in range(E) if e not in (h, t) and (h, r, e) not in known]
        ent2 = ent.copy()
        ent2[copies] = ent2[t]
        query = np.array([[h, r, t]])
        opt, pes, _, _ = _brute_force_ranks(_all_scores(name, ent2, rel), splits, query, tails_only=True)
        assert pes[0] - opt[0] == len(copies)
        for cfg in (EvalConfig(), EvalConfig(eval_batch_size=5, chunk_size=7)):
            got = FilteredEvaluator(index, cfg).ranks(_model(name, ent2, rel), query, tails_only=True)
            want_ranks.append((opt[0], pes[0]))
            got_ranks.append((got.optimistic[0], got.pessimistic[0]))
    assert got_ranks == want_ranks


# -- tails_only and metrics ----------------------------------------------------------------


def test_tails_only_gives_only_tail_queries():
    splits, index = _random_kg(8)
    ent, rel = _random_weights("complex", 9)
    model = _model("complex", ent, rel)
    ev = FilteredEvaluator(index, EvalConfig(eval_batch_size=7, chunk_size=11))
    both = ev.ranks(model, splits["test"])
    tails = ev.ranks(model, splits["test"], tails_only=True)
    n = len(splits["test"])
    assert len(both.optimistic) == 2 * n and len(tails.optimistic) == n
    assert tails.tail_query.all()
    np.testing.assert_array_equal(both.tail_query, np.repeat([False, True], n))
    np.testing.assert_array_equal(tails.optimistic, both.optimistic[n:])
    np.testing.assert_array_equal(tails.pessimistic, both.pessimistic[n:])
    np.testing.assert_array_equal(tails.relations, splits["test"][:, 1])
    metrics = ev.evaluate(model, "test", tails_only=True)
    assert "head" not in metrics
    assert metrics["count"] == n and metrics["tail"]["count"] == n


def test_rank_metrics_by_hand():
    got = rank_metrics(np.array([1, 2, 4, 10, 11, 1.5]))
    assert got["mrr"] == pytest.approx((1 + 1 / 2 + 1 / 4 + 1 / 10 + 1 / 11 + 1 / 1.5) / 6)
    assert got["hits@1"] == pytest.approx(1 / 6)
    assert got["hits@3"] == pytest.approx(3 / 6)
    assert got["hits@10"] == pytest.approx(5 / 6)
    assert got["mean_rank"] == pytest.approx((1 + 2 + 4 + 10 + 11 + 1.5) / 6)
    assert got["count"] == 6
    assert rank_metrics([3]) == {
        "mrr": pytest.approx(1 / 3),
        "hits@1": 0.0,
        "hits@3": 1.0,
        "hits@10": 1.0,
        "mean_rank": 3.0,
        "count": 1,
    }
    empty = rank_metrics(np.array([]))
    assert empty["count"] == 0 and np.isnan(empty["mrr"]) and np.isnan(empty["hits@10"])


@pytest.mark.parametrize("rank_type", ["realistic", "optimistic", "pessimistic"])
def test_metrics_dict_has_head_tail_and_per_relation(rank_type):
    splits, index = _random_kg(10)
    ent, rel = _dyadic_weights("distmult", 11)  # ties, so the rank types differ
    model = _model("distmult", ent, rel)
    labels = np.array(["born_in", "likes", "part_of", "works_for"])
    ev = FilteredEvaluator(index, EvalConfig(rank_type=rank_type, eval_batch_size=4, chunk_size=9), labels)
    metrics = ev.evaluate(model, "test")
    opt, pes, is_tail, rels = _brute_force_ranks(_all_scores("distmult", ent, rel), splits, splits["test"])
    values = {"optimistic": opt, "pessimistic": pes, "realistic": (opt + pes) / 2}[rank_type]
    assert metrics["rank_type"] == rank_type

    def check(part, expected_ranks):
        want = rank_metrics(expected_ranks)
        assert set(want) <= set(part)
        for k, v in want.items():
            assert part[k] == pytest.approx(v), k

    check(metrics, values)
    check(metrics["head"], values[~is_tail])
    check(metrics["tail"], values[is_tail])
    assert set(metrics["per_relation"]) == {str(labels[r]) for r in np.unique(splits["test"][:, 1])}
    for r in np.unique(splits["test"][:, 1]):
        check(metrics["per_relation"][str(labels[r])], values[rels == r])


def test_per_relation_keys_default_to_ids():
    splits, index = _random_kg(12)
    model = _model("simple", *_random_weights("simple", 13))
    metrics = FilteredEvaluator(index).evaluate(model, "valid")
    assert set(metrics["per_relation"]) == {str(r) for r in np.unique(splits["valid"][:, 1])}
    assert sum(m["count"] for m in metrics["per_relation"].values()) == 2 * len(splits["valid"])


# -- top-1 predictions and type inconsistency (the paper's qualitative analysis) ------------


def _brute_force_top1(scores: np.ndarray, splits: dict, triples: np.ndarray) -> np.ndarray:
    """Filtered top-1 entity per query (head queries first); exact ties go to the lower id."""
    known = {tuple(x) for s in SPLITS for x in splits[s].tolist()}
    top = []
    for direction in (False, True):
        for h, r, t in triples.tolist():
            cand = scores[h, r, :] if direction else scores[:, r, t]
            target = t if direction else h
            keep = [e for e in range(len(cand)) if e == target or ((h, r, e) if direction else (e, r, t)) not in known]
            top.append(keep[int(np.argmax(cand[keep]))])  # argmax: first of equal maxima
    return np.array(top)


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("weights", ["random", "dyadic"])
def test_top1_matches_brute_force(name, weights):
    splits, index = _random_kg(14)
    ent, rel = _random_weights(name, 15) if weights == "random" else _dyadic_weights(name, 15)
    scores = _all_scores(name, ent, rel)
    test = np.concatenate([splits["test"], splits["valid"]])
    if weights == "random":
        _assert_well_separated(scores, test)
    expected = _brute_force_top1(scores, splits, test)
    model = _model(name, ent, rel)
    for cfg in (EvalConfig(), EvalConfig(eval_batch_size=5, chunk_size=7), EvalConfig(chunk_size=1)):
        got = FilteredEvaluator(index, cfg).ranks(model, test)
        np.testing.assert_array_equal(got.top1, expected)
    # Non-trivial: the top-1 is sometimes the target and sometimes not.
    targets = np.concatenate([test[:, 0], test[:, 2]])
    assert 0 < np.sum(expected == targets) < len(expected)


def test_type_inconsistent_share_by_hand():
    """Top-1 outside the relation's training heads/tails is inconsistent; checked per part."""
    splits, index = _random_kg(16)
    ent, rel = _random_weights("complex", 17)
    model = _model("complex", ent, rel)
    ev = FilteredEvaluator(index, EvalConfig(eval_batch_size=6, chunk_size=8))
    ranks = ev.ranks(model, splits["test"])
    train = splits["train"]
    slot = {
        True: {r: set(train[train[:, 1] == r, 2].tolist()) for r in range(R)},
        False: {r: set(train[train[:, 1] == r, 0].tolist()) for r in range(R)},
    }
    want = np.array(
        [e not in slot[bool(tq)][r] for e, tq, r in zip(ranks.top1, ranks.tail_query, ranks.relations, strict=True)]
    )
    np.testing.assert_array_equal(ev.type_inconsistent(ranks), want)
    assert 0 < want.sum() < len(want), "the fixture must produce both kinds"
    test = splits["test"]
    np.testing.assert_array_equal(ranks.targets, np.concatenate([test[:, 0], test[:, 2]]))
    answers = np.array(
        [e not in slot[bool(tq)][r] for e, tq, r in zip(ranks.targets, ranks.tail_query, ranks.relations, strict=True)]
    )
    np.testing.assert_array_equal(ev.type_inconsistent(ranks, of="targets"), answers)
    assert 0 < answers.sum() < len(answers) and not np.array_equal(answers, want)
    metrics = ev.metrics_from_ranks(ranks)
    assert metrics["type_inconsistent"] == pytest.approx(want.mean())
    assert metrics["type_inconsistent_answers"] == pytest.approx(answers.mean())
    assert metrics["tail"]["type_inconsistent_answers"] == pytest.approx(answers[ranks.tail_query].mean())
    assert metrics["tail"]["type_inconsistent"] == pytest.approx(want[ranks.tail_query].mean())
    assert metrics["head"]["type_inconsistent"] == pytest.approx(want[~ranks.tail_query].mean())
    for r in np.unique(ranks.relations):
        assert metrics["per_relation"][str(r)]["type_inconsistent"] == pytest.approx(want[ranks.relations == r].mean())


# -- relation prediction -------------------------------------------------------------------


def _brute_force_relation_ranks(scores: np.ndarray, splits: dict, triples: np.ndarray):
    known = {tuple(x) for s in SPLITS for x in splits[s].tolist()}
    opt, pes = [], []
    for h, r, t in triples.tolist():
        cand = scores[h, :, t]
        keep = np.array([(h, other, t) not in known for other in range(len(cand))])
        opt.append(1 + np.sum(cand[keep] > cand[r]))
        pes.append(1 + np.sum(cand[keep] > cand[r]) + np.sum(cand[keep] == cand[r]))
    return np.array(opt, float), np.array(pes, float)


@pytest.mark.parametrize("name", MODELS)
def test_relation_ranks_match_brute_force(name):
    splits, index = _random_kg(4)
    ent, rel = _random_weights(name, 5)
    scores = _all_scores(name, ent, rel)
    got = FilteredEvaluator(index, EvalConfig(eval_batch_size=7)).relation_ranks(_model(name, ent, rel), splits["test"])
    expected = _brute_force_relation_ranks(scores, splits, splits["test"])
    np.testing.assert_array_equal(got[0], expected[0])
    np.testing.assert_array_equal(got[1], expected[1])
    # Filtering matters here: some test pair is linked by another known relation too.
    pairs = {(h, t) for s in SPLITS for h, _, t in splits[s].tolist()}
    assert sum(len({r for h2, r, t2 in splits["train"].tolist() if (h2, t2) == p}) > 1 for p in pairs) > 0
    metrics = FilteredEvaluator(index).relation_metrics(_model(name, ent, rel), "test")
    assert metrics["mrr"] == pytest.approx(np.mean(2.0 / (expected[0] + expected[1])))
    assert metrics["count"] == len(splits["test"])


def test_relation_ranks_of_a_reciprocal_model_use_the_forward_rows():
    splits, index = _random_kg(6)
    ent, rel = _random_weights("complex", 7)
    model = JoBiModel(num_entities=E, num_relations=R, model="complex", dim=DIM, reciprocal=True)
    model.entity_embeddings.assign(ent)
    inverse = np.random.default_rng(8).normal(size=rel.shape).astype(np.float32) * 10  # must not matter
    model.triple_relations.assign(np.concatenate([rel, inverse]))
    got = FilteredEvaluator(index).relation_ranks(model, splits["test"])
    expected = _brute_force_relation_ranks(_all_scores("complex", ent, rel), splits, splits["test"])
    np.testing.assert_array_equal(got[0], expected[0])


# -- type-aware ranking --------------------------------------------------------------------


def _brute_force_slot_ranks(scores: np.ndarray, splits: dict, triples: np.ndarray, pair=None, threshold=0.5):
    """Ranks among the slot's entities; with ``pair`` (``[E, R, E]`` pair-head scores) also
    among those whose pair probability reaches ``threshold``."""
    known = {tuple(x) for s in SPLITS for x in splits[s].tolist()}
    tails = {(r, t) for _, r, t in splits["train"].tolist()}
    heads = {(r, h) for h, r, _ in splits["train"].tolist()}
    opt, pes = [], []
    for direction in (False, True):
        for h, r, t in triples.tolist():
            cand = scores[h, r, :] if direction else scores[:, r, t]
            target = t if direction else h
            slot = tails if direction else heads
            fits = np.array([(r, e) in slot for e in range(E)])
            if pair is not None:
                fits |= 1 / (1 + np.exp(-(pair[h, r, :] if direction else pair[:, r, t]))) >= threshold
            if not fits[target]:
                opt.append(E)
                pes.append(E)
                continue
            keep = np.array(
                [fits[e] and e != target and ((h, r, e) if direction else (e, r, t)) not in known for e in range(E)]
            )
            opt.append(1 + np.sum(cand[keep] > cand[target]))
            pes.append(1 + np.sum(cand[keep] >= cand[target]))
    return np.array(opt, float), np.array(pes, float)


@pytest.mark.parametrize("name", MODELS)
def test_slot_restricted_ranks_match_brute_force(name):
    splits, index = _random_kg(9)
    ent, rel = _random_weights(name, 10)
    scores = _all_scores(name, ent, rel)
    model = _model(name, ent, rel)
    restricted = FilteredEvaluator(index, EvalConfig(restrict="slots", chunk_size=7, eval_batch_size=6))
    got = restricted.ranks(model, splits["test"])
    expected = _brute_force_slot_ranks(scores, splits, splits["test"])
    np.testing.assert_array_equal(got.optimistic, expected[0])
    np.testing.assert_array_equal(got.pessimistic, expected[1])
    plain = FilteredEvaluator(index).ranks(model, splits["test"])
    assert (expected[0] == E).any() and (got.optimistic != plain.optimistic).any()  # both cases exercised
    assert restricted.metrics_from_ranks(got)["type_inconsistent"] == 0  # every top-1 answer fits its slot


@pytest.mark.parametrize("name", MODELS)
def test_soft_slot_ranks_admit_what_the_pair_head_places_in_the_slot(name):
    splits, index = _random_kg(9)
    ent, rel = _random_weights(name, 10)
    pair_rel = np.random.default_rng(11).normal(size=rel.shape).astype(np.float32)
    dim = ent.shape[1] if name == "distmult" else ent.shape[1] // 2
    model = JoBiModel(num_entities=E, num_relations=R, model=name, dim=dim, joint=True)
    model.entity_embeddings.assign(ent)
    model.triple_relations.assign(rel)
    model.pair_relations.assign(pair_rel)
    scores, pair = _all_scores(name, ent, rel), _all_scores(name, ent, pair_rel)
    cfg = EvalConfig(restrict="soft-slots", pair_threshold=0.7, chunk_size=7, eval_batch_size=6)
    got = FilteredEvaluator(index, cfg).ranks(model, splits["test"])
    expected = _brute_force_slot_ranks(scores, splits, splits["test"], pair=pair, threshold=0.7)
    np.testing.assert_array_equal(got.optimistic, expected[0])
    np.testing.assert_array_equal(got.pessimistic, expected[1])
    strict = _brute_force_slot_ranks(scores, splits, splits["test"])
    assert (strict[0] == E).sum() > (expected[0] == E).sum()  # some answers new to their slot are admitted
    with pytest.raises(ConfigError, match="--restrict: 'soft-slots' needs a model with a pair head"):
        FilteredEvaluator(index, cfg).ranks(_model(name, ent, rel), splits["test"])


# -- the one-pass count and bfloat16 ranking -----------------------------------------------


def _two_pass_only(monkeypatch):
    """Make every scorer take the two-pass route (the count before the one-pass route)."""
    from jobi_tf.evaluation import one_pass

    monkeypatch.setattr(one_pass.OnePassCounter, "handles", staticmethod(lambda scorer: False))


@pytest.mark.parametrize("prior", [0.0, 0.7])
def test_one_pass_ranks_equal_two_pass_ranks_on_fb15k_237(monkeypatch, prior):
    """FB15k-237's first 1,000 validation triples under a ComplEx table with many exact ties (rows copied):
    the one-pass count gives the two-pass count's ranks and top-1s, bit for bit, with the
    sparse slot prior's offsets too."""
    from jobi_tf.config import DataConfig
    from jobi_tf.datasets.loading import load_index

    try:
        _, _, index = load_index(DataConfig(dataset="fb15k-237"))
    except Exception as exc:  # offline without a local copy
        pytest.skip(f"FB15k-237 not available here: {exc}")
    rng = np.random.default_rng(0)
    model = JoBiModel(num_entities=index.num_entities, num_relations=index.num_relations, model="complex", dim=32)
    ent = rng.normal(size=(index.num_entities, 64)).astype(np.float32)
    ent[rng.choice(index.num_entities, 2000, replace=False)] = ent[: 2000 // 100].repeat(100, axis=0)
    model.entity_embeddings.assign(ent)
    model.triple_relations.assign(rng.normal(size=model.triple_relations.shape).astype(np.float32))
    if prior:
        from jobi_tf.models.slot_prior import SparseSlotPrior

        model.prior = SparseSlotPrior(prior, index.num_entities, index.num_relations)
        model.prior.fill(index.train)
    valid = index.split("valid")[:1000]
    cfg = EvalConfig(chunk_size=5000)  # several blocks, tiles of unequal widths
    from jobi_tf.evaluation import one_pass

    one_pass_count, outcomes = one_pass.OnePassCounter.count, []
    monkeypatch.setattr(
        one_pass.OnePassCounter, "count", lambda self, *a: outcomes.append(one_pass_count(self, *a)) or outcomes[-1]
    )
    one = FilteredEvaluator(index, cfg).ranks(model, valid)
    assert outcomes
    if any(o is None for o in outcomes):  # this CPU's products sum by column position: exact, slower
        pytest.skip("the one-pass count fell back to two passes on this CPU (ranks stay exact; no speed-up)")
    monkeypatch.undo()
    _two_pass_only(monkeypatch)
    two = FilteredEvaluator(index, cfg).ranks(model, valid)
    assert np.sum(two.pessimistic > two.optimistic) > 100, "the fixture must produce ties"
    for field in ("optimistic", "pessimistic", "top1"):
        np.testing.assert_array_equal(getattr(one, field), getattr(two, field), err_msg=field)


def test_a_target_score_that_differs_in_its_tile_falls_back_to_two_passes(monkeypatch):
    """A target score given beforehand that its tile does not reproduce (forced here) sends
    the batch to the two-pass route, whose ranks are the brute force's."""
    from jobi_tf.evaluation import one_pass

    splits, index = _random_kg(2)
    ent, rel = _random_weights("complex", 3)
    expected = _brute_force_ranks(_all_scores("complex", ent, rel), splits, splits["test"])
    _assert_well_separated(_all_scores("complex", ent, rel), splits["test"])
    original = one_pass.OnePassCounter._target_scores
    outcomes = []

    def nudged(self, *args):
        return np.nextafter(original(self, *args), np.float32(np.inf))

    def count(self, *args):
        outcomes.append(one_pass_count(self, *args))
        return outcomes[-1]

    one_pass_count = one_pass.OnePassCounter.count
    monkeypatch.setattr(one_pass.OnePassCounter, "_target_scores", nudged)
    monkeypatch.setattr(one_pass.OnePassCounter, "count", count)
    got = FilteredEvaluator(index, EvalConfig(eval_batch_size=7, chunk_size=9)).ranks(
        _model("complex", ent, rel), splits["test"]
    )
    assert outcomes and all(o is None for o in outcomes)
    _assert_ranks_equal(got, expected)


@pytest.mark.parametrize("name", MODELS)
def test_bfloat16_ranks_are_those_of_bfloat16_scores(name):
    """``dtype="bfloat16"``: each rank counts the filtered candidates whose bfloat16 score
    (of bfloat16-rounded rows) is above / equal to the target's, as a NumPy reference does."""
    import tensorflow as tf

    splits, index = _random_kg(9)
    ent, rel = _random_weights(name, 10, dim=8)
    model = _model(name, ent, rel)
    test = splits["test"]
    got = FilteredEvaluator(index, EvalConfig(eval_batch_size=6, chunk_size=11), dtype="bfloat16").ranks(model, test)

    def bf16(x):
        return (
            tf.cast(tf.cast(tf.constant(np.asarray(x, np.float32)), tf.bfloat16), tf.float32).numpy().astype(np.float64)
        )

    known = {tuple(x) for s in SPLITS for x in splits[s].tolist()}
    table = bf16(model.entity_embeddings.numpy())
    want_opt, want_pes = [], []
    for tail in (False, True):
        heads, rels, tails = test[:, 0], test[:, 1], test[:, 2]
        queries = (model.tail_queries(heads, rels) if tail else model.head_queries(rels, tails)).numpy()
        for i, (h, r, t) in enumerate(test.tolist()):
            scores = bf16(bf16(queries[i]) @ table.T)  # products of rounded rows, rounded again
            target = t if tail else h
            keep = np.array([((h, r, e) if tail else (e, r, t)) not in known for e in range(E)])
            keep[target] = False
            want_opt.append(1 + np.sum(scores[keep] > scores[target]))
            want_pes.append(1 + np.sum(scores[keep] >= scores[target]))
    # the target's value is its float64 product rounded once; the matmul rounds a float32 sum:
    # they may differ by one bfloat16 step, so allow a rank or two where that happens
    assert np.mean(got.optimistic == np.array(want_opt)) > 0.9
    assert np.max(np.abs(got.optimistic - np.array(want_opt))) <= 2
    assert np.max(np.abs(got.pessimistic - np.array(want_pes))) <= 2


def test_validation_sample_is_fixed_and_in_split_order():
    from jobi_tf.evaluation.ranking import validation_sample

    triples = np.arange(300).reshape(100, 3)
    a, b = validation_sample(triples, 10), validation_sample(triples, 10)
    np.testing.assert_array_equal(a, b)
    assert len(a) == 10 and np.all(np.diff(a[:, 0]) > 0)
    assert validation_sample(triples, 0) is triples and len(validation_sample(triples, 500)) == 100


def test_bfloat16_ranking_of_a_scorer_it_cannot_take_ranks_in_float32(caplog):
    """Type-aware ranking under ``dtype="bfloat16"``: a one-line warning, then the exact float32
    ranks (validation inside a run goes on rather than stopping mid-run)."""
    splits, index = _random_kg(4)
    ent, rel = _random_weights("complex", 5)
    model = _model("complex", ent, rel)
    cfg = EvalConfig(restrict="slots", chunk_size=7, eval_batch_size=6)
    want = FilteredEvaluator(index, cfg).ranks(model, splits["test"])
    with caplog.at_level("WARNING"):
        got = FilteredEvaluator(index, cfg, dtype="bfloat16").ranks(model, splits["test"])
    np.testing.assert_array_equal(got.optimistic, want.optimistic)
    np.testing.assert_array_equal(got.pessimistic, want.pessimistic)
    assert sum("ranking in float32" in r.getMessage() for r in caplog.records) == 1


def test_one_pass_tiles_run_across_contiguous_blocks():
    """A block's end is not a tile's: only the last tile of a contiguous run is narrower."""
    from jobi_tf.evaluation.one_pass import TILE, _tiles

    tiles = _tiles([(0, 100_000), (100_000, 200_000), (250_000, 250_010)])
    widths = [hi - lo for lo, hi in tiles]
    assert tiles[0] == (0, TILE) and tiles[-1] == (250_000, 250_010)
    assert widths[:-2] == [TILE] * (len(tiles) - 2) and tiles[-2][1] == 200_000
    assert sum(widths) == 200_010 and all(b[0] == a[1] for a, b in zip(tiles[:-2], tiles[1:-1], strict=True))
