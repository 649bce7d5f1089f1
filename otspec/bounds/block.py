r"""The block optimum: the largest :math:`E[\tau]` of any lossless one-iteration chain verifier.

For a drafted block :math:`X^\gamma \sim M_s` and a target :math:`M_b`, any verifier that emits
:math:`O = (X^\tau, Y)` and is lossless in the "as-is" speculative loop satisfies (:doc:`block`, the block optimum)
:math:`P(\tau \ge i, X^i = x^i) \le W(x^i)` with

.. math:: W(\emptyset) = 1, \qquad W(x^i) = \min\{W(x^{i-1})\, M_b(x_i \mid x^{i-1}),\ M_s(x^i)\},

so :math:`E[\tau] \le \sum_{i=1}^{\gamma} \sum_{x^i} W(x^i)`, and block verification attains it.
:func:`block_optimum` computes this value two ways: the closed form, and (``method="lp"``) the
full-information block LP over couplings :math:`\pi(x^\gamma, \tau, y)` (:doc:`block`, the block optimum),
solved by HiGHS and re-checked in plain numpy. It also reports the *naive* joint-coupling bound
:math:`\sum_i (1 - d_{TV}(M_b^{(i)}, M_s^{(i)}))`, which is not achievable: emitting the prefix of a
maximally coupled target block breaks the stream law (:doc:`block`, the block optimum, the toy gives 12/9 vs 11/9).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from otspec import prefixes
from otspec._tolerances import (
    CERTIFICATE_ATOL,
    DUAL_BOUND_SLACK,
    HIGHS_SMALL_MATRIX_VALUE,
    LP_MAX_ROW_SCALE,
    POLISH_NEGATIVE_ATOL,
    POLISH_RESIDUAL_SLACK,
    ROUNDING_PER_TERM,
)
from otspec._validation import as_int_in_range
from otspec.bounds.highs import basic_masks, model_status_code, solve_colwise
from otspec.bounds.result import STATUS_CHECK_FAILED, STATUS_OPTIMAL, STATUS_SOLVER_FAILED, BlockPlan
from otspec.bounds.sizing import check_path_lp
from otspec.errors import UnsupportedMethodError

__all__ = [
    "BlockOptimumResult",
    "block_optimum",
    "joint_coupling_bound",
    "solve_path_lp",
    "METHODS",
]

METHODS = ("closed_form", "lp")


@dataclass(frozen=True, eq=False)
class BlockOptimumResult:
    r"""The optimal expected number of accepted draft tokens of a block (or tree) problem.

    Attributes
    ----------
    value : float
        :math:`\max E[\tau]` over lossless one-iteration verifiers.
    method : str
        ``"closed_form"`` or ``"lp"``.
    status : str
        ``"optimal"``; ``"check_failed"`` or ``"solver_failed"`` when the value must not be trusted.
    joint_coupling_bound : float
        :math:`\sum_{i=1}^{\gamma} \sum_{x^i} \min\{M_s(x^i), M_b(x^i)\}` (not achievable).
    gamma, V, k : int
        Block length, vocabulary size, number of drafts (1 for a single chain).
    gap : float
        The certified duality gap: the dual bound re-computed in numpy minus the primal objective
        (LP only; 0 for the closed form). The same meaning as :attr:`otspec.AcceptanceResult.gap`.
    error_bound : float
        Bound on the numerical error of ``value``.
    checks : mapping
        Residual of every plain-numpy re-check (name -> float).
    plan : BlockPlan or None
        The LP's optimal coupling :math:`\pi(o, t, n, y)` with its column labels (a
        :class:`~otspec.TransportPlan`, like :attr:`otspec.AcceptanceResult.plan`); LP only.
    solver_info : str
        HiGHS' model status (LP only; empty for the closed form).
    """

    value: float
    method: str
    status: str
    joint_coupling_bound: float
    gamma: int
    V: int
    k: int = 1
    gap: float = 0.0
    error_bound: float = 0.0
    checks: Mapping[str, float] = field(default_factory=dict)
    plan: BlockPlan | None = None
    solver_info: str = ""

    @property
    def ok(self) -> bool:
        """True when the value can be trusted (status ``"optimal"``)."""
        return self.status == STATUS_OPTIMAL

    @property
    def block_efficiency(self) -> float:
        """:math:`E[\\tau] + 1`, tokens emitted per target call."""
        return self.value + 1.0

    def __repr__(self) -> str:
        return (
            f"BlockOptimumResult(value={self.value:.12g}, method={self.method!r}, status={self.status!r}, "
            f"joint_coupling_bound={self.joint_coupling_bound:.12g}, gamma={self.gamma}, V={self.V}, k={self.k}, gap={self.gap:.2e})"
        )

    def _repr_html_(self) -> str:
        """The result as an HTML table (Jupyter shows it in place of the ``repr``)."""
        from otspec._display import fields_table

        fields = [("E[tau] (value)", f"{self.value:.12g}"), ("block efficiency", f"{self.block_efficiency:.12g}")]
        fields += [("method", self.method), ("status", self.status), ("joint coupling bound", f"{self.joint_coupling_bound:.12g}")]
        fields += [
            ("gamma", self.gamma),
            ("V", self.V),
            ("k", self.k),
            ("gap", f"{self.gap:.2e}"),
            ("error bound", f"{self.error_bound:.2e}"),
        ]
        return fields_table("BlockOptimumResult", fields)

    def to_dict(self) -> dict:
        """JSON-ready summary (the plan is left out, as in :meth:`otspec.AcceptanceResult.to_dict`).

        Returns
        -------
        dict
            Every field but the plan, plus ``block_efficiency``, as plain Python types.
        """
        return {
            "value": float(self.value),
            "block_efficiency": float(self.value + 1.0),
            "method": self.method,
            "status": self.status,
            "joint_coupling_bound": float(self.joint_coupling_bound),
            "gamma": self.gamma,
            "V": self.V,
            "k": self.k,
            "gap": float(self.gap),
            "error_bound": float(self.error_bound),
            "checks": {k: float(v) for k, v in self.checks.items()},
            "solver_info": self.solver_info,
        }


# ------------------------------------------------------------------------------------------------
def _joint_coupling(table: prefixes.PrefixTable) -> float:
    return float(sum(np.minimum(table.p_joint[i], table.q_joint[i]).sum() for i in range(1, table.gamma + 1)))


def joint_coupling_bound(p_model: Any, q_model: Any, gamma: int, *, memory_cap: float | None = None) -> float:
    r"""The naive joint-coupling bound :math:`\sum_{i=1}^{\gamma} (1 - d_{TV}(M_b^{(i)}, M_s^{(i)}))`.

    .. math:: \sum_{i=1}^{\gamma} \sum_{x^i} \min\{M_s(x^i), M_b(x^i)\} \;\ge\; \sum_i \sum_{x^i} W(x^i).

    It is an upper bound on the block optimum but is **not achievable** by a lossless verifier in
    the as-is loop: emitting the accepted prefix of a maximally coupled target block changes the law
    of the decoded stream (:doc:`block`, the block optimum; in Sun et al.'s toy it is 12/9 against the optimum 11/9).

    Parameters
    ----------
    p_model, q_model : Model or callable
        Target :math:`M_b` and draft :math:`M_s` models (:mod:`otspec.models`).
    gamma : int
        Draft block length.
    memory_cap : float, optional
        Bytes for the prefix enumeration; ``None``: the library default.

    Returns
    -------
    float
        The bound, in ``[0, gamma]``.

    Raises
    ------
    ProblemTooLargeError
        If the enumeration exceeds its cap or ``memory_cap``.
    NotAnIntegerError, InvalidDraftCountError
        If ``gamma`` is not an integer ``>= 1``.

    Examples
    --------
    >>> from otspec import models
    >>> from otspec.bounds.block import joint_coupling_bound
    >>> p, q = models.context_free([1/3, 2/3]), models.context_free([2/3, 1/3])
    >>> round(joint_coupling_bound(p, q, 2) * 9, 9)
    12.0
    """
    return _joint_coupling(prefixes.enumerate_prefixes(p_model, q_model, gamma, memory_cap=memory_cap))


def _suffix_tables(table: prefixes.PrefixTable) -> list:
    """S[d]: (V**d, V**(gamma+1-d)) target probabilities of every continuation to length gamma + 1."""
    V, g = table.V, table.gamma
    S = [None] * (g + 2)
    S[g + 1] = np.ones((V ** (g + 1), 1))
    for d in range(g, -1, -1):
        S[d] = (table.p_cond[d][:, :, None] * S[d + 1].reshape(V**d, V, -1)).reshape(V**d, -1)
    return S


def _polish(A, b: np.ndarray, c: np.ndarray, highs):
    """Re-solve the final simplex basis in float64 (LU of the basis matrix): exact basic primal and
    dual solutions instead of HiGHS' tolerance-level ones. Returns ``(x, y)`` or None."""
    import scipy.sparse as sp
    from scipy.sparse.linalg import splu

    try:
        cols, rows = basic_masks(highs)
        nrow = A.shape[0]
        if cols.sum() + rows.sum() != nrow:
            return None
        slack = sp.csc_matrix(
            (-np.ones(int(rows.sum())), (np.flatnonzero(rows), np.arange(int(rows.sum())))), shape=(nrow, int(rows.sum()))
        )
        M = sp.hstack([A[:, np.flatnonzero(cols)], slack], format="csc")
        lu = splu(M)
        rhs = np.where(rows, 0.0, b)
        z = lu.solve(rhs)
        x = np.zeros(A.shape[1])
        x[cols] = z[: int(cols.sum())]
        cost = np.concatenate([c[cols], np.zeros(int(rows.sum()))])
        y = lu.solve(cost, trans="T")
        if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
            return None
        return x, y
    except Exception:  # singular or odd basis: keep HiGHS' solution (the certificate still runs)
        return None


#: HiGHS option sets tried in turn by the block / tree LP until one gives a certified answer.
_HIGHS_LADDER = (
    {},
    {"solver": "ipm", "run_crossover": "on"},
    {"solver": "simplex", "simplex_strategy": 4, "presolve": "off"},
    {"solver": "simplex", "simplex_strategy": 1, "presolve": "off", "simplex_scale_strategy": 0},
)


@dataclass(frozen=True, eq=False)
class _PathLP:
    """The path / tree LP in original units, column-wise, with each column's labels and scale.

    Rows: the ``n_out`` draft rows, then one target row per :math:`z \\in \\Omega^{\\gamma+1}`.
    ``col_scale[j]`` is :math:`M_b(z^{t+1})` of column j's emitted block (the column's upper bound
    in every feasible plan)."""

    start: np.ndarray
    index: np.ndarray
    value: np.ndarray
    b: np.ndarray  # right-hand side: Q(o) for the draft rows, M_b(z) for the target rows
    tau: np.ndarray  # objective: the accepted length t of each column
    col_scale: np.ndarray
    labels: dict  # outcome, tau, node, y per column
    n_out: int

    @property
    def shape(self) -> tuple[int, int]:
        return self.b.size, self.tau.size


def _build(table: prefixes.PrefixTable, weights: np.ndarray, nodes: Sequence[Sequence[np.ndarray]]) -> _PathLP:
    """The columns :math:`\\pi(o, t, n, y)` depth by depth, in compressed sparse column form."""
    V, g = table.V, table.gamma
    n_out = len(weights)
    S = _suffix_tables(table)
    target = S[0].reshape(-1)  # M_b(z) for every z in Omega^{gamma+1}
    starts, indices, values, lab_o, lab_t, lab_n, lab_y, mb_parts = [], [], [], [], [], [], [], []
    offset = 0
    for t in range(g + 1):
        o_ids = np.concatenate([np.full(len(nodes[o][t]), o, dtype=np.int64) for o in range(n_out)])
        n_ids = np.concatenate([np.asarray(nodes[o][t], dtype=np.int64) for o in range(n_out)])
        if o_ids.size == 0:
            continue
        o_ids = np.repeat(o_ids, V)
        n_ids = np.repeat(n_ids, V)
        y_ids = np.tile(np.arange(V, dtype=np.int64), o_ids.size // V)
        m = n_ids * V + y_ids  # node of the emitted block z^{t+1}
        # An emitted block of target probability 0 would put extended mass on sequences the target
        # never produces: such columns are 0 in every feasible plan, so they are not built (this
        # also keeps HiGHS' presolve away from rows whose right-hand side is exactly 0).
        ok = table.p_joint[t][n_ids] * table.p_cond[t][n_ids, y_ids] > 0
        o_ids, n_ids, y_ids, m = o_ids[ok], n_ids[ok], y_ids[ok], m[ok]
        if m.size == 0:
            continue
        L = V ** (g - t)
        idx = np.empty((m.size, 1 + L), dtype=np.int64)
        val = np.empty((m.size, 1 + L))
        idx[:, 0] = o_ids
        idx[:, 1:] = n_out + m[:, None] * L + np.arange(L)[None, :]
        val[:, 0] = 1.0
        val[:, 1:] = S[t + 1][m]
        nz = val != 0.0
        counts = nz.sum(axis=1)
        indices.append(idx[nz])
        values.append(val[nz])
        starts.append(offset + np.concatenate([[0], np.cumsum(counts)[:-1]]))
        offset += int(counts.sum())
        mb_parts.append(table.p_joint[t][n_ids] * table.p_cond[t][n_ids, y_ids])
        lab_o.append(o_ids), lab_t.append(np.full(m.size, t, dtype=np.int64)), lab_n.append(n_ids), lab_y.append(y_ids)
    return _PathLP(
        start=np.concatenate(starts + [np.array([offset], dtype=np.int64)]),
        index=np.concatenate(indices),
        value=np.concatenate(values),
        b=np.concatenate([np.asarray(weights, dtype=np.float64), target]),
        tau=np.concatenate(lab_t).astype(np.float64),
        col_scale=np.concatenate(mb_parts),
        labels={"outcome": np.concatenate(lab_o), "tau": np.concatenate(lab_t), "node": np.concatenate(lab_n), "y": np.concatenate(lab_y)},
        n_out=n_out,
    )


def _scaling(lp: _PathLP) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Diagonal scaling for HiGHS: ``(scaled entries, row scale, scaled right-hand side)``.

    HiGHS' tolerances and its small-matrix-value cut are absolute, and it refuses entries above
    1e15: the column of an emitted block :math:`z^{t+1}` is measured in units of
    :math:`M_b(z^{t+1})`; every target row is divided by :math:`M_b(z)`, so it reads
    :math:`\\sum u = 1` with unit entries; every draft row by its right-hand side Q(o). The
    certificate is computed in the original units. Peaky models (conditionals ~1e-9 and below) can
    still defeat the solver: that shows as status "solver_failed"/"check_failed", never as a
    silently wrong value."""
    n_out, index, col_scale = lp.n_out, lp.index, lp.col_scale
    target = lp.b[n_out:]
    col_of = np.repeat(np.arange(lp.tau.size), np.diff(lp.start))
    draft_entry = index < n_out
    scaled_draft = col_scale[col_of[draft_entry]]
    row_max = np.zeros(n_out)  # becomes the draft rows' divisor
    np.maximum.at(row_max, index[draft_entry], scaled_draft)
    row_max[row_max == 0] = 1.0
    # divide each draft row by its right-hand side Q(o) (rhs 1, like the target rows), unless that
    # makes entries larger than 1e9 (HiGHS refuses entries above 1e15 and loses accuracy well before)
    row_max = np.maximum(lp.b[:n_out], row_max * LP_MAX_ROW_SCALE)
    value_s = np.ones(index.size)
    # target-row entries: M_b(z_{t+2..} | z^{t+1}) M_b(z^{t+1}) / M_b(z) = 1 exactly (not computed
    # as a product of scales, which could overflow near the float64 floor)
    value_s[draft_entry] = scaled_draft / row_max[index[draft_entry]]
    row_scale = np.concatenate([1.0 / row_max, np.where(target > 0, 1.0 / np.where(target > 0, target, 1.0), 1.0)])
    rhs = np.concatenate([lp.b[:n_out] / row_max, (target > 0).astype(np.float64)])
    return value_s, row_scale, rhs


def _dual_bound(lp: _PathLP, A, duals: list, primal: float) -> tuple[float, float]:
    """``(dual infeasibility term, bound)`` of the smallest rigorous upper bound among ``duals``.

    Dual of max c.x, Ax = b, x >= 0 is min b.y, A^T y >= c. Every feasible plan has
    x_j <= M_b(z^{t+1}) = col_scale_j (sum the target rows of column j's block), so for ANY y
        optimum <= b.y + sum_j col_scale_j * max(0, c_j - (A^T y)_j),
    a rigorous upper bound even when y is slightly infeasible. We try HiGHS' row duals (either
    sign: its convention for a maximisation is not ours to rely on) and the polished basis duals,
    and keep the smallest bound. A bound below the value of our (feasible to rounding) plan can only
    come from a numerically meaningless y (huge multipliers times rounding): such candidates are
    skipped."""
    best = None
    for yv in duals:
        slack = float(lp.col_scale @ np.maximum(lp.tau - A.T @ yv, 0.0))
        bound = float(lp.b @ yv) + slack
        if bound < primal - DUAL_BOUND_SLACK:
            continue
        if best is None or bound < best[1]:
            best = (slack, bound)
    return best if best is not None else (float("inf"), float("inf"))


def _attempt(lp: _PathLP, scaled: tuple, table: prefixes.PrefixTable, k: int, options: dict) -> BlockOptimumResult:
    """One HiGHS run with ``options`` and the float64 basis polish, then the certificate
    (:func:`_certified`)."""
    value_s, row_scale, rhs = scaled
    tau, b, col_scale = lp.tau, lp.b, lp.col_scale
    nrow, ncol = lp.shape
    # Entries below small_matrix_value are dropped by HiGHS (default 1e-9): keep them.
    h, ok, info = solve_colwise(
        cost=tau * col_scale,
        row_lower=rhs,
        row_upper=rhs,
        start=lp.start,
        index=lp.index,
        value=value_s,
        options={"small_matrix_value": HIGHS_SMALL_MATRIX_VALUE, **options},
    )
    if not ok:
        return BlockOptimumResult(
            value=float("nan"),
            method="lp",
            status=STATUS_SOLVER_FAILED,
            joint_coupling_bound=_joint_coupling(table),
            gamma=table.gamma,
            V=table.V,
            k=k,
            checks={"highs_status": model_status_code(h)},
            solver_info=info,
        )
    import scipy.sparse as sp

    sol = h.getSolution()
    x = np.asarray(sol.col_value, dtype=np.float64) * col_scale
    ydual = np.asarray(sol.row_dual, dtype=np.float64) * row_scale
    polished = False
    duals = [ydual, -ydual]
    A = sp.csc_matrix((lp.value, lp.index, lp.start), shape=(nrow, ncol))
    polish = _polish(A, b, tau, h)
    if polish is not None:
        x_p, y_p = polish
        # keep the polished basic solution only if it is at least as feasible as HiGHS' one
        if x_p.min() >= -POLISH_NEGATIVE_ATOL and np.abs(A @ x_p - b).max() <= np.abs(A @ x - b).max() + POLISH_RESIDUAL_SLACK:
            x, polished = np.maximum(x_p, 0.0), True
        duals.append(y_p)
    return _certified(lp, A, x, duals, float(h.getInfo().objective_function_value), polished, table, k, info)


def _certified(
    lp: _PathLP, A, x: np.ndarray, duals: list, objective: float, polished: bool, table: prefixes.PrefixTable, k: int, info: str
) -> BlockOptimumResult:
    """The plain-numpy certificate of a solved plan ``x`` (primal feasibility, objective, dual
    feasibility, duality gap) and the result it earns."""
    n_out, tau, b, g = lp.n_out, lp.tau, lp.b, table.gamma
    xc = np.maximum(x, 0.0)
    primal = float(tau @ xc)
    checks = {
        "negative_mass": float(max(0.0, -x.min())),
        "draft_marginal": float(np.abs(A[:n_out] @ xc - b[:n_out]).max()),
        "target_law": float(np.abs(A[n_out:] @ xc - b[n_out:]).max()),
        "objective": abs(primal - objective),
    }
    slack, bound = _dual_bound(lp, A, duals, primal)
    checks["dual_feasibility"] = slack
    gap = bound - primal
    checks["gap"] = abs(gap)
    good = all(v <= CERTIFICATE_ATOL for v in checks.values())
    x.setflags(write=False)
    labels = lp.labels
    plan = BlockPlan(
        value=primal,
        outcome_weights=b[:n_out].copy(),
        mass=x,
        outcome=labels["outcome"],
        tau=labels["tau"],
        node=labels["node"],
        y=labels["y"],
    )
    return BlockOptimumResult(
        value=primal,
        method="lp",
        status=STATUS_OPTIMAL if good else STATUS_CHECK_FAILED,
        joint_coupling_bound=_joint_coupling(table),
        gamma=g,
        V=table.V,
        k=k,
        gap=float(gap),
        error_bound=float(abs(gap) + checks["target_law"] * g + checks["draft_marginal"] * g),
        checks={**checks, "polished": float(polished)},
        plan=plan,
        solver_info=info,
    )


def solve_path_lp(
    table: prefixes.PrefixTable, weights: np.ndarray, nodes: Sequence[Sequence[np.ndarray]], *, k: int, memory_cap: float | None, what: str
) -> BlockOptimumResult:
    r"""Solve the full-information LP over (drafted outcome, emitted block).

    ``weights[o]`` is the draft probability of outcome ``o`` (a path, or a tree); ``nodes[o][t]``
    the indices (depth ``t``, lexicographic) of the prefixes the verifier may emit as accepted
    prefix of length ``t`` when ``o`` was drafted. Variables :math:`\pi(o, t, n, y) \ge 0`;
    constraints: :math:`\sum_{t,n,y} \pi(o,t,n,y) = Q(o)` and, for every
    :math:`z \in \Omega^{\gamma+1}`,
    :math:`\sum \pi(o,t,n,y)\, M_b(z_{t+2..\gamma+1} \mid z^{t+1}) = M_b(z)` over the columns whose
    block :math:`(n, y)` is the prefix :math:`z^{t+1}`. Objective: maximise :math:`\sum t\,\pi`.

    Small LPs on peaked models can end with HiGHS model status "unknown" or a plan that fails the
    certificate under one algorithm and solve cleanly under another: a short ladder of algorithms
    is tried (dual simplex after presolve, IPM with crossover, primal simplex without presolve,
    dual simplex without scaling) and the first certified answer kept, else the last attempt.

    Parameters
    ----------
    table : PrefixTable
        The enumerated target/draft pair (:func:`otspec.prefixes.enumerate_prefixes`).
    weights : ndarray, shape (n_outcomes,)
        :math:`Q(o)` of every drafted outcome.
    nodes : sequence of sequence of ndarray
        ``nodes[o][t]``: the depth-``t`` prefix indices outcome ``o`` may emit as accepted prefix.
    k : int
        Number of drafts (recorded in the result).
    memory_cap : float or None
        Bytes for the LP; ``None``: the library default.
    what : str
        Description of the problem for the size error message.

    Returns
    -------
    BlockOptimumResult
        ``method="lp"``: the certified value, gap, error bound, checks (including
        ``highs_attempts``), the :class:`~otspec.bounds.result.BlockPlan` and HiGHS' status.

    Raises
    ------
    ProblemTooLargeError
        If the LP's estimated size exceeds its cap or ``memory_cap``.
    """
    check_path_lp(table.V, table.gamma, nodes, len(weights), memory_cap, what)
    lp = _build(table, weights, nodes)
    scaled = _scaling(lp)
    result = None
    for n_attempt, options in enumerate(_HIGHS_LADDER, start=1):
        result = _attempt(lp, scaled, table, k, options)
        result = dataclasses.replace(result, checks={**result.checks, "highs_attempts": float(n_attempt)})
        if result.ok:
            break
    return result


# long-function: the public entry: validation, method dispatch and certification read top to bottom
def block_optimum(
    p_model: Any, q_model: Any, gamma: int, *, method: str = "closed_form", memory_cap: float | None = None
) -> BlockOptimumResult:
    r"""The largest expected number of accepted draft tokens of any lossless chain verifier.

    .. math:: \max E[\tau] = \sum_{i=1}^{\gamma} \sum_{x^i} W(x^i), \qquad
              W(x^i) = \min_{0 \le j \le i} M_s(x^j)\, M_b(x_{j+1..i} \mid x^j),

    over verifiers that see one drafted block :math:`X^\gamma \sim M_s` (and every conditional of
    both models), emit :math:`O = (X^\tau, Y)` and keep the decoded stream's law equal to the
    target's when decoding restarts from the target after every block (:doc:`block`, the block optimum).

    Parameters
    ----------
    p_model, q_model : model
        Target :math:`M_b` and draft :math:`M_s` (callables ``prefix -> (V,) distribution``; see
        :mod:`otspec.models`).
    gamma : int
        Draft block length.
    method : {"closed_form", "lp"}
        ``"closed_form"``: the W recursion (vectorised over the :math:`\sum_i V^i` prefixes).
        ``"lp"``: the full-information block LP -- variables :math:`\pi(x^\gamma, \tau, y) \ge 0`,
        draft marginal :math:`\sum_{\tau, y} \pi = M_s(x^\gamma)`, and the emitted block
        :math:`(x^\tau, y)` extended by the target to :math:`\gamma + 1` tokens must have the
        target's joint law :math:`M_b(z^{\gamma+1})`; maximise :math:`E[\tau]`. Solved with HiGHS
        (tolerances 1e-10) and certified in numpy (marginals, objective, dual feasibility, gap).
    memory_cap : float, optional
        Bytes; larger problems raise :class:`~otspec.errors.ProblemTooLargeError` (the size is
        estimated before anything is built).

    Returns
    -------
    BlockOptimumResult
        ``value``, ``method``, ``status`` and the (unachievable) ``joint_coupling_bound``.

    Raises
    ------
    UnsupportedMethodError
        If ``method`` is not ``"closed_form"`` or ``"lp"``.
    NotAnIntegerError, InvalidDraftCountError
        If ``gamma`` is not an integer ``>= 1``.
    InvalidDistributionError, ShapeMismatchError
        If a model is invalid or the vocabularies differ.
    ProblemTooLargeError
        If the enumeration or the LP exceeds its cap or ``memory_cap``.

    References
    ----------
    Sun, Mendlovic, Leviathan, Aharoni, Ro, Beirami, Suresh, "Block Verification Accelerates
    Speculative Decoding" (ICLR 2025), Theorem 2 (optimality of block verification) and Lemma 1
    (the two-token toy).

    Examples
    --------
    >>> import otspec
    >>> from otspec import models
    >>> p, q = models.context_free([1/3, 2/3]), models.context_free([2/3, 1/3])
    >>> r = otspec.block_optimum(p, q, 2)
    >>> round(r.value * 9, 9), round(r.joint_coupling_bound * 9, 9)
    (11.0, 12.0)
    """
    if method not in METHODS:
        raise UnsupportedMethodError(f"method must be one of {METHODS} (got {method!r}); 'closed_form' is exact and fastest")
    gamma = as_int_in_range(gamma, "gamma")
    table = prefixes.enumerate_prefixes(p_model, q_model, gamma, memory_cap=memory_cap)
    if method == "closed_form":
        W = prefixes.prefix_weights(table)
        value = float(sum(w.sum() for w in W[1:]))
        n_terms = sum(w.size for w in W)
        return BlockOptimumResult(
            value=value,
            method="closed_form",
            status=STATUS_OPTIMAL,
            joint_coupling_bound=_joint_coupling(table),
            gamma=gamma,
            V=table.V,
            error_bound=ROUNDING_PER_TERM * n_terms * (gamma + 1),
        )
    keep = np.flatnonzero(table.q_joint[gamma] > 0)
    anc = table.ancestors(gamma)[keep]
    nodes = [[anc[o, t : t + 1] for t in range(gamma + 1)] for o in range(keep.size)]
    return solve_path_lp(
        table, table.q_joint[gamma][keep], nodes, k=1, memory_cap=memory_cap, what=f"the block LP at V = {table.V}, gamma = {gamma}"
    )
