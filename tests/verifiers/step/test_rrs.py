"""Recursive rejection sampling: with replacement (SpecInfer) and without (RSD)."""

from __future__ import annotations

import numpy as np
import pytest

import otspec
from otspec._tolerances import EXACT_ATOL, FLOAT64_ATOL
from otspec.errors import InvalidDraftsError, ShapeMismatchError
from otspec.verifiers import rrs, rrs_wor, token
from otspec.verifiers.step.rrs import rrs_conditional
from otspec.verifiers.step.rrs_wor import rrs_wor_conditional, rrs_wor_schedule
from tests._tolerances import FLOAT64_ULPS_ATOL, STRICT_GAP


def test_rrs_hand_example():
    """p = (1/2, 1/2), q = (0.9, 0.1), k = 2, derived by hand: round 1 accepts w.p. 0.6, leaving
    p_1 = (0, 1); round 2 accepts w.p. 0.1; a rejected draft is always token 0 and the residual is
    token 1, so acceptance = 1 - 0.4 * 0.9 = 0.64. Drafts (0, 0): keep 0 w.p. 5/9, else token 1."""
    p, q = [0.5, 0.5], [0.9, 0.1]
    est = rrs.acceptance(p, otspec.iid(q, 2))
    assert est.how == "closed_form"
    assert abs(est.value - 0.64) < FLOAT64_ULPS_ATOL and abs(est.extras["round_acceptance"] - 0.64) < FLOAT64_ULPS_ATOL
    np.testing.assert_allclose(rrs_conditional(p, q, [0, 0]), [[5 / 9, 4 / 9]], rtol=0, atol=FLOAT64_ULPS_ATOL)


def test_rrs_k1_is_token(rng):
    for _ in range(20):
        p, q = rng.dirichlet(np.ones(5)), rng.dirichlet(np.ones(5))
        law = otspec.iid(q, 1)
        np.testing.assert_allclose(rrs.kernel(p, law).pi, token.kernel(p, law).pi, atol=FLOAT64_ULPS_ATOL)
        np.testing.assert_allclose(rrs_wor.kernel(p, otspec.without_replacement(q, 1)).pi, token.kernel(p, law).pi, atol=FLOAT64_ULPS_ATOL)


def test_rrs_product_uses_each_drafts_own_q(rng):
    V = 4
    qs = [rng.dirichlet(np.ones(V)) for _ in range(3)]
    p = rng.dirichlet(np.ones(V))
    law = otspec.product(qs)
    K = rrs.kernel(p, law)
    np.testing.assert_allclose(rrs_conditional(p, np.stack(qs), K.tuples), K.pi, atol=0)
    np.testing.assert_allclose(K.output_law(), p, atol=FLOAT64_ATOL)
    # using the first drafter's q in every round (the i.i.d. rule) is NOT lossless for this law
    wrong = rrs_conditional(p, qs[0], K.tuples)
    assert np.abs(K.weights @ wrong - p).max() > STRICT_GAP
    # a product of identical drafters is the i.i.d. law
    same = otspec.product([qs[0]] * 3)
    assert abs(rrs.acceptance(p, same).value - rrs.acceptance(p, otspec.iid(qs[0], 3)).value) < FLOAT64_ULPS_ATOL


def test_rrs_conditional_rejects_wrong_number_of_drafters():
    with pytest.raises(ShapeMismatchError, match="2 laws for k = 3"):
        rrs_conditional([0.5, 0.5], [[0.5, 0.5], [0.5, 0.5]], [0, 1, 0])


def _rsd_round_acceptance(p, q, k):
    """docs/verifiers.rst, rrs_wor recursion, written independently of the library:
    A(p, q, k) = beta(p, q) + sum_x (q(x) - p(x))_+ A(norm((p - q)_+), q with x removed, k - 1)."""
    if k == 0:
        return 0.0
    beta = float(np.minimum(p, q).sum())
    res = np.maximum(p - q, 0.0)
    if res.sum() <= 0:
        return beta
    pn = res / res.sum()
    total = beta
    for x in np.flatnonzero(np.maximum(q - p, 0.0) > 0):
        qx = q.copy()
        qx[x] = 0.0
        if qx.sum() <= 0:
            continue
        total += (q[x] - p[x]) * _rsd_round_acceptance(pn, qx / qx.sum(), k - 1)
    return total


def test_rsd_round_acceptance_matches_recursion(rng):
    for _ in range(40):
        V = int(rng.integers(2, 6))
        q = rng.dirichlet(np.ones(V))
        p = rng.dirichlet(np.ones(V))
        k = int(rng.integers(1, V + 1))
        law = otspec.without_replacement(q, k)
        tuples, w = law.enumerate()
        plan = rrs_wor_schedule(p, q, tuples)
        loop = w @ (1.0 - np.prod(1.0 - plan.accept, axis=1))
        assert abs(loop - _rsd_round_acceptance(p, q, k)) < FLOAT64_ATOL
        # membership acceptance >= round acceptance, <= the without-replacement optimum
        a = rrs_wor.acceptance(p, law).value
        assert loop - FLOAT64_ATOL <= a <= otspec.optimal_acceptance(p, law, method="lp").value + FLOAT64_ATOL


def test_rsd_conditional_matches_kernel_and_rejects_duplicates(rng):
    p, q = rng.dirichlet(np.ones(5)), rng.dirichlet(np.ones(5))
    K = rrs_wor.kernel(p, otspec.without_replacement(q, 3))
    np.testing.assert_allclose(rrs_wor_conditional(p, q, K.tuples), K.pi, atol=0)
    with pytest.raises(InvalidDraftsError, match="distinct"):
        rrs_wor_conditional(p, q, [[1, 1, 2]])


def test_rrs_closed_form_at_full_vocabulary():
    rng = np.random.default_rng(1)
    V = 262_144
    p, q = rng.dirichlet(np.full(V, 0.1)), rng.dirichlet(np.full(V, 0.1))
    est = rrs.acceptance(p, otspec.iid(q, 8))
    assert est.how == "closed_form"
    assert est.extras["round_acceptance"] <= est.value <= otspec.optimal_acceptance(p, otspec.iid(q, 8)).value + EXACT_ATOL
