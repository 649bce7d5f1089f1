"""method="prefix" has a real certificate: the gap is the cut's value minus a checked coupling's
acceptance, a wrong primal is caught, and a result without a primal says so (gap None, a reason)."""

import numpy as np
import pytest

import otspec
from otspec._tolerances import CERTIFICATE_ATOL, EXACT_ATOL
from otspec.bounds import primal
from tests._tolerances import CLEAR_DIFFERENCE
from tests.conftest import random_simplex


def _pair(seed, V):
    rng = np.random.default_rng(seed)
    return random_simplex(rng, V, zeros=V // 4, alpha=0.5), random_simplex(rng, V, zeros=V // 5, alpha=0.5)


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("k", [1, 2, 3, 5])
def test_iid_gap_is_real(seed, k):
    """The closed-form selection law passes the Lorenz test and its acceptance is the optimum."""
    p, q = _pair(seed, 9)
    r = otspec.optimal_acceptance(p, otspec.iid(q, k), method="prefix")
    assert r.status == "optimal" and r.gap is not None and r.gap_reason == ""
    assert abs(r.gap) <= EXACT_ATOL and abs(r.lower_bound - r.value) <= EXACT_ATOL
    assert r.checks["selection_law_membership"] <= EXACT_ATOL
    assert abs(r.value - otspec.optimal_acceptance(p, otspec.iid(q, k), method="lp").value) <= EXACT_ATOL


def test_iid_gap_is_real_at_scale():
    p, q = _pair(1, 50_000)
    r = otspec.optimal_acceptance(p, otspec.iid(q, 8))
    assert r.status == "optimal" and 0.0 <= abs(r.gap) <= 1e-12


def test_lorenz_test_catches_a_non_member():
    """r = p is not the law of any selection rule here (it puts more than 1 - (1 - q(S))^k on S)."""
    p, q = np.array([0.9, 0.05, 0.05]), np.array([0.1, 0.45, 0.45])
    assert primal.lorenz_violation(p, q, 2) >= CLEAR_DIFFERENCE
    law = otspec.iid(q, 2)
    assert primal.membership_violation_by_sets(p, law) == pytest.approx(primal.lorenz_violation(p, q, 2), abs=EXACT_ATOL)


def test_a_wrong_primal_fails_the_certificate(monkeypatch):
    """If the closed form's selection law were wrong (r = p off the cut instead of the cap, which
    overstates the acceptance), the membership check fails and so does the status."""
    p, q = np.array([0.9, 0.05, 0.05]), np.array([0.1, 0.45, 0.45])
    monkeypatch.setattr(primal, "_cap", lambda p, q, target, presorted=False: p.copy())
    r = otspec.optimal_acceptance(p, otspec.iid(q, 2), method="prefix")
    assert r.status == "check_failed" and r.checks["selection_law_membership"] >= CLEAR_DIFFERENCE


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("k", [1, 2, 3])
def test_without_replacement_gap_checked_by_enumeration(seed, k):
    p, q = _pair(seed, 8)
    k = min(k, int(np.count_nonzero(q)))
    r = otspec.optimal_acceptance(p, otspec.without_replacement(q, k), method="prefix")
    assert r.status == "optimal" and r.gap is not None and abs(r.gap) <= 1e-9
    assert r.checks["selection_law_membership"] <= 1e-9


def test_without_replacement_dual_only_beyond_enumeration():
    p, q = _pair(3, primal.WOR_CHECK_MAX_V + 4)
    r = otspec.optimal_acceptance(p, otspec.without_replacement(q, 3), method="prefix")
    assert r.status == "optimal" and r.gap is None and r.lower_bound is None
    assert r.gap_reason.startswith("dual only") and r.to_dict()["gap"] is None and "gap=None" in repr(r)


@pytest.mark.parametrize("k", [1, 2, 4])
def test_greedy_primal(k):
    p, q = _pair(k, 10)
    r = otspec.optimal_acceptance(p, otspec.greedy(q, k), method="prefix")
    assert r.status == "optimal" and abs(r.gap) <= EXACT_ATOL


def test_subsets_is_dual_only_and_plans_carry_their_value():
    p, q = _pair(0, 6)
    law = otspec.iid(q, 2)
    s = otspec.optimal_acceptance(p, law, method="subsets")
    assert s.gap is None and "dual only" in s.gap_reason and s.status == "optimal"
    f = otspec.optimal_acceptance(p, law, method="flow")
    assert f.lower_bound == f.value and f.gap_reason == ""


@pytest.mark.parametrize("seed", range(5))
def test_sorted_iid_primal_equals_the_generic_one(seed):
    """The fast path (p/q order of the prefix scan, no gathers) gives the generic primal's
    acceptance and the same verdict of the Lorenz test, exact zeros and ties included."""
    rng = np.random.default_rng(seed)
    V, k = 3000, int(rng.integers(2, 9))
    p, q = random_simplex(rng, V, zeros=V // 10, alpha=0.3), random_simplex(rng, V, zeros=V // 10 * (seed % 2), alpha=0.3)
    q[:20] = q[20:40] = q[:20].mean() if seed == 3 else q[:20]  # ties
    q = q / q.sum()
    law = otspec.iid(q, k)
    r = otspec.optimal_acceptance(p, law, method="prefix")
    in_cut = np.zeros(V, dtype=bool)
    in_cut[r.cut] = True
    generic = primal.cap_floor_law(p, q, in_cut, law.prob_all_in(in_cut))
    assert abs(r.lower_bound - np.minimum(p, generic).sum()) <= 1e-13
    assert primal.lorenz_violation(generic, q, k) <= 1e-12 and r.checks["selection_law_membership"] <= 2e-12


# Draft laws with masses near the smallest float (denormals): the race integral behind the
# without-replacement prefix value goes wrong here, and before the primal check the result still
# said status="optimal". The checked selection law catches it: the status is optimal only if the
# value is the LP's.
_DENORMAL_WOR = [
    (
        [1.6659391457547371e-09, 4.1162362362149506e-07, 5.387380573216072e-11, 3.9499767940447353e-10, 0.9562792455506356,
         0.011572441412718935, 3.8984725062578415e-11, 0.009140146941554385, 0.0, 0.0024842982725418305, 6.1020687594027685e-21,
         0.0018416560070794244, 6.90359613199616e-06, 0.018674894441918794, 0.0, 0.0],
        [9.085112254e-314, 4.1382089720574195e-13, 2.72549905e-316, 8.869413135737681e-20, 3.5189784124785996e-19, 0.0,
         2.8829864956905952e-33, 0.0, 6.245298352307491e-15, 0.0, 0.0, 0.9999999999995798, 8.662733279154104e-17,
         4.88684676696e-313, 3.68404034581655e-20, 4.104176883758816e-18],
        4,
    ),
    (
        [0.10770032779833523, 0.2569633578400967, 0.1697755781085028, 0.1308445141056218, 0.1618285033954197, 0.1728877187520237],
        [0.0, 0.9999999999995538, 2.62289713323e-313, 2.9148588514e-313, 2.506217328242101e-13, 1.956026687104422e-13],
        5,
    ),
]  # fmt: skip


@pytest.mark.parametrize("p, q, k", _DENORMAL_WOR)
def test_a_wrong_closed_form_value_is_never_optimal(p, q, k):
    p, q = np.array(p), np.array(q)
    law = otspec.without_replacement(q / q.sum(), k)
    r = otspec.optimal_acceptance(p / p.sum(), law, method="prefix")
    exact = otspec.optimal_acceptance(p / p.sum(), law, method="lp").value
    assert r.status != "optimal" or abs(r.value - exact) <= EXACT_ATOL, (r, exact)


def _density_ordered(rng, V, k, member):
    """A random law r over V tokens, q > 0, both in ascending r/q order, with the scan's powers."""
    q = random_simplex(rng, V, zeros=0, alpha=0.5)
    q = np.maximum(q, 1e-300)
    q /= q.sum()
    if member:  # the closed form's r* of a random pair: a member of B(f)
        p = random_simplex(rng, V, zeros=V // 5, alpha=0.5)
        res = otspec.optimal_acceptance(p, otspec.iid(q, k), method="prefix")
        in_cut = np.zeros(V, dtype=bool)
        in_cut[res.cut] = True
        r = primal.cap_floor_law(p, q, in_cut, otspec.iid(q, k).prob_all_in(in_cut))
    else:
        r = random_simplex(rng, V, zeros=0, alpha=0.3)
    o = np.argsort(r / q, kind="stable")
    r, q = r[o], q[o]
    return r, q, np.minimum(np.cumsum(q), 1.0) ** k


@pytest.mark.parametrize("seed", range(40))
def test_lorenz_scan_is_the_sorted_lorenz_test(seed):
    """The O(V) Lorenz test along the scan's order gives the sort-based test's
    violation (within rounding and its declared order allowance) on members and non-members, and
    on a member perturbed into a non-member (mass moved to the top-density token) both refuse it
    by the same amount."""
    rng = np.random.default_rng(seed)
    V, k = int(rng.integers(2, 400)), int(rng.integers(1, 9))
    r, q, pw = _density_ordered(rng, V, k, member=seed % 2 == 0)
    scan, ref = primal.lorenz_scan(r, q, pw), primal.lorenz_violation(r, q, k)
    assert scan is not None  # the order is a density order
    assert abs(scan - ref) <= 2e-12 + primal._ORDER_EPS
    if seed % 2 == 0:
        assert ref <= 1e-12 and scan <= 3e-12
        # perturb: move delta of the lowest-density mass to the highest-density token (the
        # densities stay in order, the curve rises at the top by delta where it was tight)
        delta = min(1e-6, float(r[0]))
        if delta > 1e-9 and k > 1:
            bad = r.copy()
            bad[0] -= delta
            bad[-1] += delta
            s_bad, ref_bad = primal.lorenz_scan(bad, q, pw), primal.lorenz_violation(bad, q, k)
            assert s_bad is not None and abs(s_bad - ref_bad) <= 2e-12 + primal._ORDER_EPS
            assert (s_bad > CERTIFICATE_ATOL) == (ref_bad > CERTIFICATE_ATOL)


def test_lorenz_scan_refuses_a_non_density_order():
    """An order along which a density rises by more than the allowance is not a Lorenz order:
    the scan declines (None) and the caller sorts."""
    q = np.array([0.25, 0.25, 0.5])
    r = np.array([0.5, 0.25, 0.25])  # densities 2, 1, 0.5: descending, not ascending
    assert primal.lorenz_scan(r, q, np.minimum(np.cumsum(q), 1.0) ** 2) is None


@pytest.mark.parametrize("seed", range(12))
def test_scan_primal_equals_the_sorted_primal(seed):
    """The certificate from the prefix scan's arrays (no gather, no sort) equals the former path
    (gathers, cap/floor passes, reversed cumulative sums) on random pairs, ties included."""
    from otspec.bounds.prefix import iid_prefix

    rng = np.random.default_rng(100 + seed)
    V, k = int(rng.integers(2, 3000)), int(rng.integers(1, 9))
    p, q = random_simplex(rng, V, zeros=V // 6, alpha=0.4), random_simplex(rng, V, zeros=0, alpha=0.4)
    if seed % 3 == 0:
        q[: V // 2] = q[: V // 2].mean()  # ties in p/q where p ties too
        p[: V // 4] = p[: V // 4].mean()
    q = np.maximum(q, 1e-300)
    q /= q.sum()
    law = otspec.iid(q, k)
    value, cut, _, order, scan = iid_prefix(p, q, k, return_scan=True)
    in_cut = np.zeros(V, dtype=bool)
    in_cut[cut] = True
    g = law.prob_all_in(in_cut)
    fast = primal._iid_primal_scan(scan[0], scan[1], cut.size, g, k, *scan[2:])
    slow = primal.iid_primal_sorted(p[order], q[order], cut.size, g, k)
    assert fast is not None
    assert abs(fast[0] - slow[0]) <= 1e-13 and abs(fast[1] - slow[1]) <= 1e-12
    res = otspec.optimal_acceptance(p, law, method="prefix")
    assert res.status == "optimal" and abs(res.lower_bound - slow[0]) <= 1e-13
