"""The full-information tree LP: upper bound on every tree verifier; k = 1 is the block optimum."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import otspec
from otspec import models
from otspec._tolerances import CERTIFICATE_ATOL
from otspec.bounds.block import block_optimum
from otspec.bounds.tree import tree_optimum
from otspec.errors import ProblemTooLargeError
from otspec.verifiers import tree
from tests._oracles import make_pair
from tests._tolerances import CLEAR_DIFFERENCE, LP_ATOL

instances = st.builds(make_pair, st.integers(0, 10_000), st.integers(2, 3), st.sampled_from([0.3, 1.0, 3.0]), st.booleans())


@settings(max_examples=15)
@given(inst=instances, gamma=st.integers(1, 3))
def test_k1_is_block_optimum(inst, gamma):
    p, q = inst
    r = tree_optimum(p, q, 1, gamma)
    assert r.ok and r.k == 1
    assert abs(r.value - block_optimum(p, q, gamma).value) <= LP_ATOL + r.gap


@settings(max_examples=12)
@given(inst=instances, gamma=st.integers(1, 3))
def test_tree_lp_dominates_every_tree_verifier(inst, gamma):
    p, q = inst
    k = 2
    iid = tree_optimum(p, q, k, gamma)
    assert iid.ok, iid.checks
    block = block_optimum(p, q, gamma).value
    tol = LP_ATOL + iid.gap  # the certified gap (peaky models: see tests/bounds/test_block.py)
    assert iid.value >= block - tol
    for v in ("kseq", "rrs"):
        assert iid.value >= tree.expected_accepted(p, q, k, gamma, verifier=v) - tol
    if np.count_nonzero(q(())) >= k:
        wor = tree_optimum(p, q, k, gamma, replacement=False)
        assert wor.ok
        assert wor.value >= tree.expected_accepted(p, q, k, gamma, verifier="rrs_wor") - LP_ATOL - wor.gap
        assert wor.value >= block - LP_ATOL - wor.gap
    assert iid.value <= gamma + LP_ATOL


@given(seed=st.integers(0, 10_000), k=st.integers(2, 3), sparse=st.booleans())
def test_depth_one_is_the_multidraft_optimum(seed, k, sparse):
    """gamma = 1: the tree LP is the OTM-k optimum alpha*(p, Q) of the single-step bound."""
    p, q = make_pair(seed, 3, 1.0, sparse)
    r = tree_optimum(p, q, k, 1)
    assert abs(r.value - otspec.optimal_acceptance(p(()), otspec.iid(q(()), k)).value) <= LP_ATOL + r.gap
    if np.count_nonzero(q(())) >= k:
        r = tree_optimum(p, q, k, 1, replacement=False)
        assert abs(r.value - otspec.optimal_acceptance(p(()), otspec.without_replacement(q(()), k)).value) <= LP_ATOL + r.gap


def test_strict_gap_to_verifiers_on_a_small_case():
    p, q = make_pair(0, 3, 1.0, False)
    r = tree_optimum(p, q, 2, 3)
    best = max(tree.expected_accepted(p, q, 2, 3, verifier=v) for v in ("kseq", "rrs"))
    assert r.value - best > CLEAR_DIFFERENCE


def test_refuses_large():
    p, q = make_pair(0, 3, 1.0, False)
    with pytest.raises(ProblemTooLargeError, match="nonzeros"):
        tree_optimum(p, q, 2, 3, method="trie", memory_cap=10_000)
    with pytest.raises(ProblemTooLargeError, match="draft trees"):
        tree_optimum(p, q, 5, 3, method="trie")


def test_tree_optimum_without_replacement_when_one_token_takes_almost_all_mass():
    # Regression: the unstable 1 - cumsum(q) denominators made the LP infeasible.
    from otspec.bounds.tree import tree_optimum

    p, q = models.context_free([0.5, 0.5]), models.context_free([1e-12, 1 - 1e-12])
    res = tree_optimum(p, q, 2, 1, replacement=False)
    assert res.status == "optimal" and res.value == pytest.approx(1.0, abs=CERTIFICATE_ATOL)


@pytest.mark.parametrize("seed,a,replacement", [(61, 0.1, True), (23, 0.1, False), (57, 0.03, True), (93, 0.03, False)])
def test_tree_lp_certifies_on_peaked_models_that_defeated_one_highs_run(seed, a, replacement):
    # Regression; found by experiments/bench/bench_lp_robustness.py (odd seeds: sparse pairs)
    from tests._oracles import make_pair

    p, q = make_pair(seed, 3, a, bool(seed % 2))
    res = tree_optimum(p, q, 2, 2, replacement=replacement)
    assert res.ok, res.checks
    # two drafts can always ignore the second one (its first-token marginal is q either way)
    assert res.value >= block_optimum(p, q, 2).value - res.gap - LP_ATOL
