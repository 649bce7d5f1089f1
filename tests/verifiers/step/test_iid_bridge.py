"""The tree-free ("bridge") draw of ``optimal_iid`` (``otspec.verifiers.step._iid_bridge``).

What is checked here (each check is an assertion that can fail):

* the exact kernel built from bridge draws ONLY (the selection law integrated over the level G,
  between the levels where three boundaries are collinear, one bridge per interval; no tree) is
  lossless (output law = p to 1e-12) and attains the subsets optimum (1e-12) on every enumerated
  small law (V <= 6, k <= 3, zeros, ratio ties, p = q, a one-token q);
* bridge blocks equal the threshold tree's blocks on seeded pairs up to V = 262 144, at random
  levels and super-tokens and at the super-tokens of smallest q-mass and of q-mass ~1e-10: every
  disagreement (if any) has less than 1e-20 of q-mass between the two ends, i.e. below the
  resolution of any float64 computation, and a law effect below k * 1e-20;
* the compensated scan is exact to double-double accuracy where a plain cumsum loses the tiny terms;
* the compiled kernels (numba) give bit-identical scans, point sets and blocks to the numpy code;
* the selection law r* equals a direct transcription of its closed form, bit for bit;
* seeded verifier outputs are the same with ``draw="bridge"``, ``draw="tree"`` and the default;
  ``draw="auto"`` builds no tree for a few draws and builds it after ``BRIDGE_DRAWS``;
* an unknown ``draw`` is refused.
"""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest

import otspec
from otspec.errors import UnsupportedMethodError
from otspec.synthetic import synthetic_pair
from otspec.verifiers.step import _iid_bridge as ib
from otspec.verifiers.step import _iid_selection as isel
from otspec.verifiers.step import optimal_iid as oi
from tests._oracles import awkward_pair, check_iid_rule_kernel

ATOL = 1e-12


def _state(p, q, k, draw="auto"):
    p, q, k = isel.check_pqk(p, q, k)
    return oi._build_state(p, q, k, draw=draw)


def _bridge_selection_rows(st, tuples):
    """Selection law per tuple from bridge draws only: the layout changes only at levels G where
    three boundaries a < i < b are collinear (G = the local ratio of i in (a, b)); between two
    consecutive such levels one bridge at the midpoint gives the block."""
    geo = st.geometry
    m = geo.m
    trip = np.array([t for t in itertools.combinations(range(m + 1), 3)], dtype=np.int64).reshape(-1, 3)
    Gs = geo.ratio(trip[:, 0], trip[:, 1], trip[:, 2]) if trip.size else np.zeros(0)
    brk = np.unique(np.clip(np.concatenate([[0.0, 1.0], Gs]), 0.0, 1.0))
    n, k = tuples.shape
    first = st.super_token[tuples].min(axis=1)
    beta = np.zeros((n, st.p.size))
    for lo, hi in itertools.pairwise(brk):
        if hi <= lo:
            continue
        G = 0.5 * (lo + hi)
        for row in range(n):
            b = ib.bridge(st.bridge_geometry, int(first[row]), G)[1] if m > 1 else m
            elig = st.super_token[tuples[row]] <= b
            np.add.at(beta[row], tuples[row][elig], (hi - lo) / elig.sum())
    return beta


def test_exact_kernel_from_bridge_draws_only_is_lossless_and_optimal():
    rng = np.random.default_rng(21)
    for _ in range(40):
        V = int(rng.integers(2, 7))
        k = int(rng.integers(1, 4))
        p, q = awkward_pair(rng, V)
        st = _state(p, q, k, draw="bridge")
        tuples = np.array(np.meshgrid(*[np.arange(V)] * k, indexing="ij")).reshape(k, -1).T
        tuples = tuples[np.prod(q[tuples], axis=1) > 0]  # tuples that are never drafted carry no mass
        beta = _bridge_selection_rows(st, tuples)
        check_iid_rule_kernel(p, q, k, st, tuples, beta, ATOL)
        assert not st.tree_built  # the tree was never needed


def _lm_pair(V, seed, spread):
    """An LM-shaped pair: q peaked (Zipf-like), p a log-normal perturbation of it."""
    p, q = synthetic_pair(V, seed=seed)
    rng = np.random.default_rng(seed)
    p = q * np.exp(spread * rng.standard_normal(V))
    return p / p.sum(), q


@pytest.mark.parametrize(("V", "k", "seed", "n"), [(2_000, 3, 0, 200), (49_152, 4, 1, 60), (262_144, 8, 2, 40)])
def test_bridge_blocks_equal_the_tree_blocks(V, k, seed, n):
    p, q = _lm_pair(V, seed, 0.4)
    st = _state(p, q, k, draw="tree")
    geo = st.geometry
    rng = np.random.default_rng(100 + seed)
    w = geo.w
    tiny = np.argsort(w)[: n // 4] + 1  # smallest q-mass
    near = np.argsort(np.abs(np.log(np.maximum(w, 1e-300)) - np.log(1e-10)))[: n // 4] + 1  # q-mass ~1e-10
    first = np.concatenate([rng.integers(1, geo.m + 1, n), tiny, near])
    s = rng.random(first.size)
    tree_end = st.block_end(first, s)
    bridge_end = st.block_end(first, s, method="bridge")
    cw = np.concatenate([[0.0], np.cumsum(w)])
    between = np.abs(cw[tree_end] - cw[bridge_end])
    assert np.all(bridge_end >= first)
    assert np.all((bridge_end == tree_end) | (between < 1e-20)), (first[bridge_end != tree_end], between.max())
    assert np.mean(bridge_end == tree_end) >= 0.99


def test_compensated_scan_keeps_tiny_terms():
    # suffix sums S[j] = sum(x[j:]), j = 0..n (S[n] = 0), scanned from the end
    x = np.array([0.5, 1e-20, 0.25, 3e-18, 1e-10, 1e-30, 0.125, 7e-21])[::-1].copy()
    hi, lo = ib._suffix(x)
    exact = list(itertools.accumulate(Fraction(v) for v in x[::-1]))[::-1] + [Fraction(0)]
    err = [abs(Fraction(h) + Fraction(lo_) - e) for h, lo_, e in zip(hi, lo, exact, strict=True)]
    assert max(err) < Fraction(1, 2**104)  # double-double: about eps**2 of the sum
    # a plain scan loses the 1e-20 term entirely (the comparison that makes the test meaningful)
    assert Fraction(np.cumsum(x[::-1])[::-1][-2]) - exact[-3] != 0


@pytest.mark.parametrize("draw", ["bridge", "tree"])
def test_seeded_outputs_do_not_depend_on_the_draw_method(draw):
    p, q = _lm_pair(3_000, 7, 0.5)
    k = 4
    rng = np.random.default_rng(5)
    drafts = rng.choice(q.size, size=(50, k), p=q)
    ref = _state(p, q, k, draw="tree").sample_batch(drafts, rng=np.random.default_rng(9))
    got = _state(p, q, k, draw=draw).sample_batch(drafts, rng=np.random.default_rng(9))
    np.testing.assert_array_equal(got, ref)
    # the verifier (draw="auto") gives the same outputs
    out = oi.optimal_iid.sample_batch(p, otspec.iid(q, k), drafts, rng=np.random.default_rng(9))
    np.testing.assert_array_equal(out, ref)


def test_auto_uses_bridges_for_few_draws_and_the_tree_for_many():
    p, q = _lm_pair(1_000, 3, 0.5)
    st = _state(p, q, 3)
    rng = np.random.default_rng(0)
    st.sample_batch(rng.choice(q.size, size=(4, 3), p=q), rng=rng)
    assert not st.tree_built
    st.sample_batch(rng.choice(q.size, size=(oi.BRIDGE_DRAWS, 3), p=q), rng=rng)
    assert st.tree_built


def test_unknown_draw_method_is_refused():
    with pytest.raises(UnsupportedMethodError, match="draw must be one of"):
        oi.prepare([0.5, 0.5], [0.5, 0.5], 2, draw="hull")


def _numpy_only(monkeypatch):
    monkeypatch.setattr(ib, "_kernels", lambda: None)


@pytest.mark.skipif(ib._kernels() is None, reason="numba is not installed")
@pytest.mark.parametrize("V,k", [(3_000, 2), (3_000, 8), (60_000, 4)])
def test_compiled_kernels_are_bit_identical(V, k, monkeypatch):
    p, q = awkward_pair(np.random.default_rng(V + k), V) if V < 10_000 else synthetic_pair(V, seed=k)
    st = _state(p, q, k, draw="bridge")
    geo = st.geometry
    rng = np.random.default_rng(7)
    first = rng.integers(1, geo.w.size + 1, 40)
    levels = rng.random(40)
    fast = ib.bridge_geometry(geo.w, geo.rho, k)
    ends = [ib.bridge(fast, int(j), float(G)) for j, G in zip(first, levels, strict=True)]
    D, E = ib._anchored(fast, int(first[0]) - 1, float(levels[0]))
    above = ib._above(D, E, np.arange(D.size), 0, D.size - 1)
    _numpy_only(monkeypatch)
    slow = ib.bridge_geometry(geo.w, geo.rho, k)
    for name in ("Yh", "Yl", "Sh", "Sl"):
        a, b = getattr(fast, name), getattr(slow, name)
        assert np.array_equal(a, b) and np.array_equal(np.signbit(a), np.signbit(b)), name
    assert ends == [ib.bridge(slow, int(j), float(G)) for j, G in zip(first, levels, strict=True)]
    np.testing.assert_array_equal(above, ib._above(D, E, np.arange(D.size), 0, D.size - 1))


def _closed_form_selection(p, q, k):
    """r* written as its closed form (docs: the selection law): tokens by p/q ascending, H* the
    first minimiser of P(H) - Q(H)^k over the ends of tied runs, min(p, c q) on A with sum
    1 - Q(H*)^k, max(p, c' q) on H* with sum Q(H*)^k (the constants by the pool scans)."""
    pos = np.flatnonzero(q > 0)
    pp, qq = p[pos], q[pos]
    o = np.argsort(pp / qq)
    ps, qs = pp[o], qq[o]
    pis = ps / qs
    n = ps.size
    cp = np.concatenate([[0.0], np.cumsum(ps)])
    cq = np.minimum(np.concatenate([[0.0], np.cumsum(qs)]), 1.0)
    g = cp - cq**k
    ties = np.concatenate([[False], pis[1:] == pis[:-1], [False]])
    g[ties] = np.inf
    nH = int(np.argmin(g))
    hk = float(cq[nH]) ** k
    r = np.empty(n)
    if nH < n:
        pA, qA, rA = ps[nH:], qs[nH:], pis[nH:]
        P_lt = np.concatenate([[0.0], np.cumsum(pA)[:-1]])
        Q_ge = np.cumsum(qA[::-1])[::-1]
        j = int(np.searchsorted(P_lt + rA * Q_ge, 1.0 - hk, side="left"))
        if j < pA.size:
            c = min(max((1.0 - hk - P_lt[j]) / Q_ge[j], rA[j - 1] if j > 0 else 0.0), rA[j])
            r[nH:] = np.where(np.arange(pA.size) < j, pA, c * qA)
        else:
            r[nH:] = pA
    if nH > 0:
        pH, qH, rH = ps[:nH], qs[:nH], pis[:nH]
        Q_le = np.cumsum(qH)
        P_gt = np.concatenate([np.cumsum(pH[::-1])[::-1][1:], [0.0]])
        j = max(int(np.searchsorted(rH * Q_le + P_gt, hk, side="left")), 1)
        if j <= nH - 1:
            cpr = min(max((hk - P_gt[j - 1]) / Q_le[j - 1], rH[j - 1]), rH[j])
        else:
            cpr = max(hk / Q_le[-1], rH[-1])
        r[:nH] = np.where(np.arange(nH) < j, cpr * qH, pH)
    out = np.zeros(p.size)
    out[pos[o]] = r
    return out


@pytest.mark.parametrize("V,k,seed", [(7, 2, 0), (300, 3, 1), (5_000, 8, 2), (262_144, 8, 0)])
def test_selection_law_equals_its_closed_form_bit_for_bit(V, k, seed):
    p, q = synthetic_pair(V, seed=seed) if V > 1000 else awkward_pair(np.random.default_rng(seed), V)
    np.testing.assert_array_equal(isel.solve_selection(p, q, k).r, _closed_form_selection(p, q, k))
