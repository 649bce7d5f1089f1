"""The block optimum: closed form W, the full-information block LP, the naive bound."""

from __future__ import annotations

import dataclasses
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import otspec
from otspec import models, prefixes
from otspec._tolerances import CERTIFICATE_ATOL, EXACT_ATOL
from otspec.bounds.block import BlockOptimumResult, block_optimum, joint_coupling_bound
from otspec.errors import ProblemTooLargeError, UnsupportedMethodError
from otspec.verifiers import block as bv
from otspec.verifiers import token_chain as tc
from tests._oracles import criterion_violation, make_pair
from tests._tolerances import LP_ATOL, STRICT_GAP

instances = st.builds(make_pair, st.integers(0, 10_000), st.integers(2, 3), st.sampled_from([0.5, 1.0, 3.0]), st.booleans())
# Peaky conditionals (Dirichlet 0.3, exact zeros) reach probabilities ~1e-9 whose products defeat
# any absolute LP tolerance: there the LP is only as exact as its own certified gap.
extreme = st.builds(make_pair, st.integers(0, 10_000), st.just(3), st.just(0.3), st.booleans())


def brute_W(p, q, gamma):
    """sum_i sum_{x^i} min_{0<=j<=i} M_s(x^j) M_b(x_{j+1..i} | x^j), straight from docs/block.rst, key identity 3."""
    import itertools

    V = p.V
    total = 0.0
    for i in range(1, gamma + 1):
        for x in itertools.product(range(V), repeat=i):
            best = np.inf
            for j in range(i + 1):
                ms = np.prod([q(x[:l])[x[l]] for l in range(j)]) if j else 1.0
                mb = np.prod([p(x[:l])[x[l]] for l in range(j, i)]) if j < i else 1.0
                best = min(best, ms * mb)
            total += best
    return total


@given(inst=instances, gamma=st.integers(1, 3))
def test_block_equals_closed_form_equals_lp(inst, gamma):
    p, q = inst
    cf = block_optimum(p, q, gamma)
    lp = block_optimum(p, q, gamma, method="lp")
    e_block = bv.expected_accepted(p, q, gamma, method="kernel")
    assert cf.ok and lp.ok, lp.checks
    assert abs(cf.value - lp.value) <= LP_ATOL
    assert abs(cf.value - e_block) <= LP_ATOL
    assert abs(cf.value - brute_W(p, q, gamma)) <= EXACT_ATOL
    assert tc.expected_accepted(p, q, gamma) <= lp.value + LP_ATOL
    assert cf.value <= cf.joint_coupling_bound + EXACT_ATOL
    assert abs(cf.joint_coupling_bound - lp.joint_coupling_bound) <= EXACT_ATOL


@given(inst=extreme, gamma=st.integers(2, 3))
def test_lp_on_peaky_models_agrees_within_its_certified_gap(inst, gamma):
    p, q = inst
    lp = block_optimum(p, q, gamma, method="lp")
    assert lp.ok, lp.checks
    assert abs(lp.value - block_optimum(p, q, gamma).value) <= lp.gap + LP_ATOL


@given(inst=instances, gamma=st.integers(1, 3))
def test_lp_plan_is_lossless_and_attains_value(inst, gamma):
    """The LP's optimal coupling satisfies the losslessness criterion of docs/block.rst (checked here, independently of the
    LP's own extended-law constraints) and its E[tau] is the reported value."""
    p, q = inst
    r = block_optimum(p, q, gamma, method="lp")
    paths = np.flatnonzero(prefixes.enumerate_prefixes(p, q, gamma).q_joint[gamma] > 0)
    law: dict = {}
    e = 0.0
    assert isinstance(r.plan, otspec.TransportPlan)
    assert r.plan.value == r.value
    for o, t, n, y, mass in zip(r.plan.outcome, r.plan.tau, r.plan.node, r.plan.y, r.plan.mass, strict=False):
        if mass <= 0:
            continue
        full = np.unravel_index(paths[o], (p.V,) * gamma)
        head = tuple(int(v) for v in full[:t])
        # the node label is the accepted prefix itself
        assert n == (np.ravel_multi_index(head, (p.V,) * t) if t else 0)
        key = head + (int(y),)
        law[key] = law.get(key, 0.0) + mass
        e += t * mass
    assert criterion_violation(law, p, p.V) <= CERTIFICATE_ATOL
    assert abs(e - r.value) <= EXACT_ATOL


def test_block_plan_rows_are_the_draft_law_and_conditionals_are_laws():
    p, q = make_pair(3, 3, 1.0, False)
    r = block_optimum(p, q, 2, method="lp")
    plan = r.plan
    assert r.ok and isinstance(plan, otspec.BlockPlan)
    rows = np.bincount(plan.outcome, weights=plan.mass, minlength=plan.outcome_weights.size)
    assert np.abs(rows - plan.outcome_weights).max() <= r.checks["draft_marginal"] + EXACT_ATOL
    for o in range(plan.outcome_weights.size):
        tau, node, y, prob = plan.conditional(o)
        assert tau.shape == node.shape == y.shape == prob.shape
        assert abs(prob.sum() - 1.0) <= LP_ATOL
    with pytest.raises(otspec.errors.InvalidDraftsError, match="outcome must be an index"):
        plan.conditional(plan.outcome_weights.size)
    with pytest.raises(ValueError, match="read-only"):
        plan.mass[0] = 0.0
    assert "plan" not in r.to_dict() and r.to_dict()["solver_info"] == r.solver_info
    # every result's plan is a TransportPlan (the single-step optimum's too)
    single = otspec.optimal_acceptance([0.5, 0.3, 0.2], otspec.iid([0.2, 0.3, 0.5], 2), method="lp")
    assert isinstance(single.plan, otspec.MembershipPlan) and isinstance(single.plan, otspec.TransportPlan)


def test_toy_values():
    p, q = models.context_free([1 / 3, 2 / 3]), models.context_free([2 / 3, 1 / 3])
    for method in ("closed_form", "lp"):
        r = block_optimum(p, q, 2, method=method)
        assert Fraction(r.value).limit_denominator(100) == Fraction(11, 9)
        assert abs(r.value - 11 / 9) <= LP_ATOL
        assert Fraction(r.joint_coupling_bound).limit_denominator(100) == Fraction(12, 9)
    assert abs(joint_coupling_bound(p, q, 2) - 12 / 9) <= EXACT_ATOL


def test_joint_coupling_bound_strictly_above_somewhere_and_token_strictly_below():
    gaps_naive, gaps_token = [], []
    for s in range(4):
        p, q = make_pair(s, 3, 1.0, False)
        r = block_optimum(p, q, 3, method="lp")
        gaps_naive.append(r.joint_coupling_bound - r.value)
        gaps_token.append(r.value - tc.expected_accepted(p, q, 3))
    assert min(gaps_naive) > STRICT_GAP and min(gaps_token) > STRICT_GAP


def test_result_type():
    p, q = make_pair(0, 2, 1.0, False)
    r = block_optimum(p, q, 2, method="lp")
    assert isinstance(r, BlockOptimumResult)
    assert r.method == "lp" and r.status == "optimal" and r.k == 1 and r.gamma == 2 and r.V == 2
    assert "BlockOptimumResult(value=" in repr(r)
    assert set(r.checks) >= {"draft_marginal", "target_law", "dual_feasibility", "gap"}
    d = r.to_dict()
    assert d["block_efficiency"] == pytest.approx(r.value + 1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.value = 0.0  # type: ignore[misc]
    assert otspec.block_optimum is block_optimum


def test_refusals():
    p, q = make_pair(0, 3, 1.0, False)
    with pytest.raises(UnsupportedMethodError):
        block_optimum(p, q, 2, method="simplex")
    with pytest.raises(ProblemTooLargeError, match="nonzeros"):
        block_optimum(p, q, 3, method="lp", memory_cap=50_000)
    big = models.dirichlet(262_144)
    with pytest.raises(ProblemTooLargeError, match="prefixes"):
        block_optimum(big, big, 2)
    with pytest.raises(otspec.errors.InvalidDraftCountError):
        block_optimum(p, q, 0)


# Regression: peaked V = 3 models on which the single HiGHS run ended with model
# status "unknown" or an uncertified plan (found by experiments/bench/bench_lp_robustness.py).
@pytest.mark.parametrize("seed,a,sparse,gamma", [(74, 0.3, False, 3), (10, 0.1, False, 3), (46, 0.1, False, 2), (27, 0.03, True, 3)])
def test_block_lp_certifies_on_peaked_models_that_defeated_one_highs_run(seed, a, sparse, gamma):
    p, q = make_pair(seed, 3, a, sparse)
    lp = block_optimum(p, q, gamma, method="lp")
    assert lp.ok, lp.checks
    assert abs(lp.value - block_optimum(p, q, gamma).value) <= lp.gap + LP_ATOL
