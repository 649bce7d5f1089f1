r"""SpecTr's K-SEQ draft selection (Sun et al., NeurIPS 2023, Algorithm 2; :doc:`verifiers`, kseq).

With i.i.d. drafts :math:`X_1..X_k \sim q` and the division factor :math:`\rho^*`:

.. math::
    \text{for } i = 1..k:\ \text{return } X_i \text{ w.p. } \min\big(1, \tfrac{p(X_i)}{\rho^* q(X_i)}\big);
    \qquad \text{else } Y \sim \mathrm{norm}\big((p - \gamma \min(p/\rho^*, q))_+\big).

Public kernel function for per-node use (e.g. SpecTr over a draft tree):
:func:`kseq_conditional` ``(p, q, drafts) -> (M, V)``, with ``k`` taken from ``drafts.shape[1]``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from otspec._docs import fill_doc
from otspec._validation import as_distribution, as_int_in_range, as_supported_drafts, check_same_vocab
from otspec.laws import DraftLaw
from otspec.verifiers.base import Verifier
from otspec.verifiers.schedule import AcceptSchedule, accept_ratio, residual, schedule_rows

__all__ = [
    "KSeqVerifier",
    "KSeqDetails",
    "kseq",
    "kseq_conditional",
    "kseq_schedule",
    "kseq_beta",
    "kseq_rho_star",
    "kseq_details",
    "details",
]


@dataclass(frozen=True)
class KSeqDetails:
    r"""SpecTr K-SEQ quantities at the optimal division factor (:doc:`verifiers`, kseq).

    ``rho_star`` :math:`\rho^*\in[1,k]`; ``beta`` :math:`\beta(\rho^*) = \sum_x \min(p/\rho^*, q)`;
    ``phase1`` :math:`1-(1-\beta)^k` (some draft accepted in the loop); ``gamma`` = phase1 / beta;
    ``membership`` the full acceptance :math:`P(Y \in \bar X)` (a residual draw may land on a
    rejected draft); ``k``.

    Attributes
    ----------
    rho_star : float
        The optimal division factor :math:`\rho^* \in [1, k]`.
    beta : float
        :math:`\beta(\rho^*) = \sum_x \min(p(x)/\rho^*, q(x))`.
    phase1 : float
        :math:`1 - (1 - \beta)^k`: probability that the loop accepts some draft.
    gamma : float
        ``phase1 / beta``, the weight of :math:`\min(p/\rho^*, q)` removed from the residual.
    membership : float
        :math:`P(Y \in \bar X) \ge` ``phase1``.
    k : int
        Number of i.i.d. drafts.
    """

    rho_star: float
    beta: float
    phase1: float
    gamma: float
    membership: float
    k: int


def _one_minus_pow(beta: float, k: int) -> float:
    """:math:`1-(1-\\beta)^k` accurately for small beta."""
    if beta >= 1.0:
        return 1.0
    return float(-math.expm1(k * math.log1p(-beta)))


def kseq_beta(p: np.ndarray, q: np.ndarray, rho: float) -> float:
    r""":math:`\beta(\rho) = \sum_x \min(p(x)/\rho, q(x))`.

    The probability that one draft passes K-SEQ's test :math:`U \le p(X)/(\rho q(X))`.

    Parameters
    ----------
    p, q : ndarray, shape (V,)
        Target and draft distributions.
    rho : float
        Division factor, ``rho >= 1``.

    Returns
    -------
    float
        :math:`\beta(\rho) \in [0, 1]`, non-increasing in :math:`\rho`.

    Examples
    --------
    >>> import numpy as np
    >>> kseq_beta(np.array([0.5, 0.5]), np.array([0.9, 0.1]), 2.0)
    0.35
    """
    return float(np.minimum(p / rho, q).sum())


def kseq_rho_star(p: np.ndarray, q: np.ndarray, k: int) -> float:
    r"""The optimal division factor :math:`\rho^*\in[1,k]` of K-SEQ, by bisection.

    :math:`f(\rho) = 1-(1-\beta(\rho))^k - \rho\,\beta(\rho)` is non-increasing in :math:`\rho`
    (:math:`\beta` decreases, :math:`\rho\beta(\rho) = \sum\min(p, \rho q)` increases), with
    :math:`f(1) \ge 0 \ge f(k)`. We return the *upper* end of the final bracket, so that
    :math:`f(\rho^*) \le 0`: the rule is valid (lossless) at the returned value, not just near it.

    Cost: one O(V) pass, then a shrinking working set. For :math:`\rho` in the current bracket
    :math:`[lo, hi]` only tokens with ratio :math:`p/q \in (lo, hi]` can switch between the two
    branches of the minimum; the others are folded into constants
    (:math:`\beta(\rho) = (A + \sum_{r \le \rho} p)/\rho + B + \sum_{r > \rho} q`), and every
    bisection step drops the tokens outside the new bracket (about half of them).

    Parameters
    ----------
    p, q : ndarray, shape (V,)
        Target and draft distributions (validated).
    k : int
        Number of i.i.d. drafts, ``>= 1``.

    Returns
    -------
    float
        :math:`\rho^* \in [1, k]` with :math:`f(\rho^*) \le 0` (1 when ``k == 1``).

    Examples
    --------
    >>> import numpy as np
    >>> kseq_rho_star(np.array([0.5, 0.5]), np.array([0.5, 0.5]), 4)
    1.0
    """
    if k == 1:
        return 1.0
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # over: denormal q, ratio +inf
        r = p / q  # q = 0: ratio inf (or nan when p = 0 too): such tokens sit on the q branch, adding 0
    lo, hi = 1.0, float(k)
    below = r <= lo
    band = (r > lo) & (r <= hi)
    A = float(np.add.reduce(p, where=below))  # tokens always on the p / rho branch
    above = ~(below | band)
    B = float(np.add.reduce(q, where=above))  # tokens always on the q branch
    PB = float(np.add.reduce(p, where=above))  # and their target mass
    idx = np.flatnonzero(band)
    rb, pb, qb = r[idx], p[idx], q[idx]

    def f_at(rho: float, P_in: float, Q_out: float, P_out: float) -> float:
        # f = (1 - rho beta) - (1 - beta)^k with 1 - rho beta = sum over the q branch of (p - rho q)
        # (sum p = 1): summed over those tokens, 0 beyond the largest ratio. Written as 1 minus a sum
        # near 1 instead, its rounding (1e-16) would decide the sign of f wherever (1 - beta)^k is
        # smaller, e.g. for every rho < 1.01 at k = 8 when all ratios are within 1e-5 of 1.
        b = (A + P_in) / rho + B + Q_out
        return (PB + P_out) - rho * (B + Q_out) - max(1.0 - b, 0.0) ** k

    if f_at(lo, 0.0, float(qb.sum()), float(pb.sum())) <= 0.0:
        return lo
    if f_at(hi, float(pb.sum()), 0.0, 0.0) > 0.0:  # impossible in exact arithmetic (docs/verifiers.rst, kseq: clamp)
        return hi
    while True:
        mid = 0.5 * (lo + hi)
        if not (lo < mid < hi):
            return hi
        inside = rb <= mid
        P_in = float(pb[inside].sum())
        Q_out = float(qb[~inside].sum())
        P_out = float(pb[~inside].sum())
        if f_at(mid, P_in, Q_out, P_out) > 0.0:
            lo = mid
            A += P_in
            keep = ~inside
        else:
            hi = mid
            B += Q_out
            PB += P_out
            keep = inside
        if rb.size:
            rb, pb, qb = rb[keep], pb[keep], qb[keep]


def kseq_details(p: np.ndarray, q: np.ndarray, k: int) -> KSeqDetails:
    r"""K-SEQ's division factor, phase-1 and membership acceptance (:doc:`verifiers`, kseq).

    .. math::
        \alpha_{\text{K-SEQ}} = p_{acc} + (1-p_{acc}) \sum_t p_{res}(t)\big(1-(1-r(t))^k\big),
        \qquad r = \frac{(q - p/\rho^*)_+}{1-\beta(\rho^*)},

    with :math:`p_{acc} = 1-(1-\beta(\rho^*))^k` and
    :math:`p_{res} = \mathrm{norm}\big((p - \gamma \min(p/\rho^*, q))_+\big)`, :math:`\gamma = p_{acc}/\beta`.

    Parameters
    ----------
    p, q : ndarray, shape (V,)
        Target and draft distributions (validated; :func:`details` validates for you).
    k : int
        Number of i.i.d. drafts.

    Returns
    -------
    KSeqDetails
        :math:`\rho^*`, :math:`\beta`, phase-1, :math:`\gamma` and the membership acceptance.
    """
    rho = kseq_rho_star(p, q, k)
    m = np.minimum(p / rho, q)
    beta = float(m.sum())
    phase1 = _one_minus_pow(beta, k)
    gamma = phase1 / beta if beta > 0 else 0.0
    membership = phase1
    if phase1 < 1.0 and beta < 1.0:
        pres, _ = residual(p, gamma * m)
        # only tokens that carry residual mass and that a rejected draft can be contribute
        idx = np.flatnonzero((pres > 0) & (q > m))
        # law of a rejected draft: (q - p / rho)_+ / (1 - beta); the denominator is summed directly
        # (1 - beta cancels when beta is close to 1), as the laws module does for successive sampling
        r = (q[idx] - m[idx]) / float((q - m).sum())
        with np.errstate(divide="ignore"):  # r == 1 gives log1p(-1) = -inf and hit = 1, as intended
            hit = -np.expm1(k * np.log1p(-np.minimum(r, 1.0)))  # 1 - (1 - r)^k
        membership = phase1 + (1.0 - phase1) * float(pres[idx] @ hit)
    return KSeqDetails(rho_star=float(rho), beta=beta, phase1=phase1, gamma=float(gamma), membership=float(membership), k=int(k))


def kseq_schedule(p: np.ndarray, q: np.ndarray, tuples: np.ndarray, rho: float | None = None) -> tuple[AcceptSchedule, KSeqDetails]:
    r"""The K-SEQ accept schedule for draft tuples ``(n, k)`` (validated inputs).

    Round ``j`` examines draft :math:`x_j` and accepts it with :math:`\min(1, p(x_j)/(\rho q(x_j)))`;
    the residual is :math:`\mathrm{norm}((p - \gamma \min(p/\rho, q))_+)`.

    Parameters
    ----------
    p, q : ndarray, shape (V,)
        Target and draft distributions.
    tuples : ndarray of int, shape (n, k)
        Draft tuples (``k`` is the number of i.i.d. drafts).
    rho : float, optional
        Division factor; default :math:`\rho^*`. The rule is lossless iff ``rho >= rho_star``
        (smaller values build deliberately broken controls for tests).

    Returns
    -------
    schedule : AcceptSchedule
        ``k`` rounds per tuple and the shared residual.
    details : KSeqDetails
        The quantities at :math:`\rho^*` (whatever ``rho`` was used).
    """
    k = tuples.shape[1]
    det = kseq_details(p, q, k)
    if rho is None:
        rho, gamma = det.rho_star, det.gamma
    else:  # an explicit division factor (valid iff rho >= rho*); used to build broken controls in tests
        rho = float(rho)
        beta = kseq_beta(p, q, rho)
        gamma = _one_minus_pow(beta, k) / beta if beta > 0 else 0.0
    res, _ = residual(p, gamma * np.minimum(p / rho, q))
    return AcceptSchedule(tokens=tuples, accept=accept_ratio(p[tuples], rho * q[tuples]), residual=res), det


@fill_doc
def kseq_conditional(p: Any, q: Any, drafts: Any) -> np.ndarray:
    r"""Exact K-SEQ output law :math:`\pi(\cdot \mid \bar x)` for each draft tuple.

    Parameters
    ----------
    p, q : array_like, shape (V,)
        Target and draft distributions.
    drafts : array_like of int, shape (M, k) or (k,)
        Draft tuples; ``k`` (the number of i.i.d. drafts) is ``drafts.shape[-1]``.

    Returns
    -------
    ndarray, shape (M, V)
        Row ``m`` is :math:`\pi(\cdot \mid \bar x_m)`.

    Raises
    ------
    {pq_raises}
    InvalidDraftsError
        If a draft is out of the vocabulary or has ``q = 0``.

    Examples
    --------
    >>> import numpy as np
    >>> pi = kseq_conditional([0.5, 0.5], [0.9, 0.1], [[0, 0], [0, 1]])
    >>> pi.shape, bool(np.allclose(pi.sum(axis=1), 1))
    ((2, 2), True)
    """
    p = as_distribution(p, "p")
    q = as_distribution(q, "q")
    check_same_vocab(p, q)
    t = as_supported_drafts(drafts, q)
    sched, _ = kseq_schedule(p, q, t)
    return schedule_rows(sched, p.shape[0])


@fill_doc
def details(p: Any, q: Any, k: int) -> KSeqDetails:
    r"""K-SEQ's :math:`\rho^*`, phase-1 and membership acceptance for ``k`` i.i.d. drafts from ``q``.

    Validating front door of :func:`kseq_details`.

    Parameters
    ----------
    p, q : array_like, shape (V,)
        Target and draft distributions.
    k : int
        Number of i.i.d. drafts, ``>= 1``.

    Returns
    -------
    KSeqDetails
        The K-SEQ quantities at :math:`\rho^*`.

    Raises
    ------
    {pq_raises}
    {k_raises}

    Examples
    --------
    >>> d = details([0.25, 0.75], [0.75, 0.25], 2)
    >>> 1.0 <= d.rho_star <= 2.0, d.phase1 <= d.membership
    (True, True)
    """
    p = as_distribution(p, "p")
    q = as_distribution(q, "q")
    check_same_vocab(p, q)
    return kseq_details(p, q, as_int_in_range(k, "k"))


class KSeqVerifier(Verifier):
    r"""SpecTr K-SEQ with the optimal division factor :math:`\rho^*` (bisection on
    :math:`1-(1-\beta(\rho))^k = \rho\beta(\rho)`).

    Acceptance (closed form, any V): phase-1 :math:`1-(1-\beta(\rho^*))^k` and the membership value
    of :func:`kseq_details`; phase-1 is at least
    :math:`(1-(1-1/k)^k)\,\alpha^*_{WR}`.

    References
    ----------
    Sun, Suresh, Ro, Beirami, Jain, Yu, "SpecTr: Fast Speculative Decoding via Optimal Transport",
    NeurIPS 2023, Algorithm 2.

    Examples
    --------
    >>> import otspec
    >>> from otspec.verifiers import kseq
    >>> est = kseq.acceptance([0.5, 0.3, 0.2], otspec.iid([0.2, 0.3, 0.5], 2))
    >>> est.how, 1 <= est.extras["rho_star"] <= 2
    ('closed_form', True)
    """

    name = "kseq"
    rule = "K-SEQ needs i.i.d. drafts (otspec.iid)"
    fix = "build the law with otspec.iid(q, k)"
    reference = "SpecTr (Sun et al. 2023), Algorithm 2"

    def applies_to(self, law: DraftLaw) -> bool:
        return law.iid_q is not None

    @fill_doc
    def details(self, p: Any, q: Any, k: int) -> KSeqDetails:
        """K-SEQ's quantities for ``k`` i.i.d. drafts from ``q`` (:func:`otspec.verifiers.step.kseq.details`).

        Parameters
        ----------
        {pqk_args}

        Returns
        -------
        KSeqDetails
            :math:`\\rho^*`, :math:`\\beta`, phase-1, :math:`\\gamma` and the membership acceptance.
        """
        return details(p, q, k)

    def _schedule(self, p, law, tuples):
        q = law.q

        def build():
            det = kseq_details(p, q, law.k)
            res, _ = residual(p, det.gamma * np.minimum(p / det.rho_star, q))
            return det.rho_star, res

        rho, res = law.cached("kseq.static", p, build)
        return AcceptSchedule(tokens=tuples, accept=accept_ratio(p[tuples], rho * q[tuples]), residual=res)

    def _closed_form(self, p, law):
        d = kseq_details(p, law.q, law.k)
        return d.membership, {"rho_star": d.rho_star, "beta": d.beta, "phase1": d.phase1, "gamma": d.gamma}


kseq = KSeqVerifier()
