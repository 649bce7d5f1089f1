"""The lossy frontier under a KL budget (kl_frontier) against independent computations.

* budget 0: the lossless optimum alpha*(p, Q), for i.i.d., without-replacement and greedy drafts;
* a closed form derived here: one draft, V = 2, p = (1/2, 1/2), q = (0.9, 0.1). For an output law
  (1/2 + d, 1/2 - d) with 0 <= d <= 0.4 the best acceptance is sum_y min(p'(y), q(y)) = 0.6 + d and
  KL(p' || p) = log 2 - H(1/2 + d), so the frontier is 0.6 + d(b) with d(b) the root of
  log 2 - H(1/2 + d) = b (found by brentq here);
* Pinsker both ways: min(1, alpha* + sqrt(p_min (e^b - 1)) / 2) <= value <= min(1, alpha* + sqrt(b / 2))
  (the TV frontier lossy_frontier at those two budgets);
* an independent solver on tiny V: scipy's SLSQP maximises t subject to t <= p'(H) + 1 - Q(all drafts
  in H) for every token set H (alpha*(p', Q) as the minimum over cuts, from the law's enumerated
  tuples), sum p' = 1 and the KL row; its value must lie in kl_frontier's certified interval, and the
  exact optimum at SLSQP's law (pulled inside the ball) must not exceed the certified upper bound.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy.optimize import brentq, minimize

import otspec
from otspec._tolerances import EXACT_ATOL, KL_FRONTIER_GAP_ATOL
from otspec.bounds.lossy import KLFrontier, kl_frontier, lossy_frontier
from otspec.errors import InvalidOptionError, NotADraftLawError
from tests.conftest import random_simplex

pytest.importorskip("cvxpy")

#: SLSQP (ftol 1e-12) against the certified interval: its KL row is met to ~1e-10 and the frontier's
#: slope in b stays below ~10 at the budgets used (b >= 0.01), so its value is within ~1e-8.
SLSQP_ATOL = 1e-7
DIRECTIONS = ("output_target", "target_output")


def _law(family, q, k):
    return getattr(otspec, family)(q, k)


def _cases(seed, n, V_max=5, full_support=False):
    rng = np.random.default_rng(seed)
    out = []
    while len(out) < n:
        V, k = int(rng.integers(2, V_max + 1)), int(rng.integers(1, 4))
        family = ("iid", "without_replacement", "greedy")[len(out) % 3]
        if family != "iid" and k > V:
            continue
        p = random_simplex(rng, V, zeros=0 if full_support else int(rng.integers(0, 2)), alpha=float(rng.choice([0.5, 1.0])))
        q = random_simplex(rng, V, alpha=float(rng.choice([0.5, 1.0])))
        out.append((p, _law(family, q, k)))
    return out


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_budget_zero_is_the_lossless_optimum(direction):
    for p, law in _cases(11, 6):
        r = kl_frontier(p, law, 0.0, direction=direction)
        alpha = otspec.optimal_acceptance(p, law).value
        assert r.ok and r.value == pytest.approx(alpha, abs=EXACT_ATOL)
        assert alpha - EXACT_ATOL <= r.upper_bound <= alpha + KL_FRONTIER_GAP_ATOL
        assert r.kl_spent == 0.0


def _binary_entropy(x):
    return -sum(v * math.log(v) for v in (x, 1.0 - x) if v > 0)


@pytest.mark.parametrize("b", [0.001, 0.02, 0.1, 0.3])
def test_two_token_closed_form(b):
    d = brentq(lambda d: math.log(2.0) - _binary_entropy(0.5 + d) - b, 0.0, 0.4)  # b < KL at d = 0.4 (0.368)
    r = kl_frontier([0.5, 0.5], otspec.iid([0.9, 0.1], 1), b)
    assert r.ok and r.lower_bound - KL_FRONTIER_GAP_ATOL <= 0.6 + d <= r.upper_bound + EXACT_ATOL
    assert r.value == pytest.approx(0.6 + d, abs=KL_FRONTIER_GAP_ATOL)


def test_pinsker_brackets_it_by_the_tv_frontier():
    done = 0
    for n, (p, law) in enumerate(_cases(12, 9, full_support=True)):
        b = (0.005, 0.05, 0.3)[n % 3]
        for direction in DIRECTIONS:
            r = kl_frontier(p, law, b, direction=direction)
            assert r.ok and r.kl_spent <= b
            ceiling = lossy_frontier(p, law, min(1.0, math.sqrt(b / 2.0))).value
            assert r.value <= r.upper_bound <= ceiling + KL_FRONTIER_GAP_ATOL
            if direction == "output_target":  # reverse Pinsker needs p > 0: KL <= log(1 + 4 TV^2 / p_min)
                floor = lossy_frontier(p, law, min(1.0, math.sqrt(p.min() * math.expm1(b)) / 2.0)).value
                assert r.value >= floor - KL_FRONTIER_GAP_ATOL
                done += int(floor > r.optimum.value + 1e-3 and ceiling < 1.0)
    assert done >= 3  # the bracket is not vacuous on most cases


def _slsqp_frontier(p, law, b, direction):
    V = p.size
    tuples, weights = law.enumerate()
    cuts = [np.array(H) for r in range(1, V) for H in itertools.combinations(range(V), r)]
    f = [float(weights[np.isin(tuples, H).all(axis=1)].sum()) for H in cuts]
    lo = 1e-12

    def kl(x):
        x = np.maximum(x[:V], lo)
        return float(np.sum(x * np.log(x / p))) if direction == "output_target" else float(np.sum(p * np.log(p / x)))

    cons = [{"type": "eq", "fun": lambda x: x[:V].sum() - 1.0}, {"type": "ineq", "fun": lambda x: b - kl(x)}]
    cons += [{"type": "ineq", "fun": lambda x, H=H, fH=fH: x[H].sum() + 1.0 - fH - x[V]} for H, fH in zip(cuts, f, strict=True)]
    x0 = np.concatenate([p, [0.0]])  # feasible start
    res = minimize(
        lambda x: -x[V],
        x0,
        method="SLSQP",
        bounds=[(lo, 1.0)] * V + [(0.0, 1.0)],
        constraints=cons,
        options={"ftol": 1e-12, "maxiter": 500},
    )
    # status 8 ("positive directional derivative") is SLSQP stopping at its line-search precision;
    # the interval check below fails if that point is not optimal
    assert res.status in (0, 8) and kl(res.x) <= b + 1e-9, res.message
    return float(res.x[V]), res.x[:V] / res.x[:V].sum()


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_agrees_with_an_independent_scipy_minimisation(direction):
    for n, (p, law) in enumerate(_cases(13, 6, V_max=4, full_support=True)):
        b = (0.01, 0.1, 0.5)[n % 3]
        r = kl_frontier(p, law, b, direction=direction)
        t, law_slsqp = _slsqp_frontier(p, law, b, direction)
        assert r.ok
        assert r.lower_bound - SLSQP_ATOL <= t <= r.upper_bound + SLSQP_ATOL
        # SLSQP's own law, pulled strictly inside the ball: its exact optimum is a feasible value
        div = otspec.verifiers.lossy.kl_divergence(*((law_slsqp, p) if direction == "output_target" else (p, law_slsqp)))
        mix = law_slsqp if div <= b else (b / div) * law_slsqp + (1.0 - b / div) * p
        assert otspec.optimal_acceptance(mix, law).value <= r.upper_bound + EXACT_ATOL


def test_result_is_frozen_and_says_what_it_is():
    r = kl_frontier([0.5, 0.5], otspec.iid([0.9, 0.1], 1), 0.02)
    assert isinstance(r, KLFrontier) and r.ok and r.direction == "output_target"
    assert "KLFrontier(budget=0.02" in repr(r) and r.gap == r.upper_bound - r.lower_bound
    assert r.output_law.shape == (2,) and abs(r.output_law.sum() - 1.0) <= EXACT_ATOL and r.kl_spent <= 0.02
    assert r.token_duals.shape == (2,) and np.all((r.token_duals >= 0.0) & (r.token_duals <= 1.0))
    with pytest.raises(AttributeError):
        r.value = 1.0  # type: ignore[misc]


@pytest.mark.parametrize("budget", [-0.01, float("nan"), float("inf"), "a", True])
def test_bad_budget(budget):
    with pytest.raises(InvalidOptionError, match="budget must be"):
        kl_frontier([0.5, 0.5], otspec.iid([0.9, 0.1], 1), budget)


def test_bad_direction_and_law():
    with pytest.raises(InvalidOptionError, match="direction must be"):
        kl_frontier([0.5, 0.5], otspec.iid([0.9, 0.1], 1), 0.1, direction="forward")
    with pytest.raises(NotADraftLawError):
        kl_frontier([0.5, 0.5], [0.9, 0.1], 0.1)
