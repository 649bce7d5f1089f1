r"""The exact lossy frontier under a total-variation budget (MATH §16).

For any draft law :math:`Q` and budget :math:`\varepsilon \ge 0`, the best membership acceptance of a
verifier whose output law :math:`p'` satisfies :math:`d_{TV}(p', p) \le \varepsilon` is

.. math:: \alpha^*(\varepsilon) = \min\big(1,\ \alpha^*(p, Q) + \varepsilon\big).

*Upper bound.* For any such :math:`p'` and any token set :math:`H`, acceptance
:math:`\le \alpha^*(p', Q) \le p'(H) + 1 - Q(H^k) \le p(H) + \varepsilon + 1 - Q(H^k)`; at the
optimal cut :math:`H` of :math:`\alpha^*(p, Q)` this is :math:`\alpha^* + \varepsilon`.
*Attained* by ``lossy_optimal`` (:mod:`otspec.verifiers.step.lossy_optimal`): an optimal plan
whose rejections output a draft with probability :math:`\min(1, \varepsilon / (1 - \alpha^*))`.

The result carries both sides: the upper bound re-computed in numpy from the cut
(:math:`\min(1, p(H) + 1 - Q(H^k) + \varepsilon)`) and the lower bound from the optimum's own
certified lower bound (:math:`\min(1, \alpha^*_{\text{lower}} + \varepsilon)`), when it has one.

Under a **Kullback-Leibler budget** :math:`b` the frontier is not a line but a convex program
(:func:`kl_frontier`): the best acceptance of a verifier whose output law :math:`p'` has
:math:`\mathrm{KL}(p' \,\|\, p) \le b` (mentored decoding's constraint, Tran-Thien 2023) is

.. math:: \alpha^*_{\mathrm{KL}}(b) = \max_{p' :\ \mathrm{KL}(p' \| p) \le b} \alpha^*(p', Q),

since for a fixed output law the best acceptance is the lossless optimum for that law. Pinsker
brackets it between two points of the TV line: with :math:`p_{\min}` the smallest positive
:math:`p`, :math:`\min(1, \alpha^* + \sqrt{p_{\min}(e^b - 1)}/2) \le \alpha^*_{\mathrm{KL}}(b) \le
\min(1, \alpha^* + \sqrt{b/2})` (the right side in either KL direction; the left side for
:math:`\mathrm{KL}(p' \| p)` when :math:`p > 0` everywhere, since then
:math:`\mathrm{KL} \le \log(1 + \chi^2) \le \log(1 + 4 d_{TV}^2 / p_{\min})`).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from otspec._optional import require
from otspec._tolerances import KL_FRONTIER_GAP_ATOL
from otspec._validation import as_distribution, as_memory_cap
from otspec.bounds.membership import membership_pairs
from otspec.bounds.multidraft import optimal_acceptance
from otspec.bounds.result import AcceptanceResult
from otspec.errors import InvalidOptionError, NotADraftLawError
from otspec.laws import DraftLaw

__all__ = ["LossyFrontier", "lossy_frontier", "KLFrontier", "kl_frontier", "KL_DIRECTIONS"]

#: The two KL constraints :func:`kl_frontier` solves: ``"output_target"`` is
#: :math:`\mathrm{KL}(p' \,\|\, p)` (mentored decoding's), ``"target_output"`` is
#: :math:`\mathrm{KL}(p \,\|\, p')`.
KL_DIRECTIONS = ("output_target", "target_output")


@dataclass(frozen=True, eq=False)
class LossyFrontier:
    r"""The best acceptance under a TV budget, with its certificate.

    Attributes
    ----------
    eps : float
        The budget :math:`\varepsilon`.
    value : float
        :math:`\min(1, \alpha^*(p, Q) + \varepsilon)`.
    tv_spent : float
        :math:`\min(\varepsilon, 1 - \alpha^*)`: the distortion the frontier rule needs (beyond it
        the acceptance is already 1).
    upper_bound : float
        :math:`\min(1, p(H) + 1 - Q(H^k) + \varepsilon)` re-computed from the cut :math:`H`.
    lower_bound : float or None
        :math:`\min(1, \alpha^*_{\text{lower}} + \varepsilon)` from the optimum's certified lower
        bound (``None`` when that method has none).
    optimum : AcceptanceResult
        The lossless optimum :math:`\alpha^*(p, Q)` and its certificate.
    """

    eps: float
    value: float
    tv_spent: float
    upper_bound: float
    lower_bound: float | None
    optimum: AcceptanceResult

    @property
    def ok(self) -> bool:
        """True when the underlying optimum can be trusted."""
        return self.optimum.ok

    def __repr__(self) -> str:
        lo = "None" if self.lower_bound is None else f"{self.lower_bound:.12g}"
        return (
            f"LossyFrontier(eps={self.eps:g}, value={self.value:.12g}, alpha_star={self.optimum.value:.12g}, "
            f"tv_spent={self.tv_spent:.6g}, bounds=[{lo}, {self.upper_bound:.12g}], status={self.optimum.status!r})"
        )


def lossy_frontier(p: Any, law: DraftLaw, eps: float, *, method: str = "auto", memory_cap: float | None = None) -> LossyFrontier:
    r"""The exact best acceptance of any verifier within TV distance ``eps`` of the target.

    .. math:: \max_{\pi:\ d_{TV}(P_\pi, p) \le \varepsilon} P_\pi(Y \in \bar X) = \min\big(1, \alpha^*(p, Q) + \varepsilon\big).

    Parameters
    ----------
    p : array_like, shape (V,)
        Target distribution.
    law : DraftLaw
        Any draft law over the same vocabulary.
    eps : float
        TV budget, ``0 <= eps <= 1``.
    method : str
        Passed to :func:`otspec.optimal_acceptance` for :math:`\alpha^*`.
    memory_cap : float, optional
        Passed to :func:`otspec.optimal_acceptance`.

    Returns
    -------
    LossyFrontier
        The value, the TV it needs, and the two certified sides.

    Raises
    ------
    InvalidOptionError
        If ``eps`` is not a number in ``[0, 1]``.
    NotADraftLawError, InvalidDistributionError, ShapeMismatchError, UnsupportedMethodError, ProblemTooLargeError
        As :func:`otspec.optimal_acceptance`.

    Notes
    -----
    MATH §16; checked against a linear program over the transport plan with a TV constraint
    (``tests/bounds/test_lossy_frontier.py``). Under a KL budget the frontier is a convex program,
    not a line: :func:`kl_frontier`.

    Examples
    --------
    >>> import otspec
    >>> from otspec.bounds.lossy import lossy_frontier
    >>> round(lossy_frontier([0.5, 0.5], otspec.iid([0.9, 0.1], 1), 0.1).value, 12)   # 0.6 + 0.1
    0.7
    """
    try:
        e = float(eps)
    except (TypeError, ValueError):
        e = float("nan")
    if isinstance(eps, bool) or not (0.0 <= e <= 1.0):
        raise InvalidOptionError(f"eps must be a number in [0, 1] (got {eps!r}); a total-variation budget; pass a value in that range")
    res = optimal_acceptance(p, law, method=method, memory_cap=memory_cap)
    pv = np.asarray(p, dtype=np.float64)
    H = np.asarray(res.cut, dtype=np.int64)
    cut_value = float(pv[H].sum()) + 1.0 - float(law.prob_all_in(H))
    lower = None if res.lower_bound is None else min(1.0, float(res.lower_bound) + e)
    return LossyFrontier(
        eps=e,
        value=min(1.0, res.value + e),
        tv_spent=min(e, max(0.0, 1.0 - res.value)),
        upper_bound=min(1.0, cut_value + e),
        lower_bound=lower,
        optimum=res,
    )


@dataclass(frozen=True, eq=False)
class KLFrontier:
    r"""The best acceptance under a KL budget, with a two-sided certificate.

    Attributes
    ----------
    budget : float
        The budget :math:`b` (nats).
    direction : str
        ``"output_target"`` (:math:`\mathrm{KL}(p' \| p) \le b`) or ``"target_output"``
        (:math:`\mathrm{KL}(p \| p') \le b`).
    value : float
        The certified attained acceptance: :attr:`lower_bound`.
    lower_bound : float
        :math:`\alpha^*(p', Q)` at the returned :attr:`output_law` (the lossless optimum for that
        law, computed exactly by :func:`otspec.optimal_acceptance`): a verifier with this output
        law and this acceptance exists.
    upper_bound : float
        The dual bound re-computed in numpy from the solver's token prices :math:`u` (see
        :func:`kl_frontier`): no verifier within the budget accepts more.
    output_law : ndarray, shape (V,)
        The output law :math:`p'` attaining :attr:`lower_bound`, within the budget.
    kl_spent : float
        Its divergence (``<= budget``).
    token_duals : ndarray, shape (V,)
        The token prices :math:`u \in [0, 1]^V` of the certificate.
    budget_dual : float
        The solver's multiplier of the KL constraint (``nan`` when it gave none).
    solver_value : float
        The solver's own objective (``nan`` on failure).
    status : str
        ``"optimal"`` when the solver succeeded and ``upper_bound - lower_bound`` is within
        :data:`~otspec._tolerances.KL_FRONTIER_GAP_ATOL`; otherwise what went wrong (the bounds
        stay valid).
    solver : str
        The cvxpy solver used.
    optimum : AcceptanceResult
        The lossless optimum :math:`\alpha^*(p, Q)` (budget 0).
    """

    budget: float
    direction: str
    value: float
    lower_bound: float
    upper_bound: float
    output_law: np.ndarray
    kl_spent: float
    token_duals: np.ndarray
    budget_dual: float
    solver_value: float
    status: str
    solver: str
    optimum: AcceptanceResult

    @property
    def gap(self) -> float:
        """``upper_bound - lower_bound``."""
        return self.upper_bound - self.lower_bound

    @property
    def ok(self) -> bool:
        """True when the two bounds meet (``status == "optimal"``)."""
        return self.status == "optimal"

    def __repr__(self) -> str:
        return (
            f"KLFrontier(budget={self.budget:g}, direction={self.direction!r}, value={self.value:.10g}, "
            f"alpha_star={self.optimum.value:.10g}, bounds=[{self.lower_bound:.10g}, {self.upper_bound:.10g}], "
            f"kl_spent={self.kl_spent:.6g}, status={self.status!r})"
        )


def _kl(a: np.ndarray, b: np.ndarray) -> float:
    """KL(a || b) in nats (0 log 0 = 0; inf where a > 0 = b)."""
    on = a > 0.0
    if np.any(b[on] <= 0.0):
        return math.inf
    return float(max(0.0, np.sum(a[on] * np.log(a[on] / b[on]))))


def _divergence(out: np.ndarray, p: np.ndarray, direction: str) -> float:
    return _kl(out, p) if direction == "output_target" else _kl(p, out)


def _sup_linear_output_target(u: np.ndarray, p: np.ndarray, b: float, lam0: float) -> float:
    r"""An upper bound on :math:`\max\{u \cdot p' : \mathrm{KL}(p' \| p) \le b\}`.

    Donsker-Varadhan duality: for every :math:`\lambda > 0` the maximum is at most
    :math:`\lambda b + \lambda \log \sum_y p(y) e^{u(y)/\lambda}`; the minimum over a scalar search
    (and the limits :math:`\max_{p > 0} u`, and :math:`u \cdot p` at :math:`b = 0`) is returned, so
    the value is a valid bound whatever the search finds.
    """
    from scipy.optimize import minimize_scalar

    on = p > 0.0
    us, ps = u[on], p[on]
    top = float(us.max())
    best = top
    if b == 0.0:
        return min(best, float(us @ ps))

    def bound(log_lam: float) -> float:
        lam = math.exp(log_lam)
        return lam * b + top + lam * math.log(float(ps @ np.exp((us - top) / lam)))

    found = minimize_scalar(bound, bounds=(-40.0, 40.0), method="bounded", options={"xatol": 1e-10})
    best = min(best, float(bound(float(found.x))))
    if math.isfinite(lam0) and lam0 > 0.0:
        best = min(best, bound(math.log(lam0)))
    return best


def _sup_linear_target_output(u: np.ndarray, p: np.ndarray, b: float) -> float:
    r"""An upper bound on :math:`\max\{u \cdot p' : \mathrm{KL}(p \| p') \le b\}`.

    Lagrange duality (with the multiplier of the KL row eliminated in closed form): for every
    :math:`\nu > \max u` the maximum is at most :math:`\nu - e^{-b} \prod_{y: p(y) > 0} (\nu - u(y))^{p(y)}`;
    the minimum over a scalar search (and the limits :math:`\max u`, and :math:`u \cdot p` at
    :math:`b = 0`) is returned.
    """
    from scipy.optimize import minimize_scalar

    on = p > 0.0
    us, ps = u[on], p[on]
    top = float(u.max())
    best = top
    if b == 0.0:
        return min(best, float(us @ ps))
    floor = max(top, float(us.max()))

    def bound(log_s: float) -> float:
        nu = floor + math.exp(log_s)
        with np.errstate(divide="ignore"):  # nu rounded onto max u: log 0 = -inf, the bound is nu itself (valid)
            return nu - math.exp(-b + float(ps @ np.log(nu - us)))

    found = minimize_scalar(bound, bounds=(-40.0, 20.0), method="bounded", options={"xatol": 1e-10})
    return min(best, float(bound(float(found.x))))


def _dual_upper(u: np.ndarray, sets: np.ndarray, weights: np.ndarray, p: np.ndarray, b: float, direction: str, lam0: float) -> float:
    r"""Weak duality of the membership program with the output law free in the KL ball.

    For token prices :math:`u \in [0, 1]^V` and set prices :math:`v(s) = \max(0, 1 - \min_{y \in s} u(y))`
    (so :math:`v(s) + u(y) \ge 1` for every :math:`y \in s`), every feasible plan has
    :math:`\sum w \le \sum_s Q(s) v(s) + u \cdot p'` and :math:`u \cdot p'` is bounded over the ball.
    """
    u = np.clip(np.nan_to_num(u, nan=1.0), 0.0, 1.0)
    member = np.where(sets >= 0, u[np.maximum(sets, 0)], np.inf)
    v = np.maximum(0.0, 1.0 - member.min(axis=1))
    if direction == "output_target":
        lin = _sup_linear_output_target(u, p, b, lam0)
    else:
        lin = _sup_linear_target_output(u, p, b)
    return min(1.0, float(weights @ v) + lin)


#: Clarabel's gap and feasibility tolerances (defaults 1e-8): near budget 0 the frontier rises like
#: sqrt(b), so the default left certified gaps near KL_FRONTIER_GAP_ATOL at b = 1e-4.
CLARABEL_TIGHT = {"tol_gap_abs": 1e-10, "tol_gap_rel": 1e-10, "tol_feas": 1e-10}


def _solve_kl_program(cp: Any, p: np.ndarray, sets: np.ndarray, weights: np.ndarray, b: float, direction: str, solver: str | None):
    """The membership program with the output law as a variable in the KL ball, through cvxpy."""
    import scipy.sparse as sp

    pair_set, pair_token, _ = membership_pairs(sets)
    S, V, n = sets.shape[0], p.shape[0], pair_set.size
    w = cp.Variable(n, nonneg=True)
    out = cp.Variable(V, nonneg=True)
    A_set = sp.csr_matrix((np.ones(n), (pair_set, np.arange(n))), shape=(S, n))
    A_tok = sp.csr_matrix((np.ones(n), (pair_token, np.arange(n))), shape=(V, n))
    on = np.flatnonzero(p > 0.0)
    off = np.flatnonzero(p <= 0.0)
    if direction == "output_target":
        div = cp.sum(cp.rel_entr(out[on], p[on]))
    else:
        div = cp.sum(cp.rel_entr(p[on], out[on]))
    tok_row = A_tok @ w <= out
    # budget 0 pins the output law (an LP); an exponential cone at radius 0 has no interior point
    kl_row = div <= b if b > 0.0 else out == p
    cons = [A_set @ w <= weights, tok_row, cp.sum(out) == 1.0, kl_row]
    if direction == "output_target" and off.size:
        cons.append(out[off] == 0.0)  # a finite KL(p' || p) puts no mass where p has none
    prob = cp.Problem(cp.Maximize(cp.sum(w)), cons)
    chosen = solver or next((s for s in ("CLARABEL", "SCS") if s in cp.installed_solvers()), None)
    tries = [CLARABEL_TIGHT, {}] if chosen == "CLARABEL" else [{}]
    for n_try, options in enumerate(tries):  # tight tolerances first; the defaults if Clarabel stalls on them
        try:
            with warnings.catch_warnings():  # "may be inaccurate": the numpy certificate decides, not the warning
                warnings.simplefilter("ignore", UserWarning)
                prob.solve(solver=chosen, **options)
            break
        except cp.error.SolverError as exc:
            if n_try == len(tries) - 1:
                return None, None, math.nan, math.nan, f"cvxpy solver error: {exc}", str(chosen)
    if out.value is None or tok_row.dual_value is None:
        return None, None, math.nan, math.nan, f"cvxpy status {prob.status}", str(chosen)
    lam = float(kl_row.dual_value) if (b > 0.0 and kl_row.dual_value is not None) else math.nan
    status = "optimal" if prob.status in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE) else f"cvxpy status {prob.status}"
    return (
        np.asarray(out.value, dtype=np.float64),
        np.asarray(tok_row.dual_value, dtype=np.float64),
        lam,
        float(prob.value),
        status,
        str(chosen),
    )


def _feasible(out: np.ndarray | None, p: np.ndarray, b: float, direction: str) -> np.ndarray:
    """The solver's output law pulled toward p until it is inside the ball (KL is convex: the mixture
    ``(1 - t) p' + t p`` has divergence at most ``(1 - t)`` times that of ``p'``)."""
    if out is None:
        return p.copy()
    out = np.clip(out, 0.0, None)
    if direction == "output_target":
        out[p <= 0.0] = 0.0
    out = out / out.sum()
    d = _divergence(out, p, direction)
    if d <= b:
        return out
    shrink = 1.0 - 1e-12  # the mixture's own rounding: land strictly inside
    for _ in range(60):
        keep = b / d * shrink if math.isfinite(d) and d > 0 else 0.0
        mix = keep * out + (1.0 - keep) * p
        if _divergence(mix, p, direction) <= b:
            return mix
        shrink *= 0.5
    return p.copy()


# long-function: validation, the solve, and the two sides of the certificate, each a few lines
def kl_frontier(
    p: Any,
    law: DraftLaw,
    budget: float,
    *,
    direction: str = "output_target",
    solver: str | None = None,
    memory_cap: float | None = None,
) -> KLFrontier:
    r"""The best acceptance of any verifier whose output law is within a KL budget of the target.

    .. math:: \alpha^*_{\mathrm{KL}}(b) = \max_{\pi} P_\pi(Y \in \bar X) \quad \text{s.t.} \quad
              \mathrm{KL}(P_\pi \,\|\, p) \le b
              \;=\; \max_{p':\ \mathrm{KL}(p' \| p) \le b} \alpha^*(p', Q),

    solved as one convex program over the membership plan :math:`w(s, y)` and the output law
    :math:`p'` (exponential cone, cvxpy): maximise :math:`\sum w` subject to
    :math:`\sum_{y \in s} w(s, y) \le Q(s)`, :math:`\sum_{s \ni y} w(s, y) \le p'(y)`,
    :math:`p' \in \Delta_V` and the KL row. The answer is certified from both sides in numpy:

    * *lower*: the solver's :math:`p'`, pulled toward :math:`p` until it is inside the ball, and
      its exact lossless optimum :math:`\alpha^*(p', Q)` (a verifier attaining it exists);
    * *upper*: weak duality with the solver's token prices :math:`u` (the duals of the token rows,
      clipped to :math:`[0, 1]`): :math:`\sum_s Q(s) \max(0, 1 - \min_{y \in s} u(y)) + \sup_{p'} u \cdot p'`,
      the last term bounded by Donsker-Varadhan, :math:`\inf_{\lambda > 0} \lambda b + \lambda \log \sum_y p(y) e^{u(y)/\lambda}`
      (for :math:`\mathrm{KL}(p \| p')`: :math:`\inf_{\nu > \max u} \nu - e^{-b} \prod_y (\nu - u(y))^{p(y)}`).

    Parameters
    ----------
    p : array_like, shape (V,)
        Target distribution.
    law : DraftLaw
        A draft law small enough to enumerate (i.i.d., without replacement, greedy, product,
        explicit; small V and k).
    budget : float
        KL budget :math:`b \ge 0`, in nats.
    direction : {"output_target", "target_output"}
        ``"output_target"``: :math:`\mathrm{KL}(p' \| p) \le b`, the constraint of mentored decoding
        (Tran-Thien 2023: the divergence *between the resulting distribution and the target*);
        ``"target_output"``: :math:`\mathrm{KL}(p \| p') \le b`.
    solver : str, optional
        cvxpy solver with exponential cones (default Clarabel, else SCS).
    memory_cap : float, optional
        Bytes for enumerating the law's draft sets; ``None``: the library default.

    Returns
    -------
    KLFrontier
        The attained value, the certified interval, the output law attaining it, the duals.

    Raises
    ------
    InvalidOptionError
        If ``budget`` is not a finite number ``>= 0`` or ``direction`` is unknown.
    NotADraftLawError, InvalidDistributionError, ShapeMismatchError
        If ``law`` is not a draft law or ``p`` is not a distribution over its vocabulary.
    ProblemTooLargeError
        If the law's draft sets cannot be enumerated within ``memory_cap``.
    ImportError
        If cvxpy is not installed.

    Notes
    -----
    ``budget = 0`` gives :math:`\alpha^*(p, Q)`; the value is increasing and concave in the budget
    and lies between two points of the TV frontier (Pinsker, see the module). The program has one
    column per (draft set, member token): exact at small V and k, like ``optimal_acceptance(method="lp")``.

    References
    ----------
    V. Tran-Thien, "An optimal lossy variant of speculative decoding" (mentored decoding), 2023.

    Examples
    --------
    >>> import otspec
    >>> from otspec.bounds.lossy import kl_frontier
    >>> r = kl_frontier([0.5, 0.5], otspec.iid([0.9, 0.1], 1), 0.0)
    >>> r.status, round(r.value, 9)                     # budget 0: alpha* = 1 - TV
    ('optimal', 0.6)
    >>> r = kl_frontier([0.5, 0.5], otspec.iid([0.9, 0.1], 1), 0.02)
    >>> 0.6 < r.value <= 0.6 + (0.02 / 2) ** 0.5       # Pinsker's ceiling
    True
    """
    try:
        b = float(budget)
    except (TypeError, ValueError):
        b = math.nan
    if isinstance(budget, bool) or not (math.isfinite(b) and b >= 0.0):
        raise InvalidOptionError(f"budget must be a finite number >= 0 (got {budget!r}); a KL budget in nats; pass a value >= 0")
    if direction not in KL_DIRECTIONS:
        raise InvalidOptionError(f"direction must be one of {', '.join(KL_DIRECTIONS)} (got {direction!r}); pick one of those")
    if not isinstance(law, DraftLaw):
        raise NotADraftLawError(
            f"law must be a draft law such as otspec.iid(q, k) (got {type(law).__name__}); build one with the law constructors"
        )
    p = as_distribution(p, "p")
    law.check_compatible(p)
    as_memory_cap(memory_cap)
    cp = require("cvxpy", None, needed_by="kl_frontier", install="pip install cvxpy")
    optimum = optimal_acceptance(p, law, memory_cap=memory_cap)
    sets, weights = law.enumerate_sets(memory_cap=memory_cap)
    out, u, lam, solver_value, status, chosen = _solve_kl_program(cp, p, sets, weights, b, direction, solver)
    law_out = _feasible(out, p, b, direction)
    at = optimal_acceptance(law_out, law, memory_cap=memory_cap)
    lower = float(at.lower_bound) if at.lower_bound is not None else float(at.value)
    if u is None:  # no duals: Pinsker's ceiling (TV <= sqrt(b / 2) in either direction) still holds
        u = np.ones(p.size)
        upper = min(1.0, float(optimum.value) + math.sqrt(b / 2.0))
    else:
        upper = _dual_upper(u, sets, weights, p, b, direction, lam)
    if status == "optimal" and not (upper - lower <= KL_FRONTIER_GAP_ATOL and at.ok):
        status = f"inaccurate: certified gap {upper - lower:.3g}"
    return KLFrontier(
        budget=b,
        direction=direction,
        value=lower,
        lower_bound=lower,
        upper_bound=upper,
        output_law=law_out,
        kl_spent=_divergence(law_out, p, direction),
        token_duals=np.clip(u, 0.0, 1.0),
        budget_dual=lam,
        solver_value=solver_value,
        status=status,
        solver=chosen,
        optimum=optimum,
    )
