"""The lossy SPRINTER-style verifier: exact TV to the target, and its sampler."""

from __future__ import annotations

import math

import numpy as np
import pytest

import otspec
from otspec._tolerances import FLOAT64_ATOL
from otspec.errors import InvalidDistributionError, ShapeMismatchError, UnsupportedMethodError
from otspec.verifiers import ALL, approximate
from otspec.verifiers.step.approximate import ApproximateVerifier
from tests._tolerances import FLOAT64_ULPS_ATOL

P = np.array([0.3, 0.3, 0.1, 0.3, 0.0])
Q = np.array([0.4, 0.2, 0.3, 0.0, 0.1])
LAW = otspec.iid(Q, 1)


def test_registered_as_lossy():
    assert approximate in ALL and approximate.lossless is False


def test_exact_rule_predicate_has_zero_tv(rng):
    for _ in range(50):
        V = int(rng.integers(2, 8))
        p, q = rng.dirichlet(np.ones(V)), rng.dirichlet(np.ones(V))
        law = otspec.iid(q, 1)
        assert approximate.tv_to_target(p, law) == 0.0
        np.testing.assert_allclose(approximate.kernel(p, law).output_law(), p, atol=FLOAT64_ATOL)
        assert abs(approximate.acceptance(p, law).value - np.minimum(p, q).sum()) < FLOAT64_ATOL


def test_tv_formula_matches_kernel_and_closed_form_law(rng):
    for _ in range(50):
        V = int(rng.integers(2, 8))
        p, q = rng.dirichlet(np.ones(V)), rng.dirichlet(np.ones(V))
        a = rng.random(V)
        v = ApproximateVerifier(a, name="random_predicate")
        law = otspec.iid(q, 1)
        K = v.kernel(p, law)
        tv_kernel = 0.5 * np.abs(K.output_law() - p).sum()
        assert abs(v.tv_to_target(p, law) - tv_kernel) < FLOAT64_ATOL
        np.testing.assert_allclose(v.output_law(p, law), K.output_law(), atol=FLOAT64_ATOL)
        assert abs(v.acceptance(p, law).value - K.acceptance()) < FLOAT64_ATOL
        # a context-only predicate a == c scales the TV: c * d_TV(p, q)  (docs/verifiers.rst, approximate)
        c = float(rng.random())
        assert abs(ApproximateVerifier(np.full(V, c)).tv_to_target(p, law) - c * 0.5 * np.abs(p - q).sum()) < FLOAT64_ATOL


def test_empirical_tv_of_sampler_matches_exact_tv():
    """Empirical TV of N = 200 000 sampler outputs vs the exact TV.

    Tolerance: |TV(P_hat, p) - TV(P, p)| <= TV(P_hat, P); E TV(P_hat, P) <= 0.5 sqrt(V / N), and by
    McDiarmid (one draw moves TV by <= 1/N) it exceeds its mean by t w.p. <= exp(-2 N t^2);
    with false-alarm rate 1e-6: tol = 0.5 sqrt(V/N) + sqrt(ln(1e6) / (2N)) ~ 0.0084 at V = 5.
    """
    N = 200_000
    tol = 0.5 * math.sqrt(P.size / N) + math.sqrt(math.log(1e6) / (2 * N))
    for a in ([1.0, 1.0, 1.0, 1.0, 1.0], [0.5, 0.9, 0.7, 0.0, 1.0], None):
        v = ApproximateVerifier(a)
        drafts = np.random.default_rng(5).choice(P.size, size=N, p=Q)[:, None]
        ys = v.sample_batch(P, LAW, drafts, rng=np.random.default_rng(6))
        emp = np.bincount(ys, minlength=P.size) / N
        tv_emp = 0.5 * np.abs(emp - P).sum()
        tv = v.tv_to_target(P, LAW)
        assert abs(tv_emp - tv) <= tol, (a, tv_emp, tv, tol)
    # the check discriminates: "pass everything" outputs q, TV(q, p) = 0.2 here, far above tol
    assert ApproximateVerifier([1.0] * 5).tv_to_target(P, LAW) - 0 > 10 * tol


def test_callable_predicate_and_bad_predicates():
    v = ApproximateVerifier(lambda p, q: (p >= 0.5 * q).astype(float), name="half_ratio")
    assert v.name == "half_ratio"
    expected = float(((P >= 0.5 * Q) * np.maximum(Q - P, 0)).sum())
    assert abs(v.tv_to_target(P, LAW) - expected) < FLOAT64_ULPS_ATOL
    with pytest.raises(InvalidDistributionError, match="1.5"):
        ApproximateVerifier([0.2, 1.5, 0.0, 0.0, 0.0])
    with pytest.raises(ShapeMismatchError, match=r"\(3,\)"):
        ApproximateVerifier([0.2, 0.5, 0.0]).tv_to_target(P, LAW)
    with pytest.raises(InvalidDistributionError, match="-1"):
        ApproximateVerifier(lambda p, q: -np.ones_like(p)).acceptance(P, LAW)
    with pytest.raises(UnsupportedMethodError, match="k = 1"):
        approximate.tv_to_target(P, otspec.iid(Q, 2))
