r"""The selection law :math:`r^*` of the optimal i.i.d. verifier, in closed form (part of
:mod:`otspec.verifiers.step.optimal_iid`; the mathematics is in ``docs/optimal_verifier.rst``).

With :math:`\Phi(t) = 1-(1-t)^k`, :math:`H^*` the optimal cut (a prefix in p/q order) and A its
complement, :math:`r^* = \min(p, c\,q)` on A and :math:`\max(p, c'q)` on :math:`H^*`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from otspec._validation import as_distribution, as_int_in_range, check_same_vocab

__all__ = ["Selection", "check_pqk", "selection_law", "solve_selection"]


# ------------------------------------------------------------------------------------------------
# Selection law r* (closed form)


@dataclass(frozen=True, eq=False)
class Selection:
    r: np.ndarray  # (V,) r*
    alpha: float  # 1 + p(H*) - q(H*)^k
    desc: np.ndarray  # tokens with q > 0 in density-descending order (may be a reversed view)
    dens: np.ndarray  # r*/q of those tokens (non-increasing; may be a reversed view)
    cut: np.ndarray  # token ids of H*
    c: float  # A-side cap constant (inf when the A pool is empty)
    c_prime: float  # H*-side floor constant (nan when H* is empty)
    q_desc: np.ndarray | None = None  # q[desc], contiguous (the sort already gathered it: saves a random gather)
    r_desc: np.ndarray | None = None  # r[desc]


def _one_minus_pow(x: float, k: int) -> float:
    """:math:`1 - (1-x)^k` without cancellation for small x."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    return -math.expm1(k * math.log1p(-x))


def solve_selection(p: np.ndarray, q: np.ndarray, k: int) -> Selection:
    # Memory-bound passes over V after the sort: every step writes into a buffer it owns (fresh
    # pages cost more than the arithmetic) and the arithmetic is the same, operation for
    # operation, as the formulas in the comments (so r* is bit-identical to theirs).
    V = p.shape[0]
    if V and q.min() > 0:  # every token has q > 0: no gather
        pos, pp, qq = None, p, q
    else:
        pos = np.flatnonzero(q > 0)
        pp, qq = p[pos], q[pos]
    with np.errstate(over="ignore"):  # a denormal q gives p/q = +inf, the right limit
        pi = pp / qq
    o = np.argsort(pi)  # ascending p/q (tie order is irrelevant: ties are merged)
    n = o.size
    ps, qs = pp[o], qq[o]  # two gathers (a gather of (p, q) rows is ~5x slower)
    with np.errstate(over="ignore"):
        pis = ps / qs
    pos_o = o if pos is None else pos[o]
    r_sorted = np.empty(n)
    if k == 1:  # Phi(t) = t: the base polytope is {q}
        r = np.zeros(V)
        if pos is None:
            r[:] = qq
        else:
            r[pos] = qq
        alpha = float(np.minimum(p, q).sum())
        desc = pos_o[::-1].copy()
        return Selection(r, alpha, desc, np.ones(n), pos_o[pis < 1.0], 1.0, 1.0, qs[::-1].copy(), qs[::-1].copy())
    cp = np.empty(n + 1)  # cp = [0, cumsum(ps)]
    cp[0] = 0.0
    np.cumsum(ps, out=cp[1:])
    cq_raw = np.empty(n + 1)  # [0, cumsum(qs)]
    cq_raw[0] = 0.0
    np.cumsum(qs, out=cq_raw[1:])
    cq = np.minimum(cq_raw, 1.0)
    g = np.power(cq, k)  # g = cp - cq**k
    np.subtract(cp, g, out=g)
    # the optimum is attained at the boundary of a block of tied ratios: only those are candidates
    boundary = np.ones(n + 1, dtype=bool)
    np.not_equal(pis[1:], pis[:-1], out=boundary[1:n])
    g[~boundary] = np.inf
    nH = int(np.argmin(g))  # first minimiser: H* = empty set when alpha* = 1
    del g, boundary
    h = float(cq[nH])
    hk = h**k
    c = _a_side(ps, qs, pis, nH, hk, r_sorted)
    c_prime = _h_side(ps, qs, pis, nH, hk, cq_raw, r_sorted)
    r = np.zeros(V)
    r[pos_o] = r_sorted
    dens = _densities(r_sorted, ps, qs, pis, nH, c, c_prime)
    alpha = float(min(1.0, 1.0 + cp[nH] - hk))
    # the descending-order arrays are reversed views (read by the super-token geometry only)
    return Selection(r, alpha, pos_o[::-1], dens[::-1], pos_o[:nH].copy(), float(c), float(c_prime), qs[::-1], r_sorted[::-1])


def _a_side(ps, qs, pis, nH, hk, r_sorted) -> float:
    """A = tokens nH..n-1 (ascending): r = min(p, c q) with sum Phi(q(A)) = 1 - h^k, written into
    ``r_sorted[nH:]``; returns c (inf when A is empty or never capped)."""
    c = math.inf
    n = ps.size
    if nH >= n:
        return c
    target = 1.0 - hk
    pA, qA, rA = ps[nH:], qs[nH:], pis[nH:]
    m = pA.size
    P_lt = np.empty(m)  # p-mass of A-tokens before j: [0, cumsum(pA)[:-1]]
    P_lt[0] = 0.0
    np.cumsum(pA[:-1], out=P_lt[1:])
    Q_ge = np.cumsum(qA[::-1])[::-1]  # q-mass of A-tokens from j on
    F = np.multiply(rA, Q_ge)  # F = P_lt + rA * Q_ge: sum_A min(p, pi_j q), non-decreasing in j
    np.add(P_lt, F, out=F)
    j = int(np.searchsorted(F, target, side="left"))
    if j < m:
        c = (target - P_lt[j]) / Q_ge[j]
        lo = rA[j - 1] if j > 0 else 0.0
        c = min(max(c, lo), rA[j])  # rounding only: keep the densities sorted
        r_sorted[nH : nH + j] = pA[:j]  # r = p before j, c q from j on
        np.multiply(c, qA[j:], out=r_sorted[nH + j :])
    else:  # F never reaches the target (rounding): r = p on A
        r_sorted[nH:] = pA
    return c


def _h_side(ps, qs, pis, nH, hk, cq_raw, r_sorted) -> float:
    """H* = tokens 0..nH-1: r = max(p, c' q) with sum h^k, written into ``r_sorted[:nH]``;
    returns c' (nan when H* is empty)."""
    if nH == 0:
        return math.nan
    pH, qH, rH = ps[:nH], qs[:nH], pis[:nH]
    Q_le = cq_raw[1 : nH + 1]  # q-mass of tokens 0..j: cumsum(qH), the same sequential sums
    P_gt = np.empty(nH)  # p-mass after j: [cumsum(pH[::-1])[::-1][1:], 0]
    P_gt[-1] = 0.0
    if nH > 1:
        np.cumsum(pH[:0:-1], out=P_gt[-2::-1])
    S = np.multiply(rH, Q_le)  # S = rH * Q_le + P_gt: sum_H max(p, pi_j q), non-decreasing in j
    np.add(S, P_gt, out=S)
    j = int(np.searchsorted(S, hk, side="left"))  # pool = tokens < j, c' in [pi_{j-1}, pi_j]
    j = max(j, 1)
    if j <= nH - 1:
        c_prime = (hk - (P_gt[j - 1])) / Q_le[j - 1]
        c_prime = min(max(c_prime, rH[j - 1]), rH[j])
    else:
        c_prime = max(hk / Q_le[-1], rH[-1])
    np.multiply(c_prime, qH[:j], out=r_sorted[:j])  # r = c' q before j, p from j on
    r_sorted[j:nH] = pH[j:]
    return c_prime


def _densities(r_sorted, ps, qs, pis, nH, c, c_prime) -> np.ndarray:
    """Densities r*/q in ascending p/q order, with the pools at exactly their constant (so that
    equal densities are recognised as equal) and p-tokens at exactly p/q."""
    d = pis.copy()
    n = pis.size
    is_p = np.equal(r_sorted, ps)
    if nH < n and np.isfinite(c):
        np.copyto(d[nH:], c, where=~is_p[nH:])  # np.where(is_p, pis, c)
    if nH > 0:
        keep = np.greater_equal(pis[:nH], c_prime)
        keep &= is_p[:nH]
        np.copyto(d[:nH], c_prime, where=~keep)  # np.where(is_p & (pis >= c'), pis, c')
    # rounding guard: densities must be non-decreasing in this order
    return np.maximum.accumulate(d, out=d)


def selection_law(p: Any, q: Any, k: Any) -> np.ndarray:
    r"""The optimal selection law :math:`r^*` for k i.i.d. drafts from q against target p.

    With tokens sorted by :math:`p/q` ascending (q = 0 last) and :math:`H^*` the first minimiser
    of :math:`p(H) - q(H)^k` over the prefixes, :math:`A = \Omega \setminus H^*`:

    .. math::
        r^*(y) = \begin{cases} \min(p(y), c\,q(y)) & y \in A,\ \ \sum_A \min(p, cq) = 1 - q(H^*)^k \\
                               \max(p(y), c'q(y)) & y \in H^*,\ \ \sum_{H^*} \max(p, c'q) = q(H^*)^k
                 \end{cases}

    Then :math:`r^*(S) \le 1 - (1 - q(S))^k` for every token set S (it is the law of a selection
    rule) and :math:`\sum_y \min(p, r^*) = \alpha^*`. Cost: one sort and two scans,
    :math:`O(V \log V)`.

    Parameters
    ----------
    p, q : array_like, shape (V,)
        Target and draft distributions.
    k : int
        Number of i.i.d. drafts (>= 1).

    Returns
    -------
    ndarray, shape (V,)
        :math:`r^*` (zero where q is zero; sums to 1).

    Examples
    --------
    >>> r = selection_law([0.5, 0.3, 0.2], [0.2, 0.3, 0.5], 2)  # alpha* = 1 + 0.5 - 0.8**2
    >>> round(float(r.sum()), 12), round(float(np.minimum([0.5, 0.3, 0.2], r).sum()), 12)
    (1.0, 0.86)
    """
    p, q, k = check_pqk(p, q, k)
    return solve_selection(p, q, k).r.copy()


def check_pqk(p, q, k):
    p = as_distribution(p, "p")
    q = as_distribution(q, "q")
    check_same_vocab(p, q)
    return p, q, as_int_in_range(k, "k")
