r"""Certified intervals for top-K-truncated pairs: what logged top-K probabilities still determine.

A serving engine logs, at each step, the K largest probabilities of the target and of the draft
(token ids and log-probabilities); the rest of each distribution -- its *tail* -- is known only by
its total mass. Many full pairs :math:`(p, q)` agree with one such log, and their optimal acceptances
differ, so a log has no single answer. This module returns an interval that holds the optimum of
every consistent full pair, from the two bounding pairs below (:doc:`corpus`, certified intervals,
proves both directions; the lower end is attained, the upper end is when both models logged the
same ids):

* **upper end** -- the *merged pair*: every token that is not logged for *both* models is merged
  into one shared token :math:`\star` (each distribution keeps its mass there). Merging tokens by one
  common map can only raise the optimum, and every full pair consistent with the log merges to this
  same pair.
* **lower end** -- the *split pair*: each distribution keeps its logged entries, and its tail is put
  on a fresh token of its own, disjoint from everything the other model can propose. Any consistent
  pair is obtained from this one by moving tail mass onto shared tokens, which never lowers the
  optimum.

Supported: the i.i.d. optimum :math:`\alpha^*(p, \mathrm{iid}(q, k))` for every ``k`` (``k = 1`` is
the single-draft acceptance :math:`1 - d_{TV}(p, q)`, which token verification attains) and the
greedy optimum (Hu et al.'s top-(k-1) plus one sampled draft; it needs the k-1 largest draft
probabilities in the log). Without-replacement drafts are not supported: merging tokens does not map
a without-replacement law to a without-replacement law, so the upper-end argument fails.

Notation: ``A`` is the set of target ids logged, ``B`` the draft's, :math:`t_p = 1 - p(A)` and
:math:`t_q = 1 - q(B)` the tails.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from otspec._tolerances import ROUNDING_PER_TERM
from otspec.errors import InvalidDistributionError, UnsupportedMethodError

__all__ = [
    "LOGGED_MASS_ATOL",
    "LOGGED_VALUE_RTOL",
    "TRUNCATED_LAWS",
    "TruncatedPair",
    "CertifiedInterval",
    "truncated_pair",
    "truncate",
    "merged_pair",
    "split_pair",
    "certified_interval",
]

#: How far above 1 the logged probabilities of one model may sum before the record is refused.
#: Engines log float32 log-probabilities (relative rounding ~6e-8 each, and exp() adds as much), so
#: K = 20-100 logged entries of a near-complete distribution can sum to ``1 + K * 1.2e-7``; 1e-5
#: admits K up to ~80 at that worst case and still refuses any real error (a wrong base of the
#: logarithm, duplicated entries). A record within it whose excess ``e`` (the sum minus 1, summed
#: exactly) is more than float64 rounding (:data:`LOGGED_VALUE_RTOL`) has it folded into the
#: interval: the logged entries are scaled by ``1 / (1 + e)`` and the interval covers every pair
#: within total variation ``e`` of the scaled one. The ends widen by ``e_p + k e_q`` for i.i.d.
#: drafts (the optimum moves by at most ``d_TV(p, p')`` in p and ``k d_TV(q, q')`` in q) and by
#: ``e_p`` plus the greedy optimum's own sensitivity, ``1.5 e_q / (r - e_q)`` with ``r`` the draft's
#: rest off its top k-1 tokens (:func:`certified_interval`).
LOGGED_MASS_ATOL = 1e-5

#: Relative precision of each logged probability: a float64 log holds the true probability rounded
#: to nearest, within 2^-53 of it (relative to the logged value). The interval holds every full
#: pair whose logged entries lie this close to the log. It matters only where the greedy optimum
#: divides by the draft's rest :math:`q(\Omega \setminus G)`, which a confident draft leaves
#: at the size of this rounding (~1e-16). A record summing above 1 by at most this (relative to
#: its sum) is that rounding and is kept as logged; a larger excess is an imprecise log (see
#: :data:`LOGGED_MASS_ATOL`).
LOGGED_VALUE_RTOL = 2.0**-53

#: The draft laws with a certified interval.
TRUNCATED_LAWS = ("iid", "greedy")


@dataclass(frozen=True)
class TruncatedPair:
    r"""The logged top-K entries of a target and a draft distribution at one step (validated).

    Attributes
    ----------
    p_ids, q_ids : ndarray of int64, shape (K_p,), (K_q,)
        Logged token ids of the target and of the draft (distinct within each).
    p_vals, q_vals : ndarray of float64
        Their probabilities as logged, or scaled to sum to 1 when they summed above 1 by more
        than float64 rounding (:data:`LOGGED_VALUE_RTOL`).
    p_excess, q_excess : float
        How far the logged masses summed above 1 (summed exactly; 0 when they did not; at most
        :data:`LOGGED_MASS_ATOL`); folded into the interval's ends when beyond rounding.
    """

    p_ids: np.ndarray
    p_vals: np.ndarray
    q_ids: np.ndarray
    q_vals: np.ndarray
    p_excess: float = 0.0
    q_excess: float = 0.0

    @property
    def p_tail(self) -> float:
        """Target mass outside the logged ids, :math:`t_p = 1 - p(A) \\ge 0` (correctly rounded)."""
        return _complement(self.p_vals)

    @property
    def q_tail(self) -> float:
        """Draft mass outside the logged ids, :math:`t_q = 1 - q(B) \\ge 0` (correctly rounded)."""
        return _complement(self.q_vals)


@dataclass(frozen=True)
class CertifiedInterval:
    """``low <= value(p, q) <= high`` for every full pair consistent with a log.

    Attributes
    ----------
    low, high : float
        The ends (``low <= high``).
    law : str
        ``"iid"`` or ``"greedy"``.
    k : int
        Number of drafts.
    """

    low: float
    high: float
    law: str
    k: int

    @property
    def width(self) -> float:
        """``high - low``: what the log leaves undetermined."""
        return self.high - self.low


def _complement(v: np.ndarray) -> float:
    """:math:`\\max(0, 1 - \\sum v)`, correctly rounded: a float sum of near-1 entries loses the
    ~1e-16 that a confident distribution leaves outside them, so the sum is exact (``math.fsum``)."""
    return max(0.0, math.fsum([1.0, *(-v).tolist()]))


def _side(ids: Any, vals: Any, name: str, V: int | None) -> tuple[np.ndarray, np.ndarray, float]:
    try:
        i = np.asarray(ids)
        v = np.asarray(vals, dtype=np.float64)
    except (TypeError, ValueError):
        raise InvalidDistributionError(f"{name}: ids and probabilities must be numeric arrays; pass lists of ints and floats") from None
    if i.ndim != 1 or v.ndim != 1 or i.size != v.size or i.size == 0:
        raise InvalidDistributionError(
            f"{name}: ids and probabilities must be two 1-D arrays of the same length >= 1 (got shapes {i.shape} and {v.shape}); "
            "log one probability per id"
        )
    if i.dtype.kind not in "iu" and not (i.dtype.kind == "f" and np.all(np.isfinite(i)) and np.all(i == np.round(i))):
        raise InvalidDistributionError(f"{name}: token ids must be integers (got {i.tolist()[:5]}...); pass integer ids")
    i = i.astype(np.int64)
    if i.min() < 0 or (V is not None and i.max() >= V):
        raise InvalidDistributionError(
            f"{name}: token ids must lie in [0, {V if V is not None else 'V'}) (got {int(i.min())}..{int(i.max())}); pass ids of the vocabulary"
        )
    if np.unique(i).size != i.size:
        raise InvalidDistributionError(
            f"{name}: token ids must be distinct (got a repeated id among {i.tolist()[:10]}); log each token once"
        )
    if not np.all(np.isfinite(v)) or v.min() < 0:
        raise InvalidDistributionError(f"{name}: probabilities must be finite and >= 0 (got {v.tolist()[:5]}); pass exp(logprob)")
    s = math.fsum(v.tolist())  # exact sum, correctly rounded: the excess below is not rounding noise
    if s > 1.0 + LOGGED_MASS_ATOL:
        raise InvalidDistributionError(
            f"{name}: logged probabilities sum to {s:.9g} > 1 + {LOGGED_MASS_ATOL:g}; they must be natural-log probabilities of one "
            "distribution (check the log base and duplicated entries)"
        )
    excess = max(0.0, math.fsum([*v.tolist(), -1.0]))
    if excess > LOGGED_VALUE_RTOL * s:  # beyond float64 rounding of the logged values: scale to 1
        v = v / s
    return i, v, excess


def truncated_pair(p_ids: Any, p_probs: Any, q_ids: Any, q_probs: Any, *, V: int | None = None) -> TruncatedPair:
    """Validate one step's logged top-K entries of the target (p) and the draft (q).

    Parameters
    ----------
    p_ids, q_ids : array_like of int, shape (K_p,), (K_q,)
        Logged token ids (distinct, in ``[0, V)``); K may differ between the models.
    p_probs, q_probs : array_like of float
        Their probabilities (``exp`` of the logged log-probabilities), each side summing to at most
        ``1 + LOGGED_MASS_ATOL``.
    V : int, optional
        Vocabulary size, when known (ids are then checked against it).

    Returns
    -------
    TruncatedPair
        The validated log.

    Raises
    ------
    InvalidDistributionError
        Shapes differ or are empty, ids are not distinct non-negative integers (below ``V``),
        probabilities are negative or not finite, or a side sums above ``1 + LOGGED_MASS_ATOL``.

    Examples
    --------
    >>> t = truncated_pair([0, 1], [0.5, 0.3], [1, 2], [0.6, 0.1])
    >>> round(t.p_tail, 12), round(t.q_tail, 12)
    (0.2, 0.3)
    """
    pi, pv, pe = _side(p_ids, p_probs, "target top-K", V)
    qi, qv, qe = _side(q_ids, q_probs, "draft top-K", V)
    return TruncatedPair(pi, pv, qi, qv, pe, qe)


def truncate(p: Any, q: Any, K: int) -> TruncatedPair:
    """The log a serving engine would write for a full pair: the top-K entries of each (ties: lower id).

    Parameters
    ----------
    p, q : array_like, shape (V,)
        Full target and draft distributions.
    K : int
        Entries kept per model (``1 <= K``; ``K >= V`` keeps everything).

    Returns
    -------
    TruncatedPair
        The top-K ids and probabilities of each.

    Raises
    ------
    InvalidDistributionError
        If ``K < 1`` or ``p``, ``q`` are not 1-D arrays of one length.

    Examples
    --------
    >>> truncate([0.5, 0.2, 0.3], [0.1, 0.6, 0.3], 1).p_ids.tolist()
    [0]
    """
    p = np.asarray(p, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    if p.ndim != 1 or p.shape != q.shape or int(K) < 1:
        raise InvalidDistributionError(
            f"truncate needs two 1-D distributions of one length and K >= 1 (got {p.shape}, {q.shape}, K = {K}); fix the inputs"
        )
    K = min(int(K), p.size)
    top_p = np.argsort(-p, kind="stable")[:K]
    top_q = np.argsort(-q, kind="stable")[:K]
    return truncated_pair(top_p, p[top_p], top_q, q[top_q], V=p.size)


def _dense(t: TruncatedPair) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Ids of A u B (sorted), and p, q on them (0 where not logged), and the membership masks."""
    ids = np.union1d(t.p_ids, t.q_ids)
    p = np.zeros(ids.size)
    q = np.zeros(ids.size)
    inA = np.zeros(ids.size, dtype=bool)
    inB = np.zeros(ids.size, dtype=bool)
    ia = np.searchsorted(ids, t.p_ids)
    ib = np.searchsorted(ids, t.q_ids)
    p[ia], inA[ia] = t.p_vals, True
    q[ib], inB[ib] = t.q_vals, True
    return p, q, inA, inB


def merged_pair(t: TruncatedPair) -> tuple[np.ndarray, np.ndarray]:
    r"""The upper-end pair: tokens logged for both models, plus one shared token :math:`\star`.

    :math:`\bar p = (p|_{A \cap B}, 1 - p(A \cap B))`, :math:`\bar q = (q|_{A \cap B}, 1 - q(A \cap B))`:
    the push-forward of *any* consistent full pair under the map sending every token outside
    :math:`A \cap B` to :math:`\star`.

    Parameters
    ----------
    t : TruncatedPair
        A validated log.

    Returns
    -------
    p_bar, q_bar : ndarray, shape (|A n B| + 1,)
        Distributions (the last entry is :math:`\star`).

    Examples
    --------
    >>> pb, qb = merged_pair(truncated_pair([0, 1], [0.5, 0.3], [1, 2], [0.6, 0.1]))
    >>> pb.round(12).tolist(), qb.round(12).tolist()
    ([0.3, 0.7], [0.6, 0.4])
    """
    p, q, inA, inB = _dense(t)
    both = inA & inB
    pb, qb = p[both], q[both]
    return np.append(pb, _complement(pb)), np.append(qb, _complement(qb))


def split_pair(t: TruncatedPair) -> tuple[np.ndarray, np.ndarray]:
    r"""The lower-end pair: logged entries on :math:`A \cup B`, each tail on its own fresh token.

    :math:`\underline p = (p|_A \text{ and } 0 \text{ on } B \setminus A, t_p, 0)`,
    :math:`\underline q = (q|_B \text{ and } 0 \text{ on } A \setminus B, 0, t_q)`; itself a full
    pair consistent with the log (on a vocabulary with two spare tokens).

    Parameters
    ----------
    t : TruncatedPair
        A validated log.

    Returns
    -------
    p_low, q_low : ndarray, shape (|A u B| + 2,)
        Distributions (the last two entries are the target's and the draft's fresh tokens).

    Examples
    --------
    >>> pl, ql = split_pair(truncated_pair([0, 1], [0.5, 0.3], [1, 2], [0.6, 0.1]))
    >>> pl.round(12).tolist(), ql.round(12).tolist()
    ([0.5, 0.3, 0.0, 0.2, 0.0], [0.0, 0.6, 0.1, 0.0, 0.3])
    """
    p, q, _, _ = _dense(t)
    return np.concatenate([p, [t.p_tail, 0.0]]), np.concatenate([q, [0.0, t.q_tail]])


def _up(x: float) -> float:
    return float(np.nextafter(x, np.inf))


def _down(x: float) -> float:
    return float(np.nextafter(x, -np.inf))


def _roundoff(n: int) -> float:
    r"""Bound on the float64 rounding of an end computed from n logged entries (absolute).

    Each end is a sum of at most ``n + 4`` non-negative terms, each a product, quotient or minimum
    of logged values and bounds (a few roundings each, relative), with at most two subtractions
    from 1 of quantities in [0, 1]: twice Higham's :math:`\gamma_{n+8}` covers it."""
    return ROUNDING_PER_TERM * (2 * n + 16)


def _beyond_rounding(excess: float) -> float:
    """The total variation by which the truth may differ from a scaled record: its excess, when
    the excess is more than the rounding of the logged values (and the scaling's own rounding)."""
    if excess <= LOGGED_VALUE_RTOL * (1.0 + excess):  # kept as logged: LOGGED_VALUE_RTOL covers it
        return 0.0
    return excess + 4 * LOGGED_VALUE_RTOL  # |fl(v / s) - v / S| <= 2 u v per entry


def _iid_value(p: np.ndarray, q: np.ndarray, k: int) -> tuple[float, float]:
    """The i.i.d. optimum of a full pair and a bound on its rounding error."""
    if k == 1:
        return float(np.minimum(p, q).sum()), ROUNDING_PER_TERM * p.size
    from otspec.bounds import optimal_acceptance
    from otspec.laws import iid

    res = optimal_acceptance(p, iid(q, k), method="prefix")
    return float(res.value), float(res.error_bound)


def _iid_interval(t: TruncatedPair, k: int) -> tuple[float, float]:
    r"""The i.i.d. optimum bounded from the log: split pair (low) and merged pair (high), widened
    outward by their rounding, by the logged values' own precision (:data:`LOGGED_VALUE_RTOL`:
    the optimum moves by at most :math:`d_{TV}` in p and :math:`k\,d_{TV}` in q) and by an excess
    beyond rounding."""
    low, err_lo = _iid_value(*split_pair(t), k)
    high, err_hi = _iid_value(*merged_pair(t), k)
    widen = 2 * LOGGED_VALUE_RTOL * (1 + k) + _beyond_rounding(t.p_excess) + k * _beyond_rounding(t.q_excess)
    n = t.p_ids.size + t.q_ids.size
    low = _down(low - err_lo - widen - _roundoff(n))
    high = _up(high + err_hi + widen + _roundoff(n))
    return max(0.0, low), min(1.0, high)


def _greedy_top(t: TruncatedPair, m: int) -> np.ndarray:
    """Positions (in ``t.q_ids``) of the m largest logged draft probabilities (ties: lower id)."""
    order = np.lexsort((t.q_ids, -t.q_vals))
    return order[:m]


def _greedy_interval(t: TruncatedPair, k: int) -> tuple[float, float]:
    r"""Greedy optimum :math:`P(G) + \sum_{x \notin G} \min(p(x), \tilde q(x))` bounded from the log.

    The draft's rest :math:`r = q(\Omega \setminus G)` is bounded from what lies *outside* G -- the
    logged entries off G plus the tail -- never as ``1 - q(G)``: for a confident draft that
    difference is a few ulps of 1, all rounding, and dividing by it gave inverted or wrong
    intervals. Every bound is rounded outward, and an excess beyond rounding widens
    by the greedy optimum's true sensitivity in q, which the renormalisation amplifies by
    :math:`1 / r` (see :func:`certified_interval`).
    """
    if k - 1 > t.q_ids.size:
        raise UnsupportedMethodError(
            f"the greedy interval with k = {k} needs the {k - 1} largest draft probabilities, but only {t.q_ids.size} are logged; "
            "log more entries or use a smaller k"
        )
    rho = LOGGED_VALUE_RTOL
    g_pos = _greedy_top(t, k - 1)
    inG = np.zeros(t.q_ids.size, dtype=bool)
    inG[g_pos] = True
    p_of = dict(zip(t.p_ids.tolist(), t.p_vals.tolist(), strict=True))
    pG = math.fsum(p_of.get(int(x), 0.0) for x in t.q_ids[g_pos])  # p(G n A)
    S_mask = ~inG & np.isin(t.q_ids, t.p_ids)  # S = (A n B) \ G
    S = t.q_ids[S_mask]
    qS = t.q_vals[S_mask]
    pS = np.array([p_of[int(x)] for x in S], dtype=np.float64)
    # r = q(off G) = (logged entries off G) + (tail), each logged entry within rho of its value and
    # the tail at most 1 - (1 - rho) q(B); sums exact (fsum), every step rounded outward.
    N = math.fsum(t.q_vals[~inG].tolist())
    tail_hi = max(0.0, _up(_up(math.fsum([1.0, *(-t.q_vals).tolist()])) + rho * _up(math.fsum(t.q_vals.tolist()))))
    r_lo = max(0.0, _down(_down(N) * (1.0 - rho)))
    r_hi = _up(_up(_up(N) * (1.0 + rho)) + tail_hi)  # > 0: tail_hi >= rho q(B) > 0, or N > 0
    qt_lo = qS * (1.0 - rho) / r_hi
    with np.errstate(divide="ignore", invalid="ignore"):
        qt_hi = np.where(qS > 0, qS * (1.0 + rho) / r_lo if r_lo > 0 else np.inf, 0.0)
    t_p = _up(t.p_tail)
    p_off_S = math.fsum(t.p_vals[~np.isin(t.p_ids, S)].tolist())  # p(A \ S), so 1 - p(S) = this + t_p
    low = pG + float(np.minimum(pS, qt_lo).sum())
    high = min(
        float(np.minimum(pS, qt_hi).sum()) + p_off_S + t_p,
        pG + t_p + 1.0 - float(np.maximum(qt_lo - pS, 0.0).sum()),
    )
    # the target's logged values within rho (the optimum is 1-Lipschitz in d_TV of p), its excess
    widen = 2 * rho + _beyond_rounding(t.p_excess)
    eps_q = _beyond_rounding(t.q_excess)
    if eps_q > 0:
        # every q' within d_TV eps_q: G stays the top k - 1 only if the (k-1)-th largest entry leads
        # the next one (a logged entry off G, else an unlogged token: at most the tail and the
        # smallest logged entry) by more than 2 eps_q; with G fixed, the renormalised rest moves by
        # d_TV(q~, q~') <= 1.5 eps_q / (r - eps_q), and the optimum by at most that.
        off = t.q_vals[~inG]
        nxt = float(off.max()) if off.size else min(tail_hi, float(t.q_vals.min()))
        if k > 1 and float(t.q_vals[g_pos].min()) * (1 - rho) - nxt * (1 + rho) <= 2 * eps_q:
            return 0.0, 1.0
        widen += 1.0 if r_lo <= eps_q else min(1.0, _up(1.5 * eps_q / _down(r_lo - eps_q)))
    slack = widen + _roundoff(t.p_ids.size + t.q_ids.size)
    # the optimum is at least p(G), whatever q~ is
    floor = _down(pG * (1.0 - rho) - _beyond_rounding(t.p_excess) - slack)
    low = max(0.0, floor, _down(low - slack))
    high = min(1.0, _up(high + slack))
    return low, high


def certified_interval(t: TruncatedPair, law: str = "iid", k: int = 1) -> CertifiedInterval:
    r"""The interval of optimal acceptances that a top-K log allows.

    For ``law="iid"``: ``low`` is :math:`\alpha^*` of :func:`split_pair`, ``high`` of
    :func:`merged_pair`. For ``law="greedy"``, with :math:`G` the k-1 largest logged draft
    probabilities, :math:`S = (A \cap B) \setminus G`, the draft's rest off G bounded from what lies
    off G -- :math:`r \in [r_-, r_+]` with :math:`r_- = q(B \setminus G)` and
    :math:`r_+ = q(B \setminus G) + t_q` -- and :math:`\tilde q_\pm = q / r_\mp`:

    .. math:: \text{low} = p(G \cap A) + \sum_{x \in S} \min(p(x), \tilde q_-(x)), \qquad
              \text{high} = \min\Big(\sum_{x \in S} \min(p(x), \tilde q_+(x)) + 1 - p(S),\;
                p(G \cap A) + t_p + 1 - \sum_{x \in S} (\tilde q_-(x) - p(x))_+\Big).

    The rest is never ``1 - q(G)``: for a confident draft (top k-1 mass within ~1e-12 of 1) that
    difference is all rounding, and the renormalisation by it amplifies the error by
    :math:`1 / r`.

    The interval holds every full pair whose logged entries lie within float64 rounding
    (:data:`LOGGED_VALUE_RTOL`) of the log, with its tails the rest: the sums are exact
    (``math.fsum``), the bounds carry that relative precision, and both ends are rounded outward
    by a bound on the arithmetic's own rounding (about ``(2 K + 16) * 1.2e-16``). A record whose
    logged masses exceeded 1 by more than rounding (within :data:`LOGGED_MASS_ATOL`) is scaled to 1
    and covers every pair within total variation ``e`` of it: the ends widen by
    ``p_excess + k * q_excess`` for i.i.d. drafts and by ``p_excess`` plus
    :math:`1.5\, e_q / (r_- - e_q)` for greedy drafts (with G fixed, the renormalised rest moves by
    that much in total variation), or to ``[0, 1]`` when ``e_q`` could reorder the top k-1 tokens
    or reaches :math:`r_-`. The ends are clipped to ``[0, 1]``.

    Parameters
    ----------
    t : TruncatedPair
        A validated log (:func:`truncated_pair`).
    law : {"iid", "greedy"}
        The draft law.
    k : int
        Number of drafts (``>= 1``; ``k = 1`` gives the single-draft :math:`1 - d_{TV}` interval).

    Returns
    -------
    CertifiedInterval
        ``low <= alpha*(p, law(q, k)) <= high`` for every full pair consistent with ``t``.

    Raises
    ------
    UnsupportedMethodError
        If ``law`` is not one of :data:`TRUNCATED_LAWS`, ``k < 1``, or greedy needs more draft
        entries than were logged.

    Examples
    --------
    >>> t = truncated_pair([0, 1], [0.5, 0.3], [1, 2], [0.6, 0.1])
    >>> iv = certified_interval(t, "iid", 1)
    >>> round(iv.low, 12), round(iv.high, 12)  # 0.3 shared on token 1; up to 0.4 more in the tails
    (0.3, 0.7)
    """
    if law not in TRUNCATED_LAWS:
        raise UnsupportedMethodError(
            f"law must be one of {TRUNCATED_LAWS} for a truncated log (got {law!r}); without replacement has no certified "
            "interval because merging tokens does not keep a without-replacement law"
        )
    if int(k) != k or k < 1:
        raise UnsupportedMethodError(f"k must be an integer >= 1 (got {k!r}); pass the number of drafts")
    k = int(k)
    low, high = _iid_interval(t, k) if law == "iid" else _greedy_interval(t, k)
    return CertifiedInterval(low, high, law, k)
