"""Back end ``method="cvxpy"``: the membership LP (:mod:`otspec.bounds.membership`) through
cvxpy (HiGHS when installed, with the shared tolerances), with optional user constraints written on
a :class:`~otspec.bounds.membership.MembershipLP`. cvxpy is imported when this method runs."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from otspec._docs import fill_doc
from otspec._tolerances import LP_FEASIBILITY_TOL
from otspec.bounds.membership import MembershipLP, PlanAnswer, membership_pairs
from otspec.errors import InvalidOptionError

__all__ = ["solve"]


@fill_doc
def solve(
    p: np.ndarray, sets: np.ndarray, weights: np.ndarray, constraints: Callable | None = None, solver: str | None = None
) -> PlanAnswer:
    """Solve the membership LP through cvxpy, with optional extra constraints.

    Parameters
    ----------
    {backend_args}
    constraints : callable, optional
        ``constraints(lp)`` with ``lp`` a :class:`~otspec.bounds.membership.MembershipLP`; returns
        a cvxpy constraint or a list of them.
    solver : str, optional
        cvxpy solver name (default HiGHS when installed, with the shared tolerances).

    Returns
    -------
    PlanAnswer
        The solution per pair (zeros on failure), the absolute duals of the token rows, whether
        cvxpy reports ``optimal``, its status (or the solver error), ``constrained`` and the
        largest violation of the user's constraints at the returned point (0 without
        constraints, inf on failure).

    Raises
    ------
    InvalidOptionError
        If ``constraints`` returns something other than cvxpy constraints.
    """
    import cvxpy as cp
    import scipy.sparse as sp

    constrained = constraints is not None
    pair_set, pair_token, _ = membership_pairs(sets)
    S, V, n = sets.shape[0], p.shape[0], pair_set.size
    w = cp.Variable(n, nonneg=True)
    A_set = sp.csr_matrix((np.ones(n), (pair_set, np.arange(n))), shape=(S, n))
    A_tok = sp.csr_matrix((np.ones(n), (pair_token, np.arange(n))), shape=(V, n))
    base = [A_set @ w <= weights, A_tok @ w <= p]
    extra: list = []
    if constraints is not None:
        model = MembershipLP(w=w, pair_set=pair_set, pair_token=pair_token, sets=sets, set_weights=weights, p=p)
        got = constraints(model)
        extra = list(got) if isinstance(got, (list, tuple)) else ([got] if got is not None else [])
        bad = [c for c in extra if not isinstance(c, cp.constraints.constraint.Constraint)]
        if bad:
            raise InvalidOptionError(
                f"constraints must return a list of cvxpy constraints (got {type(bad[0]).__name__}: {bad[0]!r:.60}); "
                "build them from lp.w, e.g. [lp.w[0] <= 0.1]"
            )
    prob = cp.Problem(cp.Maximize(cp.sum(w)), base + extra)
    chosen = solver or ("HIGHS" if "HIGHS" in cp.installed_solvers() else None)
    kwargs = {}
    if chosen == "HIGHS":
        kwargs = {"primal_feasibility_tolerance": LP_FEASIBILITY_TOL, "dual_feasibility_tolerance": LP_FEASIBILITY_TOL}
    try:
        prob.solve(solver=chosen, **kwargs)
    except cp.error.SolverError as exc:
        return PlanAnswer("cvxpy", sets, weights, np.zeros(n), np.zeros(V), False, f"cvxpy solver error: {exc}", constrained, np.inf)
    ok = prob.status == cp.OPTIMAL and w.value is not None
    wv = np.asarray(w.value, dtype=np.float64) if ok else np.zeros(n)
    dv = base[1].dual_value
    duals = np.abs(np.asarray(dv, dtype=np.float64)) if (ok and dv is not None) else np.zeros(V)
    violation = max([float(np.max(c.violation())) for c in extra] or [0.0]) if ok else np.inf
    return PlanAnswer("cvxpy", sets, weights, wv, duals, ok, str(prob.status), constrained, violation)
