r"""Exponential-race computation of :math:`Q_{WOR}(H^k)` for successive sampling.

Successive sampling proportional to q is the order in which independent exponential clocks
:math:`E_x \sim \mathrm{Exp}(q(x))` ring. The first k drafts all lie in H iff the k-th clock of H
rings before the first clock of :math:`H^c`, whose ringing time is :math:`\mathrm{Exp}(\lambda)`,
:math:`\lambda = q(H^c)`. Hence (MATH.md section 3.2)

.. math:: Q(H^k) = \int_0^\infty \lambda e^{-\lambda t}\, P\big(N_H(t) \ge k\big)\, dt,
          \qquad N_H(t) = \sum_{x \in H} \mathrm{Bernoulli}(1 - e^{-q(x) t}).

This module evaluates it for every prefix of a token order (reference implementation: a loop
over tokens carrying the Poisson-binomial DP at Gauss-Legendre nodes in :math:`s = \log t`).
"""

from __future__ import annotations

import numpy as np

__all__ = ["wor_prefix_all_in"]


def _nodes(s_lo: float, s_hi: float, n: int) -> tuple[np.ndarray, np.ndarray]:
    x, w = np.polynomial.legendre.leggauss(n)
    half = 0.5 * (s_hi - s_lo)
    s = s_lo + half * (x + 1.0)
    t = np.exp(s)
    return t, w * half * t  # dt = t ds


def _prefix_values(q_sorted: np.ndarray, k: int, lam: np.ndarray, t: np.ndarray, wt: np.ndarray) -> np.ndarray:
    V = q_sorted.size
    out = np.empty(V + 1)
    out[0] = 0.0
    P = np.zeros((t.size, k))  # P[:, j] = P(N = j) for the current prefix, j < k
    P[:, 0] = 1.0
    for i in range(V):
        a = np.exp(-q_sorted[i] * t)
        b = -np.expm1(-q_sorted[i] * t)
        P[:, 1:] = P[:, 1:] * a[:, None] + P[:, :-1] * b[:, None]
        P[:, 0] *= a
        tail = np.clip(1.0 - P.sum(axis=1), 0.0, 1.0)  # P(N >= k)
        li = lam[i + 1]
        out[i + 1] = float(np.sum(wt * li * np.exp(-li * t) * tail)) if li > 0 else 1.0
    return out


def wor_prefix_all_in(q_sorted: np.ndarray, k: int) -> tuple[np.ndarray, float]:
    """Return ``(values, error_bound)`` with ``values[i] = Q_WOR(H_i^k)`` for the first i tokens of
    ``q_sorted`` (a distribution already permuted into the prefix order)."""
    q_sorted = np.asarray(q_sorted, dtype=np.float64)
    V = q_sorted.size
    # lambda_i = q(complement of the first i tokens), summed from the back for accuracy.
    lam = np.concatenate([np.cumsum(q_sorted[::-1])[::-1], [0.0]])
    if k == 1:
        vals = np.minimum(np.concatenate([[0.0], np.cumsum(q_sorted)]), 1.0)
        return vals, 4.4e-16 * V
    pos = lam[lam > 0]
    lam_min = float(pos.min()) if pos.size else 1.0
    s_lo = -30.0
    s_hi = float(np.log(40.0 / lam_min)) + 1.0
    t1, w1 = _nodes(s_lo, s_hi, 400)
    t2, w2 = _nodes(s_lo, s_hi, 200)
    v1 = _prefix_values(q_sorted, k, lam, t1, w1)
    v2 = _prefix_values(q_sorted, k, lam, t2, w2)
    tails = np.exp(s_lo) + np.exp(-40.0)
    err = float(np.max(np.abs(v1 - v2))) + tails
    return np.minimum(v1, 1.0), err
