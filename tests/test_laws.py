"""Draft laws: enumeration, prob_all_in, prefix masses and samplers against first principles."""

import itertools
import math

import numpy as np
import pytest
from scipy import stats

import otspec
from otspec._tolerances import EXACT_ATOL
from otspec.errors import InvalidDraftCountError, InvalidDraftsError
from tests._tolerances import FALSE_ALARM
from tests.conftest import random_simplex


def _brute_wor(q, k):
    """Successive sampling probabilities straight from the definition."""
    out = {}
    for t in itertools.permutations(range(q.size), k):
        w, rem = 1.0, 1.0
        for x in t:
            w *= q[x] / rem if rem > 0 else 0.0
            rem -= q[x]
        if w > 0:
            out[t] = w
    return out


@pytest.mark.parametrize("seed", range(5))
def test_wor_enumeration_matches_definition(seed):
    rng = np.random.default_rng(seed)
    q = random_simplex(rng, 5, zeros=1)
    law = otspec.without_replacement(q, 3)
    tuples, w = law.enumerate()
    brute = _brute_wor(q, 3)
    assert len(brute) == len(w)
    for t, x in zip(map(tuple, tuples), w, strict=False):
        assert abs(brute[t] - x) <= EXACT_ATOL
    assert abs(w.sum() - 1) <= EXACT_ATOL


@pytest.mark.parametrize("make", ["iid", "without_replacement", "greedy", "product", "explicit"])
def test_prob_all_in_and_prefix_agree_with_enumeration(make):
    rng = np.random.default_rng(3)
    V, k = 5, 3
    q = random_simplex(rng, V, zeros=1)
    law = {
        "iid": lambda: otspec.iid(q, k),
        "without_replacement": lambda: otspec.without_replacement(q, k),
        "greedy": lambda: otspec.greedy(q, k),
        "product": lambda: otspec.product([q, random_simplex(rng, V), random_simplex(rng, V, zeros=2)]),
        "explicit": lambda: otspec.explicit(rng.integers(0, V, size=(7, k)), random_simplex(rng, 7)),
    }[make]()
    tuples, w = law.enumerate()
    assert abs(w.sum() - 1) <= EXACT_ATOL
    order = rng.permutation(V)
    prefix, err = law.prefix_prob_all_in(order)
    for i in range(V + 1):
        H = np.zeros(V, bool)
        H[order[:i]] = True
        direct = w[np.all(H[tuples], axis=1)].sum()
        assert abs(law.prob_all_in(H) - direct) <= EXACT_ATOL + err
        assert abs(prefix[i] - direct) <= EXACT_ATOL + err


def test_greedy_law_structure():
    q = np.array([0.1, 0.4, 0.2, 0.2, 0.1])
    law = otspec.greedy(q, 3)
    # top-2 of q with ties broken by lower id: 1 (0.4), then 2 (0.2 tie with 3)
    assert law.top.tolist() == [1, 2]
    tuples, w = law.enumerate()
    assert np.all(tuples[:, :2] == [1, 2])
    np.testing.assert_allclose(w, q[[0, 3, 4]] / q[[0, 3, 4]].sum(), atol=EXACT_ATOL)


def _chi2_pvalue(counts, probs):
    keep = probs > 0
    assert counts[~keep].sum() == 0, "sampler produced a tuple of probability 0"
    return stats.chisquare(counts[keep], probs[keep] * counts.sum()).pvalue


@pytest.mark.parametrize("make", ["iid", "without_replacement", "greedy", "product", "explicit"])
def test_samplers_follow_enumerated_law(make):
    """Chi-square goodness of fit of N = 200 000 sampled tuples against the exact enumeration.

    False-alarm rate: we reject only at p < 1e-6 (fixed seed, so the test is deterministic)."""
    rng = np.random.default_rng(11)
    V, k = 4, 2
    q = random_simplex(rng, V)
    law = {
        "iid": lambda: otspec.iid(q, k),
        "without_replacement": lambda: otspec.without_replacement(q, k),
        "greedy": lambda: otspec.greedy(q, k),
        "product": lambda: otspec.product([q, random_simplex(rng, V)]),
        "explicit": lambda: otspec.explicit([[0, 1], [2, 2], [3, 1]], [0.2, 0.5, 0.3]),
    }[make]()
    tuples, w = law.enumerate()
    draws = law.sample(np.random.default_rng(12), 200_000)
    codes_all = draws @ (V ** np.arange(k))
    codes = tuples @ (V ** np.arange(k))
    counts = np.array([(codes_all == c).sum() for c in codes])
    assert counts.sum() == draws.shape[0], "sampler produced tuples outside the enumeration"
    assert _chi2_pvalue(counts, w) > FALSE_ALARM


def test_wor_sampler_negative_control():
    """The same chi-square test rejects i.i.d. draws presented as without-replacement draws."""
    rng = np.random.default_rng(5)
    q = random_simplex(rng, 4)
    law = otspec.without_replacement(q, 2)
    tuples, w = law.enumerate()
    draws = otspec.iid(q, 2).sample(np.random.default_rng(6), 200_000)
    draws = draws[draws[:, 0] != draws[:, 1]]  # even conditioning on distinctness is wrong
    codes_all = draws @ (4 ** np.arange(2))
    counts = np.array([(codes_all == c).sum() for c in tuples @ (4 ** np.arange(2))])
    assert stats.chisquare(counts, w * counts.sum()).pvalue < FALSE_ALARM


def test_law_errors():
    q = np.array([0.5, 0.5, 0.0])
    with pytest.raises(InvalidDraftCountError, match="support size"):
        otspec.without_replacement(q, 3)
    with pytest.raises(InvalidDraftCountError, match="integer"):
        otspec.iid(q, 2.5)
    with pytest.raises(InvalidDraftCountError, match=">= 1"):
        otspec.iid(q, 0)
    law = otspec.without_replacement(q, 2)
    with pytest.raises(InvalidDraftsError, match="repeat"):
        law.validate_drafts([0, 0])
    with pytest.raises(InvalidDraftsError, match="< V"):
        law.validate_drafts([0, 7])
    with pytest.raises(InvalidDraftsError, match="exactly k"):
        law.validate_drafts([0, 1, 2])
    with pytest.raises(InvalidDraftsError, match="probability 0"):
        law.validate_drafts([0, 2])


def test_num_tuples_matches_enumeration():
    q = np.array([0.2, 0.3, 0.5, 0.0])
    assert otspec.iid(q, 3).num_tuples() == 27 == otspec.iid(q, 3).enumerate()[1].size
    assert otspec.without_replacement(q, 2).num_tuples() == math.perm(3, 2)


def test_prefix_exact_says_where_the_sorted_prefix_dual_applies():
    """method='prefix' (and the advice of every refusal) is offered exactly for the laws with a
    sorted-prefix theorem."""
    q = np.array([0.2, 0.3, 0.5])
    assert otspec.iid(q, 2).prefix_exact and otspec.without_replacement(q, 2).prefix_exact and otspec.greedy(q, 2).prefix_exact
    assert not otspec.product([q, q[::-1]]).prefix_exact
    assert not otspec.explicit([[0, 1]], [1.0]).prefix_exact
    for law in (otspec.iid(q, 2), otspec.product([q, q[::-1]])):
        assert law.prefix_exact == (law.prefix_cut_order(q) is not None)
