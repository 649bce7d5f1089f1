"""optimal_plan: the cleaned LP plan agrees with MembershipPlan.conditional and attains the optimum."""

from __future__ import annotations

import numpy as np
import pytest

import otspec
from otspec._tolerances import CERTIFICATE_ATOL, EXACT_ATOL, FLOAT64_ATOL
from otspec.verifiers import optimal_plan


def test_rows_match_transport_plan_conditional(rng):
    for _ in range(10):
        V, k = int(rng.integers(2, 6)), int(rng.integers(1, 4))
        p, q = rng.dirichlet(np.ones(V)), rng.dirichlet(np.ones(V))
        for law in (otspec.iid(q, k), otspec.product([rng.dirichlet(np.ones(V)) for _ in range(k)])):
            res = otspec.optimal_acceptance(p, law, method="lp")
            K = optimal_plan.kernel(p, law)
            ref = np.stack([res.plan.conditional(t) for t in K.tuples])
            np.testing.assert_allclose(K.pi, ref, atol=CERTIFICATE_ATOL)
            # the cleaned plan is exactly lossless and its acceptance is the optimum
            np.testing.assert_allclose(K.output_law(), p, atol=FLOAT64_ATOL)
            assert abs(K.acceptance() - res.value) < EXACT_ATOL
            cp = optimal_plan.plan(p, law)
            assert abs(cp.value - res.value) < EXACT_ATOL and cp.lp_value == res.value


def test_sampling_reuses_one_lp_solve():
    p, q = np.array([0.3, 0.3, 0.4]), np.array([0.5, 0.25, 0.25])
    law = otspec.iid(q, 2)
    a = optimal_plan.plan(p, law)
    optimal_plan.sample(p, law, [0, 1], rng=np.random.default_rng(0))
    assert optimal_plan.plan(p, law) is a


def test_zero_weight_draft_set_has_a_defined_row():
    # Regression: the set {1} has Q = (1e-200)^2 = 0 in float64; its row was 0/0.
    p = np.array([0.5, 0.5])
    law = otspec.iid([1 - 1e-200, 1e-200], 2)
    K = optimal_plan.kernel(p, law)
    assert np.all(np.isfinite(K.pi))
    np.testing.assert_allclose(K.pi.sum(axis=1), 1.0, atol=EXACT_ATOL)
    # drafts {0} w.p. 1: the optimum accepts p(0) = 0.5 (the cut H = {0} certifies it)
    assert optimal_plan.acceptance(p, law).value == pytest.approx(0.5, abs=EXACT_ATOL)
    res = otspec.optimal_acceptance(p, law, method="lp")
    row = res.plan.conditional([1, 1])
    assert np.all(np.isfinite(row)) and row.sum() == pytest.approx(1.0, abs=EXACT_ATOL)
    np.testing.assert_allclose(row, res.plan.residual)  # the documented row of a zero-weight set
