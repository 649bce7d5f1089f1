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

from dataclasses import dataclass
from typing import Any

import numpy as np

from otspec.errors import InvalidDistributionError, UnsupportedMethodError

__all__ = [
    "LOGGED_MASS_ATOL",
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
#: logarithm, duplicated entries). A record within it has its excess ``e`` (the sum minus 1) folded
#: into the interval: the logged entries are scaled by ``1 / (1 + e)`` and both ends are widened by
#: ``e_p + k e_q`` (the optimum moves by at most ``d_TV(p, p')`` in p and ``k d_TV(q, q')`` in q).
LOGGED_MASS_ATOL = 1e-5

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
        Their probabilities, scaled so that each side sums to at most 1.
    p_excess, q_excess : float
        How far the logged masses summed above 1 before scaling (0 when they did not; at most
        :data:`LOGGED_MASS_ATOL`); folded into the interval's ends.
    """

    p_ids: np.ndarray
    p_vals: np.ndarray
    q_ids: np.ndarray
    q_vals: np.ndarray
    p_excess: float = 0.0
    q_excess: float = 0.0

    @property
    def p_tail(self) -> float:
        """Target mass outside the logged ids, :math:`t_p = 1 - p(A) \\ge 0`."""
        return max(0.0, 1.0 - float(self.p_vals.sum()))

    @property
    def q_tail(self) -> float:
        """Draft mass outside the logged ids, :math:`t_q = 1 - q(B) \\ge 0`."""
        return max(0.0, 1.0 - float(self.q_vals.sum()))


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
    s = float(v.sum())
    if s > 1.0 + LOGGED_MASS_ATOL:
        raise InvalidDistributionError(
            f"{name}: logged probabilities sum to {s:.9g} > 1 + {LOGGED_MASS_ATOL:g}; they must be natural-log probabilities of one "
            "distribution (check the log base and duplicated entries)"
        )
    excess = max(0.0, s - 1.0)
    if excess > 0:
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
    return np.append(pb, max(0.0, 1.0 - pb.sum())), np.append(qb, max(0.0, 1.0 - qb.sum()))


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


def _iid_value(p: np.ndarray, q: np.ndarray, k: int) -> float:
    if k == 1:
        return float(np.minimum(p, q).sum())
    from otspec.bounds import optimal_acceptance
    from otspec.laws import iid

    return float(optimal_acceptance(p, iid(q, k), method="prefix").value)


def _greedy_top(t: TruncatedPair, m: int) -> np.ndarray:
    """Positions (in ``t.q_ids``) of the m largest logged draft probabilities (ties: lower id)."""
    order = np.lexsort((t.q_ids, -t.q_vals))
    return order[:m]


def _greedy_interval(t: TruncatedPair, k: int) -> tuple[float, float]:
    r"""Greedy optimum :math:`P(G) + \sum_{x \notin G} \min(p(x), \tilde q(x))` bounded from the log."""
    if k - 1 > t.q_ids.size:
        raise UnsupportedMethodError(
            f"the greedy interval with k = {k} needs the {k - 1} largest draft probabilities, but only {t.q_ids.size} are logged; "
            "log more entries or use a smaller k"
        )
    g_pos = _greedy_top(t, k - 1)
    G = t.q_ids[g_pos]
    qG = float(t.q_vals[g_pos].sum())
    rest = 1.0 - qG
    p_of = dict(zip(t.p_ids.tolist(), t.p_vals.tolist(), strict=True))
    pG_logged = sum(p_of.get(int(x), 0.0) for x in G)
    inG = np.isin(t.q_ids, G)
    S_mask = ~inG & np.isin(t.q_ids, t.p_ids)  # (A n B) \ G
    S = t.q_ids[S_mask]
    if rest <= 0.0:  # the draft's whole mass is on G: the last draft never leaves G
        return pG_logged, min(1.0, pG_logged + t.p_tail)
    qt_S = t.q_vals[S_mask] / rest
    p_S = np.array([p_of[int(x)] for x in S])
    common = float(np.minimum(p_S, qt_S).sum())
    low = pG_logged + common
    high = common + min(1.0 - float(p_S.sum()), pG_logged + t.p_tail + 1.0 - float(qt_S.sum()))
    return low, high


def certified_interval(t: TruncatedPair, law: str = "iid", k: int = 1) -> CertifiedInterval:
    r"""The interval of optimal acceptances that a top-K log allows.

    For ``law="iid"``: ``low`` is :math:`\alpha^*` of :func:`split_pair`, ``high`` of
    :func:`merged_pair`. For ``law="greedy"``, with :math:`G` the k-1 largest logged draft
    probabilities, :math:`\tilde q = q / (1 - q(G))` and :math:`S = (A \cap B) \setminus G`:

    .. math:: \text{low} = p(G \cap A) + \sum_{x \in S} \min(p(x), \tilde q(x)), \qquad
              \text{high} = \sum_{x \in S} \min(p(x), \tilde q(x))
                + \min\big(1 - p(S),\; p(G \cap A) + t_p + 1 - \tilde q(S)\big).

    A record whose logged masses exceeded 1 (within :data:`LOGGED_MASS_ATOL`) widens both ends by
    ``p_excess + k * q_excess``; the ends are clipped to ``[0, 1]``.

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
    if law == "iid":
        low = _iid_value(*split_pair(t), k)
        high = _iid_value(*merged_pair(t), k)
    else:
        low, high = _greedy_interval(t, k)
    widen = t.p_excess + k * t.q_excess
    return CertifiedInterval(max(0.0, low - widen), min(1.0, high + widen), law, k)
