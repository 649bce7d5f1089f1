r"""The optimal selection law :math:`r^*` for k drafts drawn without replacement (prefix cut + cap/floor).

With :math:`g(H) = P(\text{every draft lies in } H)` and :math:`f(S) = 1 - g(S^c)`, the optimal
acceptance is :math:`\alpha^*_{WOR} = 1 + \min_H [p(H) - g(H)]`. The minimiser can be taken to be a
prefix :math:`H^*` of the tokens sorted by :math:`p/q` ascending (q = 0 last; Lemma Q and the
exchange argument in ``docs/optimal_wor.rst``), so one sorted scan finds it
(:func:`otspec._race.wor_dual_minimum`). With :math:`A = \Omega \setminus H^*`,

.. math:: r^*(y) = \min(p(y), c\,q(y)) \ (y \in A), \qquad r^*(y) = \max(p(y), c'q(y)) \ (y \in H^*),

:math:`\sum_A \min(p, cq) = 1 - g(H^*)` and :math:`\sum_{H^*} \max(p, c'q) = g(H^*)`. This
:math:`r^*` lies in the base polytope :math:`B(f)` (it is the law of a selection rule) and
:math:`\sum_y \min(p, r^*) = \alpha^*_{WOR}`. Both constants come from one scan each side.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from otspec import _race
from otspec.laws import ratio_order

__all__ = ["WorSelection", "wor_selection"]


@dataclass(frozen=True, eq=False)
class WorSelection:
    """The optimal selection law for drafts without replacement and its cut.

    Attributes
    ----------
    r : ndarray, shape (V,)
        :math:`r^*` (zero where q is zero; sums to 1).
    in_A : ndarray of bool, shape (V,)
        Membership in :math:`A`, the complement of the optimal prefix cut :math:`H^*`.
    g_cut : float
        :math:`g(H^*) = P(\\text{all drafts in } H^*)` (the mass :math:`r^*(H^*)`).
    alpha : float
        :math:`\\alpha^*_{WOR} = 1 + p(H^*) - g(H^*)`.
    error_bound : float
        Bound on the error of ``alpha`` and ``g_cut`` (the race integral's bound).
    """

    r: np.ndarray
    in_A: np.ndarray
    g_cut: float
    alpha: float
    error_bound: float


def _cap_side(pA: np.ndarray, qA: np.ndarray, target: float) -> np.ndarray:
    """``min(p, c q)`` over tokens in ascending p/q with ``sum = target`` (``target <= p.sum()``)."""
    with np.errstate(over="ignore"):  # a denormal q gives p/q = +inf, the right limit
        rA = pA / qA
    P_lt = np.concatenate([[0.0], np.cumsum(pA)[:-1]])
    Q_ge = np.cumsum(qA[::-1])[::-1]
    with np.errstate(invalid="ignore", over="ignore"):
        F = P_lt + rA * Q_ge  # sum_A min(p, pi_j q), non-decreasing
    j = int(np.searchsorted(F, target, side="left"))
    if j >= pA.size or not np.isfinite(rA[j]):
        return pA.copy()
    c = (target - P_lt[j]) / Q_ge[j]
    lo = rA[j - 1] if j > 0 else 0.0
    c = min(max(c, lo), rA[j])
    return np.where(np.arange(pA.size) < j, pA, c * qA)


def _floor_side(pH: np.ndarray, qH: np.ndarray, target: float) -> np.ndarray:
    """``max(p, c' q)`` over tokens in ascending p/q with ``sum = target`` (``target >= p.sum()``)."""
    with np.errstate(over="ignore"):
        rH = pH / qH
    Q_le = np.cumsum(qH)
    P_gt = np.concatenate([np.cumsum(pH[::-1])[::-1][1:], [0.0]])
    S = rH * Q_le + P_gt  # sum_H max(p, pi_j q), non-decreasing
    j = max(int(np.searchsorted(S, target, side="left")), 1)
    if j <= pH.size - 1:
        cp = (target - P_gt[j - 1]) / Q_le[j - 1]
        cp = min(max(cp, rH[j - 1]), rH[j])
    else:
        cp = max(target / Q_le[-1], rH[-1])
    return np.where(np.arange(pH.size) < j, cp * qH, pH)


def wor_selection(p: np.ndarray, q: np.ndarray, k: int) -> WorSelection:
    r"""The optimal selection law :math:`r^*` for k drafts without replacement from q.

    Parameters
    ----------
    p, q : ndarray, shape (V,)
        Target and draft distributions (validated by the caller).
    k : int
        Number of drafts, at most the number of tokens with q > 0.

    Returns
    -------
    WorSelection
        :math:`r^*`, the set :math:`A`, :math:`g(H^*)`, :math:`\alpha^*_{WOR}` and the error bound
        of the race integral behind them.

    Examples
    --------
    >>> import numpy as np
    >>> s = wor_selection(np.array([0.1, 0.2, 0.7]), np.array([0.5, 0.3, 0.2]), 2)
    >>> round(s.alpha, 12), s.in_A.tolist()
    (0.785714285714, [False, False, True])
    """
    V = p.shape[0]
    order = ratio_order(p, q)
    res = _race.wor_dual_minimum(p[order], q[order], k)
    nH = int(res.index)
    qs = q[order]
    err = float(res.error_bound)
    if nH == 0:
        g = 0.0
    elif nH == V or not np.any(qs[nH:] > 0):
        g = 1.0
    else:
        vals, e2 = _race.wor_prefix_at(qs, k, np.array([nH]))
        g, err = float(vals[0]), max(err, float(e2))
    g = min(max(g, 0.0), 1.0)
    ps = p[order]
    r_sorted = np.zeros(V)
    pos = qs > 0  # q = 0 tokens are never drafted: r* = 0 there
    posA, posH = np.flatnonzero(pos[nH:]) + nH, np.flatnonzero(pos[:nH])
    if posA.size:
        r_sorted[posA] = _cap_side(ps[posA], qs[posA], 1.0 - g)
    if posH.size and g > 0.0:
        r_sorted[posH] = _floor_side(ps[posH], qs[posH], g)
    # g = 0 (fewer than k tokens in H*): optimality forces p(H*) = 0 and r* = 0 there
    r = np.zeros(V)
    r[order] = r_sorted
    in_A = np.zeros(V, dtype=bool)
    in_A[order[nH:]] = True
    alpha = float(min(1.0, 1.0 + math.fsum(ps[:nH]) - g))
    return WorSelection(r=r, in_A=in_A, g_cut=g, alpha=alpha, error_bound=err)
