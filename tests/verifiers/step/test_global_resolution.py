"""Global Resolution (our reading): lossless for every fitted weight vector, its acceptance within
the tolerance of the exact i.i.d. optimum, and the convex program's gradient is r_theta - r*."""

from __future__ import annotations

import numpy as np
import pytest

import otspec
from otspec._tolerances import GR_SELECTION_L1_TOL
from otspec.errors import InvalidOptionError
from otspec.verifiers import global_resolution
from otspec.verifiers.step.global_resolution import fit, kernel_rows, selection_rows


def _pair(rng, V):
    p = rng.dirichlet(np.full(V, 0.6))
    q = rng.dirichlet(np.full(V, 0.6))
    if V > 2 and rng.random() < 0.4:  # zeros in p or q
        (p if rng.random() < 0.5 else q)[rng.integers(V)] = 0.0
        p, q = p / p.sum(), q / q.sum()
    return p, q


def _output_law(p, q, k, g):
    law = otspec.iid(q, k)
    tuples, weights = law.enumerate()
    return weights @ kernel_rows(p, g, tuples), weights @ selection_rows(g, tuples)


def test_lossless_for_any_fit_on_120_random_cases():
    """Exact output law over every draft tuple equals p to 1e-12, for coarse fits (the rule is
    lossless for every weight vector, so a loose tolerance keeps this cheap): 120 cases, V <= 5,
    k <= 3, zeros in p or q; the quadrature law r_theta equals the enumerated selection law."""
    rng = np.random.default_rng(36)
    worst = worst_r = 0.0
    for _ in range(120):
        V, k = int(rng.integers(2, 6)), int(rng.integers(1, 4))
        p, q = _pair(rng, V)
        g = fit(p, q, k, tol=1e-2)
        out, r_exact = _output_law(p, q, k, g)
        worst = max(worst, float(np.abs(out - p).max()))
        worst_r = max(worst_r, float(np.abs(r_exact - g.r).max()))
    assert worst <= 1e-12
    assert worst_r <= 1e-13


def test_acceptance_within_tolerance_of_the_exact_optimum_on_20_cases():
    rng = np.random.default_rng(7)
    for _ in range(20):
        V, k = int(rng.integers(2, 7)), int(rng.integers(1, 5))
        p, q = _pair(rng, V)
        g = fit(p, q, k)
        exact = otspec.optimal_acceptance(p, otspec.iid(q, k), method="subsets").value
        assert g.converged, g
        assert abs(g.alpha_star - exact) <= 1e-12
        assert -1e-12 <= exact - g.value <= GR_SELECTION_L1_TOL + 1e-12


def test_kernel_acceptance_and_sampler_through_the_verifier():
    p, q = np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.3, 0.5])
    law = otspec.iid(q, 2)
    K = global_resolution.kernel(p, law)
    tuples, weights = law.enumerate()
    assert np.abs(weights @ K.pi - p).max() <= 1e-12
    est = global_resolution.acceptance(p, law)
    assert abs(est.value - 0.86) <= GR_SELECTION_L1_TOL  # alpha* = 1 + 0.5 - 0.8^2
    out = global_resolution.sample_batch(p, law, tuples, rng=np.random.default_rng(0))
    assert out.shape == (tuples.shape[0],) and set(out.tolist()) <= {0, 1, 2}


def test_gradient_of_the_convex_program_is_the_law_gap():
    """Psi(theta) = E log S - <r*, theta>: a central finite difference of the objective along a
    random direction equals <r_theta - r*, d> (checks the quadrature's objective and law agree)."""
    from otspec.verifiers.step.global_resolution import _side

    rng = np.random.default_rng(3)
    Qg = rng.dirichlet(np.ones(6)) * 0.7
    th = rng.normal(size=6)
    d = rng.normal(size=6)
    c, k, eps = 0.3, 3, 1e-5
    r0, _ = _side(Qg, np.exp(th - th.max()), c, k)
    fp = _side(Qg, np.exp(th + eps * d - (th + eps * d).max()), c, k)[1]
    fm = _side(Qg, np.exp(th - eps * d - (th - eps * d).max()), c, k)[1]
    # the objective is shift invariant only with the linear term; E log S itself shifts by the
    # max, so compare with the shift undone: E log S(theta) = obj(theta - max) + P(E) max
    pe = (Qg.sum() + c) ** k - c**k
    fp += pe * (th + eps * d).max()
    fm -= 0.0
    fm += pe * (th - eps * d).max()
    assert abs((fp - fm) / (2 * eps) - float(np.dot(r0, d))) <= 1e-7


def test_k1_is_speculative_sampling():
    p, q = np.array([0.6, 0.3, 0.1]), np.array([0.2, 0.2, 0.6])
    g = fit(p, q, 1)
    assert np.allclose(g.r, q, atol=1e-15) and abs(g.value - np.minimum(p, q).sum()) <= 1e-15


@pytest.mark.parametrize("tol", [0.0, -1e-3, 2.0, "x", float("nan")])
def test_bad_tolerance(tol):
    with pytest.raises(InvalidOptionError, match="tol must be"):
        fit([0.5, 0.5], [0.5, 0.5], 2, tol=tol)


def test_sampler_follows_the_exact_kernel():
    """Chi-square of ``sample_batch`` against the exact kernel on the joint law of (draft tuple,
    output): N = 100 000 draws, fixed seed, false-alarm rate 1e-6; power >= 0.99 against any
    sampler at TV >= 0.04 from the kernel (``otspec.testing.assert_sampler_matches``). Cells of
    expected count below 5 (outputs the near-optimal residual almost never reaches) are pooled."""
    from otspec.testing import assert_sampler_matches

    p, q = np.array([0.1, 0.4, 0.2, 0.3]), np.array([0.3, 0.1, 0.4, 0.2])
    chk = assert_sampler_matches(
        global_resolution, p, otspec.iid(q, 2), n=100_000, false_alarm=1e-6, tv=0.04, rng=np.random.default_rng(2511), per_tuple=False
    )
    assert chk.power >= 0.99, chk


def test_certified_bracket_without_the_fit():
    """Small laws: None (the kernel is cheap); large laws: [0, alpha*] from the closed form, equal
    to optimal_acceptance's value, without running the convex program."""
    from otspec.synthetic import synthetic_pair

    assert global_resolution.certified_bracket([0.5, 0.5], otspec.iid([0.5, 0.5], 2)) is None
    p, q = synthetic_pair(4096, seed=1)
    law = otspec.iid(q, 2)
    lo, hi = global_resolution.certified_bracket(p, law)
    assert lo == 0.0 and abs(hi - otspec.optimal_acceptance(p, law).value) <= 2e-12
