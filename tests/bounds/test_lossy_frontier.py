"""The exact lossy frontier (MATH §16) against an independent linear program.

The LP is built here from scratch over the transport plan: variables pi(m, y) >= 0 for every
enumerated draft tuple m and output token y, rows sum_y pi(m, y) = Q(m), the output law
P(y) = sum_m pi(m, y), slack variables t_y >= P(y) - p(y), t_y >= 0 and sum_y t_y <= eps (since P
and p both sum to 1, sum_y (P - p)_+ = d_TV(P, p)); maximise sum_m sum_{y in m} pi(m, y). It is
solved by scipy's HiGHS and compared with lossy_frontier's min(1, alpha* + eps) on 150 random small
instances per law family (i.i.d., without replacement, greedy), V = 2..5, k = 1..3.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import linprog

import otspec
from otspec.bounds.lossy import LossyFrontier, lossy_frontier
from otspec.errors import InvalidOptionError
from otspec.verifiers.step.lossy_optimal import LossyOptimalVerifier
from tests._tolerances import LP_ATOL
from tests.conftest import random_simplex

#: scipy's HiGHS at its default tolerances (1e-7 feasibility) against an exact closed form.
SCIPY_LP_ATOL = 1e-7
N_CASES = 150


def _tv_lp(p, law, eps):
    tuples, weights = law.enumerate()
    M, V = tuples.shape[0], p.size
    n_pi = M * V
    c = np.zeros(n_pi + V)
    for m, t in enumerate(tuples.tolist()):
        for y in set(t):
            c[m * V + y] = -1.0  # maximise the membership mass
    A_eq = np.zeros((M, n_pi + V))
    for m in range(M):
        A_eq[m, m * V : (m + 1) * V] = 1.0
    # P(y) - t_y <= p(y)  and  sum_y t_y <= eps
    A_ub = np.zeros((V + 1, n_pi + V))
    for y in range(V):
        A_ub[y, y:n_pi:V] = 1.0
        A_ub[y, n_pi + y] = -1.0
    A_ub[V, n_pi:] = 1.0
    b_ub = np.concatenate([p, [eps]])
    res = linprog(c, A_ub=A_ub, b_ub=b_ub, A_eq=A_eq, b_eq=weights, bounds=(0, None), method="highs")
    assert res.status == 0, res.message
    return -res.fun


def _instances(seed):
    rng = np.random.default_rng(seed)
    while True:
        V, k = int(rng.integers(2, 6)), int(rng.integers(1, 4))
        p = random_simplex(rng, V, zeros=int(rng.integers(0, 2)), alpha=float(rng.choice([0.3, 1.0])))
        q = random_simplex(rng, V, zeros=int(rng.integers(0, 2)), alpha=float(rng.choice([0.3, 1.0])))
        eps = float(rng.choice([0.0, 0.01, 0.05, 0.2, rng.uniform(0, 1)]))
        yield rng, p, q, k, eps


@pytest.mark.parametrize("family", ["iid", "without_replacement", "greedy"])
def test_tv_frontier_equals_the_lp(family):
    done, saturated, interior = 0, 0, 0
    for _, p, q, k, eps in _instances({"iid": 1, "without_replacement": 2, "greedy": 3}[family]):
        if family != "iid" and k > np.count_nonzero(q):
            continue
        law = getattr(otspec, family)(q, k)
        lp = _tv_lp(p, law, eps)
        fr = lossy_frontier(p, law, eps)
        assert fr.value == pytest.approx(lp, abs=SCIPY_LP_ATOL), (p, q, k, eps)
        assert fr.upper_bound >= lp - SCIPY_LP_ATOL
        assert fr.lower_bound is None or fr.lower_bound <= lp + SCIPY_LP_ATOL
        saturated += int(fr.value == 1.0 and fr.optimum.value < 1.0)
        interior += int(eps > 0 and fr.value < 1.0)
        done += 1
        if done == N_CASES:
            break
    assert saturated >= 5 and interior >= 50  # both regimes of min(1, alpha* + eps) are exercised


def test_lossy_optimal_reaches_the_lp_frontier():
    """The shipped rule attains the LP's value on enumerable laws (its kernel, not the formula)."""
    for n, (_, p, q, k, eps) in enumerate(_instances(4)):
        law = otspec.iid(q, k) if n % 2 == 0 else otspec.product([q, p][: min(k, 2)])
        K = LossyOptimalVerifier(eps).kernel(p, law)
        assert K.acceptance() == pytest.approx(_tv_lp(p, law, eps), abs=SCIPY_LP_ATOL)
        assert 0.5 * np.abs(K.output_law() - p).sum() <= eps + LP_ATOL
        if n == 29:
            break


def test_result_is_frozen_and_says_what_it_is():
    fr = lossy_frontier([0.5, 0.5], otspec.iid([0.9, 0.1], 1), 0.1)
    assert isinstance(fr, LossyFrontier) and fr.ok
    assert fr.value == pytest.approx(0.7) and fr.tv_spent == pytest.approx(0.1)
    assert "LossyFrontier(eps=0.1" in repr(fr)
    with pytest.raises(AttributeError):
        fr.value = 1.0  # type: ignore[misc]
    sat = lossy_frontier([0.5, 0.5], otspec.iid([0.9, 0.1], 1), 0.8)
    assert sat.value == 1.0 and sat.tv_spent == pytest.approx(0.4)


@pytest.mark.parametrize("eps", [-0.01, 1.01, float("nan"), "a", True])
def test_bad_budget(eps):
    with pytest.raises(InvalidOptionError, match="eps must be"):
        lossy_frontier([0.5, 0.5], otspec.iid([0.9, 0.1], 1), eps)
