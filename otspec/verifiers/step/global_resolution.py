r"""Global Resolution (Thomas & Pal, ICLR 2026): the i.i.d. optimal plan to a tolerance by a convex
program in at most V variables (registered as ``global_resolution``).

**Our reading.** Only the paper's abstract and third-party summaries were available to us: the
optimal transport plan for k i.i.d. drafts is found by (i) the optimal cut :math:`H^*` (max-flow /
subset selection, here the sorted-prefix closed form), (ii) complementary slackness, which fixes
the selection mass of each side, and (iii) a convex minimisation over softmax weights, solved to
a tolerance :math:`\tau`. We implement that structure as follows; the paper's own truncation
rule and its error constants were not recovered, so this is a reading, not a transcription.

*Rule.* With :math:`A = \Omega \setminus H^*` and weights :math:`w = e^{\theta} > 0`: if some
draft lies in A, select draft i among the drafts in A with probability
:math:`w_{x_i} / \sum_{j: x_j \in A} w_{x_j}`; otherwise select among all drafts in the same way.
Then single-draft speculative sampling from the selection law :math:`r_\theta` to p (keep the
selected y with :math:`\min(1, p(y)/r_\theta(y))`, else draw from :math:`\mathrm{norm}((p -
r_\theta)_+)`). This is lossless for *every* :math:`\theta` (Khisti et al.'s two-step form) and
accepts with :math:`\sum_y \min(p(y), r_\theta(y)) \le \alpha^*`.

*Convex program.* The target is the optimal selection law :math:`r^*` of
:func:`~otspec.verifiers.step.optimal_iid.selection_law` (:math:`r^*(A) = 1 - q(H^*)^k` is
exactly the mass the rule gives A). For each side :math:`L \in \{A, H^*\}`, with
:math:`S_L = \sum_{i: x_i \in L} w_{x_i}` on the event :math:`E_L` that the side is selected from,

.. math:: \Psi_L(\theta) = \mathbb{E}[\log S_L;\, E_L] - \sum_{y \in L} r^*(y)\, \theta_y,
          \qquad \partial \Psi_L / \partial \theta_y = r_\theta(y) - r^*(y),

a convex function (an expectation of log-sum-exp minus a linear term). Its infimum is approached
exactly when :math:`r_\theta \to r^*`; we stop at :math:`\|r_\theta - r^*\|_1 \le \tau`, which
bounds the acceptance shortfall :math:`\alpha^* - \sum \min(p, r_\theta) \le \tau`. Tokens of
equal density :math:`r^*/q` on one side share one weight (the map from weight to density is the
same increasing function for every token of a side), so the program has one variable per
distinct density: at most V.

*Evaluation at any V.* With :math:`M_L(s) = \sum_{z \in L} q_z e^{-s w_z}` and :math:`c_A = q(H^*)`,
:math:`c_H = 0`,

.. math:: r_\theta(y) = k\, q_y w_y \int_0^\infty e^{-s w_y} (M_L(s) + c_L)^{k-1} ds, \qquad
          \mathbb{E}[\log S_L; E_L] = \int_0^\infty \frac{P(E_L)\, e^{-s} - \big((M_L(s) + c_L)^k
          - c_L^k\big)}{s}\, ds

(:math:`1/S = \int_0^\infty e^{-sS} ds` and Frullani's integral), evaluated by the trapezoidal rule
in :math:`\log s` (analytic integrands in a strip of half-width :math:`\pi/2`: the step
:data:`LOG_STEP` gives error :math:`\approx e^{-\pi^2/h}`), ends cut where the tails fall below
:data:`TAIL_EPS`. Cost :math:`O(G N)` per evaluation (G variables, N ~ 200-450 nodes). The
minimisation is L-BFGS (scipy), preconditioned by :math:`\sqrt{r^*}` per variable.

References
----------
R. K. Thomas, A. Pal, "Global Resolution: Optimal Multi-Draft Speculative Sampling via Convex
Minimization", ICLR 2026, arXiv 2511.15898 (abstract: a convex program in at most V variables,
tuned to arbitrary accuracy).
Khisti et al., ICLR 2025 (the two-step canonical form).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from otspec._tolerances import FLOAT64_ATOL, GR_SELECTION_L1_TOL, KERNEL_AUTO_MAX_ENTRIES
from otspec.errors import InvalidOptionError, UnsupportedMethodError
from otspec.laws import DraftLaw
from otspec.sampling import spawn_streams
from otspec.verifiers.base import Verifier
from otspec.verifiers.step._iid_selection import check_pqk, solve_selection

__all__ = [
    "GRFit",
    "GlobalResolutionVerifier",
    "LOG_STEP",
    "LOG_W_MIN",
    "TAIL_EPS",
    "accept_and_residual",
    "fit",
    "global_resolution",
    "kernel_rows",
    "selection_rows",
]

#: Trapezoid step in log s: the integrands are analytic in a strip of half-width pi/2 about the
#: real log-s axis, so the rule's error is about exp(-pi^2 / LOG_STEP) = 7e-18.
LOG_STEP = 0.25
#: Mass each cut tail of the integrals may drop (left: the integrand is O(s); right: e^{-s w_min}).
TAIL_EPS = 1e-18
#: Smallest log-weight of a side (relative to its largest): weights below e^-60 ~ 1e-26 change the
#: selection law by less than that relative amount, and the floor caps the quadrature range.
LOG_W_MIN = -60.0
#: Nodes evaluated together (bounds the (G, nodes) work array to ~64 MB at G = 262 144).
_CHUNK = 32


@dataclass(frozen=True, eq=False)
class GRFit:
    r"""The fitted Global Resolution rule for one (p, q, k).

    Attributes
    ----------
    theta : ndarray, shape (V,)
        Log-weights (:math:`-\infty` where q = 0; each side's maximum is 0).
    in_a : ndarray of bool, shape (V,)
        The side A (drafts here are selected first); its complement is :math:`H^*`.
    r : ndarray, shape (V,)
        The rule's selection law :math:`r_\theta` (quadrature, relative error ~1e-15).
    r_star : ndarray, shape (V,)
        The optimal selection law the program aims at.
    alpha_star : float
        :math:`\alpha^* = 1 + p(H^*) - q(H^*)^k`.
    value : float
        :math:`\sum \min(p, r_\theta)`, the probability that the selected draft is kept: the
        acceptance :math:`P(Y \in \bar X)` is at least this and at most :math:`\alpha^*`.
    l1 : float
        :math:`\|r_\theta - r^*\|_1` at the end (bounds :math:`\alpha^* - \mathrm{value}`).
    tol : float
        The tolerance asked for.
    converged : bool
        Whether ``l1 <= tol``.
    evaluations : int
        Objective-and-gradient evaluations used.
    variables : int
        Variables of the program (distinct densities per side).
    """

    theta: np.ndarray
    in_a: np.ndarray
    r: np.ndarray
    r_star: np.ndarray
    alpha_star: float
    value: float
    l1: float
    tol: float
    converged: bool
    evaluations: int
    variables: int

    def __repr__(self) -> str:
        return (
            f"GRFit(value={self.value:.12g}, alpha_star={self.alpha_star:.12g}, l1={self.l1:.3g}, tol={self.tol:.3g}, "
            f"converged={self.converged}, evaluations={self.evaluations}, variables={self.variables})"
        )


class _Stop(Exception):
    """Raised inside the objective once the tolerance is met (ends L-BFGS early)."""


def _groups(dens: np.ndarray) -> tuple[np.ndarray, int]:
    """Group labels of equal densities (relative 1e-12, after sorting) and their number."""
    if dens.size == 0:
        return np.zeros(0, dtype=np.int64), 0
    o = np.argsort(dens, kind="stable")
    d = dens[o]
    new = np.concatenate([[True], np.abs(np.diff(d)) > 1e-12 * np.maximum(np.abs(d[1:]), 1e-300)])
    lab = np.empty(dens.size, dtype=np.int64)
    lab[o] = np.cumsum(new) - 1
    return lab, int(new.sum())


def _normalised(th: np.ndarray) -> np.ndarray:
    """Log-weights of one side shifted to maximum 0 and floored at :data:`LOG_W_MIN`."""
    return np.maximum(th - th.max(), LOG_W_MIN)


def _log_grid(w: np.ndarray, k: int) -> np.ndarray:
    """Nodes s_j (trapezoid in log s) for weights normalised to max 1."""
    s_lo = TAIL_EPS / max(k, 1)
    s_hi = (-math.log(TAIL_EPS) + 2.0) / max(float(w.min()), 1e-300)
    u = np.arange(math.log(s_lo), math.log(s_hi) + LOG_STEP, LOG_STEP)
    return np.exp(u)


def _side_numpy(Qg: np.ndarray, wg: np.ndarray, s: np.ndarray, c: float, k: int) -> tuple[np.ndarray, np.ndarray]:
    """``(M(s_j), sum_j s_j e^{-s_j w_g} (M_j + c)^{k-1})``, by chunks of nodes (exp dominates)."""
    M_all, r = np.empty(s.size), np.zeros_like(Qg)
    for j0 in range(0, s.size, _CHUNK):
        sj = s[j0 : j0 + _CHUNK]
        E = np.exp(-np.multiply.outer(wg, sj))  # (G, n)
        M = Qg @ E  # (n,)
        M_all[j0 : j0 + sj.size] = M
        r += E @ (sj * (M + c) ** (k - 1))
    return M_all, r


def _side(Qg: np.ndarray, wg: np.ndarray, c: float, k: int) -> tuple[np.ndarray, float]:
    """Selection mass per group and :math:`E[\\log S; E]` for one side (weights max 1)."""
    s = _log_grid(wg, k)
    pe = (float(Qg.sum()) + c) ** k - c**k  # P(E): some draft in A / every draft in H*
    M, r = _side_numpy(Qg, wg, s, c, k)
    obj = float(np.sum(pe * np.exp(-s) - ((M + c) ** k - c**k)))
    return k * Qg * wg * r * LOG_STEP, obj * LOG_STEP


def _fit_sides(sides, k, tol, max_evals):
    """Minimise the sum of the sides' convex programs; stop at ||r - r*||_1 <= tol."""
    from scipy.optimize import minimize  # scipy costs ~0.4 s to import: only when a fit runs

    sizes = [s["Qg"].size for s in sides]
    D = np.concatenate([np.sqrt(np.maximum(s["Rg"], 1e-300)) for s in sides])  # preconditioner
    best = {"l1": math.inf, "theta": np.concatenate([np.log(np.maximum(s["Rg"], 1e-300) / s["Qg"]) for s in sides]), "n": 0}

    def evaluate(theta):
        total, grads, at = 0.0, [], 0
        for s, n in zip(sides, sizes, strict=True):
            th = _normalised(theta[at : at + n])
            rg, obj = _side(s["Qg"], np.exp(th), s["c"], k)
            total += obj - float(np.dot(s["Rg"], th))
            grads.append(rg - s["Rg"])
            at += n
        g = np.concatenate(grads)
        l1 = float(np.abs(g).sum())
        best["n"] += 1
        if l1 < best["l1"]:
            best.update(l1=l1, theta=theta.copy())
        if l1 <= tol or best["n"] >= max_evals:
            raise _Stop
        return total, g

    def f(x):
        total, g = evaluate(x / D)
        return total, g / D

    try:
        minimize(
            f,
            best["theta"] * D,
            jac=True,
            method="L-BFGS-B",
            options={"maxiter": max_evals, "maxfun": max_evals, "gtol": 0.0, "ftol": 0.0, "maxcor": 30},
        )
        # L-BFGS stops once the objective's rounding (~1e-16 of its size) hides further descent,
        # near ||r - r*||_1 ~ 1e-8, while the gradient is still exact to ~1e-15: finish with the
        # minorise-maximise step of Luce models, w <- w r* / r_theta (no function values), for as
        # long as it keeps improving
        theta, stall = best["theta"].copy(), 0
        while stall < 3:
            prev = best["l1"]
            _, g = evaluate(theta)
            R = np.concatenate([s["Rg"] for s in sides])
            theta = theta + np.log(np.maximum(R, 1e-300) / np.maximum(g + R, 1e-300))
            stall = stall + 1 if best["l1"] >= prev else 0
    except _Stop:
        pass
    return best


def _iid_q(law: DraftLaw) -> tuple[np.ndarray | None, str]:
    """``(q, "")`` when the law is k i.i.d. drafts from q (also a product of identical drafters),
    else ``(None, why)``."""
    if law.iid_q is not None:
        return law.iid_q, ""
    qs = law.independent_qs
    if qs is not None and all(np.array_equal(qs[0], qj) for qj in qs[1:]):
        return qs[0], ""
    return None, f"the {law.kind} law is not k i.i.d. drafts, so the selection mass of A is not 1 - q(H*)^k"


def _as_tol(tol: Any) -> float:
    try:
        t = float(tol)
    except (TypeError, ValueError):
        t = math.nan
    if not 0.0 < t <= 1.0:
        raise InvalidOptionError(
            f"tol must be a number in (0, 1] (got {tol!r}); pass e.g. tol=1e-6 (the L1 distance to r* at which to stop)"
        )
    return t


def fit(p: Any, q: Any, k: Any, *, tol: Any = GR_SELECTION_L1_TOL, max_evals: int = 2000) -> GRFit:
    r"""Fit the Global Resolution rule: the convex program over softmax weights, to tolerance ``tol``.

    Parameters
    ----------
    p, q : array_like, shape (V,)
        Target and draft distributions.
    k : int
        Number of i.i.d. drafts (>= 1).
    tol : float, optional
        Stop when :math:`\|r_\theta - r^*\|_1 \le` ``tol`` (then the acceptance is within
        ``tol`` of :math:`\alpha^*`); default :data:`~otspec._tolerances.GR_SELECTION_L1_TOL`.
    max_evals : int, optional
        Most objective-and-gradient evaluations (each :math:`O(G N)`).

    Returns
    -------
    GRFit
        ``converged`` says whether the tolerance was met (otherwise the best point found).

    Raises
    ------
    InvalidDistributionError, ShapeMismatchError, InvalidDraftCountError
        For an invalid p, q or k.
    InvalidOptionError
        If ``tol`` is not in (0, 1].

    Examples
    --------
    >>> g = fit([0.5, 0.3, 0.2], [0.2, 0.3, 0.5], 2, tol=1e-10)
    >>> g.converged, round(g.value, 9), round(g.alpha_star, 9)
    (True, 0.86, 0.86)
    """
    p, q, k = check_pqk(p, q, k)
    tol = _as_tol(tol)
    sel = solve_selection(p, q, k)
    V = p.size
    in_h = np.zeros(V, dtype=bool)
    in_h[sel.cut] = True
    drafted = q > 0
    in_a = drafted & ~in_h
    theta = np.full(V, -np.inf)
    sides, labels = [], []
    qH = float(q[in_h].sum())
    for mask, c in ((in_a, min(qH, 1.0)), (drafted & in_h, 0.0)):
        idx = np.flatnonzero(mask)
        if idx.size == 0:
            continue
        lab, G = _groups(sel.r[idx] / q[idx])
        Qg = np.bincount(lab, weights=q[idx], minlength=G)
        Rg = np.bincount(lab, weights=sel.r[idx], minlength=G)
        sides.append({"Qg": Qg, "Rg": Rg, "c": c})
        labels.append((idx, lab))
    best = _fit_sides(sides, k, tol, max_evals)
    r = np.zeros(V)
    at = 0
    for s, (idx, lab) in zip(sides, labels, strict=True):
        G = s["Qg"].size
        th = _normalised(best["theta"][at : at + G])
        rg, _ = _side(s["Qg"], np.exp(th), s["c"], k)
        theta[idx] = th[lab]
        r[idx] = rg[lab] * q[idx] / s["Qg"][lab]
        at += G
    l1 = float(np.abs(r - sel.r).sum())
    return GRFit(
        theta=theta,
        in_a=in_a,
        r=r,
        r_star=sel.r.copy(),
        alpha_star=float(sel.alpha),
        value=float(np.minimum(p, r).sum()),
        l1=l1,
        tol=tol,
        converged=l1 <= tol,
        evaluations=int(best["n"]),
        variables=int(sum(s["Qg"].size for s in sides)),
    )


def selection_rows(g: GRFit, tuples: Any) -> np.ndarray:
    r"""Exact selection law of the rule given each draft tuple.

    Parameters
    ----------
    g : GRFit
        A fitted rule.
    tuples : array_like of int, shape (n, k)
        Draft tuples (tokens with q > 0).

    Returns
    -------
    ndarray, shape (n, V)
        Row i: :math:`P(\text{select } y \mid x^{(i)})`.

    Examples
    --------
    >>> g = fit([0.5, 0.5], [0.5, 0.5], 2)
    >>> selection_rows(g, [[0, 1]]).round(6).tolist()
    [[0.5, 0.5]]
    """
    t = np.asarray(tuples, dtype=np.int64)
    n, kk = t.shape
    w = np.exp(g.theta[t])
    ina = g.in_a[t]
    active = np.where(ina.any(axis=1)[:, None], ina, True)
    wt = np.where(active, w, 0.0)
    wt = wt / wt.sum(axis=1, keepdims=True)
    out = np.zeros((n, g.theta.size))
    np.add.at(out, (np.repeat(np.arange(n), kk), t.ravel()), wt.ravel())
    return out


def accept_and_residual(p: np.ndarray, g: GRFit) -> tuple[np.ndarray, np.ndarray]:
    r"""Keep probability :math:`\min(1, p/r_\theta)` per token and the residual :math:`\mathrm{norm}((p - r_\theta)_+)`.

    Parameters
    ----------
    p : ndarray, shape (V,)
        Target distribution.
    g : GRFit
        A fitted rule.

    Returns
    -------
    accept, residual : ndarray, shape (V,)

    Examples
    --------
    >>> g = fit([0.5, 0.5], [0.5, 0.5], 1)
    >>> [a.round(6).tolist() for a in accept_and_residual(np.array([0.5, 0.5]), g)]
    [[1.0, 1.0], [0.5, 0.5]]
    """
    r = g.r
    with np.errstate(divide="ignore", invalid="ignore"):
        acc = np.where(r > 0, np.minimum(1.0, p / np.where(r > 0, r, 1.0)), 0.0)
    res = np.maximum(p - r, 0.0)
    res = res / res.sum() if res.sum() > 0 else p
    return acc, res


def kernel_rows(p: Any, g: GRFit, tuples: Any) -> np.ndarray:
    r"""Exact output law :math:`\pi(y \mid x)` of the fitted rule for each draft tuple.

    Lossless for every fit: :math:`\sum_x Q(x) \pi(\cdot \mid x) = p` up to the quadrature
    error of :math:`r_\theta` (~1e-15).

    Parameters
    ----------
    p : array_like, shape (V,)
        Target distribution.
    g : GRFit
        A fitted rule (any tolerance).
    tuples : array_like of int, shape (n, k)
        Draft tuples.

    Returns
    -------
    ndarray, shape (n, V)

    Examples
    --------
    >>> g = fit([0.5, 0.5], [0.5, 0.5], 1)
    >>> kernel_rows([0.5, 0.5], g, [[0], [1]]).round(6).tolist()
    [[1.0, 0.0], [0.0, 1.0]]
    """
    p = np.asarray(p, dtype=np.float64)
    acc, res = accept_and_residual(p, g)
    a = selection_rows(g, tuples) * acc[None, :]
    return a + (1.0 - a.sum(axis=1))[:, None] * res[None, :]


class GlobalResolutionVerifier(Verifier):
    r"""Global Resolution for k i.i.d. drafts: lossless, acceptance within ``tol`` of :math:`\alpha^*`.

    Examples
    --------
    >>> import otspec
    >>> from otspec.verifiers import global_resolution
    >>> p, law = [0.5, 0.3, 0.2], otspec.iid([0.2, 0.3, 0.5], 2)
    >>> abs(global_resolution.acceptance(p, law).value - 0.86) < 1e-6
    True
    """

    name = "global_resolution"
    rule = "Global Resolution needs k i.i.d. drafts (otspec.iid, or otspec.product with identical drafters)"
    fix = "build the law with otspec.iid(q, k), or use optimal_plan on small laws"
    reference = "Thomas & Pal, ICLR 2026 (arXiv 2511.15898); our reading (docs: Referee)"

    def applies_to(self, law: DraftLaw) -> bool:
        return _iid_q(law)[0] is not None

    def _check(self, p, law):
        if isinstance(law, DraftLaw):
            q, why = _iid_q(law)
            if q is None:
                raise UnsupportedMethodError(f"verifier {self.name!r} does not apply to the draft law {law!r}: {why}; {self.fix}")
        return super()._check(p, law)

    def fitted(self, p: Any, law: DraftLaw) -> GRFit:
        """The fitted rule for ``(p, law)`` (memoised on the law), at the default tolerance.

        Parameters
        ----------
        p : array_like, shape (V,)
            Target distribution.
        law : DraftLaw
            i.i.d. drafts.

        Returns
        -------
        GRFit
        """
        p = self._check(p, law)
        return self._fit(p, law)

    def _fit(self, p, law) -> GRFit:
        q = _iid_q(law)[0]
        return law.cached("global_resolution.fit", p, lambda: fit(p, q, law.k))

    def _prepare(self, p, law):
        self._fit(p, law)

    #: :func:`otspec.report.compare` shows :meth:`certified_bracket` even when asked to fit: the fit
    #: takes seconds to minutes above V ~ 10 000, and the exact optimum it approximates
    #: (``optimal_iid``) is in the same table.
    fit_in_compare = False
    bracket_reason = "not fitted (the convex fit takes minutes at this size; optimal_iid is the exact rule it approximates)"

    def certified_bracket(self, p: Any, law: DraftLaw) -> tuple[float, float] | None:
        r"""A certified interval for the acceptance without the fit, or None when the law is small.

        Where the kernel is too large to build, the acceptance needs the fit (seconds to minutes
        above V ~ 10 000) and Monte Carlo; without them what is certified is
        :math:`[0, \alpha^*]` (no lossless verifier of i.i.d. drafts accepts more; closed form,
        O(V log V)). :func:`otspec.report.compare` shows this interval unless asked to fit.

        Parameters
        ----------
        p : array_like, shape (V,)
            Target distribution.
        law : DraftLaw
            i.i.d. drafts.

        Returns
        -------
        tuple of float, or None
            ``(low, high)`` with ``low <= acceptance <= high``; None if the kernel is affordable.

        Raises
        ------
        UnsupportedMethodError
            If the law is not i.i.d.
        """
        p = self._check(p, law)
        if law.num_tuples() * law.V <= KERNEL_AUTO_MAX_ENTRIES:
            return None
        q = _iid_q(law)[0]
        return 0.0, min(1.0, float(solve_selection(p, q, law.k).alpha) + FLOAT64_ATOL)

    def _rows(self, p, law, tuples):
        return kernel_rows(p, self._fit(p, law), tuples)

    def _sample_rows(self, p, law, tuples, coin_rng, res_rng):
        g = self._fit(p, law)
        acc, res = accept_and_residual(p, g)
        beta = selection_rows(g, tuples)
        u = coin_rng.random((tuples.shape[0], 2))
        cdf = np.cumsum(beta, axis=1)
        y = np.minimum((cdf < u[:, :1] * cdf[:, -1:]).sum(axis=1), law.V - 1)
        keep = u[:, 1] < acc[y]
        z = res_rng.choice(law.V, size=tuples.shape[0], p=res)
        return np.where(keep, y, z)

    # No closed form: sum min(p, r_theta) counts "selected and kept" only; while r_theta != r*
    # the residual (p - r_theta)_+ can also land on a drafted token, so P(Y in drafts) is a little
    # larger (by at most ||r_theta - r*||_1). The kernel (or Monte Carlo) gives the exact value.

    def sample(self, p: Any, law: DraftLaw, drafts: Any, *, rng: np.random.Generator) -> int:
        """One output token: selection and accept coin from one child stream, the residual draw
        from another (``spawn_streams``)."""
        return int(self.sample_batch(p, law, [drafts], rng=rng)[0])

    def sample_batch(self, p: Any, law: DraftLaw, drafts: Any, *, rng: np.random.Generator) -> np.ndarray:
        """One output token per row of ``drafts`` ``(N, k)``."""
        p = self._check(p, law)
        d = law.validate_draft_batch(drafts)
        coins, draws = spawn_streams(rng, 2)
        return self._sample_rows(p, law, d, coins, draws)


global_resolution = GlobalResolutionVerifier()
