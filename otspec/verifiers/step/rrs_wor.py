r"""Recursive rejection sampling without replacement (Recursive Speculative Decoding, Jeon et al.
2024; :doc:`verifiers`, rrs_wor).

Drafts come by successive sampling proportional to q. After each rejection the target becomes the
residual against the *current* draft law, and the rejected token is removed from the draft law:

.. math::
    q_1 = q,\ p_0 = p;\quad \text{return } X_j \text{ w.p. } \min\big(1, \tfrac{p_{j-1}(X_j)}{q_j(X_j)}\big),\
    p_j = \mathrm{norm}\big((p_{j-1} - q_j)_+\big),\ q_{j+1} = \mathrm{norm}\big(q_j 1_{\ne X_j}\big);
    \quad \text{else } Y \sim p_k.

No closed form is known: acceptance is exact from the kernel on small laws; at full vocabulary it is
estimated by sampling *rejection paths* in O(k log V) each (:func:`rsd_path_acceptance`), with a
99% confidence interval, instead of evaluating O(k V) kernel rows per sampled draft tuple.

The reduction (:doc:`verifiers`, rrs_wor). Every residual is one member of the family
:math:`p^{(t)} = (p - t q)_+ / Z(t)`, :math:`Z(t) = \sum_x (p - t q)_+(x)`: with :math:`s_j` the
q-mass of the j rejected drafts, :math:`c_j = 1/(1 - s_j)` and :math:`t_0 = 0`,

.. math::
    p_j = p^{(t_j)}, \qquad t_{j+1} = t_j + c_j Z(t_j),

because a rejected draft x has :math:`q_j(x) > p_{j-1}(x)`, so :math:`p_j(x) = 0` and removing it
from the draft law only rescales the others by :math:`c_j`. Round j + 1 therefore accepts with
probability

.. math::
    A_j = \sum_x \min\big(p_j(x), c_j q(x)\big)
        = c_j\, Q(r > t_{j+1}) + \frac{P(t_j < r \le t_{j+1}) - t_j\, Q(t_j < r \le t_{j+1})}{Z(t_j)},

(:math:`r = p/q`, :math:`P, Q` masses over tokens sorted by r: two binary searches in prefix sums),
and rejects a token x with probability :math:`c_j q(x)` if :math:`r(x) \le t_j` and x is not yet
drafted, :math:`(t_{j+1} q(x) - p(x)) / Z(t_j)` if :math:`t_j < r(x) \le t_{j+1}`, 0 otherwise. The
acceptance is :math:`E\big[\sum_{j<k} A_j \prod_{i<j} (1 - A_i)\big]` over rejection paths drawn
from those conditional laws: an unbiased estimator whose only randomness is the masses :math:`s_j`.

Public kernel function for per-node use: :func:`rrs_wor_conditional` ``(p, q, drafts) -> (M, V)``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from otspec._docs import fill_doc
from otspec._validation import as_distribution, as_supported_drafts, check_same_vocab
from otspec.laws import DraftLaw, ratio_order
from otspec.sampling import sample_categorical_rows
from otspec.verifiers.base import Verifier
from otspec.verifiers.kernel import AcceptanceEstimate
from otspec.verifiers.schedule import AcceptSchedule, accept_ratio, residual_rows, schedule_rows

__all__ = ["RRSWorVerifier", "rrs_wor", "rrs_wor_conditional", "rrs_wor_schedule", "rsd_path_acceptance"]


class _RSDPrefix:
    """Tokens sorted by r = p/q (q = 0 < p last, as :func:`otspec.laws.ratio_order`) with the
    prefix sums every round of the reduction needs."""

    def __init__(self, p: np.ndarray, q: np.ndarray):
        order = ratio_order(p, q)
        self.order = order
        self.q_sorted = q[order]
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            self.r = np.where(q > 0, p / np.where(q > 0, q, 1.0), np.where(p > 0, np.inf, 0.0))[order]
        self.P = np.concatenate([[0.0], np.cumsum(p[order])])
        self.Q = np.concatenate([[0.0], np.cumsum(self.q_sorted)])
        self.rank = np.empty(p.size, dtype=np.int64)
        self.rank[order] = np.arange(p.size)

    def idx(self, t: np.ndarray) -> np.ndarray:
        """Number of tokens with r <= t."""
        return np.searchsorted(self.r, t, side="right")

    def step(self, t: np.ndarray, s: np.ndarray):
        """One round from state (t_j, s_j): returns ``(A, t_next, a, b, Z, c)`` with the band of
        sorted positions ``[a, b)`` where t_j < r <= t_{j+1}."""
        P, Q = self.P, self.Q
        a = self.idx(t)
        Z = np.maximum((P[-1] - P[a]) - t * (Q[-1] - Q[a]), 0.0)
        c = 1.0 / np.maximum(1.0 - s, np.finfo(float).tiny)
        t_next = t + c * Z
        b = self.idx(t_next)
        safeZ = np.where(Z > 0, Z, 1.0)
        band = np.where(Z > 0, ((P[b] - P[a]) - t * (Q[b] - Q[a])) / safeZ, 0.0)
        A = np.where(Z > 0, np.clip(c * (Q[-1] - Q[b]) + band, 0.0, 1.0), 1.0)
        return A, t_next, a, b, Z, c


def rsd_path_acceptance(p: np.ndarray, q: np.ndarray, k: int, n: int, rng: np.random.Generator) -> np.ndarray:
    r"""``n`` independent unbiased estimates of the RSD acceptance, one per sampled rejection path.

    Each path costs O(k log V) after an O(V log V) sort (module docstring): the mean over paths is
    the acceptance, their spread gives the confidence interval.

    Parameters
    ----------
    p, q : ndarray, shape (V,)
        Target and draft laws (validated).
    k : int
        Number of drafts, by successive sampling from q.
    n : int
        Number of paths.
    rng : numpy.random.Generator
        Drives the rejected-token draws.

    Returns
    -------
    ndarray, shape (n,)
        :math:`\sum_{j<k} A_j \prod_{i<j} (1 - A_i)` along each sampled path.
    """
    pre = _RSDPrefix(p, q)
    t = np.zeros(n)
    s = np.zeros(n)
    alive = np.ones(n)
    est = np.zeros(n)
    removed = np.full((n, max(k - 1, 1)), np.iinfo(np.int64).max, dtype=np.int64)  # sorted positions
    rows = np.arange(n)
    for j in range(k):
        A, t_next, a, b, Z, c = pre.step(t, s)
        est += alive * A
        if j + 1 == k:
            break
        alive = alive * (1.0 - A)
        # The rejected token: from D = {r <= t_j} minus the drafted ones (weight c q) or the band.
        mass_d = c * np.maximum(pre.Q[a] - s, 0.0)
        mass_band = np.where(Z > 0, np.maximum(t_next * (pre.Q[b] - pre.Q[a]) - (pre.P[b] - pre.P[a]), 0.0) / np.where(Z > 0, Z, 1.0), 0.0)
        tot = mass_d + mass_band
        u = rng.random(n) * tot
        in_d = u < mass_d
        # D: inverse CDF of q over positions [0, a), skipping the removed intervals (ascending).
        ud = u / np.where(c > 0, c, 1.0)
        for col in range(j):
            e = removed[:, col]
            skip = (e < a) & (pre.Q[np.minimum(e, pre.r.size - 1)] <= ud)
            ud = ud + np.where(skip, pre.q_sorted[np.minimum(e, pre.r.size - 1)], 0.0)
        pos_d = np.clip(np.searchsorted(pre.Q, ud, side="right") - 1, 0, np.maximum(a - 1, 0))
        # band: inverse CDF of (t' q - p) over positions [a, b), a vectorised binary search.
        ub = (u - mass_d) * Z
        lo, hi = a.copy(), np.maximum(b, a + 1) - 1
        base_q, base_p = pre.Q[a], pre.P[a]
        while np.any(lo < hi):
            mid = (lo + hi) // 2
            cum = t_next * (pre.Q[mid + 1] - base_q) - (pre.P[mid + 1] - base_p)
            go_right = cum <= ub
            lo = np.where(go_right & (lo < hi), mid + 1, lo)
            hi = np.where(~go_right & (lo < hi), mid, hi)
        pos = np.where(in_d, pos_d, np.minimum(lo, pre.r.size - 1))
        ok = tot > 0  # tot == 0 only where the path is already dead (A = 1)
        s = np.where(ok, s + pre.q_sorted[pos], s)
        removed[rows, j] = np.where(ok, pos, removed[rows, j])
        removed[:, : j + 1] = np.sort(removed[:, : j + 1], axis=1)
        t = t_next
    return est


def rrs_wor_schedule(p: np.ndarray, q: np.ndarray, tuples: np.ndarray) -> AcceptSchedule:
    r"""RSD accept schedule for draft tuples ``(n, k)`` of distinct tokens (per-row residuals, ``(n, V)``).

    Round ``j`` accepts :math:`x_j` with :math:`\min(1, p_{j-1}(x_j)/q_j(x_j))`, then
    :math:`p_j = \mathrm{norm}((p_{j-1} - q_j)_+)` and :math:`q_{j+1}` is :math:`q_j` with
    :math:`x_j` removed and renormalised; the residuals depend on the drafts, hence one per row.

    Parameters
    ----------
    p, q : ndarray, shape (V,)
        Target and draft distributions.
    tuples : ndarray of int, shape (n, k)
        Tuples of distinct drafts (validated).

    Returns
    -------
    AcceptSchedule
        ``k`` rounds per tuple, residual of shape ``(n, V)``.
    """
    n, k = tuples.shape
    r = np.arange(n)
    P = np.broadcast_to(p, (n, p.shape[0])).copy()
    Q = np.broadcast_to(q, (n, q.shape[0])).copy()
    acc = np.empty((n, k))
    for j in range(k):
        x = tuples[:, j]
        num, den = P[r, x], Q[r, x]
        acc[:, j] = accept_ratio(num, den)
        P, _ = residual_rows(P, Q)
        if j + 1 < k:
            Q[r, x] = 0.0
            tot = Q.sum(axis=1)
            Q /= np.where(tot > 0, tot, 1.0)[:, None]
    return AcceptSchedule(tokens=tuples, accept=acc, residual=P)


@fill_doc
def rrs_wor_conditional(p: Any, q: Any, drafts: Any) -> np.ndarray:
    r"""Exact RSD output law :math:`\pi(\cdot \mid \bar x)` for each tuple of distinct drafts.

    Parameters
    ----------
    p, q : array_like, shape (V,)
        Target and draft distributions.
    drafts : array_like of int, shape (M, k) or (k,)
        Tuples of distinct drafts.

    Returns
    -------
    ndarray, shape (M, V)
        Row ``m`` is :math:`\pi(\cdot \mid \bar x_m)`.

    Raises
    ------
    {pq_raises}
    InvalidDraftsError
        If a draft is out of the vocabulary, has ``q = 0``, or a tuple repeats a token.

    Examples
    --------
    >>> pi = rrs_wor_conditional([0.5, 0.5, 0.0], [0.5, 0.25, 0.25], [[0, 2]])
    >>> pi.round(6).tolist()
    [[1.0, 0.0, 0.0]]
    """
    p = as_distribution(p, "p")
    q = as_distribution(q, "q")
    check_same_vocab(p, q)
    t = as_supported_drafts(drafts, q, distinct=True)
    return schedule_rows(rrs_wor_schedule(p, q, t), p.shape[0])


class RRSWorVerifier(Verifier):
    r"""Recursive rejection sampling without replacement (RSD), the draft law updated after each
    rejection. Acceptance: exact from the kernel (small laws) or Monte Carlo.

    References
    ----------
    Jeon, Gagrani, Goel, Park, Lee, Lott, "Recursive Speculative Decoding", arXiv 2402.14160.

    Examples
    --------
    >>> import otspec
    >>> from otspec.verifiers import rrs_wor
    >>> est = rrs_wor.acceptance([0.5, 0.3, 0.2], otspec.without_replacement([0.2, 0.3, 0.5], 2))
    >>> est.how
    'kernel'
    """

    name = "rrs_wor"
    rule = "RRS without replacement needs successive-sampling drafts (otspec.without_replacement)"
    fix = "use otspec.verifiers.rrs for i.i.d./product drafts, or build the law with otspec.without_replacement"
    reference = "RSD (Jeon et al. 2024)"

    def applies_to(self, law: DraftLaw) -> bool:
        return law.without_replacement_q is not None

    def _schedule(self, p, law, tuples):
        return rrs_wor_schedule(p, law.q, tuples)

    def _sample_rows(self, p, law, tuples, coin_rng, res_rng):
        """The rule of :func:`rrs_wor_schedule` run lazily: a row's round-j residual is built only if
        the row reaches round j + 1 (round 0 needs no (n, V) array at all). The random draws
        (one coin per row and round up front, then one residual draw per fully rejected row) and
        every per-row float operation are those of ``sample_schedule(rrs_wor_schedule(...))``, so the
        output is the same token for the same generator states."""
        q = law.q
        n, k = tuples.shape
        V = p.shape[0]
        out = np.empty(n, dtype=np.int64)
        U = coin_rng.random((n, k))
        x0 = tuples[:, 0]
        hit = U[:, 0] < accept_ratio(p[x0], q[x0])
        out[hit] = x0[hit]
        alive = np.flatnonzero(~hit)
        if alive.size == 0:
            return out
        P = np.broadcast_to(p, (alive.size, V)).copy()
        Q = np.broadcast_to(q, (alive.size, V)).copy()
        for j in range(k):
            r = np.arange(alive.size)
            if j > 0:
                x = tuples[alive, j]
                hit = U[alive, j] < accept_ratio(P[r, x], Q[r, x])
                out[alive[hit]] = x[hit]
                keep = ~hit
                alive, P, Q = alive[keep], P[keep], Q[keep]
                if alive.size == 0:
                    return out
                r = np.arange(alive.size)
            P, _ = residual_rows(P, Q)
            if j + 1 < k:
                Q[r, tuples[alive, j]] = 0.0
                tot = Q.sum(axis=1)
                Q /= np.where(tot > 0, tot, 1.0)[:, None]
        out[alive] = sample_categorical_rows(res_rng, P)
        return out

    def _monte_carlo(self, p, law, n, rng) -> AcceptanceEstimate:
        """Rejection-path sampling (:func:`rsd_path_acceptance`) with ``n`` paths and a 99% normal
        interval; O(k log V) per path instead of O(k V) per sampled tuple (pass a larger
        ``n_samples`` for a tighter interval: 1e5 paths take well under a second at V = 262 144)."""
        if n < 2:
            return super()._monte_carlo(p, law, n, rng)  # the same refusal as every verifier
        v = rsd_path_acceptance(p, law.q, law.k, n, rng)
        return AcceptanceEstimate.from_samples(v, "mean over sampled RSD rejection paths of sum_j A_j prod_{i<j} (1 - A_i)")


rrs_wor = RRSWorVerifier()
