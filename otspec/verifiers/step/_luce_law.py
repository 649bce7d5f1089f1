r"""The law of the two-level Luce selection rule on drafts without replacement (the law oracle).

The rule (:mod:`otspec.verifiers.step.optimal_wor`): given the drafted set D, a token set A and
weights :math:`b \ge 0`, let :math:`D' = D \cap A` if D meets A, else :math:`D' = D`; select
:math:`y \in D'` with probability :math:`b_y / b(D')`. Its selection law is
:math:`r_b(y) = \sum_U P(D = U)\, 1\{y \in U'\}\, b_y / b(U')`.

Two evaluations:

* :func:`luce_law_exact` sums over the enumerated draft sets (small problems; exact up to
  rounding).
* :func:`luce_law_quadrature`, at any V, by a double integral. Draws without replacement are the
  first k clocks to ring of independent :math:`T_j \sim \mathrm{Exp}(q_j)`; with
  :math:`R(t)` the set rung by time t, the state :math:`R(t) = U` (|U| = k) is left at rate
  :math:`1 - q(U)`, so :math:`P(D = U) = \int_0^\infty P(R(t) = U)\,(1 - q(U))\,dt`. The Luce
  choice is the first of independent clocks :math:`S_z \sim \mathrm{Exp}(b_z)` on D'. Hence, for
  :math:`y \in A`,

  .. math:: r_b(y) = \int_0^\infty\!\!\int_0^\infty b_y e^{-b_y s}\, \pi_y(t)\,
            [x^{k-1} \varepsilon]\prod_{j \ne y}\big(a_j(1 + \varepsilon q_j) + \pi_j w_j x\big)\, dt\, ds,

  with :math:`a_j = e^{-q_j t}`, :math:`\pi_j = 1 - a_j` (token j has rung), :math:`w_j = e^{-s b_j}`
  for :math:`j \in A` and 1 for :math:`j \notin A` (the other A-drafts must lose the Luce race);
  x counts rung tokens and the :math:`\varepsilon`-coefficient sums :math:`q_j` over the tokens not
  rung, i.e. the exit rate :math:`1 - q(U)`. For :math:`y \notin A` the A-factors are
  :math:`a_j(1+\varepsilon q_j)` (no A token may ring) and :math:`w_j = e^{-s b_j}` on the others.
  The coefficients are a Poisson-binomial recursion truncated at degree k - 1 over the tokens: a
  forward pass stores the prefix products, a backward pass carries the suffix product, and the
  leave-one-out product of token y is prefix(y) x suffix(y) (on the A side the H tokens' factors do
  not depend on s: their product is formed once per t-node and starts the recursion over A, so a
  node costs O(|A| + |H|) = O(V)) -- every term is non-negative, so
  there is no cancellation and no deconvolution. Both integrals are trapezoidal sums in
  :math:`\log t` and :math:`\log s` (exponentially convergent for integrands analytic in a strip);
  the ranges are cut where rigorous tail bounds fall below :data:`TAIL_EPS`, except the left end
  in s, where the integrand is :math:`b_y s\, G_y(0)(1 + O(s k))` and the trapezoid nodes left of
  :data:`S_LEFT` are summed in closed form (a geometric series) onto the first node; on every
  grid wide enough, each rule's nodes below :math:`s_c` (:math:`k s_c \approx` :data:`LEFT_KS`,
  the geometric tail included) are replaced by :data:`LEFT_NODES` Chebyshev nodes exact on
  polynomials of degree below that (:func:`_left_rule`; the integrand is entire there, with
  Taylor coefficients :math:`|G_n| \le G(0) k^n / n!`), whose a-priori bound joins the error. Cost:
  :math:`O(N_s N_t V k)`, every (s, t) node independent of the others (compiled with numba, a
  core dependency, the t-nodes split over numba's threads; without numba a warning says it runs
  as plain Python).
  **Head / tail split** (:func:`tail_split`): a token whose clock rarely rings over the whole
  t-range (:math:`q_j t_{max} \le \rho`) needs no recursion step per node. With
  :math:`u_j = (e^{q_j t} - 1) w_j` the tail's factors multiply to :math:`e^{-q_T t}
  \exp(\sum_m (-1)^{m+1} S_m x^m / m + \varepsilon(q_T + \sum_m (-1)^m R_m x^m))` (truncated
  power series), where the power sums :math:`S_m = \sum_T u_j^m`, :math:`R_m = \sum_T q_j u_j^m`
  come from the moments :math:`\sum_T q_j^n w_j^m` of each s-node through the Taylor series of
  :math:`(e^{z} - 1)^m` (truncation below 1e-18 relative); the head tokens (a few hundred at
  V ~ 50 000) are recursed at every node from that product. A tail token's leave-one-out divides
  the full product by its own factor, the geometric series
  :math:`\pi_y w_y / f_y = \sum_m (-1)^m u_y^{m+1} x^m (1 - (m+1)\varepsilon q_y)` (stable: its
  terms shrink like :math:`k q_y`), so its law is a sum over s-nodes of a polynomial in
  :math:`q_y` whose coefficients are t-sums of the full product: :math:`O(N_s N_t (|head| + k^2) k
  + V N_s k N)` per evaluation instead of :math:`O(N_s N_t V k)`. The error adds the truncation
  and the alternating sums' rounding, relative to the terms' absolute sums.
  Error estimate: the rules of step 2h and 4h are sub-sums of the same nodes (free); their
  distances :math:`d_1 = \|T_h - T_{2h}\|_1 \approx \mathrm{err}(2h)` and
  :math:`d_2 = \|T_{2h} - T_{4h}\|_1 \approx \mathrm{err}(4h)` extrapolate, with
  :math:`\log \mathrm{err}` linear in 1/h (exponential convergence), to
  :math:`\mathrm{err}(h) \approx d_1 (d_1/d_2)^2` -- an a-posteriori estimate, not a proof
  (on exhaustive small cases it exceeds the true L1 error by 10-100x at h = 0.25, where the true
  error is ~1e-15) -- plus the rigorous tail bounds and a rounding allowance.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np

__all__ = [
    "LuceLaw",
    "QuadratureGrid",
    "TAIL_EPS",
    "T_MAX",
    "WEIGHT_FLOOR",
    "floor_weights",
    "law_from_sums",
    "luce_law_exact",
    "luce_law_quadrature",
    "luce_selection_rows",
    "quadrature_grid",
    "tail_split",
]

#: Bound on the mass each of the four cut tails of the double integral may drop.
TAIL_EPS = 1e-17
#: Left end of the s-integral (weights scaled to maximum 1 per level): the nodes below are summed
#: in closed form (a geometric series), with relative error O(k S_LEFT).
S_LEFT = 1e-9
#: Below :math:`s_c` with :math:`k s_c` at most this, the s-integrand is an entire function of
#: small argument: each rule's nodes there are replaced by :data:`LEFT_NODES` nodes exact on
#: polynomials of degree below that (about half the s-nodes at h = 0.25).
LEFT_KS = 0.25
#: Nodes of the compressed left end (relative error below 1e-19 at k s_c = 0.25).
LEFT_NODES = 14
#: Unit roundoff of float64.
ROUND = 2.0**-53
#: Tokens with :math:`q_j t_{max}` at most this enter the integral through power sums (the tail of
#: :func:`tail_split`): small enough for a short series, large enough that the head, the tokens
#: recursed at every node, is a few hundred at V ~ 50 000.
TAIL_RHO = 0.05
#: Relative truncation error of the tail's series (below float64 rounding).
TAIL_TRUNC = 1e-18
#: The split pays from this many tail tokens on (below it the plain recursion is as fast).
TAIL_MIN = 64
#: Positive weights below this fraction of their level's maximum are raised to it: the s-range
#: grows like 1 / (smallest weight) (a weight of 1e-318 made it infinite), and a token this light
#: is selected over any weight-1 token of D' with probability at most WEIGHT_FLOOR. The law
#: returned is that of the floored weights; the rule uses the same ones (:func:`floor_weights`).
WEIGHT_FLOOR = 1e-18
#: Largest t of the t-grid (e^t must stay finite in float64): where q's mass outside its top k
#: is below ~1e-298 the t-range is cut here and the dropped tail is added to the error.
T_MAX = 1e300


@dataclass(frozen=True, eq=False)
class LuceLaw:
    r"""Selection law of a two-level Luce rule, with its accuracy.

    Attributes
    ----------
    r : ndarray, shape (V,)
        The law :math:`r_b` (sums to 1 up to ``error``).
    error : float
        Estimated bound on :math:`\\|r - r_b\\|_1` (0 for the exact enumeration up to rounding).
    method : str
        ``"exact"`` (enumeration of the draft sets) or ``"quadrature"``.
    nodes : int
        Quadrature nodes (0 for ``"exact"``).
    second : ndarray, shape (V,) or None
        :math:`\sum_U P(D = U)\, \sigma_y(U)^2` with :math:`\sigma_y(U) = b_y/b(U')`: with ``r``
        it gives the diagonal :math:`r_y - \text{second}_y` of the Hessian of the weights'
        convex objective (:mod:`~otspec.verifiers.step._luce_weights`).
    """

    r: np.ndarray
    error: float
    method: str
    nodes: int = 0
    second: np.ndarray | None = None


def floor_weights(b: np.ndarray, in_A: np.ndarray, active: np.ndarray | None = None) -> np.ndarray:
    r"""The weights the quadrature oracle evaluates: each level scaled to maximum 1, and the
    positive weights (or, with ``active``, the active tokens' weights, including ones that
    underflowed to 0) raised to at least :data:`WEIGHT_FLOOR`.

    Parameters
    ----------
    b : ndarray, shape (V,)
        Non-negative Luce weights.
    in_A : ndarray of bool, shape (V,)
        The upper level.
    active : ndarray of bool, shape (V,), optional
        Tokens whose weight must be positive (default: those with b > 0).

    Returns
    -------
    ndarray, shape (V,)
        The floored weights (0 off ``active``): the same Luce rule up to the floor, and the
        weights whose law :func:`luce_law_quadrature` returns (it floors its input this way).

    Examples
    --------
    >>> floor_weights(np.array([2.0, 1e-300, 0.0]), np.zeros(3, dtype=bool)).tolist()
    [1.0, 1e-18, 0.0]
    """
    b = np.asarray(b, dtype=np.float64)
    act = b > 0 if active is None else np.asarray(active, dtype=bool)
    out = np.zeros(b.size)
    for lev in (act & in_A, act & ~in_A):
        if lev.any():
            m = b[lev].max()
            out[lev] = np.maximum(b[lev] / m, WEIGHT_FLOOR) if m > 0 else 1.0
    return out


def luce_selection_rows(rows: np.ndarray, b: np.ndarray, in_A: np.ndarray) -> np.ndarray:
    """Selection probabilities of the two-level Luce rule for drafted rows.

    Parameters
    ----------
    rows : ndarray of int64, shape (n, k)
        Distinct drafted tokens per row (``-1`` pads a row of fewer tokens).
    b : ndarray, shape (V,)
        Non-negative Luce weights.
    in_A : ndarray of bool, shape (V,)
        The upper level A.

    Returns
    -------
    ndarray, shape (n, k)
        Probability of selecting each row entry: :math:`b_y / b(D')` on :math:`D'` (D' = D meets A ?
        D with A : D), 0 elsewhere. Where :math:`b(D') = 0` (an event of probability 0 when the
        weights solve the scaling problem) D' is chosen uniformly -- the documented fallback.
    """
    valid = rows >= 0
    T = np.maximum(rows, 0)
    inA = in_A[T] & valid
    level = np.where(inA.any(axis=1)[:, None], inA, valid)
    bw = np.where(level, b[T], 0.0)
    tot = bw.sum(axis=1, keepdims=True)
    cnt = level.sum(axis=1, keepdims=True)
    return np.where(tot > 0, bw / np.where(tot > 0, tot, 1.0), level / np.maximum(cnt, 1))


def luce_law_exact(sets: np.ndarray, weights: np.ndarray, b: np.ndarray, in_A: np.ndarray) -> LuceLaw:
    """The law :math:`r_b` by summing over enumerated draft sets.

    Parameters
    ----------
    sets : ndarray of int64, shape (S, k)
        Draft sets (``-1`` padding), e.g. from ``law.enumerate_sets()``.
    weights : ndarray, shape (S,)
        Their probabilities.
    b : ndarray, shape (V,)
        Luce weights.
    in_A : ndarray of bool, shape (V,)
        The upper level.

    Returns
    -------
    LuceLaw
        ``method="exact"``, ``error`` the rounding of the sums.
    """
    sig = luce_selection_rows(sets, b, in_A)
    sel = sig * weights[:, None]
    valid = sets >= 0
    r = np.bincount(sets[valid], weights=sel[valid], minlength=b.size)
    second = np.bincount(sets[valid], weights=(sel * sig)[valid], minlength=b.size)
    return LuceLaw(r=r, error=4e-16 * max(1, sets.shape[0]) ** 0.5, method="exact", second=second)


# ------------------------------------------------------------------------------------------------
# Quadrature


def _gamma_tail_x(k: int, eps: float) -> float:
    r"""Smallest x (on a 1.1 grid) with :math:`P(\mathrm{Gamma}(k+1, 1) > x) \le` eps."""
    x = 10.0
    while math.exp(-x) * sum(x**i / math.factorial(i) for i in range(k + 1)) > eps:
        x *= 1.1
    return x


def _gamma_sf(k: int, x: float) -> float:
    r""":math:`P(\mathrm{Gamma}(k+1, 1) > x)` (at most 1)."""
    return min(1.0, math.exp(-x) * sum(x**i / math.factorial(i) for i in range(k + 1)))


def _grid(lo: float, hi: float, h: float) -> tuple[np.ndarray, np.ndarray]:
    """Nodes ``i h`` covering ``[lo, hi]`` (log scale) and their coarseness: 2 where 4 divides i
    (a node of the step-4h rule), 1 where 2 does, else 0."""
    i = np.arange(math.floor(lo / h), math.ceil(hi / h) + 1)
    return i * h, ((i % 2) == 0).astype(np.int64) + ((i % 4) == 0).astype(np.int64)


@dataclass(frozen=True, eq=False)
class QuadratureGrid:
    r"""The nodes of the double integral for one (q, b, A, k) (shared by the numba and torch
    evaluations).

    Attributes
    ----------
    V : int
        Vocabulary size.
    pos : ndarray of int64
        Tokens with q > 0 (the others are never drafted; their law is 0).
    q, b : ndarray
        q on ``pos`` (normalised) and b on ``pos`` (each level scaled to maximum 1).
    in_A : ndarray of bool
        A on ``pos``.
    k : int
        Number of drafts.
    h : float
        Step in :math:`\log t` and :math:`\log s`.
    taus, sigmas : ndarray
        Nodes in :math:`\log t` and :math:`\log s`.
    coarse_t, coarse_s : ndarray of int64
        2 at nodes of the step-4h rule, 1 at nodes of the step-2h rule, else 0.
    mult : ndarray, shape (len(sigmas), 3)
        Weight multipliers of the step-h, 2h, 4h rules per s-node: the first :data:`LEFT_NODES`
        s-nodes carry each rule's nodes at or below :math:`s_c = e^{\sigma_c}` (k s_c about
        :data:`LEFT_KS`), compressed (:func:`_left_rule`); without compression the first s-node
        carries the closed-form left tail.
    left_bound : float
        Relative error bound of the compressed left end (0 without compression).
    t_cut : float
        Bound on the L1 mass dropped where the t-range is cut at :data:`T_MAX` (0 otherwise).
    """

    V: int
    pos: np.ndarray
    q: np.ndarray
    b: np.ndarray
    in_A: np.ndarray
    k: int
    h: float
    taus: np.ndarray
    sigmas: np.ndarray
    coarse_t: np.ndarray
    coarse_s: np.ndarray
    mult: np.ndarray
    left_bound: float = 0.0
    t_cut: float = 0.0


def quadrature_grid(q: np.ndarray, b: np.ndarray, in_A: np.ndarray, k: int, h: float) -> QuadratureGrid | LuceLaw:
    r"""The quadrature nodes of :func:`luce_law_quadrature` (or the exact law when D is the whole
    support).

    Parameters
    ----------
    q, b : ndarray, shape (V,)
        Draft distribution and Luce weights.
    in_A : ndarray of bool, shape (V,)
        The upper level.
    k : int
        Number of drafts.
    h : float
        Step of both trapezoidal rules.

    Returns
    -------
    QuadratureGrid or LuceLaw
        The grid; a :class:`LuceLaw` (exact) when exactly k tokens have q > 0.
    """
    V = q.size
    pos = np.flatnonzero(q > 0)
    qq = q[pos] / q[pos].sum()
    bb = np.asarray(b, dtype=np.float64)[pos].copy()
    inA = np.asarray(in_A, dtype=bool)[pos]
    if pos.size == k:  # D is the whole support
        sel = luce_selection_rows(np.arange(k)[None, :], bb, inA)[0]
        r = np.zeros(V)
        r[pos] = sel
        second = np.zeros(V)
        second[pos] = sel**2
        return LuceLaw(r=r, error=0.0, method="exact", second=second)
    # only ratios within a level matter: scale each to max 1, floor the positive ones (their
    # s-range is 1 / the smallest weight)
    bb = floor_weights(bb, inA)
    srt = np.sort(qq)
    lam = float(srt[: pos.size - k].sum())  # smallest exit rate of a k-set: 1 - (top-k mass)
    lam1 = float(srt[: pos.size - k + 1].sum())  # 1 - (top-(k-1) mass)
    t_lo = (TAIL_EPS * math.factorial(k + 1)) ** (1.0 / (k + 1))
    x_tail = _gamma_tail_x(k, TAIL_EPS)
    # q's mass outside its top k below ~1e-298: cut at T_MAX, the dropped mass (the k-th ring
    # after T_MAX, Gamma(k+1) tail at lam T_MAX) joins the error, for every token
    t_hi = x_tail / lam if x_tail < lam * T_MAX else T_MAX
    t_cut = 0.0 if t_hi < T_MAX else pos.size * _gamma_sf(k, lam * T_MAX)
    s_lo = S_LEFT / k
    act = bb > 0
    m_y = np.minimum(1.0, k * qq[act] / lam1) * pos.size
    s_hi = float(np.max(np.log(np.maximum(m_y / TAIL_EPS, 2.0)) / bb[act])) if act.any() else 1.0
    taus, ct = _grid(math.log(t_lo), math.log(t_hi), h)
    i0 = 4 * math.floor(math.log(s_lo) / (4 * h))  # first s-node: a node of all three rules
    sigmas, cs = _grid(i0 * h, math.log(s_hi), h)
    # left tail in s: below s_0 = e^{sigma_0} the integrand is b_y s G(0) (1 + O(s k)), so the
    # trapezoid sum over the nodes left of sigma_0 is the first node's term times a geometric sum
    mult = np.ones((sigmas.size, 3))
    mult[0] = [1.0 / (1.0 - math.exp(-m * h)) for m in (1, 2, 4)]
    ic = 4 * math.floor(math.log(LEFT_KS / k) / (4 * h))  # s_c = e^(ic h): a node of all three rules
    if ic - i0 > 2 * LEFT_NODES:  # the rules' nodes at or below s_c become LEFT_NODES nodes
        s_left, w_left = _left_rule(math.exp(ic * h), h)
        keep = sigmas > (ic + 0.5) * h
        sigmas = np.concatenate([np.log(s_left), sigmas[keep]])
        cs = np.concatenate([np.full(LEFT_NODES, 2, dtype=np.int64), cs[keep]])
        mult = np.concatenate([w_left / (np.array([1.0, 2.0, 4.0]) * h * s_left[:, None]), mult[keep]])
        # G(s) = sum_S c_S e^{-s lambda_S}, c_S >= 0, rates lambda_S <= k (weights <= 1 per level):
        # |G_n| <= G(0) k^n / n! and G(0) <= e^{k s_c} G(s) on (0, s_c]; the rules agree on degrees
        # below LEFT_NODES, so they differ by at most this fraction of the left part (<= the mass)
        ks = k * math.exp(ic * h)
        left_bound = (
            (1.0 + np.abs(w_left[:, 0]).sum() / w_left[:, 0].sum()) * math.exp(2 * ks) * ks**LEFT_NODES / math.factorial(LEFT_NODES)
        )
    else:
        left_bound = 0.0
    return QuadratureGrid(V, pos, qq, bb, inA, k, h, taus, sigmas, ct, cs, mult, float(left_bound), float(t_cut))


def _left_rule(s_c: float, h: float) -> tuple[np.ndarray, np.ndarray]:
    r"""Nodes in (0, s_c] and, per rule (step h, 2h, 4h), weights that integrate every polynomial
    of degree below :data:`LEFT_NODES` exactly as that rule's nodes at or below :math:`\log s_c`
    do: :math:`\sum_{j \ge 0} \ell h\, s_j G(s_j)`, :math:`s_j = s_c e^{-j \ell h}`.

    Returns
    -------
    nodes : ndarray, shape (LEFT_NODES,)
        Chebyshev points of (0, s_c).
    weights : ndarray, shape (LEFT_NODES, 3)
        The weight of :math:`G(s_i)` in the h, 2h and 4h rules (interpolatory, some negative).
    """
    x = -np.cos(np.pi * (2 * np.arange(LEFT_NODES) + 1) / (2 * LEFT_NODES))  # ascending
    T = np.polynomial.chebyshev.chebvander(x, LEFT_NODES - 1)
    weights = np.empty((LEFT_NODES, 3))
    for c, ell in enumerate((1, 2, 4)):
        u = np.exp(-np.arange(int(55.0 / (ell * h)) + 1) * ell * h)  # e^-55: below float64's resolution
        moments = np.polynomial.chebyshev.chebvander(2 * u - 1, LEFT_NODES - 1).T @ (ell * h * s_c * u)
        weights[:, c] = np.linalg.solve(T.T, moments)
    return s_c * (1 + x) / 2, weights


def law_from_sums(grid: QuadratureGrid, out: np.ndarray, out2: np.ndarray, out4: np.ndarray, second: np.ndarray) -> LuceLaw:
    r"""The :class:`LuceLaw` from the trapezoid sums of step h, 2h and 4h on ``grid.pos``.

    Parameters
    ----------
    grid : QuadratureGrid
        The grid the sums were taken on.
    out, out2, out4 : ndarray, shape (len(grid.pos),)
        The step-h, 2h and 4h sums of :math:`r_b`.
    second : ndarray, shape (len(grid.pos),)
        The step-h sum of :math:`\sum_U P(U)\sigma_y(U)^2`.

    Returns
    -------
    LuceLaw
        ``method="quadrature"`` with the extrapolated error estimate (module docstring).
    """
    r = np.zeros(grid.V)
    r[grid.pos] = out
    sec = np.zeros(grid.V)
    sec[grid.pos] = second
    n = grid.pos.size
    d1 = float(np.abs(out - out2).sum())  # ~ error of the step-2h rule
    d2 = float(np.abs(out2 - out4).sum())  # ~ error of the step-4h rule
    # log(error) is about linear in 1/h: extrapolate from 1/(4h), 1/(2h) to 1/h (capped by d1)
    est = d1 * min(1.0, d1 / d2) ** 2 if d2 > 0 else d1
    err = est + 64 * ROUND * n + 4 * TAIL_EPS * n + grid.left_bound + grid.t_cut
    return LuceLaw(r=r, error=err, method="quadrature", nodes=int(grid.taus.size * grid.sigmas.size), second=sec)


def luce_law_quadrature(q: np.ndarray, b: np.ndarray, in_A: np.ndarray, k: int, *, h: float = 0.25, tail_rho: float = TAIL_RHO) -> LuceLaw:
    r"""The law :math:`r_b` at any V by the double integral of the module docstring.

    Parameters
    ----------
    q : ndarray, shape (V,)
        Draft distribution (drafts without replacement).
    b : ndarray, shape (V,)
        Non-negative Luce weights (only their ratios within each level matter).
    in_A : ndarray of bool, shape (V,)
        The upper level A.
    k : int
        Number of drafts (at most the number of tokens with q > 0).
    h : float
        Step of both trapezoidal rules in :math:`\log t` and :math:`\log s` (0.25: L1 error
        ~1e-14 and a conservative estimate on the tested cases; 0.5: ~1e-7 with four times fewer
        nodes, where the estimate may fall below the true error).
    tail_rho : float
        Tokens with :math:`q_j t_{max} \le` ``tail_rho`` enter through power sums
        (:func:`tail_split`); 0 recurses over every token at every node.

    Returns
    -------
    LuceLaw
        ``method="quadrature"``; ``error`` = :math:`\|T_h - T_{2h}\|_1` plus the four tail
        bounds (module docstring) and, with the split, the tail series' truncation and rounding
        allowance.
    """
    g = quadrature_grid(q, b, in_A, k, h)
    if isinstance(g, LuceLaw):
        return g
    from otspec.verifiers.step._luce_kernels import COMPILED, UncompiledLuceWarning, integrate, num_threads  # lazily: slow import

    if not COMPILED:  # the user is told: the plain-Python loops are 100-1000x slower than compiled
        warnings.warn(
            "numba is not importable, so the Luce law's double integral runs as plain Python (100-1000x slower "
            "than compiled: minutes per evaluation above a few thousand tokens); numba is a core dependency of "
            "otspec: reinstall it (pip install numba)",
            UncompiledLuceWarning,
            stacklevel=2,
        )

    nchunks = max(1, min(num_threads(), g.taus.size))
    acc = np.zeros((nchunks, 4, g.pos.size))
    split = tail_split(g, tail_rho) if tail_rho > 0 else None
    if split is None:
        integrate(g.q, g.b, g.in_A, k, g.taus, h, g.sigmas, h, g.coarse_t, g.coarse_s, g.mult, nchunks, acc)
        slack = 0.0
    else:
        from otspec.verifiers.step._luce_kernels import split_sums

        _, _, _, N, delta = split
        acc, absout = split_sums(g, split, nchunks, tail_rho, TAIL_TRUNC)
        # the tail's truncated series (relative error delta per term) and its alternating sums'
        # rounding, both relative to the terms' absolute sum
        slack = k * (max(delta, TAIL_TRUNC) + 8 * (N + k) * ROUND) * float(absout.sum())
    out, out2, out4, m2 = acc.sum(axis=0)
    law = law_from_sums(g, out, out2, out4, m2)
    return LuceLaw(r=law.r, error=law.error + slack, method=law.method, nodes=law.nodes, second=law.second)


def tail_split(grid: QuadratureGrid, rho: float) -> tuple | None:
    r"""The tail of the head / tail split of the double integral (None when it is too small to pay).

    A token whose clock rings with small probability over the whole t-range (:math:`q_j t_{max}
    \le \rho`) enters the products through power sums :math:`\sum_j q_j^n w_j^m` (per s-node, not
    per (s, t) node), with :math:`(e^{q_j t} - 1)^m = \sum_n C_{m,n} (q_j t)^n` truncated where the
    relative remainder, at most :math:`(k\rho)^{N+1} e^{k\rho} / (N+1)!` (the coefficients of
    :math:`((e^z - 1)/z)^m` are bounded by those of :math:`e^{mz}`), is below :data:`TAIL_TRUNC`;
    its own leave-one-out is the geometric series of its factor (convergent, :math:`q_y t < 1`).

    Parameters
    ----------
    grid : QuadratureGrid
        The nodes (their largest t sets the split).
    rho : float
        The split's bound on :math:`q_j t_{max}`.

    Returns
    -------
    tuple or None
        ``(is_tail, theta, C, N, delta)``: the tail mask on ``grid.pos``, its largest q, the
        coefficients ``C[m, d]`` of :math:`z^{m+d}` in :math:`(e^z - 1)^m` (m = 0..k, d = 0..N)
        and the truncation's relative error bound ``delta``; None when fewer than
        :data:`TAIL_MIN` tokens qualify.
    """
    k = grid.k
    is_tail = grid.q * math.exp(grid.taus[-1]) <= rho
    if int(is_tail.sum()) < TAIL_MIN:
        return None
    N = 1
    while (k * rho) ** (N + 1) * math.exp(k * rho) / math.factorial(N + 1) > TAIL_TRUNC:
        N += 1
    D = k + N + 1
    phi = np.array([0.0] + [1.0 / math.factorial(i) for i in range(1, D + 1)])  # e^z - 1
    C = np.zeros((k + 1, N + 1))
    power = np.zeros(D + 1)
    power[0] = 1.0
    for m in range(1, k + 1):
        power = np.convolve(power, phi)[: D + 1]
        C[m] = power[m : m + N + 1]
    delta = (k * rho) ** (N + 1) * math.exp(k * rho) / math.factorial(N + 1)
    return is_tail, float(grid.q[is_tail].max()), C, N, delta
