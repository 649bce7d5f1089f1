"""method='maxflow' (OR-Tools integer max-flow): exact against the 2^V brute force, certified, never
overflowing, used by auto above the dense limits, with an install hint when OR-Tools is missing.
Also: enumerate_sets' int64-key grouping equals np.unique(axis=0) row for row."""

import dataclasses
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import otspec
from otspec._tolerances import EXACT_ATOL
from otspec.bounds import multidraft
from otspec.bounds.cuts import cut_value
from otspec.errors import ProblemTooLargeError
from otspec.laws import _sets_from_tuples
from tests._oracles import check_plan_is_coupling
from tests._tolerances import CLEAR_DIFFERENCE
from tests.bounds.test_multidraft import pairs
from tests.conftest import random_simplex

pytest.importorskip("ortools.graph.python.max_flow")


def _laws(p, q, k, rng):
    V = p.size
    kw = min(k, int(np.count_nonzero(q)))
    return [
        otspec.iid(q, k),
        otspec.without_replacement(q, kw),
        otspec.greedy(q, kw),
        otspec.product([q] + [random_simplex(rng, V, zeros=1) for _ in range(k - 1)]),
        otspec.explicit(rng.integers(0, V, size=(7, k)), random_simplex(rng, 7, zeros=2), vocab_size=V),
    ]


@given(pairs(), st.integers(1, 3), st.integers(0, 2**32 - 1))
def test_maxflow_equals_subsets_oracle(pq, k, seed):
    """Every enumerable law: the max-flow value equals the 2^V brute-force minimum of the dual, the
    status is optimal, and the returned cut attains the value (recomputed from the law)."""
    p, q = pq
    for law in _laws(p, q, k, np.random.default_rng(seed)):
        ref = otspec.optimal_acceptance(p, law, method="subsets")
        r = otspec.optimal_acceptance(p, law, method="maxflow")
        assert r.status == "optimal" and r.method == "maxflow", (law, r)
        assert abs(r.value - ref.value) <= EXACT_ATOL, (law, r.value, ref.value)
        assert abs(cut_value(p, law, r.cut) - r.value) <= EXACT_ATOL
        assert -EXACT_ATOL <= r.gap <= EXACT_ATOL


def test_maxflow_plan_is_a_coupling(rng):
    """The arc flows, certified into a plan, give a kernel that is a Markov kernel with output law
    exactly p and acceptance equal to the value (checked on every enumerated tuple)."""
    p, q = random_simplex(rng, 6, zeros=1), random_simplex(rng, 6, zeros=1)
    law = otspec.iid(q, 3)
    r = otspec.optimal_acceptance(p, law, method="maxflow")
    check_plan_is_coupling(p, law, r)


def test_scaling_never_overflows_and_is_tight():
    """The sum of all capacities, at most (k + 2)(1 + 1e-8) 2^N, stays below 2^63 for every k, and
    one more bit would break that (so no precision is given away)."""
    from otspec.bounds.maxflow import scale_bits

    for k in range(1, 200):
        N = scale_bits(k)
        total = (k + 2) * (1 + 1e-8)
        assert total * 2.0**N < 2.0**63
        assert total * 2.0 ** (N + 1) >= 2.0**63


def test_many_drafts_do_not_overflow(rng):
    """k = 40 draft slots (sets of up to 40 tokens, middle capacities summing to ~40x the source's):
    the integer solve stays optimal and equals the LP."""
    V, k, M = 60, 40, 30
    tuples = rng.integers(0, V, size=(M, k))
    law = otspec.explicit(tuples, random_simplex(rng, M), vocab_size=V)
    p = random_simplex(rng, V)
    a = otspec.optimal_acceptance(p, law, method="maxflow")
    b = otspec.optimal_acceptance(p, law, method="lp")
    assert a.status == b.status == "optimal"
    assert abs(a.value - b.value) <= EXACT_ATOL
    assert "2^57" in a.solver_info  # scale_bits(40)


def test_wrong_cut_is_check_failed(monkeypatch):
    """A corrupted max-flow answer (the empty cut instead of the min cut) must be downgraded."""
    import otspec.bounds.maxflow as mf

    real = mf.solve

    def broken(p, sets, weights):
        a = real(p, sets, weights)
        return dataclasses.replace(a, w=a.w * 0.95, token_duals=np.zeros_like(a.token_duals))

    monkeypatch.setattr(mf, "solve", broken)
    rng = np.random.default_rng(3)
    p, q = random_simplex(rng, 5), random_simplex(rng, 5)
    r = otspec.optimal_acceptance(p, otspec.iid(q, 2), method="maxflow")
    assert r.status == "check_failed" and r.gap > CLEAR_DIFFERENCE


def test_auto_uses_maxflow_above_the_dense_limit(monkeypatch):
    rng = np.random.default_rng(4)
    p, q, q2 = (random_simplex(rng, 8) for _ in range(3))
    law = otspec.product([q, q2])
    assert otspec.optimal_acceptance(p, law).method == "flow"
    monkeypatch.setattr(multidraft, "_MAXFLOW_FROM_ARCS", 10)
    r = otspec.optimal_acceptance(p, law)
    assert r.method == "maxflow" and r.status == "optimal"
    assert abs(r.value - otspec.optimal_acceptance(p, law, method="subsets").value) <= EXACT_ATOL


def test_without_ortools_auto_refuses_naming_the_extra(monkeypatch):
    """OR-Tools made unimportable: auto refuses large tuple problems without a closed form up front,
    naming the extra (a product law goes to the branch-and-bound instead), and an explicit
    method='maxflow' raises ImportError with the install command."""
    monkeypatch.setitem(sys.modules, "ortools.graph.python.max_flow", None)
    monkeypatch.setattr(multidraft, "AUTO_MAX_TUPLES", 10)
    monkeypatch.setattr(multidraft, "_MAXFLOW_FROM_ARCS", 10)
    monkeypatch.setattr(multidraft, "_FLOW_MAX_ARCS", 10)
    rng = np.random.default_rng(5)
    p, q, q2 = (random_simplex(rng, 8) for _ in range(3))
    tuples = rng.integers(0, 8, size=(40, 2))
    with pytest.raises(ProblemTooLargeError, match=r"otspec\[maxflow\]"):
        otspec.optimal_acceptance(p, otspec.explicit(tuples, random_simplex(rng, 40), vocab_size=8))
    assert otspec.optimal_acceptance(p, otspec.product([q, q2])).method == "product"
    with pytest.raises(ImportError, match=r"otspec\[maxflow\]"):
        otspec.optimal_acceptance(p, otspec.product([q, q2]), method="maxflow")


def _sets_reference(tuples, weights):
    """The grouping written out directly with np.unique(axis=0)."""
    s = np.sort(tuples, axis=1)
    dup = np.zeros_like(s, dtype=bool)
    dup[:, 1:] = s[:, 1:] == s[:, :-1]
    s = np.ascontiguousarray(np.sort(np.where(dup, -1, s), axis=1)[:, ::-1])
    u, inv = np.unique(s, axis=0, return_inverse=True)
    return u, np.bincount(inv.ravel(), weights=weights, minlength=u.shape[0])


@pytest.mark.parametrize("V,k,M", [(3, 1, 10), (5, 3, 300), (7, 4, 2000), (50, 2, 3000), (2**20, 4, 500), (2**40, 2, 100)])
def test_enumerate_sets_key_grouping_matches_unique_rows(V, k, M):
    """Same sets in the same order and the same weights as np.unique(axis=0), including the
    fallback when the base-(V+1) key would not fit in int64 (V = 2^20, k = 4; V = 2^40, k = 2)."""
    rng = np.random.default_rng(V + k)
    tuples = rng.integers(0, V, size=(M, k))
    tuples[: M // 3] = tuples[M // 3 : 2 * (M // 3)]  # guaranteed repeats
    w = rng.random(M)
    got, ref = _sets_from_tuples(tuples, w), _sets_reference(tuples, w)
    assert got[0].dtype == np.int64
    np.testing.assert_array_equal(got[0], ref[0])
    np.testing.assert_array_equal(got[1], ref[1])


@pytest.mark.parametrize("n", [0, 1, 2, 7, 1000, 100_000])
def test_stable_argsort_is_numpy_stable_argsort(n):
    """The fast tie-fixing argsort behind ratio_order returns numpy's stable permutation exactly, on
    keys with many ties, +inf and zeros (the ratio keys of tokens with q = 0 or p = 0)."""
    from otspec.laws import stable_argsort

    rng = np.random.default_rng(n)
    for key in (rng.random(n), rng.integers(0, 5, n).astype(float), np.round(rng.random(n), 2)):
        key = key.copy()
        key[rng.random(n) < 0.1] = np.inf
        key[rng.random(n) < 0.1] = 0.0
        np.testing.assert_array_equal(stable_argsort(key), np.argsort(key, kind="stable"))


def _integer_flow(info: str) -> int:
    return int(info.rsplit("integer flow ", 1)[1].rstrip(")"))


def _no_peel(pair_set, pair_token, cap_set, cap_tok):
    return np.ones(cap_set.size, bool), np.ones(cap_tok.size, bool), np.zeros(0, np.int64)


@pytest.mark.parametrize("seed", range(6))
def test_presolve_keeps_the_exact_integer_flow_and_a_tight_cut(seed, monkeypatch):
    """The abundant-token presolve changes nothing but the work: on laws where it fixes a share of
    the sets (checked), the integer max flow equals the one of the whole network solved without it,
    the value equals the LP's, and the returned cut attains the value (the flow is tight)."""
    import otspec.bounds.maxflow as mf
    from otspec.bounds.certificate import certify

    rng = np.random.default_rng(seed)
    V = 12
    p, q = random_simplex(rng, V, zeros=seed % 3, alpha=0.5), random_simplex(rng, V, alpha=0.5)
    laws = [otspec.iid(q, 2), otspec.iid(q, 3), otspec.product([q, random_simplex(rng, V, alpha=0.5)])]
    for law in laws:
        sets, weights = law.enumerate_sets()
        a = mf.solve(p, sets, weights)
        ind, ok, info = a.token_duals, a.ok, a.info
        with monkeypatch.context() as m:
            m.setattr(mf, "peel_abundant_tokens", _no_peel)
            a0 = mf.solve(p, sets, weights)
            ok0, info0 = a0.ok, a0.info
        assert ok and ok0
        assert "presolve fixed 0 of" in info0 and "presolve fixed 0 of" not in info, (law, info)
        assert _integer_flow(info) == _integer_flow(info0), (law, info, info0)
        r = certify(p, law, a)
        lp = otspec.optimal_acceptance(p, law, method="lp")
        assert r.status == "optimal" and abs(r.value - lp.value) <= EXACT_ATOL
        H = np.flatnonzero(ind)
        assert abs(cut_value(p, law, H) - r.value) <= EXACT_ATOL  # the solver's own cut, not a rescan


def test_presolve_can_route_everything():
    """One draft and p a hair above q (within the simplex tolerance): every token absorbs its
    singleton set even with the presolve's float margin, no solver call is needed, value 1."""
    q = np.array([0.1, 0.2, 0.3, 0.4])
    r = otspec.optimal_acceptance(q * (1 + 5e-10), otspec.iid(q, 1), method="maxflow")
    assert "not needed" in r.solver_info and r.status == "optimal"
    assert abs(r.value - 1.0) <= EXACT_ATOL and r.cut.size == 0


@given(st.integers(0, 2**32 - 1))
def test_peel_invariants(seed):
    """On random bipartite networks: one fixed arc per removed set, landing on a removed token
    whose total fixed load fits its capacity (integers, exact), and no live set touches a removed
    token (so the rest is the original network restricted to live sets and tokens)."""
    from otspec.bounds.maxflow import peel_abundant_tokens

    rng = np.random.default_rng(seed)
    S, V, k = int(rng.integers(1, 30)), int(rng.integers(1, 10)), int(rng.integers(1, 4))
    sets, _ = otspec.explicit(rng.integers(0, V, size=(S, k)), np.full(S, 1.0 / S), vocab_size=V).enumerate_sets()
    from otspec.bounds.membership import membership_pairs

    ps, pt, _ = membership_pairs(sets)
    cap_set = rng.integers(0, 2**40, size=sets.shape[0])
    cap_tok = rng.integers(0, 2**41, size=V)
    live_set, live_tok, fixed = peel_abundant_tokens(ps, pt, cap_set, cap_tok)
    assert np.array_equal(np.sort(ps[fixed]), np.flatnonzero(~live_set))  # one arc per removed set
    assert not live_tok[pt[fixed]].any()
    load = np.zeros(V, dtype=object)
    for a in fixed:
        load[pt[a]] += int(cap_set[ps[a]])
    assert all(load[y] <= int(cap_tok[y]) for y in range(V))
    live_arcs = live_set[ps]
    assert live_tok[pt[live_arcs]].all()


def test_maxflow_cut_is_deterministic(rng):
    """The same problem twice gives the same cut, value and flows (bit for bit)."""
    p, q = random_simplex(rng, 40, alpha=0.5), random_simplex(rng, 40, alpha=0.5)
    law = otspec.product([q, random_simplex(rng, 40, alpha=0.5)])
    a = otspec.optimal_acceptance(p, law, method="maxflow")
    b = otspec.optimal_acceptance(p, law, method="maxflow")
    assert a.status == b.status == "optimal"
    np.testing.assert_array_equal(a.cut, b.cut)
    np.testing.assert_array_equal(a.plan.accept, b.plan.accept)
    assert a.value == b.value


def test_int32_pairs_are_membership_pairs(rng):
    """The int32 arcs handed to OR-Tools are membership_pairs' (set, token) pairs in the same order."""
    from otspec.bounds.maxflow import pairs32
    from otspec.bounds.membership import membership_pairs

    for k in (1, 2, 4):
        sets, _ = otspec.explicit(rng.integers(0, 9, size=(40, k)), np.full(40, 1 / 40), vocab_size=9).enumerate_sets()
        ps, pt = pairs32(sets)
        ref_s, ref_t, _ = membership_pairs(sets)
        assert ps.dtype == pt.dtype == np.int32
        np.testing.assert_array_equal(ps, ref_s)
        np.testing.assert_array_equal(pt, ref_t)
