"""The without-replacement race integral (otspec/_race.py) against first principles.

Oracles: exact enumeration of successive sampling (the law's own and a careful one whose
denominators are sums of the remaining masses), brute force over all 2^V subsets for the dual,
closed forms (k = 1, uniform q), the reference token loop, and the same rule with a 1000x smaller
error target.
"""

import itertools
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import otspec
from otspec import _race
from otspec._tolerances import FLOAT64_ATOL, WOR_TARGET_ERROR
from tests._oracles import reference_prefix_values
from tests._tolerances import FLOAT64_SUM_ATOL, FLOAT64_ULPS_ATOL
from tests.conftest import random_simplex

#: Rounding of the enumeration oracles themselves (sums of <= 7!/3! products of 4 factors).
ORACLE_ATOL = 1e-14
#: What the brief asks of every value on small problems.
SMALL_ATOL = 1e-11


# ------------------------------------------------------------------------------------------------
# oracles
# ------------------------------------------------------------------------------------------------
def careful_prefix_values(q_sorted, k):
    """Q(H_i^k), i = 0..V, by enumerating ordered k-tuples of distinct positive tokens; each
    factor is q(x) / (mass not yet drawn), the denominator summed with math.fsum from the remaining
    entries so that it stays accurate when one token holds almost all the mass."""
    V = q_sorted.size
    pos = [x for x in range(V) if q_sorted[x] > 0]
    hist = np.zeros(V + 1)
    for tup in itertools.permutations(pos, k):
        w, used = 1.0, set()
        for x in tup:
            w *= q_sorted[x] / math.fsum(q_sorted[y] for y in pos if y not in used)
            used.add(x)
        hist[max(tup) + 1] += w
    return np.cumsum(hist)


def law_prefix_values(q, k, order):
    """Q(H_i^k) from ``otspec.without_replacement(q, k).enumerate()`` by counting the tuples that
    lie in each prefix of ``order``."""
    tuples, weights = otspec.without_replacement(q, k).enumerate()
    rank = np.empty(q.size, dtype=np.int64)
    rank[order] = np.arange(q.size)
    max_rank = rank[tuples].max(axis=1)
    return np.array([weights[max_rank < i].sum() for i in range(q.size + 1)])


def subset_minimum(p, q, k):
    """min over all 2^V token sets H of P(H) - Q(H^k), Q by careful enumeration."""
    V = p.size
    best = 0.0
    for mask in range(1, 2**V):
        H = [x for x in range(V) if mask >> x & 1]
        rest = [x for x in range(V) if not mask >> x & 1]
        order = np.array(H + rest)
        Qh = careful_prefix_values(q[order], k)[len(H)] if sum(q[H] > 0) >= k else 0.0
        best = min(best, math.fsum(p[H]) - Qh)
    return best


def ratio_order(p, q):
    """Tokens by p/q ascending, q = 0 last (docs/math.rst, sorted prefixes)."""
    with np.errstate(divide="ignore"):
        ratio = np.where(q > 0, p / np.where(q > 0, q, 1.0), np.inf)
    return np.argsort(ratio, kind="stable")


def lm_pair(rng, V, noise=1.0, drift=0.5):
    """LM-like (p, q): Zipf-shaped logits plus noise; q perturbs the logits (as in the benchmark)."""
    logits = -1.1 * np.log(np.arange(1, V + 1)) + rng.normal(0.0, noise, V)
    p = np.exp(logits - logits.max())
    lq = logits + rng.normal(0.0, drift, V)
    q = np.exp(lq - lq.max())
    return p / p.sum(), q / q.sum()


SPECIAL_MASSES = {
    "plain": None,
    "zeros": [0.0, 0.0],
    "tiny": [1e-12, 3e-12],
    "unequal": [1 - 1e-9, 1e-10],
    "zero_and_tiny": [0.0, 1e-12],
}


def special_q(rng, V, kind):
    q = random_simplex(rng, V)
    extra = SPECIAL_MASSES[kind]
    if extra is not None:
        q[: len(extra)] = extra
        if kind == "unequal":
            q[2:] = rng.dirichlet(np.ones(V - 2)) * (1e-9 - 1e-10)
        else:
            q[len(extra) :] *= (1.0 - sum(extra)) / q[len(extra) :].sum()
    return q[rng.permutation(V)]


# ------------------------------------------------------------------------------------------------
# values against exact enumeration
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", sorted(SPECIAL_MASSES))
@pytest.mark.parametrize("V,k", [(4, 2), (5, 3), (6, 2), (7, 3), (7, 4)])
def test_values_match_careful_enumeration(kind, V, k):
    rng = np.random.default_rng(1000 * V + 10 * k + len(kind))
    q = special_q(rng, V, kind)
    assert np.count_nonzero(q) >= k, "fixed-seed fixture must leave at least k tokens with q > 0"
    for _ in range(3):
        order = rng.permutation(V)
        exact = careful_prefix_values(q[order], k)
        vals, err = _race.wor_prefix_all_in(q[order], k)
        gap = np.abs(vals - exact).max()
        assert gap <= SMALL_ATOL
        assert gap <= err + ORACLE_ATOL
        assert err <= WOR_TARGET_ERROR


def dyadic_q(rng, V, kind):
    """Masses that are integers / 2**52 summing to exactly 1, so that the law's own denominators
    1 - sum(previous drafts) are exact even for very unequal masses (where a rounded sum would
    make ``law.enumerate()`` itself inaccurate)."""
    total = 2**52
    if kind == "unequal":  # one token holds 1 - 2**-30; the rest share 2**-30
        w = [total - 2**22] + list(rng.multinomial(2**22, np.ones(V - 1) / (V - 1)))
    elif kind == "tiny":  # two tokens near 1e-12 (4503 / 2**52)
        big = rng.multinomial(total - 2 * 4503, np.ones(V - 2) / (V - 2))
        w = [4503, 4503] + list(big)
    elif kind == "zeros":
        w = [0, 0] + list(rng.multinomial(total, np.ones(V - 2) / (V - 2)))
    else:
        w = list(rng.multinomial(total, rng.dirichlet(np.ones(V))))
    q = np.array(w, dtype=np.float64) / total
    assert math.fsum(q) == 1.0 and q.sum() == 1.0
    return q[rng.permutation(V)]


@pytest.mark.parametrize("kind", ["plain", "zeros", "tiny", "unequal"])
@pytest.mark.parametrize("seed", range(3))
def test_values_match_law_enumeration(kind, seed):
    rng = np.random.default_rng(seed)
    V = int(rng.integers(4, 8))
    k = int(rng.integers(2, min(4, V - 2) + 1))
    q = dyadic_q(rng, V, kind)
    assert np.count_nonzero(q) >= k, "fixed-seed fixture must leave at least k tokens with q > 0"
    order = rng.permutation(V)
    exact = law_prefix_values(q, k, order)
    vals, err = otspec.without_replacement(q, k).prefix_prob_all_in(order)
    assert np.abs(vals - exact).max() <= min(SMALL_ATOL, err + ORACLE_ATOL)


def _masses(draw_kind, rng_u):
    """A positive, zero, tiny or dominant raw mass (normalised later)."""
    return {"normal": rng_u, "zero": 0.0, "tiny": 1e-12 * rng_u, "huge": 1e6 * (1 + rng_u)}[draw_kind]


@given(
    kinds=st.lists(st.sampled_from(["normal", "normal", "zero", "tiny", "huge"]), min_size=2, max_size=7),
    us=st.lists(st.floats(0.05, 1.0), min_size=7, max_size=7),
    k=st.integers(1, 4),
    perm_seed=st.integers(0, 2**31),
)
def test_values_property(kinds, us, k, perm_seed):
    raw = np.array([_masses(kd, u) for kd, u in zip(kinds, us, strict=False)])
    if np.count_nonzero(raw) < max(k, 1):
        return
    q = raw / math.fsum(raw)
    order = np.random.default_rng(perm_seed).permutation(q.size)
    exact = careful_prefix_values(q[order], k)
    vals, err = _race.wor_prefix_all_in(q[order], k)
    gap = np.abs(vals - exact).max()
    assert gap <= SMALL_ATOL
    assert gap <= err + ORACLE_ATOL


# ------------------------------------------------------------------------------------------------
# exact cases and closed forms
# ------------------------------------------------------------------------------------------------
def test_exact_cases_are_exact():
    q = np.array([0.0, 1e-12, 0.3, 0.0, 0.5, 0.2 - 1e-12, 0.0])
    vals, err = _race.wor_prefix_all_in(q, 3)
    # fewer than 3 positive tokens in the first 4: Q = 0 exactly; the whole support: Q = 1 exactly
    assert np.all(vals[:5] == 0.0)
    assert np.all(vals[6:] == 1.0)
    assert 0.0 < vals[5] < 1.0
    assert err <= WOR_TARGET_ERROR


def test_k1_closed_form():
    rng = np.random.default_rng(7)
    q = random_simplex(rng, 1000, zeros=100)
    vals, err = _race.wor_prefix_all_in(q, 1)
    assert np.abs(vals - np.concatenate([[0.0], np.cumsum(q)])).max() <= FLOAT64_SUM_ATOL
    assert err <= FLOAT64_ULPS_ATOL


@pytest.mark.parametrize("k", [2, 5, 8])
def test_uniform_q_closed_form_at_scale(k):
    # Uniform q: every k-subset is equally likely, so Q(H^k) = m(m-1)...(m-k+1) / (n(n-1)...(n-k+1))
    n = 60_000
    q = np.full(n, 1.0 / n)
    vals, err = _race.wor_prefix_all_in(q, k)
    m = np.arange(n + 1, dtype=np.float64)
    exact = np.ones(n + 1)
    for j in range(k):
        exact *= np.clip(m - j, 0.0, None) / (n - j)
    gap = np.abs(vals - exact).max()
    assert gap <= err
    assert err <= WOR_TARGET_ERROR


def test_scale_invariance():
    # The race is invariant under scaling every rate: successive sampling proportional to q.
    rng = np.random.default_rng(11)
    q = random_simplex(rng, 3000, zeros=300, alpha=0.3)
    v1, e1 = _race.wor_prefix_all_in(q, 4)
    v2, e2 = _race.wor_prefix_all_in(q * 0.37, 4)
    assert np.abs(v1 - v2).max() <= e1 + e2


@pytest.mark.parametrize("tiny", [2.5e-308, 1e-305, 5e-324], ids=["near-min-normal", "1e-305", "smallest-subnormal"])
def test_rates_near_the_smallest_float(tiny):
    # Regression: with lambda and the k-th rate near the smallest float, the integrand lives at
    # t ~ 1 / lambda > e^700; the node range was cut there (Q(H_2^2) = 0.9997 with error bound ~1,
    # or a ZeroDivisionError for subnormal rates). The sweep now runs on rates scaled by 2^e.
    # Exact: the second draw is token 1 or 2 with probability 1/2 each, up to O(tiny).
    q = np.array([1.0, tiny, tiny])
    vals, err = _race.wor_prefix_all_in(q, 2)
    assert err <= WOR_TARGET_ERROR
    np.testing.assert_allclose(vals, [0.0, 0.0, 0.5, 1.0], rtol=0, atol=err + FLOAT64_ATOL)
    p = np.array([2.5e-308, 2.5e-158, 1.0])  # p/q ascending: the cut {0, 1} has value 0.5
    r = _race.wor_dual_minimum(p, q, 2)
    assert r.index == 2
    assert abs(r.value - 0.5) <= r.error_bound + FLOAT64_ATOL
    assert r.error_bound <= WOR_TARGET_ERROR


def test_rescaling_leaves_ordinary_rates_alone():
    # A plan that fits below the node cap is never rescaled: results stay bit-identical.
    rng = np.random.default_rng(12)
    q = random_simplex(rng, 500, zeros=50, alpha=0.3)
    grid = _race._grid(q, 3, np.arange(1, 400), 1.0 - np.cumsum(q)[:399], np.cumsum(q)[:399], 1.0, WOR_TARGET_ERROR)
    assert _race._rescale_exponent(grid, 3, 1.0) == 0


def test_prefix_at_agrees_with_all_in():
    rng = np.random.default_rng(12)
    q = random_simplex(rng, 4000, zeros=500, alpha=0.2)
    vals, err = _race.wor_prefix_all_in(q, 5)
    idx = rng.integers(0, q.size + 1, size=37)
    sub, err_sub = _race.wor_prefix_at(q, 5, idx)
    assert np.abs(sub - vals[idx]).max() <= err + err_sub


# ------------------------------------------------------------------------------------------------
# error bound against independent high-accuracy references
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("k", [2, 4, 8, 18])
def test_against_reference_loop(k):
    # The reference token loop (Gauss-Legendre in log t) with 1600 nodes on a wide range. k = 18
    # exercises the stable token-loop fallback used when the cumsum form could overflow.
    rng = np.random.default_rng(100 + k)
    V = 2500 if k < 18 else 800
    p, q = lm_pair(rng, V)
    order = ratio_order(p, q)
    vals, err = _race.wor_prefix_all_in(q[order], k)
    ref = reference_prefix_values(q[order], k, n_nodes=1600, s_lo=-40.0)
    assert np.abs(vals - ref).max() <= err + FLOAT64_ATOL  # the reference's own error is ~1e-13
    assert err <= WOR_TARGET_ERROR


@pytest.mark.parametrize("family", ["lm", "dirichlet", "heavy"])
@pytest.mark.parametrize("k", [2, 4, 8])
def test_error_bound_covers_error_at_scale(family, k):
    rng = np.random.default_rng({"lm": 1, "dirichlet": 2, "heavy": 3}[family] * 10 + k)
    V = 50_000
    if family == "lm":
        p, q = lm_pair(rng, V)
        q = q[ratio_order(p, q)]
    elif family == "dirichlet":
        q = rng.dirichlet(np.full(V, 0.1))
    else:  # three tokens hold all but 1e-6 of the mass: lambda -> 0 and m_k tiny together
        q = np.full(V, 1e-6 / (V - 3))
        q[:3] = [0.5, 0.3, 0.2 - 1e-6]
        q = q[rng.permutation(V)]
    vals, err = _race.wor_prefix_all_in(q, k)
    ref, ref_err = _race._prefix_at(q, k, np.arange(V + 1), WOR_TARGET_ERROR / 1000)
    assert np.abs(vals - ref).max() <= err + ref_err
    assert err <= WOR_TARGET_ERROR


def test_error_bound_is_not_vacuous_and_fails_when_rule_is_coarse():
    # Negative control: the same sweep with a 1e6x looser target really is less accurate, and its
    # (larger) bound still covers the gap; so agreement above is not an artefact of the reference.
    rng = np.random.default_rng(5)
    q = rng.dirichlet(np.full(20_000, 0.2))
    idx = np.arange(q.size + 1)
    fine, e_fine = _race._prefix_at(q, 3, idx, 1e-14)
    coarse, e_coarse = _race._prefix_at(q, 3, idx, 1e-5)
    gap = np.abs(coarse - fine).max()
    assert gap > SMALL_ATOL
    assert gap <= e_coarse + e_fine


# ------------------------------------------------------------------------------------------------
# the dual minimum
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(12))
def test_dual_minimum_matches_all_subsets(seed):
    rng = np.random.default_rng(seed)
    V = int(rng.integers(3, 8))
    k = int(rng.integers(1, min(4, V - 1) + 1))
    p = random_simplex(rng, V, zeros=int(rng.integers(0, 2)))
    q = random_simplex(rng, V, zeros=int(rng.integers(0, V - k + 1)), alpha=0.7)
    if seed % 3 == 0:
        q[np.argmin(q + (q == 0))] = 1e-12  # a tiny rate
        q /= q.sum()
    order = ratio_order(p, q)
    res = _race.wor_dual_minimum(p[order], q[order], k)
    brute = 1.0 + subset_minimum(p, q, k)
    assert abs(res.value - brute) <= min(SMALL_ATOL, res.error_bound + ORACLE_ATOL)
    # the returned cut attains the value
    cut_val = math.fsum(p[order][: res.index]) - careful_prefix_values(q[order], k)[res.index]
    assert abs(1.0 + cut_val - res.value) <= res.error_bound + ORACLE_ATOL


@given(
    q_kinds=st.lists(st.sampled_from(["normal", "normal", "zero", "tiny", "huge"]), min_size=2, max_size=5),
    p_kinds=st.lists(st.sampled_from(["normal", "normal", "zero", "tiny", "huge"]), min_size=5, max_size=5),
    us=st.lists(st.floats(0.05, 1.0), min_size=10, max_size=10),
    k=st.integers(1, 4),
)
def test_dual_minimum_property(q_kinds, p_kinds, us, k):
    V = len(q_kinds)
    q_raw = np.array([_masses(kd, u) for kd, u in zip(q_kinds, us[:V], strict=False)])
    p_raw = np.array([_masses(kd, u) for kd, u in zip(p_kinds[:V], us[5 : 5 + V], strict=False)])
    if np.count_nonzero(q_raw) < k or not p_raw.any():
        return
    q, p = q_raw / math.fsum(q_raw), p_raw / math.fsum(p_raw)
    order = ratio_order(p, q)
    res = _race.wor_dual_minimum(p[order], q[order], k)
    brute = 1.0 + subset_minimum(p, q, k)
    assert abs(res.value - brute) <= min(SMALL_ATOL, res.error_bound + ORACLE_ATOL)


@pytest.mark.parametrize("family", ["lm", "dirichlet"])
@pytest.mark.parametrize("k", [2, 4, 8])
def test_dual_minimum_matches_prefix_scan(family, k):
    rng = np.random.default_rng(50 + k)
    V = 2000
    if family == "lm":
        p, q = lm_pair(rng, V, noise=1.5, drift=1.0)
    else:
        p, q = rng.dirichlet(np.full(V, 0.1)), rng.dirichlet(np.full(V, 0.1))
    order = ratio_order(p, q)
    ps, qs = p[order], q[order]
    vals, err = _race.wor_prefix_all_in(qs, k)
    f = np.concatenate([[0.0], np.cumsum(ps)]) - vals
    res = _race.wor_dual_minimum(ps, qs, k)
    assert abs(res.value - (1.0 + f.min())) <= err + res.error_bound
    assert f[res.index] <= f.min() + err + res.error_bound
    assert 0 < res.evaluated < V // 2  # pruning does its job on these families
    assert res.error_bound <= WOR_TARGET_ERROR


def test_dual_minimum_exact_prefixes_and_k1():
    # k = 1 is the maximal coupling: 1 + min_i [P_i - q(H_i)] = sum min(p, q)
    rng = np.random.default_rng(9)
    p, q = random_simplex(rng, 500, zeros=20), random_simplex(rng, 500, zeros=50)
    order = ratio_order(p, q)
    res = _race.wor_dual_minimum(p[order], q[order], 1)
    assert abs(res.value - np.minimum(p, q).sum()) <= FLOAT64_SUM_ATOL
    assert res.evaluated == 0
    # p == q: every prefix has P - Q >= 0 (WOR), so the minimum is 1 at the empty cut or the whole support
    res = _race.wor_dual_minimum(q[order], q[order], 3)
    assert abs(res.value - 1.0) <= res.error_bound + FLOAT64_ULPS_ATOL


def test_worminimum_is_frozen_and_public():
    res = _race.wor_dual_minimum(np.array([0.1, 0.2, 0.7]), np.array([0.5, 0.3, 0.2]), 2)
    with pytest.raises(AttributeError):
        res.value = 0.0  # type: ignore[misc]
    assert "WorMinimum(" in repr(res)
    for name in _race.__all__:
        assert hasattr(_race, name)


# ------------------------------------------------------------------------------------------------
# the base: the tokens before the first requested prefix, summarised by the moments of q
# ------------------------------------------------------------------------------------------------
#: Rounding of the extended-precision Poisson-binomial reference: each step is a convex
#: combination (<= 4 long-double ulps relative), so n steps stay within 4 n eps_ld of the exact law.
LD_EPS = float(np.finfo(np.longdouble).eps)


def extended_dp(q, k, t):
    """P(N_B(t) = j), j < k, by the Poisson-binomial DP over the tokens of q in long double."""
    tl = t.astype(np.longdouble)
    P = np.zeros((k, t.size), dtype=np.longdouble)
    P[0] = 1
    for x in q[q > 0].astype(np.longdouble):
        z = x * tl
        a, b = np.exp(-z), -np.expm1(-z)
        P[1:] = P[1:] * a + P[:-1] * b
        P[0] *= a
    return P


def family_q(rng, family, V):
    """Draft laws that stress the base: LM-like (a few big rates, a long tail), Dirichlet(0.1)
    (rates down to 1e-40) and three tokens holding all but 1e-6 of the mass."""
    if family == "lm":
        return lm_pair(rng, V)[1]
    if family == "dirichlet":
        return rng.dirichlet(np.full(V, 0.1))
    q = np.full(V, 1e-6 / (V - 3))
    q[:3] = [0.5, 0.3, 0.2 - 1e-6]
    return q[rng.permutation(V)]


@pytest.mark.parametrize("family", ["lm", "dirichlet", "heavy"])
@pytest.mark.parametrize("k", [2, 5, 8, 20])
def test_base_law_matches_extended_precision_dp(family, k):
    rng = np.random.default_rng({"lm": 1, "dirichlet": 2, "heavy": 3}[family] * 100 + k)
    q = family_q(rng, family, 3000)
    base = _race._Base(q, k)
    # two chunks: the second within e times the first's last node (the split is reused) and a
    # third beyond it (a new split, more tokens take the Poisson-binomial step)
    for s_hi in (3.0, 3.9, 7.0):
        t = np.exp(np.linspace(s_hi - 6.0, s_hi, 25))
        P, err = base.state(t)
        gap = np.abs(P - extended_dp(q, k, t)).sum(axis=0).astype(np.float64)
        assert np.all(gap <= err + 4 * q.size * LD_EPS)
        assert float(err.max()) <= 1e-12  # the bound is not vacuous
    assert base.big.size > 0 and base.n_small > 0  # both paths of the base ran


def test_base_bound_follows_a_truncated_series(monkeypatch):
    # Negative control: a moment series cut far earlier is visibly less accurate, and the
    # reported bound (which carries the truncation rho) still covers the error. Twenty equal rates
    # with q t up to 0.09 at the last node: every token is small and near the series' radius.
    monkeypatch.setattr(_race, "_BASE_SERIES_RTOL", 1e-2)
    _race._moment_plan.cache_clear()
    try:
        q = np.full(20, 0.05)
        t = np.linspace(0.1, 1.8, 25)
        base = _race._Base(q, 6)
        P, err = base.state(t)
        assert base.big.size == 0
        gap = np.abs(P - extended_dp(q, 6, t)).sum(axis=0).astype(np.float64)
        assert gap.max() > 1e-12  # 1000x the error of the full series here
        assert np.all(gap <= err + 4 * q.size * LD_EPS)
    finally:
        monkeypatch.undo()
        _race._moment_plan.cache_clear()


def test_moment_plan_coefficients():
    # a[m, s] are the Taylor coefficients of ((e^z - 1) / z)^m; the omitted tail at z = delta is
    # below rho relative to z^m
    k = 8
    S, a, rho = _race._moment_plan(k)
    for m in range(1, k):
        for z in (0.05, _race._BASE_DELTA):
            series = float(np.polyval(a[m][::-1], z))
            assert abs(series - (math.expm1(z) / z) ** m) <= rho * 1.01 + 1e-15 * series


@pytest.mark.parametrize("family", ["lm", "dirichlet", "heavy"])
@pytest.mark.parametrize("k", [2, 4, 8, 20])
def test_sweep_with_base_matches_sweep_without(family, k, monkeypatch):
    # The same prefixes late in a 20 000-token order, with the base (moments + Poisson-binomial
    # step for the tokens before the window) and with the window engine over every token.
    rng = np.random.default_rng({"lm": 5, "dirichlet": 6, "heavy": 7}[family] * 100 + k)
    V = 20_000
    q = family_q(rng, family, V)
    idx = np.concatenate([np.arange(V - 400, V - 100, 7), [V - 3]])
    with_base, e_with = _race.wor_prefix_at(q, k, idx)
    assert _race._base_split(q, k, idx, _race._grid(q, k, idx, 1 - np.cumsum(q)[idx - 1], np.cumsum(q)[idx - 1], 1.0, WOR_TARGET_ERROR))
    monkeypatch.setattr(_race, "_BASE_MIN_TOKENS", 10**9)
    without, e_without = _race.wor_prefix_at(q, k, idx)
    assert np.abs(with_base - without).max() <= e_with + e_without
    assert e_with <= WOR_TARGET_ERROR


@pytest.mark.parametrize("k", [2, 4, 8])
def test_late_prefixes_against_reference_loop(k):
    # The base path against the independent reference loop (1600 Gauss-Legendre nodes).
    rng = np.random.default_rng(200 + k)
    V = 1200  # the first 1 139 tokens form the base
    p, q = lm_pair(rng, V)
    qs = q[ratio_order(p, q)]
    idx = np.arange(V - 60, V + 1)
    vals, err = _race.wor_prefix_at(qs, k, idx)
    ref = reference_prefix_values(qs, k, n_nodes=1600, s_lo=-40.0)[idx]
    assert np.abs(vals - ref).max() <= err + FLOAT64_ATOL
    assert err <= WOR_TARGET_ERROR


def test_one_late_prefix_sums_only_its_window(monkeypatch):
    # Regression (speed): a cut's re-check at full vocabulary evaluated the symmetric sums over
    # every token of the cut at every node; the tokens before the window now enter through the
    # base, and the window engine sees only the last one.
    seen = []
    layout = _race._layout

    def spy(q, idx, lam_idx, loop):
        seen.append(int(idx.max()))  # the window's token count
        return layout(q, idx, lam_idx, loop)

    monkeypatch.setattr(_race, "_layout", spy)
    rng = np.random.default_rng(8)
    q = family_q(rng, "lm", 200_000)
    vals, err = _race.wor_prefix_at(q, 8, [199_990])
    assert seen == [1]
    assert err <= WOR_TARGET_ERROR
    assert 0.0 < vals[0] < 1.0


@pytest.mark.parametrize("family", ["zipf", "dirichlet"])
def test_dual_minimum_at_full_vocabulary_against_fine_reference(family, monkeypatch):
    # V = 262 144, k = 8: the fast path (base, two-level sums, bounds at a few prefixes) against
    # the window engine over every token with a 1000x smaller error target.
    p, q = otspec.synthetic.synthetic_pair(262_144, family=family, seed=0)
    order = ratio_order(p, q)
    ps, qs = p[order], q[order]
    fast = _race.wor_dual_minimum(ps, qs, 8)
    assert fast.error_bound <= 1e-10
    monkeypatch.setattr(_race, "_BASE_MIN_TOKENS", 10**9)
    monkeypatch.setattr(_race, "WOR_TARGET_ERROR", WOR_TARGET_ERROR / 1000)
    fine = _race.wor_dual_minimum(ps, qs, 8)
    assert abs(fast.value - fine.value) <= fast.error_bound + fine.error_bound
    assert fine.error_bound < fast.error_bound


def naive_block_top(q, k, block):
    """The running top-k at block ends by merging every block (the definition)."""
    V = q.size
    nb = -(-V // block)
    top = np.zeros((nb + 1, k))
    cur = np.zeros(k)
    for b in range(nb):
        cur = -np.sort(-np.concatenate([cur, q[b * block : (b + 1) * block]]))[:k]
        top[b + 1] = cur
    return top


@pytest.mark.parametrize("V,k,block", [(100, 3, 1), (5000, 7, 8), (3000, 4, 1), (70_000, 5, 64)])
def test_block_top_and_top_values_match_definitions(V, k, block):
    rng = np.random.default_rng(V + k)
    for q in (rng.dirichlet(np.full(V, 0.3)), np.sort(rng.random(V)), np.round(rng.random(V), 2)):
        assert np.array_equal(_race._block_top(q, k, block), naive_block_top(q, k, block))
        assert np.array_equal(_race._top_values(q, k), -np.sort(-q)[:k])


@pytest.mark.parametrize("V", [1, 7, 64, 65, 1000, 262_145])
def test_blocked_prefix_sums_within_their_rounding(V):
    x = np.random.default_rng(V).dirichlet(np.full(V, 0.2))
    X, units = _race._blocked_prefix(x)
    exact = np.concatenate([[0], np.cumsum(x.astype(np.longdouble))])
    rel = np.abs(X - exact) / np.maximum(exact, np.finfo(np.float64).tiny)
    assert float(rel.max()) <= units * 2.0**-53 + V * LD_EPS
    lam, eps = _race._suffix_at(x, np.array([0, V // 2, V]) if V > 1 else np.array([0, 1]))
    idx = [0, V // 2, V] if V > 1 else [0, 1]
    ex = np.array([math.fsum(x[i:]) for i in idx])
    assert np.all(np.abs(lam - ex) <= eps * ex + 1e-300)


def test_wor_primal_skips_the_race_integral_when_dual_only(monkeypatch):
    # Regression (speed): above the enumeration limit the WOR primal is "dual only", yet Q(H*^k) was
    # computed first, a second race integral over the cut; only the certificate's re-check remains.
    calls = []
    prob = otspec.laws.WithoutReplacementLaw.prob_all_in

    def spy(self, H):
        calls.append(1)
        return prob(self, H)

    monkeypatch.setattr(otspec.laws.WithoutReplacementLaw, "prob_all_in", spy)
    p, q = otspec.synthetic.synthetic_pair(2000, family="zipf", seed=3)
    res = otspec.optimal_acceptance(p, otspec.without_replacement(q, 4))
    assert res.status == "optimal" and res.lower_bound is None
    assert len(calls) == 1


@pytest.mark.parametrize("tiny", [1e-320, 3e-310, 1e-300], ids=["subnormal", "near-min-normal", "1e-300"])
def test_base_with_rates_near_the_smallest_float(tiny, monkeypatch):
    # Six tokens hold the mass, 4 994 tokens have rate `tiny` (the base's small tokens: their
    # largest rate, the moments' scale, is then tiny too, and its reciprocal would overflow).
    V = 5000
    q = np.full(V, tiny)
    q[[0, 1, 2, V - 10, V - 5, V - 1]] = [0.3, 0.2, 0.1, 0.2, 0.1, 0.1]
    idx = np.array([V - 7, V - 3, V - 1])
    with_base, e_with = _race.wor_prefix_at(q, 3, idx)
    monkeypatch.setattr(_race, "_BASE_MIN_TOKENS", 10**9)
    without, e_without = _race.wor_prefix_at(q, 3, idx)
    assert np.all(np.isfinite(with_base))
    assert np.abs(with_base - without).max() <= e_with + e_without
    assert e_with <= WOR_TARGET_ERROR
