"""A HiGHS run that does not end optimal is never read as a solution.

HiGHS starts its thread pool once per process; a later run asking for another thread count returns
an error without solving (model status "Not Set", an all-zero solution vector). Every run is made to
fail that way here, and each front door that solves a HiGHS LP must say so: a result status
``"solver_failed"``, or, for the verifiers whose rule is an LP's solution, a
:class:`~otspec.bounds.result.SolverFailedWarning` and a lossless fall-back rule.
"""

from __future__ import annotations

import numpy as np
import pytest

import otspec
from otspec import block_optimum, models, optimal_acceptance, tree_optimum
from otspec.bounds.result import STATUS_SOLVER_FAILED, SolverFailedWarning
from otspec.verifiers.step.khisti import khisti, selection_weights
from otspec.verifiers.step.optimal_plan import optimal_plan

P = np.array([0.5, 0.3, 0.2])
Q = np.array([0.2, 0.3, 0.5])


@pytest.fixture
def failing_highs(monkeypatch):
    """Every HiGHS run returns an error without solving, as a run with a mismatched ``threads``
    option does; counts the runs."""
    import highspy

    calls = {"n": 0}

    def run(self):
        calls["n"] += 1
        return highspy.HighsStatus.kError

    monkeypatch.setattr(highspy.Highs, "run", run)
    return calls


def _law():
    """A fresh non-i.i.d. law (the verifiers cache their LP on the law object)."""
    return otspec.product([[0.2, 0.3, 0.5], [0.6, 0.3, 0.1]])


def test_khisti_selection_lp_failure_warns_and_stays_lossless(failing_highs):
    law = _law()
    with pytest.warns(SolverFailedWarning, match="khisti's selection LP"):
        sw = selection_weights(P, law)
    assert failing_highs["n"] == 1 and sw.status == STATUS_SOLVER_FAILED
    # uniform selection over each draft set's tokens, and the output law is still p
    np.testing.assert_allclose(sw.beta.sum(axis=1), 1.0, atol=1e-15)
    law2 = _law()
    with pytest.warns(SolverFailedWarning):
        K = khisti.kernel(P, law2)
    np.testing.assert_allclose(K.output_law(), P, atol=1e-12)


def test_optimal_plan_lp_failure_warns_and_stays_lossless(failing_highs):
    law = _law()
    with pytest.warns(SolverFailedWarning, match="optimal_plan's LP"):
        plan = optimal_plan.plan(P, law)
    assert plan.status == STATUS_SOLVER_FAILED and plan.value == 0.0
    with pytest.warns(SolverFailedWarning):
        K = optimal_plan.kernel(P, _law())
    np.testing.assert_allclose(K.output_law(), P, atol=1e-12)


@pytest.mark.parametrize(
    "solve",
    [
        pytest.param(lambda: optimal_acceptance(P, otspec.iid(Q, 2), method="lp"), id="membership-lp"),
        pytest.param(lambda: block_optimum(models.context_free(P), models.context_free(Q), 2, method="lp"), id="block-lp"),
        pytest.param(lambda: tree_optimum(models.context_free(P), models.context_free(Q), 2, 2, method="node"), id="tree-node"),
        pytest.param(lambda: tree_optimum(models.context_free(P), models.context_free(Q), 2, 2, method="trie"), id="tree-trie"),
    ],
)
def test_front_doors_report_a_failed_solve(failing_highs, solve):
    r = solve()
    assert failing_highs["n"] >= 1
    assert r.status == STATUS_SOLVER_FAILED and not r.ok
