"""Select-then-BV tree verifiers (docs/trees.rst, Theorem 2): the optimal tree verifier reaches the
tree optimum losslessly, and block-verifying a tree verifier's own selection law never lowers its
E[tau]. Exact kernels on enumerable models; one distribution-level Monte Carlo check of sample()."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

import otspec
from otspec import models
from otspec.errors import UnsupportedMethodError
from otspec.verifiers import chain, tree
from otspec.verifiers.tree_select import selection_value
from tests._oracles import make_pair

#: Exact kernels: float64 sums over at most a few thousand drafted trees.
EXACT = 1e-12


def _cases(n, max_trees=729, seed=33):
    rng = np.random.default_rng(seed)
    out = []
    while len(out) < n:
        V, g, k = int(rng.integers(2, 4)), int(rng.integers(1, 4)), int(rng.integers(1, 4))
        if V ** (k * g) > max_trees:
            continue
        out.append((int(rng.integers(0, 10_000)), V, g, k, float(rng.choice([0.3, 1.0, 3.0])), bool(rng.integers(2))))
    return out


CASES = _cases(100)


@pytest.mark.parametrize("seed,V,gamma,k,a,sparse", CASES)
def test_optimal_tree_verifier_is_lossless_and_reaches_the_tree_optimum(seed, V, gamma, k, a, sparse):
    p, q = make_pair(seed, V, a, sparse)
    K = tree.kernel(p, q, k, gamma, verifier="optimal")
    assert chain.lossless_violation(K.output_law(), p) <= EXACT
    t_star = otspec.tree_optimum(p, q, k, gamma, method="node")
    assert t_star.ok
    assert abs(K.expected_accepted() - t_star.value) <= EXACT


@pytest.mark.parametrize("seed,V,gamma,k,a,sparse", CASES[:40])
def test_bv_boosts_are_lossless_and_never_worse(seed, V, gamma, k, a, sparse):
    p, q = make_pair(seed, V, a, sparse)
    rules = [("kseq", "kseq_bv"), ("rrs", "rrs_bv")]
    if np.count_nonzero(q(())) >= k:
        rules.append(("rrs_wor", "rrs_wor_bv"))
    for base, boost in rules:
        K = tree.kernel(p, q, k, gamma, verifier=boost)
        assert chain.lossless_violation(K.output_law(), p) <= EXACT
        assert K.expected_accepted() >= tree.expected_accepted(p, q, k, gamma, verifier=base) - EXACT
        # the kernel's E[tau] is the closed form Phi(mu) of the rule's selection law
        plan = tree.selection_plan(p, q, k, gamma, verifier=boost)
        assert abs(K.expected_accepted() - selection_value(p, q, plan)) <= EXACT


def test_boost_is_strict_somewhere():
    """The boost must be able to fail the equality: on this pair it gains clearly over K-SEQ."""
    p, q = make_pair(0, 3, 1.0, False)
    gain = tree.expected_accepted(p, q, 2, 2, verifier="kseq_bv") - tree.expected_accepted(p, q, 2, 2, verifier="kseq")
    assert gain > 1e-3


def test_sample_matches_the_kernel():
    """N = 20 000 verifications of one drafted tree; chi-square of the emitted blocks against the
    exact kernel row (cells with expected count >= 5 kept, the rest pooled); false-alarm rate 1e-3."""
    p, q = make_pair(5, 3, 1.0, False)
    drafted = np.array([[0, 1], [2, 1]])
    K = tree.kernel(p, q, 2, 2, verifier="optimal")
    m = int(np.flatnonzero((K.trees == drafted[None]).all(axis=(1, 2)))[0])
    law = K.laws[m]
    draws = tree.sample_many(p, q, drafted, 20_000, verifier="optimal", rng=np.random.default_rng(11))
    keys = sorted(law)
    counts = np.array([sum(1 for _, b in draws if b == o) for o in keys], dtype=float)
    assert counts.sum() == len(draws)
    expected = np.array([law[o] for o in keys]) * len(draws)
    big = expected >= 5
    obs = np.append(counts[big], counts[~big].sum())
    exp = np.append(expected[big], expected[~big].sum())
    keep = exp > 0
    assert stats.chisquare(obs[keep], exp[keep] * obs[keep].sum() / exp[keep].sum()).pvalue > 1e-3
    tau, block = tree.sample(p, q, drafted, verifier="kseq_bv", rng=np.random.default_rng(0))
    assert len(block) == tau + 1


def test_optimal_needs_iid_drafts_and_a_known_rule():
    p, q = make_pair(5, 3, 1.0, False)
    with pytest.raises(UnsupportedMethodError, match="verifier must be one of"):
        tree.kernel(p, q, 2, 2, verifier="best")
    with pytest.raises(UnsupportedMethodError, match="verifier must be one of"):
        tree.selection_plan(p, q, 2, 2, verifier="kseq")


def test_toy_k1_is_block_verification():
    p, q = models.context_free([1 / 3, 2 / 3]), models.context_free([2 / 3, 1 / 3])
    assert round(tree.expected_accepted(p, q, 1, 2, verifier="optimal") * 9, 9) == 11.0
