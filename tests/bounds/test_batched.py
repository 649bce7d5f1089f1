"""otspec.bounds.batched: the bin-scan optima against the sorted-prefix dual of
:func:`otspec.optimal_acceptance` (``method="prefix"``, an independent full-sort implementation),
on random pairs with zeros, ties and equal distributions, and at a realistic vocabulary."""

import numpy as np
import pytest

import otspec
from otspec.bounds.batched import all_optima, greedy_optima, iid_optima, one_minus_tv

#: the bin-scan optima and the library's sorted prefix sum the same terms in another order:
#: a few hundred ulps at V <= 3000
SOLVER_ATOL = 1e-12


def _pairs(seed, n):
    rng = np.random.default_rng(seed)
    for t in range(n):
        V = int(rng.integers(3, 3000))
        z = rng.standard_normal(V) * rng.uniform(0.5, 4)
        zq = z + rng.standard_normal(V) * rng.uniform(0.01, 2)
        p, q = np.exp(z - z.max()), np.exp(zq - zq.max())
        if t % 5 == 0:  # top-k / top-p processing: zeros in q, or in p
            q[rng.random(V) < 0.3] = 0
            q[np.argmax(q)] = 1
        if t % 7 == 0:
            p[rng.random(V) < 0.3] = 0
            p[np.argmax(p)] = 1
        if t % 11 == 0:  # many tied ratios
            q = np.round(q * 10) / 10 + 1e-3
        if t % 13 == 0:
            q = p.copy()
        yield p / p.sum(), q / q.sum()


def test_bin_scan_optima_equal_the_library_optima():
    n = 0
    for p, q in _pairs(0, 150):
        ks = [1, 2, 3, 4, 8]
        got_iid = iid_optima(p, q, ks)
        support = int(np.count_nonzero(q))
        gk = [k for k in ks if k <= support]
        got_greedy = greedy_optima(p, q, gk)
        for k in ks:
            exact = otspec.optimal_acceptance(p, otspec.iid(q, k), method="prefix").value
            assert got_iid[k] == pytest.approx(exact, abs=SOLVER_ATOL)
            n += 1
        for k in gk:
            exact = otspec.optimal_acceptance(p, otspec.greedy(q, k), method="prefix").value
            assert got_greedy[k] == pytest.approx(exact, abs=SOLVER_ATOL)
    assert n == 750


def test_bin_scan_at_a_realistic_vocabulary():
    from otspec.synthetic import synthetic_pair

    p, q = synthetic_pair(49152, seed=3)
    got = iid_optima(p, q, [2, 4, 8])
    gg = greedy_optima(p, q, [2, 4, 8])
    for k in (2, 4, 8):
        assert got[k] == pytest.approx(otspec.optimal_acceptance(p, otspec.iid(q, k), method="prefix").value, abs=SOLVER_ATOL)
        assert gg[k] == pytest.approx(otspec.optimal_acceptance(p, otspec.greedy(q, k), method="prefix").value, abs=SOLVER_ATOL)


def test_all_optima_is_the_three_in_one():
    """One binning gives bit for bit what the single-purpose functions give."""
    for p, q in _pairs(1, 30):
        support = int(np.count_nonzero(q))
        gk = [k for k in (2, 3) if k <= support]
        tv, iid, greedy = all_optima(p, q, [2, 5], gk)
        assert tv == one_minus_tv(p, q) == float(np.minimum(p, q).sum())
        assert iid == iid_optima(p, q, [2, 5])
        assert set(greedy) == set(gk)
        for k in gk:
            assert greedy[k] == pytest.approx(greedy_optima(p, q, [k])[k], abs=SOLVER_ATOL)
