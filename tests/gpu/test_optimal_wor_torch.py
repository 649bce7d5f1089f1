"""Torch twin of optimal_wor's law oracle (otspec_gpu.verifiers.step._luce_law): the same law as the
exact enumeration and as the numba oracle, on the same nodes, to rounding."""

from __future__ import annotations

import numpy as np
import pytest

import otspec
from otspec.verifiers.step._luce_law import luce_law_exact, luce_law_quadrature
from otspec_gpu.verifiers.step._luce_law import luce_law_quadrature_torch


@pytest.mark.parametrize("seed", range(4))
def test_torch_law_equals_enumeration_and_numba(seed, device):
    rng = np.random.default_rng(seed)
    V = 6
    k = int(rng.integers(1, 5))
    q = rng.dirichlet(np.full(V, 0.7))
    if seed % 2:  # one dominant token: where deconvolution would cancel
        q = np.concatenate([[0.99], 0.01 * q[1:] / q[1:].sum()])
    in_A = rng.random(V) < 0.5
    b = 10.0 ** rng.uniform(-3, 0, V)
    law = otspec.without_replacement(q, k)
    sets, w = law.enumerate_sets()
    exact = luce_law_exact(sets, w, b, in_A)
    ref = luce_law_quadrature(q, b, in_A, k)
    got = luce_law_quadrature_torch(q, b, in_A, k, device=device)
    assert np.abs(got.r - exact.r).sum() <= 1e-12
    np.testing.assert_allclose(got.r, ref.r, atol=1e-14, rtol=0)  # the same ~1e4 node sums, another order
    np.testing.assert_allclose(got.second, ref.second, atol=1e-14, rtol=0)
    assert got.nodes == ref.nodes
    assert abs(got.error - ref.error) <= 1e-14
