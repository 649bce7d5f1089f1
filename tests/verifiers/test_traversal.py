"""Traversal Verification (Weng et al., arXiv 2505.12398): the paper's claims checked exactly.

* lossless for any tree: the losslessness criterion of MATH 0.1 on the exact block law, 120 random
  small cases (chains and trees, drafts with and without replacement), violation <= 1e-12;
* optimal on a single chain (= block verification): the exact block law equals block
  verification's and E[tau] equals the block optimum (the LP of otspec.bounds.tree at k = 1) on
  100 random chains, and the Sun et al. toy gives 11/9;
* on trees: E[tau] <= T* (the full-information tree LP), and its gap is reported; never below
  recursive rejection sampling on the cases drawn here;
* our reading of repeated drafts: the residual update applied once per distinct token instead of
  once per copy breaks losslessness (the smallest counterexample we found is pinned).
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

import otspec.verifiers.traversal as traversal_module
from otspec import models
from otspec._tolerances import FLOAT64_ATOL
from otspec.bounds.tree import tree_optimum
from otspec.errors import InvalidDraftsError
from otspec.verifiers import block, chain, traversal, tree
from tests._tolerances import FALSE_ALARM


def _random_models(rng):
    V = int(rng.integers(2, 4))
    pm = models.markov(V, order=1, seed=int(rng.integers(1 << 30)), concentration=0.7)
    qm = models.markov(V, order=1, seed=int(rng.integers(1 << 30)), concentration=0.7)
    return V, pm, qm


def _tree_cases(rng, n):
    """(V, gamma, k, replacement, p, q) with at most 729 drafted trees each."""
    out = []
    while len(out) < n:
        V, pm, qm = _random_models(rng)
        gamma, k = int(rng.integers(1, 4)), int(rng.integers(2, 4))
        replacement = bool(rng.integers(2))
        if V ** (gamma * k) > 729 or (not replacement and k > V):
            continue
        out.append((V, gamma, k, replacement, pm, qm))
    return out


def test_lossless_on_120_random_chains_and_trees():
    rng = np.random.default_rng(2505)
    n_chains = 0
    for i in range(120):
        if i % 4 == 0:
            V, pm, qm = _random_models(rng)
            gamma, k, replacement = int(rng.integers(1, 5)), 1, True
            n_chains += 1
        else:
            V, gamma, k, replacement, pm, qm = _tree_cases(rng, 1)[0]
        law = traversal.block_law(pm, qm, k, gamma, replacement=replacement)
        assert chain.lossless_violation(law, pm) <= FLOAT64_ATOL, (V, gamma, k, replacement)
    assert n_chains == 30


def test_chain_is_block_verification_on_100_chains():
    """Claim (their Thm 3.4): on a chain E[tau] equals block verification's, which is optimal.
    Checked: the whole block law equals block verification's, and E[tau] equals the exact block
    optimum (the tree LP at k = 1, solved by HiGHS and certified -- not the closed form)."""
    rng = np.random.default_rng(3)
    for i in range(100):
        _, pm, qm = _random_models(rng)
        gamma = int(rng.integers(1, 4))
        mine = traversal.block_law(pm, qm, 1, gamma)
        ref = block.kernel(pm, qm, gamma).output_law()
        keys = set(mine) | set(ref)
        assert max(abs(mine.get(o, 0.0) - ref.get(o, 0.0)) for o in keys) <= FLOAT64_ATOL
        e = traversal.expected_accepted(pm, qm, 1, gamma)
        assert e == pytest.approx(block.expected_accepted(pm, qm, gamma), abs=FLOAT64_ATOL)
        if i < 30:  # the LP is the slow part
            assert e == pytest.approx(tree_optimum(pm, qm, 1, gamma).value, abs=1e-9)


def test_block_verification_toy_number():
    """Sun et al.'s toy (MATH 1.4): M_b = (1/3, 2/3), M_s = (2/3, 1/3), gamma = 2: 11/9."""
    p, q = models.context_free([1 / 3, 2 / 3]), models.context_free([2 / 3, 1 / 3])
    assert traversal.expected_accepted(p, q, 1, 2) == pytest.approx(11 / 9, abs=FLOAT64_ATOL)


def test_trees_against_the_optimum_and_rrs():
    """E[tau] <= T* (the full-information tree LP) on 40 random trees, with a real gap somewhere
    (the rule is not claimed optimal on trees); and >= recursive rejection sampling (RRS with /
    without replacement, the token-level rule it refines) on every case drawn."""
    rng = np.random.default_rng(11)
    gaps = []
    for V, gamma, k, replacement, pm, qm in _tree_cases(rng, 40):
        e = traversal.expected_accepted(pm, qm, k, gamma, replacement=replacement)
        opt = tree_optimum(pm, qm, k, gamma, replacement=replacement).value
        rrs = tree.expected_accepted(pm, qm, k, gamma, verifier="rrs" if replacement else "rrs_wor")
        assert e <= opt + 1e-9, (V, gamma, k, replacement)
        assert e >= rrs - FLOAT64_ATOL, (V, gamma, k, replacement)
        gaps.append(opt - e)
    assert max(gaps) > 0.05


def test_sampler_matches_the_exact_tree_law():
    """Chi-square of 40 000 sampled blocks against tree_law on one branching tree (V = 3,
    gamma = 2, k = 3, with a repeated first token), false-alarm 1e-6; cells of expected count < 5
    pooled into one."""
    pm = models.markov(3, order=1, seed=5, concentration=0.7)
    qm = models.markov(3, order=1, seed=6, concentration=0.7)
    t = [[0, 1], [2, 2], [0, 0]]
    law = traversal.tree_law(pm, qm, t)
    keys = sorted(law)
    rng = np.random.default_rng(8)
    n = 40_000
    counts = dict.fromkeys(keys, 0)
    for _ in range(n):
        counts[traversal.sample(pm, qm, t, rng=rng)] += 1
    exp = np.array([law[o] * n for o in keys])
    obs = np.array([counts[o] for o in keys], dtype=float)
    small = exp < 5
    exp = np.append(exp[~small], exp[small].sum())
    obs = np.append(obs[~small], obs[small].sum())
    chi2 = float(np.sum((obs - exp) ** 2 / np.where(exp > 0, exp, 1.0)))
    assert stats.chi2.sf(chi2, exp.size - 1) > FALSE_ALARM


def test_residual_update_once_per_distinct_token_is_not_lossless(monkeypatch):
    """Negative control for our reading of repeated drafts. Smallest counterexample found:
    M_b = (1/4, 1/2, 1/4), M_s = (2/3, 1/3, 0) context-free, k = 2 i.i.d., gamma = 1 -- skipping
    the update for a repeated first token violates the criterion by 1/12; the rule as implemented
    is exact on the same case."""
    pm, qm = models.context_free([0.25, 0.5, 0.25]), models.context_free([2 / 3, 1 / 3, 0.0])
    assert chain.lossless_violation(traversal.block_law(pm, qm, 2, 1), pm) <= FLOAT64_ATOL
    orig = traversal_module._children
    monkeypatch.setattr(traversal_module, "_children", lambda paths, depth: [(c, s) for c, s in orig(paths, depth) if s is not None])
    assert chain.lossless_violation(traversal.block_law(pm, qm, 2, 1), pm) == pytest.approx(1 / 12, abs=1e-12)


def test_bad_tree():
    p = models.context_free([0.5, 0.5])
    with pytest.raises(InvalidDraftsError, match="tree must be"):
        traversal.tree_law(p, p, [[0, 2]])
    with pytest.raises(InvalidDraftsError, match="tree must be"):
        traversal.sample(p, p, [0, 1], rng=np.random.default_rng(0))
