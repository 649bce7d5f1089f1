"""optimal_plan: the cleaned LP plan agrees with TransportPlan.conditional and attains the optimum."""

from __future__ import annotations

import numpy as np

import otspec
from otspec.verifiers import optimal_plan


def test_rows_match_transport_plan_conditional(rng):
    for _ in range(10):
        V, k = int(rng.integers(2, 6)), int(rng.integers(1, 4))
        p, q = rng.dirichlet(np.ones(V)), rng.dirichlet(np.ones(V))
        for law in (otspec.iid(q, k), otspec.product([rng.dirichlet(np.ones(V)) for _ in range(k)])):
            res = otspec.optimal_acceptance(p, law, method="lp")
            K = optimal_plan.kernel(p, law)
            ref = np.stack([res.plan.conditional(t) for t in K.tuples])
            np.testing.assert_allclose(K.pi, ref, atol=1e-8)
            # the cleaned plan is exactly lossless and its acceptance is the optimum
            np.testing.assert_allclose(K.output_law(), p, atol=1e-12)
            assert abs(K.acceptance() - res.value) < 1e-9
            cp = optimal_plan.plan(p, law)
            assert abs(cp.value - res.value) < 1e-9 and cp.lp_value == res.value


def test_sampling_reuses_one_lp_solve():
    p, q = np.array([0.3, 0.3, 0.4]), np.array([0.5, 0.25, 0.25])
    law = otspec.iid(q, 2)
    a = optimal_plan.plan(p, law)
    optimal_plan.sample(p, law, [0, 1], rng=np.random.default_rng(0))
    assert optimal_plan.plan(p, law) is a
