r"""The primal side of the closed forms of ``method="prefix"``: a feasible coupling's acceptance.

The sorted-prefix dual gives the optimum's value and its cut :math:`H^*` (an upper bound by weak
duality). The lower bound comes from an explicit coupling (:doc:`math`, the closed-form selection
law):

* **i.i.d. and without replacement**: the two-step rule "select a draft with law :math:`r`, accept
  it with :math:`\min(1, p/r)`, else draw from the residual" accepts with :math:`\sum_y \min(p_y,
  r_y)` whenever :math:`r` lies in the base polytope :math:`B(f)`, :math:`f(S) = P(\text{some draft
  in } S)`. The closed-form law is :math:`r^* = \min(p, c\,q)` off the cut (summing to
  :math:`1 - Q(H^{*k})`) and :math:`\max(p, c'q)` on it (summing to :math:`Q(H^{*k})`). Its
  membership is *checked*, not assumed: for i.i.d. drafts by the Lorenz test (densities
  :math:`r/q` sorted descending, the cumulated :math:`r` against :math:`\Phi(t) = 1 - (1 - t)^k` of
  the cumulated q; both curves are checked at the breakpoints, which suffices since :math:`\Phi` is
  concave and the Lorenz curve piecewise linear), in O(V) along the prefix scan's p/q order, which
  is a density order of :math:`r^*` (:func:`lorenz_scan`; a sort only where that order fails its
  O(V) check); without replacement by enumerating
  every token set where that fits (:data:`WOR_CHECK_MAX_V`), otherwise the result is dual only;
* **greedy**: the explicit plan of the closed form (accept the random draft x with
  :math:`\min(p_x, \tilde q_x)`, route the rest of its set's mass to the always-drafted tokens G).
"""

from __future__ import annotations

import numpy as np

from otspec._arith import power
from otspec.bounds.subsets import subset_sums
from otspec.laws import DraftLaw

__all__ = [
    "power",
    "WOR_CHECK_MAX_V",
    "cap_floor_law",
    "iid_primal_sorted",
    "lorenz_scan",
    "lorenz_violation",
    "membership_violation_by_sets",
    "prefix_lower",
]

#: Without replacement, r*'s membership in B(f) is checked over all 2^V token sets up to this V.
WOR_CHECK_MAX_V = 16

#: Relative density inversions tolerated along a caller's order in the Lorenz test (then added to
#: the reported violation).
_ORDER_EPS = 1e-12

#: ... and when the law has at most this many draft tuples to enumerate.
_WOR_CHECK_MAX_TUPLES = 200_000


def _sorted(p: np.ndarray, q: np.ndarray, presorted: bool):
    """p, q and p/q in ascending p/q (``presorted``: the input already is)."""
    with np.errstate(over="ignore"):
        pi = p / q
    if presorted:
        return p, q, pi
    o = np.argsort(pi, kind="stable")
    return p[o], q[o], pi[o]


def _cap(p: np.ndarray, q: np.ndarray, target: float, presorted: bool = False) -> np.ndarray:
    """``min(p, c q)`` with ``sum = target`` (q > 0; ``target <= p.sum()``)."""
    if p.size == 0:
        return p.copy()
    ps, qs, pis = _sorted(p, q, presorted)
    P_le = np.cumsum(ps)
    Q_gt = np.concatenate([np.cumsum(qs[::-1])[::-1][1:], [0.0]])
    with np.errstate(invalid="ignore", over="ignore"):
        S = P_le + np.where(Q_gt > 0, pis * Q_gt, 0.0)
    j = int(np.searchsorted(S, target, side="left"))
    if j >= p.size:
        return p.copy()
    P_lt = P_le[j - 1] if j > 0 else 0.0
    Q_ge = Q_gt[j] + qs[j]
    with np.errstate(over="ignore"):
        c = (target - P_lt) / Q_ge
    if np.isfinite(c):
        return np.minimum(p, c * q)
    # Q_ge subnormal: c overflows although every c q it scales is finite. The ranks >= j (exactly the
    # tokens with p/q >= p_j/q_j, since c lies strictly above the previous ratio) take c q, computed
    # as (target - P_lt) (q / Q_ge) with q / Q_ge <= 1; the others keep p.
    with np.errstate(over="ignore", invalid="ignore"):
        hi = p / q >= pis[j]
    r = p.copy()
    r[hi] = np.minimum(p[hi], (target - P_lt) * (q[hi] / Q_ge))
    return r


def _floor(p: np.ndarray, q: np.ndarray, target: float, presorted: bool = False) -> np.ndarray:
    """``max(p, c' q)`` with ``sum = target`` (q > 0; ``target >= p.sum()``)."""
    if p.size == 0:
        return p.copy()
    ps, qs, pis = _sorted(p, q, presorted)
    P_ge = np.cumsum(ps[::-1])[::-1]
    Q_lt = np.concatenate([[0.0], np.cumsum(qs)[:-1]])
    with np.errstate(invalid="ignore", over="ignore"):
        S = P_ge + np.where(Q_lt > 0, pis * Q_lt, 0.0)
    j = max(int(np.searchsorted(S, target, side="right")) - 1, 0)
    P_gt = P_ge[j + 1] if j + 1 < p.size else 0.0
    Q_le = Q_lt[j] + qs[j]
    with np.errstate(over="ignore"):
        c = (target - P_gt) / Q_le
    if np.isfinite(c):
        return np.maximum(p, c * q)
    # Q_le subnormal (as in _cap): the ranks <= j take c q = (target - P_gt) (q / Q_le), the others p.
    with np.errstate(over="ignore", invalid="ignore"):
        lo = p / q <= pis[j]
    r = p.copy()
    r[lo] = np.maximum(p[lo], (target - P_gt) * (q[lo] / Q_le))
    return r


def cap_floor_law(p: np.ndarray, q: np.ndarray, in_cut: np.ndarray, g: float, order: np.ndarray | None = None) -> np.ndarray:
    r"""The closed-form selection law :math:`r^*`: :math:`\min(p, c\,q)` off the cut with sum
    :math:`1 - g`, :math:`\max(p, c'q)` on the cut with sum :math:`g`; zero where q is zero.

    Parameters
    ----------
    p, q : ndarray, shape (V,)
        Target and draft distributions.
    in_cut : ndarray of bool, shape (V,)
        The optimal cut :math:`H^*`.
    g : float
        :math:`Q(H^{*k})`, the probability that every draft lies in the cut.
    order : ndarray of int64, shape (V,), optional
        The tokens in ascending p/q (saves two sorts; any tie order).

    Returns
    -------
    ndarray, shape (V,)
        :math:`r^*` (its membership in :math:`B(f)` is checked separately).

    Examples
    --------
    >>> r = cap_floor_law(np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.3, 0.5]), np.array([False, True, True]), 0.64)
    >>> r.round(6).tolist()  # sum(min(p, r)) = 0.86, the optimum of 2 i.i.d. drafts
    [0.36, 0.3, 0.34]
    """
    r = np.zeros(p.size)
    if order is None:
        A, H = np.flatnonzero(~in_cut & (q > 0)), np.flatnonzero(in_cut & (q > 0))
    else:
        pos = q[order] > 0
        cut_sorted = in_cut[order]
        A, H = order[~cut_sorted & pos], order[cut_sorted & pos]
    r[A] = _cap(p[A], q[A], 1.0 - g, presorted=order is not None)
    if g > 0:
        r[H] = _floor(p[H], q[H], g, presorted=order is not None)
    return r


def iid_primal_sorted(ps: np.ndarray, qs: np.ndarray, n_cut: int, g: float, k: int, scan: tuple | None = None) -> tuple[float, float]:
    r"""The i.i.d. primal in the p/q order, with no gather beyond the two the caller made:
    :math:`r^*` by the cap/floor formulas on the suffix/prefix, its Lorenz test along the reversed
    order (after the O(V) near-sortedness check of :func:`lorenz_violation`) and its acceptance.

    Given the prefix scan's own arrays (``scan``; every q positive), the whole check is O(V)
    in about ten passes with no sort (:func:`_iid_primal_scan`): the floor's constant by a binary
    search on the prefix sums, the Lorenz test as a prefix scan in the same p/q order.

    Parameters
    ----------
    ps, qs : ndarray, shape (V,)
        p and q in ascending p/q (the prefix scan's order; q = 0 < p last).
    n_cut : int
        Size of the optimal prefix :math:`H^*`.
    g : float
        :math:`q(H^*)^k`.
    k : int
        Number of i.i.d. drafts.
    scan : tuple of ndarray, optional
        ``(cp, cq, pw)``: the scan's prefix sums of ``ps`` and ``qs`` and
        :math:`\min(\sum_{j \le i} q_j, 1)^k` (repeated squaring).

    Returns
    -------
    lower : float
        :math:`\sum_y \min(p_y, r^*_y)`.
    violation : float
        As :func:`lorenz_violation` (``nan`` when the sorted path does not apply; the caller then
        takes the generic one).
    """
    if scan is not None and qs.size and qs.min() > 0:
        out = _iid_primal_scan(ps, qs, n_cut, g, k, *scan)
        if out is not None:
            return out
    pos = qs > 0
    everywhere = bool(pos.all())  # the common case: slices instead of index arrays
    r = np.zeros(ps.size)
    A = slice(n_cut, None) if everywhere else np.flatnonzero(pos[n_cut:]) + n_cut
    H = slice(0, n_cut) if everywhere else np.flatnonzero(pos[:n_cut])
    r[A] = _cap(ps[A], qs[A], 1.0 - g, presorted=True)
    if g > 0:
        r[H] = _floor(ps[H], qs[H], g, presorted=True)
    lower = float(np.minimum(ps, r).sum())
    rr, qr = (r[::-1], qs[::-1]) if everywhere else (r[::-1][pos[::-1]], qs[::-1][pos[::-1]])
    d = rr / qr
    if not np.all(d[1:] <= (1.0 + _ORDER_EPS) * np.minimum.accumulate(d)[:-1]):
        return lower, float("nan")
    # Phi(t) = 1 - (1 - t)^k by repeated squaring (absolute error a few ulps: far below the
    # certificate tolerance)
    phi = power(np.maximum(1.0 - np.cumsum(qr), 0.0), k)
    np.subtract(1.0, phi, out=phi)
    excess = float(np.max(np.cumsum(rr) - phi, initial=0.0)) + _ORDER_EPS
    return lower, max(0.0, excess, abs(float(r.sum()) - 1.0), float(-min(r.min(initial=0.0), 0.0)))


def _iid_primal_scan(ps, qs, n, g, k, cp, cq, pw) -> tuple[float, float] | None:
    r""":func:`iid_primal_sorted` from the prefix scan's arrays (every q positive): O(V), no sort.

    * The floor's constant c' on the first ``n`` tokens: a binary search (searchsorted
      ``side="right"``, as :func:`_floor`) on :math:`S_i = P_{\ge i} + (p_i/q_i)\,Q_{<i}`,
      nondecreasing in i, whose terms are read off the prefix sums (O(log V) of them).
    * The acceptance: :math:`\min(p, \max(p, c'q)) = p` and :math:`\min(p, \min(p, cq)) =
      \min(p, cq)` exactly in floating point, so it is :math:`P(H^*) + r^*(A)`.
    * The Lorenz test along the reversed order: the top tokens from i on hold r-mass
      :math:`R - R_{<i}` and q-mass :math:`1 - Q_{<i}`, so the excess over
      :math:`\Phi = 1 - (1 - t)^k` at that breakpoint is :math:`Q_{<i}^k - R_{<i} + R - 1`: the
      scan's powers minus the prefix sums of r, one pass (the same test as the reversed cumulative
      sums, within rounding). The densities must not increase along the reversed order beyond the
      relative :data:`_ORDER_EPS`, checked against the running minimum exactly as before.

    Returns None where a constant overflows (subnormal masses): the caller takes the other path.
    """
    V = ps.size
    r = np.empty(V)
    A = slice(n, None)
    r[A] = _cap(ps[A], qs[A], 1.0 - g, presorted=True)
    if g > 0 and n > 0:
        top = float(cp[n - 1])
        lo, hi = 0, n
        while lo < hi:  # first i with S_i > g
            mid = (lo + hi) >> 1
            if mid == 0:
                s_mid = top
            else:
                with np.errstate(over="ignore"):
                    s_mid = (top - float(cp[mid - 1])) + float(ps[mid] / qs[mid]) * float(cq[mid - 1])
            if s_mid <= g:
                lo = mid + 1
            else:
                hi = mid
        j = max(lo - 1, 0)
        p_gt = top - float(cp[j]) if j + 1 < n else 0.0
        q_le = float(cq[j])
        with np.errstate(over="ignore"):
            c = (g - p_gt) / q_le
        if not np.isfinite(c):
            return None
        np.multiply(qs[:n], c, out=r[:n])
        np.maximum(r[:n], ps[:n], out=r[:n])
        lower_cut = float(cp[n - 1])
    else:  # g = 0 (an empty cut, or q(H*)^k underflowed): r* is 0 on the cut, as in _floor's caller
        r[:n] = 0.0
        lower_cut = 0.0
    rA = r[A]
    lower = lower_cut + float(rA.sum())
    viol = lorenz_scan(r, qs, pw)
    if viol is None:
        return None
    neg = float(-min(rA.min(initial=0.0), 0.0))  # r >= p >= 0 on the cut by construction
    return lower, max(viol, neg)


def lorenz_scan(r: np.ndarray, qs: np.ndarray, pw: np.ndarray) -> float | None:
    r"""The Lorenz test of ``r`` in O(V) along a given ascending-density order, or None if the
    order is not one (then :func:`lorenz_violation` sorts).

    With the tokens in ascending :math:`r/q` (every q positive), the top tokens from i on hold
    r-mass :math:`R - R_{<i}` and q-mass :math:`1 - Q_{<i}`, so the excess of the Lorenz curve
    over :math:`\Phi(t) = 1 - (1 - t)^k` at that breakpoint is :math:`Q_{<i}^k - R_{<i} + R - 1`:
    ``pw`` (the prefix scan's powers :math:`\min(Q_{\le i}, 1)^k`) minus the prefix sums of r.
    The order is accepted when no density exceeds :math:`1 + \epsilon` times any density after
    it (:data:`_ORDER_EPS`, added to the result: the sorted curve lies within it), the same
    condition as :func:`lorenz_violation`'s check of a caller's order.

    Parameters
    ----------
    r : ndarray, shape (V,)
        A candidate selection law, in the order.
    qs : ndarray, shape (V,)
        q in the same order (all positive).
    pw : ndarray, shape (V,)
        :math:`\min(\sum_{j \le i} q_j, 1)^k`.

    Returns
    -------
    float or None
        ``max(0, excess, |R - 1|)`` as :func:`lorenz_violation` (plus :data:`_ORDER_EPS`), or
        None.

    Examples
    --------
    >>> q = np.array([0.5, 0.5])
    >>> pw = np.minimum(np.cumsum(q), 1.0) ** 2
    >>> lorenz_scan(np.array([0.25, 0.75]), q, pw) < 1e-11, round(lorenz_scan(np.array([0.0, 1.0]), q, pw), 6)
    (True, 0.25)
    """
    d = np.divide(r, qs)
    run = np.minimum.accumulate(d[::-1])  # along the reversed (descending) order
    if not np.all(d[::-1][1:] <= (1.0 + _ORDER_EPS) * run[:-1]):
        return None
    cr = np.cumsum(r, out=d)  # R_{<i+1}
    total = float(cr[-1])
    gap = np.subtract(pw[:-1], cr[:-1], out=run[:-1])  # Q_{<i}^k - R_{<i} at i = 1..V-1
    excess = max(0.0, (total - 1.0) + float(gap.max(initial=0.0))) + _ORDER_EPS
    return max(0.0, excess, abs(total - 1.0))


def lorenz_violation(r: np.ndarray, q: np.ndarray, k: int, order: np.ndarray | None = None) -> float:
    r"""How far ``r`` is from :math:`B(f)` for k i.i.d. drafts from q: the largest excess of its
    Lorenz curve over :math:`\Phi(t) = 1 - (1 - t)^k`, its total's distance from 1, and any mass
    on tokens q never drafts (0 for a member, up to rounding).

    Parameters
    ----------
    r : ndarray, shape (V,)
        A candidate selection law.
    q : ndarray, shape (V,)
        The draft distribution.
    k : int
        Number of i.i.d. drafts.
    order : ndarray of int64, shape (V,), optional
        A candidate order of descending density :math:`r/q`; it is used only after an O(V) check
        that the densities do not increase along it (else the tokens are sorted).

    Returns
    -------
    float
        The worst violation, ``max(0, ...)``; O(V log V).

    Examples
    --------
    >>> q = np.array([0.5, 0.5])
    >>> lorenz_violation(np.array([0.75, 0.25]), q, 2), lorenz_violation(np.array([1.0, 0.0]), q, 2)
    (0.0, 0.25)
    """
    pos = q > 0
    off = float(np.abs(r[~pos]).sum())
    missort = 0.0
    if order is not None:
        o = order[pos[order]]
        rs, qs = r[o], q[o]
        d = rs / qs
        # Every later density at most (1 + eps) times every earlier one: moving q-mass from an
        # earlier to a later token gains at most eps times the r-mass moved (<= eps in all), so
        # the sorted Lorenz curve lies within eps above this one.
        if np.all(d[1:] <= (1.0 + _ORDER_EPS) * np.minimum.accumulate(d)[:-1]):
            missort = _ORDER_EPS
        else:
            order = None
    if order is None:
        rp, qp = r[pos], q[pos]
        o = np.argsort(-(rp / qp), kind="stable")
        rs, qs = rp[o], qp[o]
    t = np.minimum(np.cumsum(qs), 1.0)
    L = np.cumsum(rs)
    with np.errstate(divide="ignore"):  # t = 1: log1p(-1) = -inf, Phi = 1
        phi = -np.expm1(k * np.log1p(-t))
    excess = float(np.max(L - phi, initial=0.0)) + missort
    return max(0.0, excess, abs(float(r.sum()) - 1.0), off, float(-min(r.min(initial=0.0), 0.0)))


def membership_violation_by_sets(r: np.ndarray, law: DraftLaw) -> float:
    r"""The largest :math:`r(S) - f(S)` over all :math:`2^V` token sets, :math:`f(S) = 1 -
    Q(\text{all drafts in } S^c)` from the law's enumerated draft sets (small V only), and the
    total's distance from 1.

    Parameters
    ----------
    r : ndarray, shape (V,)
        A candidate selection law.
    law : DraftLaw
        Any enumerable draft law.

    Returns
    -------
    float
        The worst violation, ``max(0, ...)``.
    """
    inside = law.subset_prob_all_in()  # inside[H] = P(every draft in H)
    f = 1.0 - inside[::-1]  # the complement of mask m is (2^V - 1) - m
    excess = float(np.max(subset_sums(r) - f))
    return max(0.0, excess, abs(float(r.sum()) - 1.0))


def prefix_lower(
    p: np.ndarray, law: DraftLaw, cut: np.ndarray, order: np.ndarray | None = None, scan: tuple | None = None
) -> tuple[float | None, str, dict]:
    """The primal lower bound of a prefix-method answer: ``(lower, reason, checks)``.

    Parameters
    ----------
    p : ndarray, shape (V,)
        Target distribution.
    law : DraftLaw
        An i.i.d., without-replacement or greedy law.
    cut : ndarray of int64
        The prefix method's optimal cut.
    order : ndarray of int64, shape (V,), optional
        The tokens in ascending p/q, when the caller has it (saves the sorts).
    scan : tuple of ndarray, optional
        i.i.d. laws: ``(ps, qs, cp, cq, pw)`` from :func:`~otspec.bounds.prefix.iid_prefix`
        (``return_scan``) in that order: the check then gathers nothing and sorts nothing.

    Returns
    -------
    lower : float or None
        A feasible coupling's acceptance, or ``None`` (dual only).
    reason : str
        Why ``lower`` is ``None`` (empty otherwise).
    checks : dict
        ``selection_law_membership`` (the violation of :math:`r^* \\in B(f)`, when checked).
    """
    closed = law.closed_form_lower(p)
    if closed is not None:  # the law's own coupling in closed form
        return closed, "", {}
    iid_q = law.iid_q
    if iid_q is None and not (law.V <= WOR_CHECK_MAX_V and law.num_tuples() <= _WOR_CHECK_MAX_TUPLES):
        # decided before Q(H*^k) is computed: at full vocabulary that is a race integral over V
        return (
            None,
            f"dual only: the membership of the closed-form selection law in the base polytope is checked "
            f"by enumeration up to V = {WOR_CHECK_MAX_V} (got V = {law.V}) for drafts without replacement",
            {},
        )
    if scan is not None and iid_q is not None:
        # Q(H*^k) from the scan's own prefix sum (the dual's arithmetic), no mask: r* sums to 1
        # whichever rounding of g it is built with, and its membership is checked either way
        n_cut = int(cut.size)
        g = float(np.power(min(float(scan[3][n_cut - 1]), 1.0), law.k)) if n_cut else 0.0
        lower, viol = iid_primal_sorted(scan[0], scan[1], n_cut, g, law.k, scan=scan[2:])
        if viol == viol:  # not nan: the order was a valid Lorenz order
            return lower, "", {"selection_law_membership": viol}
    in_cut = np.zeros(law.V, dtype=bool)
    in_cut[cut] = True
    g = float(law.prob_all_in(in_cut))
    if order is None:
        order = law.prefix_cut_order(p)
    if iid_q is not None:
        lower, viol = iid_primal_sorted(p[order], iid_q[order], int(cut.size), g, law.k)
        if viol == viol:  # not nan: the order was a valid Lorenz order
            return lower, "", {"selection_law_membership": viol}
    r = cap_floor_law(p, law.q, in_cut, g, order)
    viol = lorenz_violation(r, iid_q, law.k, order[::-1]) if iid_q is not None else membership_violation_by_sets(r, law)
    return float(np.minimum(p, r).sum()), "", {"selection_law_membership": viol}
