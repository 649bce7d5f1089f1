"""The exact race law of the shared-exponential rules at large V: what it computes it computes in
O(V log V) per drafted token, and what it cannot compute it refuses before allocating (the work
count includes the winning copy's exponential sum), so the decoder's per-round theory records NaN
for GLS at a real vocabulary instead of running out of memory."""

from __future__ import annotations

import math

import numpy as np
import pytest

from otspec.errors import ProblemTooLargeError
from otspec.theory import single_theory
from otspec.verifiers.step.gumbel_coupling import gumbel_match_probability, race_joint

V = 4096


@pytest.fixture(scope="module")
def pair():
    g = np.random.default_rng(4096)
    lp = 3.0 * g.standard_normal(V)
    p = np.exp(lp - lp.max())
    q = np.exp(lp + 0.8 * g.standard_normal(V) - lp.max())
    return p / p.sum(), q / q.sum()


def test_one_copy_race_law_at_large_v_is_the_closed_form(pair):
    """K = 1, every drafted token's own row at V = 4096: the diagonal summed against q is the closed
    form (before, the race law tabulated every token's exponential sum with a (segments x V) table)."""
    p, q = pair
    x = np.argsort(-q)[:64]
    J = race_joint(p, [q], x[:, None], drafted_only=True)
    diag = J[np.arange(x.size), x] / q[x]
    den = np.maximum(p[x][:, None] * q[None, :], p[None, :] * q[x][:, None]).sum(axis=1)
    np.testing.assert_allclose(diag, p[x] / den, rtol=1e-10, atol=0)
    assert gumbel_match_probability(p, q) >= float((q[x] * diag).sum())


def test_two_copies_at_large_v_are_refused_and_the_theory_is_nan(pair):
    p, q = pair
    with pytest.raises(ProblemTooLargeError, match="RACE_KERNEL_MAX_WORK"):
        race_joint(p, [q, q], np.array([[0, 1]]), drafted_only=True)  # (2V)^2 terms per step
    out = single_theory(p, q, np.array([int(np.argmax(q)), 1]), "gls", "iid")
    assert math.isnan(out["expected_cond"]) and math.isnan(out["expected"])
    assert 0.0 < out["optimum"] <= 1.0
