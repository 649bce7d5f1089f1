"""rrs_wor acceptance at full vocabulary: the rejection-path reduction (residuals are (p - t q)_+)
checked round by round against the RSD rule itself, the path estimator against the exact kernel,
and the fast successive sampler of without-replacement drafts."""

import numpy as np
import pytest

import otspec
from otspec._tolerances import FLOAT64_ATOL
from otspec.verifiers import rrs_wor
from otspec.verifiers.step.rrs_wor import _RSDPrefix, rsd_path_acceptance
from tests.conftest import random_simplex


def _rsd_round(P, Qj):
    """One RSD round written from the rule: acceptance sum min(p_{j-1}, q_j), rejection weights
    q_j (1 - min(1, p/q_j)) = (q_j - p)_+, next residual norm((p - q_j)_+)."""
    A = np.minimum(P, Qj).sum()
    rej = np.maximum(Qj - P, 0.0)
    diff = np.maximum(P - Qj, 0.0)
    return A, rej, (diff / diff.sum() if diff.sum() > 0 else P)


@pytest.mark.parametrize("seed", range(12))
def test_reduction_matches_the_rule_round_by_round(seed):
    """Along a random rejection path drawn from the rule's own rejection weights, the (t, s) state
    of the reduction gives the same acceptance A_j every round, and the rejection weights of the
    reduction's two regions equal the rule's (q_j - p_{j-1})_+."""
    rng = np.random.default_rng(seed)
    V, k = 9, 5
    p = random_simplex(rng, V, zeros=seed % 3, alpha=0.5)
    q = random_simplex(rng, V, zeros=(seed // 3) % 2, alpha=0.5)
    pre = _RSDPrefix(p, q)
    P, Qj = p.copy(), q.copy()
    t, s = np.zeros(1), np.zeros(1)
    removed = []
    for j in range(k):
        A_rule, rej, P_next = _rsd_round(P, Qj)
        A, t_next, a, b, Z, c = pre.step(t, s)
        assert abs(A[0] - A_rule) <= FLOAT64_ATOL, (j, A[0], A_rule)
        if rej.sum() <= FLOAT64_ATOL or j + 1 == k:
            break
        # the reduction's rejection weights, token by token
        r = pre.r[pre.rank]
        in_d = (r <= t[0]) & ~np.isin(np.arange(V), removed)
        band = (r > t[0]) & (r <= t_next[0])
        w = np.where(in_d, c[0] * q, 0.0) + np.where(band, (t_next[0] * q - p) / Z[0], 0.0)
        np.testing.assert_allclose(w, rej, atol=FLOAT64_ATOL)
        x = int(rng.choice(V, p=rej / rej.sum()))
        removed.append(x)
        P = P_next
        Qj = Qj.copy()
        Qj[x] = 0.0
        Qj = Qj / Qj.sum()
        t, s = t_next, s + q[x]


@pytest.mark.parametrize("V,k,seed", [(6, 3, 0), (8, 4, 1), (12, 5, 2), (40, 3, 3)])
def test_path_estimator_brackets_the_kernel(V, k, seed):
    """Mean of 100 000 sampled paths vs the exact kernel acceptance: |z| <= 3.29 (two-sided 0.1%
    false-alarm rate per case, fixed seeds)."""
    rng = np.random.default_rng(100 + seed)
    p = random_simplex(rng, V, zeros=1, alpha=0.5)
    q = random_simplex(rng, V, zeros=1, alpha=0.5)
    exact = rrs_wor.acceptance(p, otspec.without_replacement(q, k), method="kernel").value
    v = rsd_path_acceptance(p, q, k, 100_000, np.random.default_rng(seed))
    se = v.std(ddof=1) / np.sqrt(v.size)
    assert abs(v.mean() - exact) <= 3.29 * se + FLOAT64_ATOL, (v.mean(), exact, se)


def test_degenerate_laws_are_exact():
    """p = q accepts at round 1 with probability 1; disjoint supports never accept."""
    rng = np.random.default_rng(7)
    q = random_simplex(rng, 10)
    v = rsd_path_acceptance(q, q, 4, 1000, rng)
    np.testing.assert_allclose(v, 1.0, atol=FLOAT64_ATOL)
    p = np.r_[np.zeros(5), random_simplex(rng, 5)]
    q2 = np.r_[random_simplex(rng, 5), np.zeros(5)]
    v = rsd_path_acceptance(p, q2, 3, 1000, rng)
    np.testing.assert_allclose(v, 0.0, atol=FLOAT64_ATOL)


def test_large_vocabulary_uses_paths_with_an_interval():
    rng = np.random.default_rng(8)
    V = 5000
    p, q = rng.dirichlet(np.full(V, 0.3)), rng.dirichlet(np.full(V, 0.3))
    est = rrs_wor.acceptance(p, otspec.without_replacement(q, 8), n_samples=20_000, rng=np.random.default_rng(1))
    assert est.how == "monte_carlo" and est.n_samples == 20_000
    assert est.ci_low <= est.value <= est.ci_high and est.ci_high - est.ci_low < 0.01
    assert "rejection paths" in est.extras["estimator"]


@pytest.mark.parametrize("V,k,seed", [(6, 1, 0), (6, 3, 1), (9, 5, 2), (300, 4, 3)])
def test_lazy_draws_equal_the_plan_draws(V, k, seed):
    """rrs_wor's lazy sampler returns exactly the token of sample_schedule(rrs_wor_schedule(...)) for the same
    generator states (same coins, same residual draws, same per-row arithmetic), row for row."""
    from otspec.sampling import spawn_streams
    from otspec.verifiers.schedule import sample_schedule
    from otspec.verifiers.step.rrs_wor import rrs_wor_schedule

    rng = np.random.default_rng(seed)
    p = random_simplex(rng, V, zeros=1, alpha=0.5)
    q = random_simplex(rng, V, zeros=1, alpha=0.5)
    law = otspec.without_replacement(q, k)
    tuples = law.sample(rng, 2000)
    c1, r1 = spawn_streams(np.random.default_rng(seed + 10), 2, parent_first=True)
    c2, r2 = spawn_streams(np.random.default_rng(seed + 10), 2, parent_first=True)
    lazy = rrs_wor._sample_rows(p, law, tuples, c1, r1)
    ref = sample_schedule(rrs_wor_schedule(p, q, tuples), c2, r2)
    np.testing.assert_array_equal(lazy, ref)
