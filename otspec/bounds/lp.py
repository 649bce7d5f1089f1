r"""Tuple-level exact solvers of the membership transport problem and their certificate.

The problem (:doc:`math`, the relaxed LP, relaxed form): with draft sets :math:`s` of probability
:math:`Q(s)` and variables :math:`w(s, y) \ge 0` for :math:`y \in s`,

.. math:: \max \sum_{s, y} w(s, y) \quad \text{s.t.} \quad
          \sum_{y \in s} w(s, y) \le Q(s), \qquad \sum_{s \ni y} w(s, y) \le p(y).

Any feasible :math:`w` extends to a full coupling by sending every set's leftover mass to one
common residual law, so its optimum is :math:`\alpha^*`. Three engines solve it:

* ``"lp"`` -- HiGHS through ``highspy``, built column-wise from numpy CSC arrays (every column has
  exactly two non-zeros: its set row and its token row), tolerances 1e-10;
* ``"cvxpy"`` -- the same LP through cvxpy (HiGHS backend), accepting extra user constraints;
* ``"flow"`` -- the two-marginal transport with cost :math:`1[y \notin s]` solved exactly by POT's
  network simplex (``ot.emd``), the fast path for moderately sized laws (dense: sets x tokens);
* ``"maxflow"`` -- the sparse max-flow source -> set -> its tokens -> sink on OR-Tools' integer
  ``SimpleMaxFlow`` (:mod:`otspec.bounds.maxflow`, optional extra), the fast path for large laws.

:func:`certify` re-checks every answer in numpy: the plan is made exactly feasible (negatives
clipped, rows scaled down where a tolerance was used), its objective recomputed, and an upper bound
found by scanning threshold cuts of the solver's token duals (and the p/q order). The gap between
the two is the certificate.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from otspec._tolerances import CERTIFICATE_ATOL, LP_FEASIBILITY_TOL
from otspec._validation import check_memory
from otspec.bounds.cuts import prefix_cut_values_from_sets
from otspec.bounds.highs import solve_colwise
from otspec.bounds.result import (
    STATUS_CHECK_FAILED,
    STATUS_CONSTRAINED,
    STATUS_OPTIMAL,
    STATUS_SOLVER_FAILED,
    AcceptanceResult,
    MembershipPlan,
)
from otspec.errors import InvalidOptionError, UnsupportedMethodError
from otspec.laws import ratio_order

__all__ = ["MembershipLP", "membership_pairs", "num_sets_bound", "solve_highs", "solve_cvxpy", "solve_flow", "certify", "estimate_bytes"]

#: Rough peak bytes per LP column (HiGHS model + factorisation + our arrays), and for cvxpy.
_BYTES_PER_COLUMN = {"lp": 400, "cvxpy": 2500}


def estimate_bytes(method: str, law) -> float:
    """Peak-memory estimate of a tuple-level solve, computed before anything is allocated.

    Parameters
    ----------
    method : {"lp", "cvxpy", "flow", "maxflow"}
        The tuple-level engine.
    law : DraftLaw
        The draft law (only ``num_tuples``, ``k``, ``V`` and ``q`` are read).

    Returns
    -------
    float
        Bytes: the enumeration plus the engine's model (per LP column, dense ``S x V`` transport, or
        sparse flow arcs).
    """
    M = float(law.num_tuples())
    enum = M * law.k * 24 * 3  # tuples, sorted copy, set grouping
    S = num_sets_bound(law)
    if method == "flow":
        return enum + 4 * 8 * S * law.V  # cost matrix, plan, POT internals (dense S x V)
    if method == "maxflow":
        from otspec.bounds.maxflow import BYTES_PER_ARC

        return enum + BYTES_PER_ARC * (S * (law.k + 1) + law.V)  # source, middle and sink arcs
    return enum + _BYTES_PER_COLUMN[method] * M * law.k


def num_sets_bound(law) -> float:
    r"""Upper bound on the number of distinct draft sets of ``law``: at most its number of tuples,
    and at most :math:`\sum_{j=1}^{k} \binom{n}{j}` sets of at most k of its n possible tokens.

    Parameters
    ----------
    law : DraftLaw
        The draft law (``n`` is the support size of ``law.q`` when it has one, else ``V``).

    Returns
    -------
    float
        The bound (a float: it may exceed the int64 range).
    """
    M = float(law.num_tuples())
    q = getattr(law, "q", None)
    n = int(np.count_nonzero(q)) if q is not None else law.V
    subsets, term = 0.0, 1.0
    for j in range(1, law.k + 1):
        term = term * (n - j + 1) / j
        subsets += term
        if subsets >= M:
            return M
    return min(M, subsets)


def membership_pairs(sets: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Flatten draft sets into LP columns: ``(pair_set, pair_token, pair_slot)``.

    Parameters
    ----------
    sets : ndarray of int, shape (S, k)
        Draft sets, ``-1`` padded.

    Returns
    -------
    pair_set, pair_token, pair_slot : ndarray of int64, shape (n,)
        For each LP column (one per set member), its set, its token and its position in the row.
    """
    valid = sets >= 0
    pair_set, pair_slot = np.nonzero(valid)
    return pair_set.astype(np.int64), sets[pair_set, pair_slot].astype(np.int64), pair_slot.astype(np.int64)


@dataclass(frozen=True, eq=False)
class MembershipLP:
    """What a user constraint sees in ``optimal_acceptance(..., method="cvxpy", constraints=f)``.

    ``w`` is the cvxpy variable (one entry per pair ``(set, token in set)``); ``pair_set`` and
    ``pair_token`` say which pair each entry is; ``sets``/``set_weights`` the draft sets.

    Examples of ``f(lp)``: ``[lp.accepted(7) == 0]`` forbids accepting token 7;
    ``[lp.residual_probability <= 0.2]`` caps the probability of a residual draw.

    Attributes
    ----------
    w : cvxpy.Variable
        Shape ``(n,)``, non-negative: :math:`w(s, y)` per pair.
    pair_set, pair_token : ndarray of int64, shape (n,)
        The set and the token of each entry of ``w``.
    sets : ndarray of int64, shape (S, k)
        The draft sets, ``-1`` padded.
    set_weights : ndarray, shape (S,)
        :math:`Q(s)`.
    p : ndarray, shape (V,)
        The target.
    """

    w: Any
    pair_set: np.ndarray
    pair_token: np.ndarray
    sets: np.ndarray
    set_weights: np.ndarray
    p: np.ndarray

    def accepted(self, token: int):
        """cvxpy expression: probability that ``token`` is output and was drafted.

        Parameters
        ----------
        token : int
            Token id.

        Returns
        -------
        cvxpy.Expression
            :math:`\\sum_{s \\ni y} w(s, y)` (the constant 0 when no set holds the token).
        """
        import cvxpy as cp

        idx = np.flatnonzero(self.pair_token == int(token))
        return cp.sum(self.w[idx]) if idx.size else cp.Constant(0.0)

    @property
    def acceptance(self):
        """cvxpy expression: the acceptance probability :math:`\\sum w`."""
        import cvxpy as cp

        return cp.sum(self.w)

    @property
    def residual_probability(self):
        """cvxpy expression: probability that the output is drawn from the residual."""
        return 1.0 - self.acceptance


def solve_highs(p: np.ndarray, sets: np.ndarray, weights: np.ndarray):
    """Solve the membership LP with HiGHS (interior point and crossover).

    Parameters
    ----------
    p : ndarray, shape (V,)
        Target distribution (the token rows' capacities).
    sets : ndarray of int, shape (S, k)
        Draft sets, ``-1`` padded.
    weights : ndarray, shape (S,)
        :math:`Q(s)` (the set rows' capacities).

    Returns
    -------
    w : ndarray, shape (n,)
        :math:`w(s, y)` per :func:`membership_pairs` column (zeros if the solve failed).
    token_duals : ndarray, shape (V,)
        Absolute duals of the token rows (they order the cuts :func:`certify` scans).
    ok : bool
        Whether HiGHS reports an optimal model.
    info : str
        HiGHS' model-status message.
    """
    pair_set, pair_token, _ = membership_pairs(sets)
    S, V, n = sets.shape[0], p.shape[0], pair_set.size
    idx = np.empty(2 * n, dtype=np.int32)
    idx[0::2] = pair_set
    idx[1::2] = S + pair_token
    # Interior point + crossover beat dual simplex by ~1.4-2x and primal simplex by ~3x on these
    # bipartite membership LPs up to ~1e5 columns (90 000 columns: 5.4 s vs 7.5 s vs 16 s on the
    # project machine); at 1e6 columns dual simplex was faster (377 s vs 522 s). For large laws
    # method="flow" (network simplex) is the fast exact path anyway.
    h, ok, info = solve_colwise(
        cost=np.ones(n),
        row_lower=np.full(S + V, -np.inf),
        row_upper=np.concatenate([weights, p]),
        start=np.arange(0, 2 * n + 1, 2, dtype=np.int32),
        index=idx,
        value=np.ones(2 * n),
        options={"solver": "ipm"},
    )
    sol = h.getSolution()
    w = np.asarray(sol.col_value, dtype=np.float64) if ok else np.zeros(n)
    duals = np.abs(np.asarray(sol.row_dual, dtype=np.float64)[S:]) if ok else np.zeros(V)
    return w, duals, ok, info


def solve_cvxpy(p: np.ndarray, sets: np.ndarray, weights: np.ndarray, constraints: Callable | None = None, solver: str | None = None):
    """Solve the membership LP through cvxpy, with optional extra constraints.

    Parameters
    ----------
    p : ndarray, shape (V,)
        Target distribution.
    sets : ndarray of int, shape (S, k)
        Draft sets, ``-1`` padded.
    weights : ndarray, shape (S,)
        :math:`Q(s)`.
    constraints : callable, optional
        ``constraints(lp)`` with ``lp`` a :class:`MembershipLP`; returns a cvxpy constraint or a
        list of them.
    solver : str, optional
        cvxpy solver name (default HiGHS when installed, with the shared tolerances).

    Returns
    -------
    w : ndarray, shape (n,)
        The solution per pair (zeros on failure).
    token_duals : ndarray, shape (V,)
        Absolute duals of the token rows.
    ok : bool
        Whether cvxpy reports ``optimal``.
    info : str
        cvxpy's status (or the solver error).
    violation : float
        Largest violation of the user's constraints at the returned point (0 without constraints,
        inf on failure).

    Raises
    ------
    InvalidOptionError
        If ``constraints`` returns something other than cvxpy constraints.
    """
    import cvxpy as cp
    import scipy.sparse as sp

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
        return np.zeros(n), np.zeros(V), False, f"cvxpy solver error: {exc}", np.inf
    ok = prob.status == cp.OPTIMAL and w.value is not None
    wv = np.asarray(w.value, dtype=np.float64) if ok else np.zeros(n)
    dv = base[1].dual_value
    duals = np.abs(np.asarray(dv, dtype=np.float64)) if (ok and dv is not None) else np.zeros(V)
    violation = max([float(np.max(c.violation())) for c in extra] or [0.0]) if ok else np.inf
    return wv, duals, ok, str(prob.status), violation


def solve_flow(p: np.ndarray, sets: np.ndarray, weights: np.ndarray):
    """Exact transport with POT's network simplex; returns ``(w, token_duals, ok, info)``.

    The dense transport from sets to tokens with cost :math:`1[y \\notin s]`; its optimum sends
    :math:`\\alpha^*` at cost 0.

    Parameters
    ----------
    p : ndarray, shape (V,)
        Target distribution (rescaled to the sets' total, as POT demands equal masses).
    sets : ndarray of int, shape (S, k)
        Draft sets, ``-1`` padded.
    weights : ndarray, shape (S,)
        :math:`Q(s)`.

    Returns
    -------
    w : ndarray, shape (n,)
        The plan's mass on each member pair (zeros on failure).
    token_duals : ndarray, shape (V,)
        POT's token potentials.
    ok : bool
        True when POT's result code is optimal and it issued no warning.
    info : str
        POT's warning, or ``"optimal"``.
    """
    import ot

    S, V = sets.shape[0], p.shape[0]
    pair_set, pair_token, _ = membership_pairs(sets)
    cost = np.ones((S, V))
    cost[pair_set, pair_token] = 0.0
    # numItermax: POT's default (1e5) silently returns a non-optimal plan on large instances
    # (docs/benchmarks.rst, tooling measurements); network simplex needs O(nodes * arcs) pivots at worst.
    iters = int(max(10 * S * V, 10_000_000))
    b = p / p.sum() * weights.sum()  # POT demands equal totals bit-for-bit; both are 1 +- 1e-9
    G, log = ot.emd(weights, b, cost, numItermax=iters, log=True)
    ok = log.get("result_code", 0) == 1 and not log.get("warning")
    w = G[pair_set, pair_token] if ok else np.zeros(pair_set.size)
    v = np.asarray(log.get("v", np.zeros(V)), dtype=np.float64)
    return w, v, ok, str(log.get("warning") or "optimal")


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


def certify(
    p: np.ndarray,
    law,
    sets: np.ndarray,
    weights: np.ndarray,
    w: np.ndarray,
    token_duals: np.ndarray,
    solver_ok: bool,
    method: str,
    info: str,
    constrained: bool = False,
    constraint_violation: float = 0.0,
) -> AcceptanceResult:
    """Turn a solver's answer into a checked :class:`AcceptanceResult` (see module docstring).

    Parameters
    ----------
    p : ndarray, shape (V,)
        Target distribution.
    law : DraftLaw
        The draft law (its ``q``, when it has one, adds the p/q order to the cut scan).
    sets : ndarray of int, shape (S, k)
        Draft sets, ``-1`` padded.
    weights : ndarray, shape (S,)
        :math:`Q(s)`.
    w : ndarray, shape (n,)
        The solver's pair values (made exactly feasible here).
    token_duals : ndarray, shape (V,)
        The solver's token duals (their threshold cuts give the upper bound).
    solver_ok : bool
        Whether the solver reported optimality.
    method : str
        Recorded in the result.
    info : str
        The solver's message, kept as ``solver_info``.
    constrained : bool
        Solved with user constraints: the cut bound does not apply, status is
        ``"optimal_constrained"`` when feasible.
    constraint_violation : float
        Largest violation of the user's constraints.

    Returns
    -------
    AcceptanceResult
        Value of the repaired plan, best cut, gap, error bound, checks and the
        :class:`MembershipPlan`.
    """
    pair_set, pair_token, pair_slot = membership_pairs(sets)
    w, violation = _repair(p, weights, pair_set, pair_token, w)
    lower = float(w.sum())
    accept = np.zeros(sets.shape, dtype=np.float64)
    accept[pair_set, pair_slot] = w
    accepted_tok = np.bincount(pair_token, weights=w, minlength=p.size)
    leftover = p - accepted_tok
    mass = float(leftover.sum())
    residual = np.maximum(leftover, 0.0) / mass if mass > 0 else np.zeros_like(p)
    plan = MembershipPlan(sets=sets, set_weights=weights, accept=accept, residual=residual, value=lower)

    orders = [np.argsort(-token_duals, kind="stable"), np.argsort(token_duals, kind="stable")]
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
        checks["user_constraint_violation"] = constraint_violation
    if not solver_ok:
        status = STATUS_SOLVER_FAILED
    elif constrained:
        status = STATUS_CONSTRAINED if constraint_violation <= CERTIFICATE_ATOL and violation <= CERTIFICATE_ATOL else STATUS_CHECK_FAILED
    else:
        status = STATUS_OPTIMAL if (abs(gap) <= CERTIFICATE_ATOL and violation <= CERTIFICATE_ATOL) else STATUS_CHECK_FAILED
    value = lower
    return AcceptanceResult(
        value=value,
        cut=best_cut if not constrained else np.zeros(0, dtype=np.int64),
        method=method,
        status=status,
        gap=float(gap) if not constrained else float("nan"),
        error_bound=float(max(gap, 0.0) + violation) if not constrained else float(violation),
        plan=plan,
        law=repr(law),
        checks=checks,
        solver_info=str(info),
    )


def solve_tuple_level(p: np.ndarray, law, method: str, memory_cap: float | None, constraints: Callable | None) -> AcceptanceResult:
    """Enumerate the law's draft sets and solve with ``method`` in {"lp", "cvxpy", "flow", "maxflow"}."""
    if constraints is not None and method != "cvxpy":
        raise UnsupportedMethodError(f"constraints are only supported with method='cvxpy' (got method={method!r}); pass method='cvxpy'")
    if method == "maxflow":
        from otspec.bounds.maxflow import require_ortools

        require_ortools()  # the install hint before any sizing or enumeration work
    check_memory(
        estimate_bytes(method, law),
        memory_cap,
        f"method={method!r} on {law!r} ({law.num_tuples():,} draft tuples)",
        "use method='prefix' for iid/without_replacement/greedy laws, a smaller V or k, or raise memory_cap",
    )
    sets, weights = law.enumerate_sets(memory_cap=memory_cap)
    if method == "maxflow":
        from otspec.bounds.maxflow import solve_maxflow

        w, cut_indicator, ok, info = solve_maxflow(p, sets, weights)
        return certify(p, law, sets, weights, w, cut_indicator, ok, "maxflow", info)
    if method == "lp":
        w, duals, ok, info = solve_highs(p, sets, weights)
        return certify(p, law, sets, weights, w, duals, ok, "lp", info)
    if method == "flow":
        w, duals, ok, info = solve_flow(p, sets, weights)
        return certify(p, law, sets, weights, w, duals, ok, "flow", info)
    w, duals, ok, info, viol = solve_cvxpy(p, sets, weights, constraints)
    return certify(p, law, sets, weights, w, duals, ok, "cvxpy", info, constrained=constraints is not None, constraint_violation=viol)
