"""The compiled i.i.d. optimum against its numpy reference: the same answer, bit for bit, and the
packed-word sort against the stable argsort it replaces."""

from __future__ import annotations

import numpy as np
import pytest

import otspec
from otspec._validation import as_distribution
from otspec.bounds import iid_compiled, jit_policy, prefix, primal
from otspec.bounds.prefix import ratio_sort

pytest.importorskip("numba")


def _pairs(seed: int):
    """Seeded (p, q) pairs: random Dirichlet, zeros in p, q = p (every key ties), coarse
    probabilities (many ties), uniform p, and a tiny vocabulary."""
    rng = np.random.default_rng(seed)
    for case in range(6):
        V = int(rng.integers(2, 400)) if case != 5 else 3
        p, q = rng.dirichlet(np.full(V, 0.3)), rng.dirichlet(np.full(V, 0.3))
        if case == 1:
            p[rng.random(V) < 0.3] = 0.0
        elif case == 2:
            q = p.copy()
        elif case == 3:
            p, q = np.round(p * 20) / 20 + 1e-9, np.round(q * 20) / 20 + 1e-9
        elif case == 4:
            p = np.ones(V)
        yield as_distribution(p / p.sum()), as_distribution(q / q.sum())


def _same(a, b) -> bool:
    return (
        a.value == b.value
        and np.array_equal(a.cut, b.cut)
        and a.error_bound == b.error_bound
        and a.lower == b.lower
        and a.checks == b.checks
    )


def _reference_scan_applies(p, q, k) -> bool:
    """Whether the reference certifies along the p/q order in O(V) (else it sorts r*, and the
    compiled path hands over to it)."""
    value, cut, err, order, scan = prefix.iid_prefix(p, q, k, return_scan=True)
    n = cut.size
    g = float(np.power(min(float(scan[3][n - 1]), 1.0), k)) if n else 0.0
    return primal._iid_primal_scan(scan[0], scan[1], n, g, k, *scan[2:]) is not None


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_compiled_matches_the_reference_bit_for_bit(seed):
    compiled = 0
    for p, q in _pairs(seed):
        for k in (1, 2, 3, 8):
            law = otspec.iid(q, k)
            ref = prefix.iid_reference(p, law)
            got = iid_compiled.solve(p, q, k, ratio_sort(prefix.ratio_keys(p, q)), prefix.iid_error_bound(p.size, k))
            # it hands over exactly where the reference leaves its O(V) path
            assert (got is not None) == _reference_scan_applies(p, q, k), (seed, p.size, k)
            if got is not None:
                compiled += 1
                assert _same(got, ref), (seed, p.size, k)
    assert compiled >= 20


def test_zero_in_q_falls_back_to_the_reference(monkeypatch):
    p = as_distribution([0.1, 0.2, 0.3, 0.4])
    q = as_distribution([0.5, 0.0, 0.25, 0.25])
    assert iid_compiled.solve(p, q, 2, ratio_sort(prefix.ratio_keys(p, q)), 0.0) is None
    monkeypatch.setattr(jit_policy, "ENGINE", "compiled")
    monkeypatch.setattr(jit_policy, "COMPILED_FROM_V", 1)
    got = otspec.optimal_acceptance(p, otspec.iid(q, 2))
    ref = prefix.iid_reference(p, otspec.iid(q, 2))
    assert got.value == ref.value and got.status == "optimal"


def test_the_front_door_takes_the_compiled_path_when_forced(monkeypatch):
    p, q = next(_pairs(3))
    law = otspec.iid(q, 4)
    monkeypatch.setattr(jit_policy, "COMPILED_FROM_V", 1)
    calls = []
    real = iid_compiled.solve
    monkeypatch.setattr(iid_compiled, "solve", lambda *a: calls.append(1) or real(*a))
    monkeypatch.setattr(jit_policy, "ENGINE", "numpy")
    ref = otspec.optimal_acceptance(p, law)
    assert calls == []
    monkeypatch.setattr(jit_policy, "ENGINE", "compiled")
    got = otspec.optimal_acceptance(p, law)
    assert calls == [1]
    assert got.value == ref.value and got.lower_bound == ref.lower_bound and got.checks == ref.checks


def test_auto_switches_after_the_reference_spent_the_start_up(monkeypatch):
    monkeypatch.setattr(jit_policy, "ENGINE", "auto")
    monkeypatch.setitem(jit_policy._STATE, "reference_s", 0.0)
    V = jit_policy.COMPILED_FROM_V
    assert not iid_compiled.ready(V)
    jit_policy.count_reference(V - 1, 1e9)  # small problems do not count
    assert not iid_compiled.ready(V)
    jit_policy.count_reference(V, jit_policy.SWITCH_AFTER_S)
    assert iid_compiled.ready(V) and not iid_compiled.ready(V - 1)


def test_ratio_sort_is_the_stable_argsort():
    rng = np.random.default_rng(5)
    values = np.array([0.0, -0.0, 1.0, np.inf, 1 + 2**-52, 1 + 2**-45, 0.5, 5e-324, 1e300])
    for trial in range(300):
        V = int(rng.integers(1, 300))
        key = rng.choice(values, V) if trial % 2 else rng.random(V) * rng.choice([1.0, 1e-300, 1e300])
        expected = np.argsort(key, kind="stable")
        assert np.array_equal(ratio_sort(key), expected)
        assert np.array_equal(ratio_sort(key, iid_compiled.kernels()), expected)
