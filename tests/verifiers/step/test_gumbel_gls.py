"""Drafter-invariant Gumbel-max coupling (Daliri et al.) and GLS list coupling (Rowan et al.):
exact kernels, the papers' bounds checked exactly, samplers against the kernels, and their place
against the optimum alpha*.

The exact joint law of the race (``race_joint``) is checked against two facts it is not built from:
its row sums are the draft law Q(x) and its column sums are p (losslessness), on random small cases
with zeros. The K = 1 match probability is checked against its closed form, a different derivation.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import stats

import otspec
from otspec._tolerances import FLOAT64_ATOL
from otspec.errors import ProblemTooLargeError, UnsupportedMethodError
from otspec.testing import assert_lossless, assert_sampler_matches
from otspec.verifiers import gls, gumbel
from otspec.verifiers.step.gls import gls_own_copy_bound
from otspec.verifiers.step.gumbel_coupling import couple, daliri_lower_bound, gumbel_match_probability, race_joint
from tests._tolerances import FALSE_ALARM

P5 = np.array([0.30, 0.25, 0.20, 0.15, 0.10])
Q5 = np.array([0.10, 0.20, 0.30, 0.25, 0.15])


def _dist(rng, V, zero):
    x = rng.dirichlet(np.full(V, 0.7))
    if zero:
        x[rng.integers(V)] = 0.0
        x /= x.sum()
    return x


def _case(rng):
    V = int(rng.integers(2, 5))
    K = int(rng.integers(1, 4))
    p = _dist(rng, V, rng.random() < 0.3)
    qs = [_dist(rng, V, rng.random() < 0.3) for _ in range(K)]
    return p, qs


def test_race_joint_marginals_are_the_draft_law_and_p_on_120_cases():
    """Rows sum to Q(x) = prod_k q_k(x_k), columns to p, exactly (1e-12), V <= 4, K <= 3, zeros."""
    rng = np.random.default_rng(20260)
    for _ in range(120):
        p, qs = _case(rng)
        T = np.array(list(itertools.product(*[np.flatnonzero(q > 0) for q in qs])))
        J = race_joint(p, qs, T)
        Qx = np.prod([qs[k][T[:, k]] for k in range(len(qs))], axis=0)
        assert np.abs(J.sum(axis=1) - Qx).max() <= FLOAT64_ATOL
        assert np.abs(J.sum(axis=0) - p).max() <= FLOAT64_ATOL
        assert J.min() >= 0.0


def test_verifiers_are_lossless_on_iid_and_product_laws():
    rng = np.random.default_rng(7)
    for _ in range(100):
        p, qs = _case(rng)
        if len(qs) == 1:
            assert_lossless(gumbel, p, otspec.iid(qs[0], 1), atol=FLOAT64_ATOL)
        else:
            assert_lossless(gls, p, otspec.product(qs), atol=FLOAT64_ATOL)
            assert_lossless(gls, p, otspec.iid(qs[0], len(qs)), atol=FLOAT64_ATOL)


def test_known_answer_point_mass_target():
    """p = (1, 0), q = (1/2, 1/2): Y = 0 always, X = 0 w.p. 1/2, so P(X = Y) = 1/2 (by hand)."""
    law = otspec.iid([0.5, 0.5], 1)
    assert gumbel.acceptance([1.0, 0.0], law).value == pytest.approx(0.5, abs=FLOAT64_ATOL)
    assert gumbel.acceptance([1.0, 0.0], law, method="kernel").value == pytest.approx(0.5, abs=FLOAT64_ATOL)


def test_gumbel_closed_form_equals_kernel():
    rng = np.random.default_rng(3)
    for _ in range(100):
        V = int(rng.integers(2, 7))
        p, q = _dist(rng, V, rng.random() < 0.3), _dist(rng, V, rng.random() < 0.3)
        law = otspec.iid(q, 1)
        exact = gumbel.acceptance(p, law, method="kernel").value
        assert gumbel.acceptance(p, law).value == pytest.approx(exact, abs=FLOAT64_ATOL)
        assert gumbel_match_probability(p, q) == pytest.approx(exact, abs=FLOAT64_ATOL)


def test_daliri_bound_holds_and_sits_below_the_maximal_coupling_on_300_cases():
    """Daliri et al.'s claim P(X = Y) >= (1 - TV)/(1 + TV), checked on the exact value; the
    coupling pays for needing no communication: P(X = Y) <= 1 - TV = alpha* (k = 1)."""
    rng = np.random.default_rng(11)
    slack = []
    for i in range(300):
        V = int(rng.integers(2, 40))
        p, q = _dist(rng, V, i % 3 == 0), _dist(rng, V, i % 5 == 0)
        exact = gumbel_match_probability(p, q)
        assert exact >= daliri_lower_bound(p, q) - FLOAT64_ATOL
        opt = otspec.optimal_acceptance(p, otspec.iid(q, 1)).value
        assert exact <= opt + FLOAT64_ATOL
        slack.append(opt - exact)
    assert max(slack) > 0.01  # the gap to the optimum is real, not a rounding artefact


def test_daliri_bound_is_attained():
    """The bound is tight: p = (1/2, 1/2, 0), q = (1/2, 0, 1/2) (TV = 1/2) match only at token 0,
    which wins both races iff E_0 / (1/2) beats E_1 / (1/2) and E_2 / (1/2): probability 1/3 by
    symmetry of three i.i.d. exponentials, = (1 - 1/2)/(1 + 1/2)."""
    p, q = np.array([0.5, 0.5, 0.0]), np.array([0.5, 0.0, 0.5])
    assert gumbel_match_probability(p, q) == pytest.approx(1.0 / 3.0, abs=FLOAT64_ATOL)
    assert daliri_lower_bound(p, q) == pytest.approx(1.0 / 3.0, abs=FLOAT64_ATOL)


def test_gls_own_copy_bound_holds_and_reduces_to_gumbel_at_k1():
    """Our list-matching bound (the winning copy drafted the winning token) <= the exact GLS
    acceptance on 150 cases; at K = 1 it is the Gumbel match probability; GLS <= alpha*."""
    rng = np.random.default_rng(5)
    gaps = []
    for _ in range(150):
        p, qs = _case(rng)
        if len(qs) == 1:
            assert gls_own_copy_bound(p, qs) == pytest.approx(gumbel_match_probability(p, qs[0]), abs=FLOAT64_ATOL)
            continue
        for law in (otspec.product(qs), otspec.iid(qs[0], len(qs))):
            lqs = list(law.independent_qs)
            exact = gls.acceptance(p, law).value
            assert gls_own_copy_bound(p, lqs) <= exact + FLOAT64_ATOL
            opt = otspec.optimal_acceptance(p, law, method="lp").value
            assert exact <= opt + FLOAT64_ATOL
            gaps.append(opt - exact)
    assert max(gaps) > 0.01


def test_sampler_matches_kernel():
    """Chi-square on the joint law of (draft tuple, output), false-alarm 1e-6, power >= 0.99
    against a 0.02 TV error, no pooled cell (``assert_sampler_matches``); N = 1 000 000 for the
    two-draft laws, whose rarest (tuple, output) cells have mass ~1e-5."""
    for v, law, n in [
        (gumbel, otspec.iid(Q5, 1), 300_000),
        (gls, otspec.iid(Q5, 2), 1_000_000),
        (gls, otspec.product([Q5, np.full(5, 0.2)]), 300_000),
    ]:
        chk = assert_sampler_matches(v, P5, law, n=n, false_alarm=FALSE_ALARM, tv=0.02, rng=np.random.default_rng(99), per_tuple=False)
        assert chk.power >= 0.99 and chk.pooled == 0, chk


def test_protocol_is_drafter_invariant_and_follows_the_exact_joint_law():
    """couple(): the same shared draw gives the same output for any drafters; its (drafts, output)
    follow race_joint (chi-square, N = 200 000, 5 x 5 x 5 cells, false-alarm 1e-6)."""
    p = P5
    y1 = couple(p, [Q5, Q5], np.random.default_rng(4), size=2000)[1]
    y2 = couple(p, [P5, np.full(5, 0.2)], np.random.default_rng(4), size=2000)[1]
    assert np.array_equal(y1, y2)
    n = 200_000
    d, y = couple(p, [Q5, Q5], np.random.default_rng(5), size=n)
    T = np.array(list(itertools.product(range(5), range(5))))
    J = race_joint(p, [Q5, Q5], T)  # [25, 5]
    obs = np.bincount((d[:, 0] * 5 + d[:, 1]) * 5 + y, minlength=125).astype(float)
    exp = J.ravel() * n
    keep = exp > 0
    assert obs[~keep].sum() == 0
    chi2 = float(np.sum((obs[keep] - exp[keep]) ** 2 / exp[keep]))
    assert stats.chi2.sf(chi2, keep.sum() - 1) > FALSE_ALARM


def test_law_rules_and_size_limit():
    with pytest.raises(UnsupportedMethodError, match="gls"):
        gls.kernel(P5, otspec.without_replacement(Q5, 2))
    with pytest.raises(UnsupportedMethodError, match="gumbel"):
        gumbel.kernel(P5, otspec.iid(Q5, 2))
    rng = np.random.default_rng(0)
    V = 3000
    p, q = rng.dirichlet(np.ones(V)), rng.dirichlet(np.ones(V))
    assert gumbel.acceptance(p, otspec.iid(q, 1)).how == "closed_form"
    with pytest.raises(ProblemTooLargeError):
        gls.acceptance(p, otspec.iid(q, 2))


def test_denormal_drafts_give_finite_lossless_kernels_without_warnings():
    """Regression: p/q overflowed for a denormal q, and a tuple whose mass underflows had a 0/0
    kernel row; the row now takes the q(x) -> 0 limit (the tiny-q draft wins the target race)."""
    import warnings

    q = np.array([1 - 5e-324 - 1e-310, 5e-324, 1e-310])
    p = np.array([0.5, 0.3, 0.2])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for v, law in [(gumbel, otspec.iid(q, 1)), (gls, otspec.iid(q, 2)), (gls, otspec.product([q, q[::-1]]))]:
            K = v.kernel(p, law)
            assert np.all(np.isfinite(K.pi))
            assert_lossless(v, p, law, atol=FLOAT64_ATOL)
        couple(p, [q, q], np.random.default_rng(0), size=10)


def test_gls_drafted_only_sum_and_tuple_acceptance_equal_the_kernel():
    """The acceptance by the drafted-outputs-only sum (closed_form) and the per-tuple exact
    acceptance agree with the full kernel (a different computation: every output column)."""
    rng = np.random.default_rng(17)
    for _ in range(40):
        p, qs = _case(rng)
        if len(qs) == 1:
            continue
        law = otspec.product(qs)
        K = gls.kernel(p, law)
        assert gls.acceptance(p, law, method="closed_form").value == pytest.approx(K.acceptance(), abs=FLOAT64_ATOL)
        rows = np.array([K.pi[n, np.unique(t)].sum() for n, t in enumerate(K.tuples)])
        assert np.abs(gls.tuple_acceptance(p, law, K.tuples) - rows).max() <= 1e-10


def test_max_product_sums_equal_the_direct_double_sum_with_zeros_and_ties():
    """The O(V log V) sums of the match probability against the V x V definition, on random pairs with
    zeros in p, in q, in both, and tied ratios (the direct sum is what the closed form states)."""
    from otspec.verifiers.step.gumbel_coupling import max_product_sums

    rng = np.random.default_rng(2024)
    for _ in range(200):
        V = int(rng.integers(2, 40))
        p, q = rng.dirichlet(np.full(V, 0.7)), rng.dirichlet(np.full(V, 0.7))
        p[rng.random(V) < 0.2] = 0.0
        q[rng.random(V) < 0.2] = 0.0
        if rng.random() < 0.3:  # tied ratios
            q[: V // 2] = p[: V // 2]
        if p.sum() == 0 or q.sum() == 0:
            continue
        p, q = p / p.sum(), q / q.sum()
        x = np.arange(V)
        direct = np.maximum(p[:, None] * q[None, :], p[None, :] * q[:, None]).sum(axis=1)
        np.testing.assert_allclose(max_product_sums(p, q, x), direct, rtol=1e-13, atol=1e-16)


def test_gumbel_acceptance_at_full_vocabulary_needs_no_square_array():
    """At V = 262 144 the closed form runs in O(V) memory (the V x V sum would need 512 GiB)."""
    import otspec

    rng = np.random.default_rng(5)
    V = 262_144
    p, q = rng.dirichlet(np.full(V, 0.3)), rng.dirichlet(np.full(V, 0.3))
    est = gumbel.acceptance(p, otspec.iid(q, 1))
    tv = 0.5 * np.abs(p - q).sum()
    assert (1 - tv) / (1 + tv) - 1e-12 <= est.value <= 1 - tv + 1e-12
