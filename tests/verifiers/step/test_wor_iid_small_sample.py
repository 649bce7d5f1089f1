"""wor_iid's Monte Carlo acceptance when the residual's share is rare.

The estimate is alpha*_iid plus the mean of a per-sample residual share z >= 0. When z is rare
(the residual's token is almost never drafted) every sample can have z = 0: the normal interval
then had width 0 and excluded the exact value, which lies above alpha*_iid. The exact value comes
from the kernel (V = 3, k = 2: every draft tuple enumerated).
"""

from __future__ import annotations

import numpy as np
import pytest

import otspec
from otspec.verifiers import wor_iid

P = np.array([0.45, 0.45, 0.1])


def _rare_residual_law(eps):
    # token 2 carries 0.1 of p but eps of q: the selection law puts less than p on it, so the
    # residual lives there, and a sample reaches it only when token 2 is drafted (~2 eps)
    return otspec.without_replacement(np.array([0.5, 0.5 - eps, eps]), 2)


def test_no_residual_in_any_sample_gives_an_exact_binomial_bound():
    law = _rare_residual_law(1e-5)
    exact = wor_iid.acceptance(P, law, method="kernel").value
    alpha_iid = wor_iid.certified_lower_bound(P, law)
    assert exact > alpha_iid  # the residual's share is rare, not absent
    n = 500
    mc = wor_iid.acceptance(P, law, method="monte_carlo", n_samples=n, rng=np.random.default_rng(0))
    assert mc.extras["nonzero_residual_samples"] == 0 and mc.extras["interval"] == "clopper_pearson"
    assert mc.ci_low == alpha_iid < exact <= mc.ci_high
    # with no positive in n samples, P(z > 0) <= 1 - 0.005^(1/n) (99% two-sided, upper tail):
    # the bound is at least that times the residual's smallest possible nonzero share
    assert mc.ci_high - alpha_iid >= (1 - 0.005 ** (1 / n)) * (exact - alpha_iid)


def test_rare_residual_interval_covers_the_exact_value():
    """200 runs (seeds 0..199) of n = 500 samples with ~0.5 nonzero shares each: a 99% interval
    misses in ~2 runs; the test allows 6 (false-alarm rate ~1.6% for a method with exact 99%
    coverage, far less for this conservative bound). The normal interval alone covered 69 of 200."""
    law = _rare_residual_law(1e-3)
    exact = wor_iid.acceptance(P, law, method="kernel").value
    hits = 0
    for seed in range(200):
        mc = wor_iid.acceptance(P, law, method="monte_carlo", n_samples=500, rng=np.random.default_rng(seed))
        hits += mc.ci_low <= exact <= mc.ci_high
    assert hits >= 194, hits


def test_plentiful_residual_keeps_the_normal_interval():
    law = _rare_residual_law(0.3)
    mc = wor_iid.acceptance(P, law, method="monte_carlo", n_samples=2000, rng=np.random.default_rng(1))
    assert mc.extras["interval"] == "normal" and mc.extras["nonzero_residual_samples"] >= 10
    exact = wor_iid.acceptance(P, law, method="kernel").value
    assert mc.ci_low <= exact <= mc.ci_high


def test_clopper_pearson_upper_bound_matches_the_beta_quantile():
    # the exact bound is the (1 - tail) quantile of Beta(m + 1, n - m); computed here without scipy.stats
    from scipy.stats import beta

    from otspec.verifiers.step.wor_iid import _clopper_pearson_upper

    for n in (2, 10, 500, 2000, 100_000):
        for m in range(min(n, 10)):
            for tail in (0.005, 0.05, 0.5):
                assert _clopper_pearson_upper(m, n, tail) == pytest.approx(beta.ppf(1.0 - tail, m + 1, n - m), rel=1e-9)
    assert _clopper_pearson_upper(3, 3, 0.005) == 1.0


def test_certified_bracket_holds_the_acceptance_and_is_none_on_enumerable_laws():
    from otspec.synthetic import synthetic_pair

    assert wor_iid.certified_bracket(P, _rare_residual_law(0.3)) is None  # the kernel is cheap there
    p, q = synthetic_pair(60, seed=2)
    law = otspec.without_replacement(q, 4)
    low, high = wor_iid.certified_bracket(p, law)
    opt, opt_iid = otspec.optimal_acceptance(p, law), otspec.optimal_acceptance(p, otspec.iid(q, 4))
    assert low == opt_iid.value - opt_iid.error_bound <= wor_iid.certified_lower_bound(p, law)
    assert opt.value <= high <= opt.value + opt.error_bound
    mc = wor_iid.acceptance(p, law, method="monte_carlo", n_samples=200, rng=np.random.default_rng(0))
    assert low <= mc.value <= high
