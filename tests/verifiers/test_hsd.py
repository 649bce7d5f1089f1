"""HSD (Zhou et al., arXiv 2601.05724), read from the authors' public code with each block verified
afresh: the claim "provably lossless" fails in the standard speculative loop.

Certificate independent of our losslessness checker: no lossless verifier that sees one drafted
chain can beat block verification's E[tau] (the block optimum, MATH 1.4); HSD's exact E[tau] on the
Sun et al. toy equals the naive joint-coupling bound 12/9 (computed by a separate formula,
otspec.bounds.block.joint_coupling_bound) > 11/9. The losslessness criterion agrees (violation
1/9 there, and violations on most random chains); at gamma = 1 the rule is speculative sampling and
is lossless, which checks the implementation where the rule is standard.
"""

from __future__ import annotations

import numpy as np
import pytest

from otspec import models
from otspec._tolerances import FLOAT64_ATOL
from otspec.bounds.block import joint_coupling_bound
from otspec.verifiers import block, chain, hsd


def test_smallest_counterexample_is_the_block_verification_toy():
    p, q = models.context_free([1 / 3, 2 / 3]), models.context_free([2 / 3, 1 / 3])
    e = hsd.expected_accepted(p, q, 2)
    assert e == pytest.approx(joint_coupling_bound(p, q, 2), abs=FLOAT64_ATOL)  # 12/9
    assert e > block.expected_accepted(p, q, 2) + 0.1  # 11/9: impossible for a lossless rule
    assert chain.lossless_violation(hsd.block_law(p, q, 2), p) > 0.1


def test_gamma_one_is_speculative_sampling_and_lossless():
    rng = np.random.default_rng(1)
    for _ in range(30):
        V = int(rng.integers(2, 5))
        pm = models.markov(V, order=1, seed=int(rng.integers(1 << 30)), concentration=0.7)
        qm = models.markov(V, order=1, seed=int(rng.integers(1 << 30)), concentration=0.7)
        assert chain.lossless_violation(hsd.block_law(pm, qm, 1), pm) <= FLOAT64_ATOL
        p0, q0 = pm(()), qm(())
        assert hsd.expected_accepted(pm, qm, 1) == pytest.approx(float(np.minimum(p0, q0).sum()), abs=FLOAT64_ATOL)


def test_not_lossless_on_random_chains_and_above_the_optimum_where_it_fails():
    """60 random chains (V <= 3, gamma 2..3): the law sums to 1 everywhere; the criterion is
    violated on many; on some, E[tau] exceeds the block optimum outright."""
    rng = np.random.default_rng(0)
    violated = above = 0
    for _ in range(60):
        V, g = int(rng.integers(2, 4)), int(rng.integers(2, 4))
        pm = models.markov(V, order=1, seed=int(rng.integers(1 << 30)), concentration=0.7)
        qm = models.markov(V, order=1, seed=int(rng.integers(1 << 30)), concentration=0.7)
        law = hsd.block_law(pm, qm, g)
        assert sum(law.values()) == pytest.approx(1.0, abs=FLOAT64_ATOL)
        violated += chain.lossless_violation(law, pm) > 1e-6
        above += hsd.expected_accepted(pm, qm, g) > block.expected_accepted(pm, qm, g) + 1e-9
    assert violated >= 20 and above >= 10


def test_sampler_by_the_rules_coins_follows_the_exact_law():
    """The coin mechanism (step-back coins, last position that does not step back) against
    path_law, chi-square on 40 000 draws of one toy chain and one random chain, false-alarm 1e-6;
    so the failure above is the rule's, not an artefact of our law."""
    from scipy import stats

    from tests._tolerances import FALSE_ALARM

    cases = [
        (models.context_free([1 / 3, 2 / 3]), models.context_free([2 / 3, 1 / 3]), (0, 1)),
        (models.markov(3, order=1, seed=4, concentration=0.7), models.markov(3, order=1, seed=9, concentration=0.7), (2, 0, 1)),
    ]
    rng = np.random.default_rng(21)
    n = 40_000
    for pm, qm, x in cases:
        law = hsd.path_law(pm, qm, x)
        keys = sorted(law)
        counts = dict.fromkeys(keys, 0)
        for _ in range(n):
            counts[hsd.sample(pm, qm, x, rng=rng)] += 1
        exp = np.array([law[o] * n for o in keys])
        obs = np.array([counts[o] for o in keys], dtype=float)
        small = exp < 5
        exp, obs = np.append(exp[~small], exp[small].sum()), np.append(obs[~small], obs[small].sum())
        keep = exp > 0
        chi2 = float(np.sum((obs[keep] - exp[keep]) ** 2 / exp[keep]))
        assert stats.chi2.sf(chi2, keep.sum() - 1) > FALSE_ALARM
