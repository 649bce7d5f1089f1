r"""The one certifier of :func:`~otspec.bounds.multidraft.optimal_acceptance`: every back end's
answer is re-checked here, in numpy, before it is returned.

Two kinds of answers reach it:

* a **cut** (:class:`CutAnswer`, the dual methods ``prefix`` and ``subsets``): a token set
  :math:`H` and its claimed value. The value of :math:`H`, :math:`P(H) + 1 - Q(H^k)`, is recomputed
  from the law's own ``prob_all_in`` (:func:`~otspec.bounds.cuts.cut_value`) and must equal the
  claim within twice the method's rounding bound (plus any method-specific check);
* a **plan** (:class:`~otspec.bounds.membership.PlanAnswer`, the tuple-level back ends): the
  plan is made exactly feasible (negatives clipped, rows scaled down where a tolerance was used),
  its objective recomputed (the lower bound), and an upper bound found by scanning threshold cuts of
  the solver's token scores (both directions, and the p/q order). The gap between the two is the
  certificate.

A failed check sets ``status="check_failed"``; it never passes silently.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from otspec._tolerances import CERTIFICATE_ATOL, ERROR_BOUND_MAX
from otspec.bounds.cuts import cut_value, prefix_cut_values_from_sets
from otspec.bounds.membership import PlanAnswer, membership_pairs
from otspec.bounds.result import (
    STATUS_CHECK_FAILED,
    STATUS_CONSTRAINED,
    STATUS_OPTIMAL,
    STATUS_SOLVER_FAILED,
    AcceptanceResult,
    MembershipPlan,
)
from otspec.laws import ratio_order

__all__ = ["CutAnswer", "certify"]


@dataclass(frozen=True, eq=False)
class CutAnswer:
    """A dual method's raw answer, before :func:`certify`.

    Attributes
    ----------
    method : str
        ``"prefix"`` or ``"subsets"``.
    value : float
        The claimed optimum :math:`1 + \\min_H [P(H) - Q(H^k)]`.
    cut : ndarray of int64
        The minimising token set :math:`H` (sorted ids).
    error_bound : float
        Bound on the rounding error of ``value``.
    checks : dict
        Extra method-specific differences that must vanish (e.g. a closed form minus the value).
    lower : float or None
        A certified lower bound on the optimum from the other side: the acceptance of a feasible
        coupling (a selection law checked to lie in the base polytope) or the closed leaves of a
        branch-and-bound; ``None`` when the method has none.
    lower_reason : str
        Why ``lower`` is ``None`` (empty otherwise).
    certificate : object or None
        A method's own certificate (``method="product"``: the tree of boxes).
    """

    method: str
    value: float
    cut: np.ndarray
    error_bound: float
    checks: dict = field(default_factory=dict)
    lower: float | None = None
    lower_reason: str = ""
    certificate: object = None


def certify(p: np.ndarray, law, answer: CutAnswer | PlanAnswer) -> AcceptanceResult:
    """Check a back end's answer and turn it into an :class:`AcceptanceResult` (module docstring).

    Parameters
    ----------
    p : ndarray, shape (V,)
        Target distribution.
    law : DraftLaw
        The draft law (it recomputes a cut's value; its ``q``, when it has one, adds the p/q order
        to a plan's cut scan).
    answer : CutAnswer or PlanAnswer
        What the back end returned.

    Returns
    -------
    AcceptanceResult
        The value, the cut, the status after the checks, the gap, the error bound, the checks and
        (for a plan) the repaired :class:`~otspec.bounds.result.MembershipPlan`.
    """
    if isinstance(answer, CutAnswer):
        return _certify_cut(p, law, answer)
    return _certify_plan(p, law, answer)


def _certify_cut(p: np.ndarray, law, a: CutAnswer) -> AcceptanceResult:
    err = a.error_bound
    upper = cut_value(p, law, a.cut)
    checks = {"cut_value_minus_value": upper - a.value, **a.checks}
    tol = CERTIFICATE_ATOL + 2 * err
    gap = None if a.lower is None else float(min(upper, 1.0) - a.lower)
    if gap is not None:
        checks["primal_dual_gap"] = gap
    status = STATUS_OPTIMAL if all(abs(v) <= tol for v in checks.values()) else STATUS_CHECK_FAILED
    if not err <= ERROR_BOUND_MAX:  # a check within 2 * err could not fail: the value is not certified
        status = STATUS_CHECK_FAILED
        checks["error_bound_above_max"] = float(err)
    return AcceptanceResult(
        value=min(a.value, 1.0),
        cut=a.cut,
        method=a.method,
        status=status,
        gap=gap,
        error_bound=err,
        plan=None,
        law=repr(law),
        checks=checks,
        lower_bound=a.lower,
        gap_reason=a.lower_reason if a.lower is None else "",
        certificate=a.certificate,
    )


def _repair(p: np.ndarray, weights: np.ndarray, pair_set: np.ndarray, pair_token: np.ndarray, w: np.ndarray):
    """Make a solver's w exactly feasible (clip, then scale rows down); return it and the worst
    violation that had to be removed."""
    violation = float(max(0.0, -w.min())) if w.size else 0.0
    w = np.maximum(w, 0.0)
    for rows, cap in ((pair_set, weights), (pair_token, p)):
        tot = np.bincount(rows, weights=w, minlength=cap.size)
        excess = tot - cap
        violation = max(violation, float(excess.max(initial=0.0)))
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            scale = np.where(tot > cap, cap / np.where(tot > 0, tot, 1.0), 1.0)
        w = w * scale[rows]
    return w, violation


def _certify_plan(p: np.ndarray, law, a: PlanAnswer) -> AcceptanceResult:
    sets, weights, constrained = a.sets, a.weights, a.constrained
    pair_set, pair_token, pair_slot = membership_pairs(sets)
    w, violation = _repair(p, weights, pair_set, pair_token, a.w)
    lower = float(w.sum())
    accept = np.zeros(sets.shape, dtype=np.float64)
    accept[pair_set, pair_slot] = w
    accepted_tok = np.bincount(pair_token, weights=w, minlength=p.size)
    leftover = p - accepted_tok
    mass = float(leftover.sum())
    residual = np.maximum(leftover, 0.0) / mass if mass > 0 else np.zeros_like(p)
    plan = MembershipPlan(sets=sets, set_weights=weights, accept=accept, residual=residual, value=lower)

    orders = [np.argsort(-a.token_duals, kind="stable"), np.argsort(a.token_duals, kind="stable")]
    if getattr(law, "q", None) is not None:
        orders.append(ratio_order(p, law.q))
    best_upper, best_cut = np.inf, np.zeros(0, dtype=np.int64)
    for order in orders:
        vals = prefix_cut_values_from_sets(p, sets, weights, order)
        i = int(np.argmin(vals))
        if vals[i] < best_upper:
            best_upper, best_cut = float(vals[i]), np.sort(order[:i])
    gap = best_upper - lower
    checks = {"plan_repair": violation, "primal_dual_gap": gap, "marginal_residual_min": float(min(leftover.min(), 0.0))}
    if constrained:
        checks["user_constraint_violation"] = a.constraint_violation
    if not a.ok:
        status = STATUS_SOLVER_FAILED
    elif constrained:
        feasible = a.constraint_violation <= CERTIFICATE_ATOL and violation <= CERTIFICATE_ATOL
        status = STATUS_CONSTRAINED if feasible else STATUS_CHECK_FAILED
    else:
        status = STATUS_OPTIMAL if (abs(gap) <= CERTIFICATE_ATOL and violation <= CERTIFICATE_ATOL) else STATUS_CHECK_FAILED
    return AcceptanceResult(
        value=lower,
        cut=best_cut if not constrained else np.zeros(0, dtype=np.int64),
        method=a.method,
        status=status,
        gap=float(gap) if not constrained else float("nan"),
        error_bound=float(max(gap, 0.0) + violation) if not constrained else float(violation),
        plan=plan,
        law=repr(law),
        checks=checks,
        solver_info=str(a.info),
        lower_bound=lower if not constrained else None,
        gap_reason="" if not constrained else "user constraints: the cut bounds the unconstrained problem only",
    )
