"""optimal_acceptance: every method agrees, known answers hold, certificates are real."""

import dataclasses

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import otspec
from otspec._tolerances import CERTIFICATE_ATOL, EXACT_ATOL, FLOAT64_ATOL
from otspec.bounds.cuts import cut_value
from tests._oracles import check_plan_is_coupling
from tests._tolerances import CLEAR_DIFFERENCE
from tests.conftest import random_simplex


@st.composite
def pairs(draw, max_V=6):
    """(p, q) on V <= 6 tokens with exact zeros and near-degenerate masses."""
    V = draw(st.integers(2, max_V))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    alpha = draw(st.sampled_from([0.2, 0.5, 1.0, 5.0]))
    p = random_simplex(rng, V, zeros=draw(st.integers(0, V - 1)), alpha=alpha)
    q = random_simplex(rng, V, zeros=draw(st.integers(0, V - 2)), alpha=alpha)
    if draw(st.booleans()):  # near-degenerate: one token carries almost everything
        j = draw(st.integers(0, V - 1))
        q = 1e-9 * q
        q[j] += 1.0 - q.sum()
    return p, q


@given(pairs(), st.integers(1, 4))
def test_iid_all_methods_agree(pq, k):
    p, q = pq
    law = otspec.iid(q, k)
    vals = {m: otspec.optimal_acceptance(p, law, method=m) for m in ("prefix", "subsets", "lp", "cvxpy", "flow")}
    ref = vals["subsets"].value
    for m, r in vals.items():
        assert r.status == "optimal", (m, r)
        assert abs(r.value - ref) <= EXACT_ATOL, (m, r.value, ref)


@given(pairs(), st.integers(1, 4))
def test_without_replacement_all_methods_agree(pq, k):
    p, q = pq
    k = min(k, int(np.count_nonzero(q)))
    law = otspec.without_replacement(q, k)
    vals = {m: otspec.optimal_acceptance(p, law, method=m) for m in ("prefix", "subsets", "lp", "cvxpy")}
    ref = vals["subsets"].value
    for m, r in vals.items():
        assert r.status == "optimal", (m, r)
        assert abs(r.value - ref) <= EXACT_ATOL, (m, r.value, ref)


@given(pairs(max_V=5), st.integers(1, 3), st.integers(0, 2**32 - 1))
def test_product_and_explicit_subsets_equal_lp(pq, k, seed):
    p, q = pq
    rng = np.random.default_rng(seed)
    V = p.size
    laws = [
        otspec.product([q] + [random_simplex(rng, V, zeros=1) for _ in range(k - 1)]),
        otspec.explicit(rng.integers(0, V, size=(6, k)), random_simplex(rng, 6, zeros=2), vocab_size=V),
    ]
    for law in laws:
        a = otspec.optimal_acceptance(p, law, method="subsets")
        b = otspec.optimal_acceptance(p, law, method="lp")
        c = otspec.optimal_acceptance(p, law, method="flow")
        assert a.status == b.status == c.status == "optimal"
        assert abs(a.value - b.value) <= EXACT_ATOL and abs(a.value - c.value) <= EXACT_ATOL


@given(pairs(), st.integers(1, 4))
def test_greedy_closed_form_equals_lp(pq, k):
    p, q = pq
    k = min(k, int(np.count_nonzero(q)))
    law = otspec.greedy(q, k)
    closed = otspec.optimal_acceptance(p, law, method="prefix")
    lp = otspec.optimal_acceptance(p, law, method="lp")
    # independent closed form written out (docs/math.rst, greedy drafts): P(G) + sum_{x not in G} min(p, q~)
    G = np.argsort(-q, kind="stable")[: k - 1]
    rest = np.setdiff1d(np.arange(p.size), G)
    qt = q[rest] / q[rest].sum()
    formula = p[G].sum() + np.minimum(p[rest], qt).sum()
    assert abs(closed.value - formula) <= EXACT_ATOL
    assert abs(lp.value - formula) <= EXACT_ATOL


# ----------------------------------------------------------------------------- known answers
@given(pairs())
def test_k1_is_one_minus_tv(pq):
    p, q = pq
    tv = 0.5 * np.abs(p - q).sum()
    for m in ("prefix", "lp", "subsets"):
        assert abs(otspec.optimal_acceptance(p, otspec.iid(q, 1), method=m).value - (1 - tv)) <= EXACT_ATOL
    assert abs(otspec.single_draft(p, q).value - (1 - tv)) <= EXACT_ATOL


@pytest.mark.parametrize("k", [1, 2, 3])
def test_p_equals_q_gives_one(k):
    q = random_simplex(np.random.default_rng(k), 6)
    for law in (otspec.iid(q, k), otspec.without_replacement(q, k), otspec.greedy(q, k)):
        assert abs(otspec.optimal_acceptance(q, law).value - 1.0) <= EXACT_ATOL
        assert abs(otspec.optimal_acceptance(q, law, method="lp").value - 1.0) <= EXACT_ATOL


def test_disjoint_supports_give_zero():
    p = np.array([0.5, 0.5, 0, 0, 0])
    q = np.array([0, 0, 0.2, 0.3, 0.5])
    for law in (otspec.iid(q, 2), otspec.without_replacement(q, 3), otspec.greedy(q, 2)):
        for m in ("prefix", "lp", "subsets"):
            assert abs(otspec.optimal_acceptance(p, law, method=m).value) <= EXACT_ATOL


@given(pairs())
def test_monotone_in_k_and_wor_dominates_iid(pq):
    p, q = pq
    supp = int(np.count_nonzero(q))
    prev = 0.0
    for k in range(1, 5):
        v = otspec.optimal_acceptance(p, otspec.iid(q, k)).value
        assert v >= prev - EXACT_ATOL
        prev = v
        if k <= supp:
            w = otspec.optimal_acceptance(p, otspec.without_replacement(q, k)).value
            assert w >= v - EXACT_ATOL


@given(pairs(), st.integers(1, 4))
def test_returned_cut_attains_value(pq, k):
    p, q = pq
    k = min(k, int(np.count_nonzero(q)))
    for law in (otspec.iid(q, k), otspec.without_replacement(q, k), otspec.greedy(q, k)):
        for m in ("prefix", "lp", "flow"):
            r = otspec.optimal_acceptance(p, law, method=m)
            assert abs(cut_value(p, law, r.cut) - r.value) <= EXACT_ATOL


def test_plan_is_a_coupling_and_attains_value(rng):
    p = random_simplex(rng, 6, zeros=1)
    q = random_simplex(rng, 6, zeros=1)
    law = otspec.iid(q, 3)
    for m in ("lp", "cvxpy", "flow"):
        r = otspec.optimal_acceptance(p, law, method=m)
        check_plan_is_coupling(p, law, r)


def test_cvxpy_user_constraints(rng):
    """Forbidding acceptance of a token, or capping the residual probability, changes the optimum
    exactly as a direct LP with the same restriction says."""
    p = random_simplex(rng, 5)
    q = random_simplex(rng, 5)
    law = otspec.iid(q, 2)
    base = otspec.optimal_acceptance(p, law, method="cvxpy")
    top = int(np.argmax(p))
    forb = otspec.optimal_acceptance(p, law, method="cvxpy", constraints=lambda lp: [lp.accepted(top) == 0])
    assert forb.status == "optimal_constrained"
    assert forb.plan.accepted_per_token()[top] <= CERTIFICATE_ATOL
    # Reference: zero target mass at `top` for acceptance purposes = alpha* of the LP with p(top)
    # capacity 0, solved by the brute-force dual with that token's capacity removed.
    from otspec.bounds import lp

    sets, weights = law.enumerate_sets()
    p_cap = p.copy()
    p_cap[top] = 0.0
    ref = lp.solve(p_cap, sets, weights)
    w_ref, ok = ref.w, ref.ok
    assert ok and abs(forb.value - w_ref.sum()) <= CERTIFICATE_ATOL
    assert forb.value <= base.value + EXACT_ATOL
    cap = otspec.optimal_acceptance(p, law, method="cvxpy", constraints=lambda lp: [lp.acceptance <= base.value - 0.1])
    assert abs(cap.value - (base.value - 0.1)) <= CERTIFICATE_ATOL


def test_failed_check_is_reported(monkeypatch):
    """A corrupted solver answer must surface as status check_failed, never as optimal."""
    import otspec.bounds.lp as lpmod

    real = lpmod.solve

    def broken(p, sets, weights):
        a = real(p, sets, weights)
        return dataclasses.replace(a, w=a.w * 0.9)  # feasible but not optimal

    monkeypatch.setattr(lpmod, "solve", broken)
    rng = np.random.default_rng(0)
    p, q = random_simplex(rng, 5), random_simplex(rng, 5)
    r = otspec.optimal_acceptance(p, otspec.iid(q, 2), method="lp")
    assert r.status == "check_failed" and r.gap > CLEAR_DIFFERENCE


def test_auto_resolves_and_reports_method():
    rng = np.random.default_rng(2)
    p, q = random_simplex(rng, 5), random_simplex(rng, 5)
    assert otspec.optimal_acceptance(p, otspec.iid(q, 2)).method == "prefix"
    assert otspec.optimal_acceptance(p, otspec.product([q, p])).method == "flow"


def test_large_vocab_prefix_runs():
    from otspec.synthetic import synthetic_pair

    p, q = synthetic_pair(49152, seed=3)
    r = otspec.optimal_acceptance(p, otspec.iid(q, 4))
    assert r.ok and 0 < r.value <= 1
    assert abs(cut_value(p, otspec.iid(q, 4), r.cut) - r.value) <= EXACT_ATOL


def test_error_bound_above_max_is_never_optimal():
    # Regression: the cut re-check accepts within 2 * error_bound, so a bound
    # past ERROR_BOUND_MAX (reported past 1 for very large k without replacement) made it
    # unable to fail while status stayed "optimal".
    from otspec._tolerances import ERROR_BOUND_MAX
    from otspec.bounds.certificate import CutAnswer, certify

    p, law = np.array([0.5, 0.3, 0.2]), otspec.iid([0.2, 0.3, 0.5], 2)
    exact = otspec.optimal_acceptance(p, law)
    ok = certify(p, law, CutAnswer("prefix", exact.value, exact.cut, 0.0))
    assert ok.status == "optimal"
    bad = certify(p, law, CutAnswer("prefix", exact.value, exact.cut, 10 * ERROR_BOUND_MAX))
    assert bad.status == "check_failed" and not bad.ok


def test_without_replacement_k_beyond_170_does_not_overflow():
    # Regression: k! overflowed a float in the race quadrature (k >= 171).
    # No independent oracle exists at this size: the check is the cut certificate (status) and
    # the trivial bounds 1 - TV <= value <= 1.
    rng = np.random.default_rng(3)
    V, k = 200, 180
    p, q = rng.dirichlet(np.full(V, 0.1)), rng.dirichlet(np.full(V, 1.0))
    r = otspec.optimal_acceptance(p, otspec.without_replacement(q, k))
    assert r.ok, r.checks
    assert otspec.optimal_acceptance(p, otspec.iid(q, 1)).value - FLOAT64_ATOL <= r.value <= 1.0


def _generic_iid_prefix(p, law):
    """The i.i.d. prefix optimum through the law's generic interface (ratio_order +
    prefix_prob_all_in), as it was computed before the fused fast path."""
    order = law.prefix_cut_order(p)
    P = np.concatenate([[0.0], np.cumsum(p[order])])
    Qv, _ = law.prefix_prob_all_in(order)
    f = P - Qv
    i = int(np.argmin(f))
    in_cut = np.zeros(law.V, dtype=bool)
    in_cut[order[:i]] = True
    return min(1.0 + float(f[i]), 1.0), np.flatnonzero(in_cut)


def test_iid_fast_prefix_is_the_generic_path_bit_for_bit():
    """The fused i.i.d. path (unstable argsort + tie fix, squaring to locate the minimum) returns the
    generic path's value and cut exactly, on inputs with many tied ratios (p proportional to q on
    blocks), zeros in p and q, and k = 1..9; and the same answer twice (a deterministic cut)."""
    rng = np.random.default_rng(12)
    tied_cases = 0
    for _ in range(400):
        V, k = int(rng.integers(1, 40)), int(rng.integers(1, 10))
        q = rng.dirichlet(np.ones(V) * rng.choice([0.2, 1.0, 5.0]))
        if rng.random() < 0.6:  # tied blocks of p/q, some zeros of q, a few untied tokens
            p = q * rng.random(3)[rng.integers(0, 3, V)]
            q[rng.random(V) < 0.2] = 0.0
            p = p + (rng.random(V) < 0.2) * rng.random(V) * 0.1
        else:
            p = rng.dirichlet(np.ones(V))
            p[rng.random(V) < 0.3] = 0.0
        if p.sum() == 0 or q.sum() == 0:
            continue
        p, q = p / p.sum(), q / q.sum()
        law = otspec.iid(q, k)
        value, cut = _generic_iid_prefix(p, law)
        a = otspec.optimal_acceptance(p, law, method="prefix")
        b = otspec.optimal_acceptance(p, law, method="prefix")
        assert a.status == "optimal"
        assert a.value == value == b.value
        np.testing.assert_array_equal(a.cut, cut)
        np.testing.assert_array_equal(b.cut, cut)
        with np.errstate(divide="ignore", invalid="ignore"):
            key = np.where(q > 0, p / np.where(q > 0, q, 1.0), np.inf)
        tied_cases += np.unique(key).size < V
    assert tied_cases > 100  # the tie rule was exercised


@pytest.mark.parametrize("k", [1, 2, 3, 5, 8, 13, 64])
def test_power_by_squaring(k):
    from otspec.bounds.prefix import power

    x = np.random.default_rng(k).random(1000)
    np.testing.assert_allclose(power(x.copy(), k), x**k, rtol=4 * k * np.finfo(float).eps, atol=0)
