r"""Exponential-race computation of :math:`Q_{WOR}(H^k)` for successive sampling.

Successive sampling proportional to q is the order in which independent exponential clocks
:math:`E_x \sim \mathrm{Exp}(q(x))` ring. The first k drafts all lie in H iff the k-th clock of H
rings before the first clock of :math:`H^c`, whose ringing time is :math:`\mathrm{Exp}(\lambda)`,
:math:`\lambda = q(H^c)`. Hence (:doc:`math`, sorted prefixes)

.. math:: Q(H^k) = \int_0^\infty \lambda e^{-\lambda t}\, P\big(N_H(t) \ge k\big)\, dt,
          \qquad N_H(t) = \sum_{x \in H} \mathrm{Bernoulli}(1 - e^{-q(x) t}).

The rates are the entries of q as given; the race is invariant under scaling all rates, so this is
successive sampling proportional to q even when ``q.sum()`` differs from 1 by rounding (it is also
what Gumbel-top-k sampling draws). Write :math:`S = \sum_x q(x) = q(H) + \lambda`.

**Fast method** (:func:`wor_prefix_all_in`, :func:`wor_prefix_at`, :func:`wor_dual_minimum`).
We integrate the complement in :math:`s = \log t`,

.. math:: 1 - Q(H^k) = \int_{-\infty}^{\infty} g(s)\, ds, \qquad
          g(s) = \lambda t e^{-\lambda t}\, P\big(N_H(t) < k\big), \quad t = e^s,

with the trapezoidal rule of step h on the whole line, :math:`T_h[g] = h \sum_n g(s_0 + n h)`.
Dividing the Poisson-binomial law by :math:`\prod_{x \in H} e^{-q(x)t}` gives

.. math:: P\big(N_H(t) < k\big) = e^{-q(H) t} \sum_{j<k} e_j\big(c(t)\big), \qquad
          c_x(t) = e^{q(x) t} - 1,

where :math:`e_j` are elementary symmetric polynomials. For the prefixes :math:`H_i` of a fixed
token order they satisfy :math:`e_j(H_i) = \sum_{l \le i} c_l\, e_{j-1}(H_{l-1})`: k - 1 cumulative
sums of positive terms over the token axis (no cancellation), vectorised over tokens and chunked
over quadrature nodes. To avoid overflow, a token with :math:`q(x) t > \tau` is given the rate
:math:`\tau / t` at that node (it has arrived with probability :math:`\ge 1 - e^{-\tau}`).
Nodes stop at :math:`t = e^{700}`; when a prefix's integrand lives beyond (its :math:`\lambda` and
k-th rate near the smallest float), the sweep runs on the rates scaled by a power of two, which is
exact and leaves :math:`Q(H^k)` unchanged (:func:`_rescale_exponent`).

**Error bound** (per prefix; details in ``docs/wor_integral.rst``):

* Discretisation -- rigorous, a priori. For :math:`|\operatorname{Im} s| < a < \pi/2`, with
  :math:`t = r e^{iy}`: :math:`|e^{q t} - 1| \le (e^{q r \cos y} - 1)/\cos y`, hence
  :math:`|P(N_H(t) < k)| \le \sec^{k-1}(y)\, P(N_H(r\cos y) < k)` and
  :math:`\int |g(s + iy)|\, ds \le \sec^k(y)\,(1 - Q)`. The trapezoidal theorem for functions
  analytic in a strip (Trefethen & Weideman 2014, Thm 5.1) then gives
  :math:`|T_h[g] - (1 - Q)| \le 2 (1-Q) \sec^k(a) / (e^{2\pi a/h} - 1)`, independent of V, q, H.
* Truncation of the infinite sum -- rigorous. Left of the first node :math:`g` equals
  :math:`\lambda t e^{-\lambda t}` (summed in closed form by a series) minus
  :math:`\lambda t e^{-\lambda t} P(N \ge k) \le \lambda q(H)^k t^{k+1}/k!` (a geometric sum).
  Right of the last node, :math:`P(N_H(t) < k)` is decreasing in t, so the rest is at most
  :math:`P(N_H(t_{\rm last}) < k)\, e^{-\lambda t_{\rm last}}` when :math:`\lambda t_{\rm last}
  \ge 1` (and :math:`P \cdot (1 + \gamma_h)` otherwise); the node range grows until this is small
  for every evaluated prefix.
* Rate capping -- rigorous. Coupling each capped Bernoulli with the exact one moves
  :math:`P(N < k)` by at most :math:`\sum_{q(x) t > \tau} (e^{-\tau} - e^{-q(x) t})`, computed.
* Rounding -- a first-order bound under the standard model of float64 arithmetic, assuming
  ``exp``/``expm1`` accurate to 1 ulp; an estimate, not a proof.
* The base (:class:`_Base`: the tokens before the first requested prefix, summarised once per
  node through the moments of q) -- its series truncation is rigorous, its rounding an estimate
  as above; the sums of q give :math:`\lambda` to a relative error that moves Q by at most twice
  it (added).
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from otspec._arith import power
from otspec._tolerances import (
    WOR_GAMMA_SERIES_CUTOFF,
    WOR_PRUNE_MARGIN,
    WOR_SERIES_CUTOFF,
    WOR_TAIL_ROUNDING_RTOL,
    WOR_TARGET_ERROR,
)

__all__ = ["WorMinimum", "wor_prefix_all_in", "wor_prefix_at", "wor_dual_minimum"]

_U = 2.0**-53  # unit roundoff of float64
#: Memory budget for one chunk of quadrature nodes: five (tokens x nodes) float64 work arrays.
_CHUNK_BYTES = 80 * 1024**2
#: Largest s = log t we integrate to: t = e^700 keeps q*t, lambda*t finite in float64.
_S_CAP = 700.0
#: A sweep whose planned last node lies beyond this is run on rates scaled by a power of two (the
#: race is scale-invariant): room of e^20 is left for the a-posteriori tail check to go on.
_S_PLAN_MAX = _S_CAP - 20.0
#: Largest exponent of the left-tail constant :math:`\lambda q(H)^k / k!` a rescaling may create.
_RESCALE_LOG_MAX = 650.0


# ----------------------------------------------------------------------------------------------
# Quadrature constants
# ----------------------------------------------------------------------------------------------
def _strip_bound(k: int, h: float) -> tuple[float, float]:
    r"""min over a in (0, pi/2) of :math:`2\sec^k(a)/(e^{2\pi a/h} - 1)`; returns (bound, a)."""
    a = np.linspace(1e-3, 0.5 * np.pi - 1e-3, 4000)
    logb = math.log(2.0) - k * np.log(np.cos(a)) - (2 * np.pi * a / h) - np.log1p(-np.exp(-2 * np.pi * a / h))
    j = int(np.argmin(logb))
    return float(np.exp(logb[j])), float(a[j])


@lru_cache(maxsize=64)
def _step(k: int, target: float) -> tuple[float, float]:
    """Largest step h (bisection) whose rigorous discretisation factor is <= target; (h, factor)."""
    lo, hi = 0.01, 2.0
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        if _strip_bound(k, mid)[0] <= target:
            lo = mid
        else:
            hi = mid
    return lo, _strip_bound(k, lo)[0]


def _gamma_excess(h: float) -> float:
    r"""Bound on :math:`|h\sum_n \phi(s_0 + nh) - 1|` for :math:`\phi(s) = \lambda e^s
    e^{-\lambda e^s}`, any :math:`\lambda, s_0`: by Poisson summation it is at most
    :math:`2\sum_{m \ge 1} |\Gamma(1 + 2\pi i m/h)|`, and
    :math:`|\Gamma(1 + i\omega)|^2 = \pi\omega / \sinh(\pi\omega)`."""
    tot = 0.0
    for m in range(1, 200):
        w = 2 * math.pi * m / h
        x = math.pi * w
        term = math.sqrt(2 * x) * math.exp(-0.5 * x) if x > 30 else math.sqrt(x / math.sinh(x))
        tot += term
        if term < WOR_GAMMA_SERIES_CUTOFF:
            break
    return 2.0 * tot


def _left_series(x: np.ndarray, h: float) -> np.ndarray:
    r""":math:`h\sum_{m \ge 1} \phi(s_{lo} - mh)` with :math:`x = \lambda e^{s_{lo}} \le 1`:
    expanding :math:`e^{-x e^{-mh}}` and summing the geometric series in m gives
    :math:`h\sum_{r \ge 0} (-x)^r x / r! \cdot 1/(e^{(r+1)h} - 1)`, alternating with terms
    decreasing to below 1e-19 (truncation error less than the first omitted term)."""
    out = np.zeros_like(x)
    term = x.copy()  # x^{r+1} / r!
    for r in range(60):
        out += (-1) ** r * term / math.expm1((r + 1) * h)
        term = term * x / (r + 1)
        if float(np.max(term, initial=0.0)) < WOR_SERIES_CUTOFF * h:
            break
    return h * out


# ----------------------------------------------------------------------------------------------
# Cheap bounds on the prefixes
# ----------------------------------------------------------------------------------------------
def _prefix_sums(q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(Q_i, lambda_i), i = 0..V, summed in extended precision (lambda from the back, so that it is
    accurate to relative rounding when it is tiny)."""
    ql = q.astype(np.longdouble)
    Q = np.concatenate([[0.0], np.cumsum(ql)]).astype(np.float64)
    lam = np.concatenate([np.cumsum(ql[::-1])[::-1], [0.0]]).astype(np.float64)
    return Q, lam


def _blocked_prefix(x: np.ndarray) -> tuple[np.ndarray, int]:
    """``(X, units)``: the prefix sums ``X[i] = sum(x[:i])``, i = 0..V, of nonnegative ``x`` in
    float64 by two levels (within blocks of B, then the block totals), and their rounding in units
    of u: every ``X[i]`` is within ``units * u * X[i]`` of the exact sum (B + nb instead of V for
    one sequential sum; an extended-precision cumsum costs ~20x more)."""
    V = x.size
    B = 1 << max(3, math.ceil(0.5 * math.log2(max(V, 1))))
    nf = V // B  # full blocks; the rest (< B entries) is one more block
    out = np.empty(V + 1)  # the only array of size V (fresh pages cost more than the sums)
    out[0] = 0.0
    full = out[1 : 1 + nf * B].reshape(nf, B)
    np.cumsum(x[: nf * B].reshape(nf, B), axis=1, out=full)
    np.cumsum(x[nf * B :], out=out[1 + nf * B :])
    if nf:
        off = np.cumsum(out[B : nf * B + 1 : B])  # totals of the full blocks
        full[1:] += off[:-1, None]
        out[1 + nf * B :] += off[-1]
    return out, B + nf + 3


def _pairwise_units(n: int) -> int:
    """Rounding of numpy's pairwise float64 sum of n nonnegative terms, in units of u (blocks of 8
    summed in order up to 128 terms, then halving)."""
    return 16 + max(0, math.ceil(math.log2(max(n, 1) / 128))) + 2


def _top_values(x: np.ndarray, k: int) -> np.ndarray:
    """The k largest entries of ``x`` (nonnegative) in descending order, zero padded: the k-th
    largest block maximum is a threshold every one of them reaches, so only the entries above it
    are sorted (two passes over x instead of a partition)."""
    out = np.zeros(k)
    if x.size <= 8 * k + 64:
        v = -np.sort(-x)[:k]
        out[: v.size] = v
        return out
    nb = max(k, min(1024, x.size // 64))
    blk = x.size // nb
    bm = x[: nb * blk].reshape(nb, blk).max(axis=1)
    thr = float(np.partition(bm, nb - k)[nb - k])
    v = x[x >= thr]
    v = -np.sort(-v)[:k]
    out[: v.size] = v
    return out


def _top_block(n: int) -> int:
    """Block length for :func:`_block_top`: about 1024 blocks (a Python loop over blocks), exact
    (length 1) for small n."""
    return 1 << max(0, math.ceil(math.log2(max(n, 1) / 1024)))


def _block_top(q: np.ndarray, k: int, block: int) -> np.ndarray:
    """``top[b, j]`` = j-th largest q among the first ``b * block`` tokens (0 when absent), for
    b = 0..ceil(V / block), j = 0..k-1. Block granularity keeps it vectorised; prefixes inside a
    block are bracketed by the two neighbouring block ends (the top values are monotone in the set).
    """
    V = q.size
    nb = -(-V // block)
    pad = np.zeros(nb * block)
    pad[:V] = q
    blocks = pad.reshape(nb, block)
    # A block whose maximum is at most the k-th largest of the earlier blocks' maxima (a lower
    # bound on the running k-th largest entry) leaves the running top-k as it is: only the others
    # are merged.
    bm = blocks.max(axis=1)
    heap: list[float] = []
    flagged = []
    for b, m in enumerate(bm.tolist()):
        if len(heap) < k or m > heap[0]:
            flagged.append(b)
        if len(heap) < k:
            heapq.heappush(heap, m)
        elif m > heap[0]:
            heapq.heapreplace(heap, m)
    kk = min(k, block)
    sel = blocks[flagged]
    part = -np.partition(-sel, kk - 1, axis=1)[:, :kk] if kk < block else sel.copy()
    part = -np.sort(-part, axis=1)
    rows = np.zeros((len(flagged) + 1, k))
    cur = np.zeros(k)
    for n in range(len(flagged)):
        merged = np.concatenate([cur, part[n]])
        cur = -np.sort(-merged)[:k]
        rows[n + 1] = cur
    # row b + 1 of the result is the state after the last flagged block <= b
    last = np.zeros(nb + 1, dtype=np.int64)
    last[np.asarray(flagged, dtype=np.int64) + 1] = np.arange(1, len(flagged) + 1)
    return rows[np.maximum.accumulate(last)]


# ----------------------------------------------------------------------------------------------
# The base: every token before the first requested prefix, summarised once per node
# ----------------------------------------------------------------------------------------------
#: A token of the base whose exponent q t stays <= this on a chunk's nodes enters through the
#: moments of q (:class:`_Base`); the others through the Poisson-binomial step.
_BASE_DELTA = 0.25
#: Moments of the base's small tokens over all of them up to this power (then only the tokens
#: whose power is still >= _MOMENT_DROP).
_DENSE_POWERS = 4
#: Relative truncation error of the moment series (``_moment_plan``), far below the target.
_BASE_SERIES_RTOL = 1e-20
#: The base is split off when it holds at least this many tokens ...
_BASE_MIN_TOKENS = 512
#: ... k is at most this (the moment series then needs <= ~100 moments) ...
_BASE_MAX_K = 32
#: ... and at most this many of its tokens take the Poisson-binomial step (a loop over them).
_BASE_MAX_BIG = 1024
#: Powers of the scaled rates below this are dropped from the higher moments (each dropped token
#: moves a moment by less than this, against a moment >= 1; counted in the error).
_MOMENT_DROP = 1e-30


@lru_cache(maxsize=64)
def _moment_plan(k: int) -> tuple[int, np.ndarray, float]:
    r"""Series length S, coefficients ``a[m, s]`` of :math:`((e^z - 1)/z)^m = \sum_s a_{m,s} z^s`
    (m = 0..k-1, s = 0..S) and the relative truncation bound rho.

    Coefficientwise :math:`(e^z - 1)/z \le e^z`, so :math:`a_{m,s} \le m^s / s!` and, for
    :math:`0 \le z \le \delta`, the omitted terms are at most :math:`z^m \rho` with
    :math:`\rho = (m\delta)^{S+1} / (S+1)! \,/\, (1 - m\delta/(S+2))`."""
    md = (k - 1) * _BASE_DELTA
    S, term = 0, md
    while True:  # term = (m delta)^(S+1) / (S+1)!
        rho = term / (1.0 - md / (S + 2))
        if md / (S + 2) < 0.5 and rho <= _BASE_SERIES_RTOL:
            break
        S += 1
        term *= md / (S + 1)
    g = np.array([1.0 / math.factorial(s + 1) for s in range(S + 1)])  # (e^z - 1)/z
    a = np.zeros((k, S + 1))
    a[0, 0] = 1.0
    for m in range(1, k):
        a[m] = np.convolve(a[m - 1], g)[: S + 1]
    return S, a, rho


def _exp_series(L: np.ndarray) -> np.ndarray:
    r"""Coefficients 0..k-1 of :math:`\exp(\sum_{m \ge 1} L_m w^m)`, rows of ``L`` (k, T) (row 0
    unused): :math:`E_j = \frac1j \sum_{m=1}^{j} m L_m E_{j-m}`."""
    k = L.shape[0]
    E = np.zeros_like(L)
    E[0] = 1.0
    for j in range(1, k):
        acc = np.zeros(L.shape[1])
        for m in range(1, j + 1):
            acc += (m * L[m]) * E[j - m]
        E[j] = acc / j
    return E


class _Base:
    r"""The law of :math:`N_B(t)`, the arrivals among a fixed token set B (the tokens before the
    first requested prefix), truncated to 0..k-1, at a chunk of nodes: O(|B|) work per chunk
    instead of O(k |B|) per node.

    At a chunk whose largest node is :math:`t_{max}`, a token with :math:`q t_{max} \le \delta`
    (``_BASE_DELTA``) is *small*. For the small tokens, with :math:`c_x = e^{q_x t} - 1`,

    .. math:: \sum_j P(N = j) w^j = e^{-q t} \prod_x (1 + c_x w)
              = e^{-q t} \exp\Big(\sum_{m \ge 1} \frac{(-1)^{m+1}}{m} \sum_x c_x^m w^m\Big),

    and :math:`\sum_x c_x^m = \sum_s a_{m,s} t^{m+s} \sum_x q_x^{m+s}` (:func:`_moment_plan`): the
    power sums of q, computed once, give every node. The few other tokens take the
    Poisson-binomial step (convex combinations). Error per node (``state``'s second result, an
    absolute bound on :math:`\sum_j |P_j - \text{exact}|`): the series truncation (rigorous,
    relative rho on each :math:`\sum_x c_x^m`) and the dropped powers, propagated to first order
    through the exponential by the same recurrence on :math:`|L_m|`
    (:math:`|\delta E_j| \le j \eta\, E^{|L|}_j`), plus a first-order rounding estimate.
    """

    def __init__(self, q: np.ndarray, k: int):
        self.q = q if q.size and q.min() > 0 else q[q > 0]
        self.k = k
        self.S, self.a, self.rho = _moment_plan(k)
        self.R = k - 1 + self.S
        self.theta = -1.0  # the split in use (none yet)

    def _split(self, t_max: float) -> None:
        """Small/big split for a chunk reaching ``t_max`` and the small tokens' scaled moments.
        The split is made with room for t up to ``e * t_max`` (the a-posteriori tail check often
        adds a few nodes), so a later chunk within that range reuses it."""
        if self.theta >= 0 and self.theta * t_max <= _BASE_DELTA:
            return
        self.theta = _BASE_DELTA / (math.e * t_max)
        big = self.q > self.theta
        nbig = int(np.count_nonzero(big))
        self.big = self.q[big] if nbig else self.q[:0]
        small = self.q[~big] if nbig else self.q
        self.n_small = small.size
        if not small.size:
            return
        self.qsum = float(small.sum())
        self.qsum_units = _pairwise_units(small.size)
        self.th = float(small.max())
        M = np.zeros(self.R + 1)
        x = small / self.th  # in (0, 1], max 1: every moment >= 1 (a division: th may be subnormal)
        M[0] = small.size
        M[1] = x.sum()
        # Powers over every token up to _DENSE_POWERS; from there on only the tokens with
        # x^_DENSE_POWERS >= _MOMENT_DROP count (the others add < _MOMENT_DROP each to a moment
        # >= 1: counted in eta), and so on at every doubling.
        pw = x * x
        r, n_drop = 2, 0
        while r <= self.R:
            M[r] = pw.sum()
            if r == self.R:
                break
            if r & (r - 1) == 0 and r >= _DENSE_POWERS:
                keep = pw >= _MOMENT_DROP
                n_drop += int(keep.size - np.count_nonzero(keep))
                pw, x = pw[keep], x[keep]
            pw *= x
            r += 1
        self.M = M
        self.eta = self.rho + n_drop * _MOMENT_DROP + (2 * self.R + math.log2(small.size + 1) + 10) * _U

    def state(self, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(P, err)``: P[j, n] = P(N_B(t_n) = j), j < k, and the error bound per node."""
        k, T = self.k, t.size
        self._split(float(t.max()))
        P = np.zeros((k, T))
        err = np.zeros(T)
        if self.n_small:
            u = self.th * t  # <= delta at every node of the chunk (see _split)
            W = np.empty((self.R + 1, T))
            W[0] = 1.0
            for r in range(1, self.R + 1):
                np.multiply(W[r - 1], u, out=W[r])
            W *= self.M[:, None]  # W[r] = t^r sum_x q_x^r
            Lab = np.zeros((k, T))
            for m in range(1, k):
                Lab[m] = (self.a[m] @ W[m : m + self.S + 1]) / m
            sign = np.where(np.arange(k) % 2 == 1, 1.0, -1.0)[:, None]
            E = _exp_series(Lab * sign)
            Eab = _exp_series(Lab)
            Z = t * self.qsum
            ez = np.exp(-Z)
            np.multiply(np.maximum(E, 0.0), ez, out=P)  # the exact coefficients are >= 0
            j = np.arange(k)[:, None]
            rel = j * self.eta + (j * (j + 5) / 2 + 4 + (self.qsum_units + 3) * Z) * _U
            err = (Eab * rel).sum(axis=0) * ez
        else:
            P[0] = 1.0
        mass = P.sum(axis=0) + err
        for x in self.big:  # the Poisson-binomial step: convex combinations, no overflow
            z = x * t
            a = np.exp(-z)
            b = -np.expm1(-z)
            P[1:] = P[1:] * a + P[:-1] * b
            P[0] *= a
        err = err + 4 * _U * self.big.size * mass
        return P, err


def _base_split(q: np.ndarray, k: int, idx: np.ndarray, grid) -> int:
    """How many leading tokens to summarise by :class:`_Base` (0: none)."""
    i0 = int(idx[0]) - 1  # every requested prefix keeps >= 1 token of the window
    if i0 < _BASE_MIN_TOKENS or k > _BASE_MAX_K:
        return 0
    theta = _BASE_DELTA / (math.e * math.exp(grid.s_hi_est))  # as _Base._split's first split
    if int(np.count_nonzero(q[:i0] > theta)) > _BASE_MAX_BIG:
        return 0
    return i0


# ----------------------------------------------------------------------------------------------
# The engine
# ----------------------------------------------------------------------------------------------
def _cumsum_blocked(x: np.ndarray) -> None:
    """In-place inclusive prefix sum over tokens of ``x`` with layout (B, nb, T), token b*B + r at
    ``x[r, b]``: a loop over the B rows (each a vectorised add over nb*T numbers) and an exclusive
    sum of the nb block totals. Two levels also keep the rounding error at (B + nb) u instead of
    V u for numpy's sequential cumsum."""
    B = x.shape[0]
    for r in range(1, B):
        np.add(x[r], x[r - 1], out=x[r])
    tot = x[B - 1]
    off = np.empty_like(tot)
    off[0] = 0.0
    if tot.shape[0] > 1:
        np.cumsum(tot[:-1], axis=0, out=off[1:])
    x += off[None]


def _next_chunk(n_done: int, n_est: int, Tc_max: int, G_prev, G_last, t_prev: float, t_last: float, tol: float, h: float, pos) -> int:
    """Nodes to compute next: the rest of the planned range, else a guess from the local decay
    rate of the slowest prefix's tail between the last two nodes (rates grow with t, so this tends
    to overshoot slightly; the a-posteriori check decides in any case)."""
    if n_done < n_est:
        return min(n_est - n_done, Tc_max)
    if G_prev is None:
        return Tc_max
    a, b = (G_prev, G_last) if pos is None else (G_prev.T.reshape(-1)[pos], G_last.T.reshape(-1)[pos])
    need = b > tol
    if not need.any():
        return 1
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = np.log(a[need] / b[need]) / (t_last - t_prev)
        dt = np.log(b[need] / tol) / rate
    if not np.all(np.isfinite(dt) & (rate > 0)):
        return Tc_max
    s_need = math.log(t_last + float(dt.max()))
    return int(min(Tc_max, max(1, math.ceil((s_need - math.log(t_last)) / h) + 1)))


def _dp_loop(q: np.ndarray, k: int, t: np.ndarray, idx: np.ndarray, base: np.ndarray | None = None) -> np.ndarray:
    """P(N_{H_i}(t) < k) at the prefixes ``idx`` (sorted) and nodes ``t``: the Poisson-binomial DP
    over tokens (no overflow for any k), shape (len(idx), len(t)). ``base`` (k, len(t)): the law of
    the arrivals among tokens before ``q[0]`` (:class:`_Base`), else none."""
    out = np.empty((idx.size, t.size))
    if base is None:
        P = np.zeros((k, t.size))
        P[0] = 1.0
    else:
        P = base.copy()
    want = np.zeros(int(idx.max()) + 1, dtype=bool)
    want[idx] = True
    row = 0
    for i in range(int(idx.max())):
        if q[i] > 0:
            z = q[i] * t
            a = np.exp(-z)
            b = -np.expm1(-z)
            P[1:] = P[1:] * a + P[:-1] * b
            P[0] *= a
        if want[i + 1]:
            out[row] = P.sum(axis=0)
            row += 1
    return out


@dataclass(frozen=True)
class _Sweep:
    values: np.ndarray  # Q at the requested prefixes
    errors: np.ndarray  # per-prefix error bound
    nodes: int  # quadrature nodes used
    parts: dict  # largest value of each error component, and the grid (for benchmarks and docs)


@dataclass(frozen=True)
class _Grid:
    """The quadrature plan of one sweep: step, constants, rate cap and the node range."""

    h: float  # trapezoidal step in s = log t
    beta: float  # discretisation factor 2 sec^k(a) / (e^{2 pi a / h} - 1)
    gam: float  # bound on |h sum_n phi(s_0 + n h) - 1| (right-tail factor)
    tol_tail: float  # target for each truncated tail
    tau: float  # rate cap: a token's exponent q t is capped at tau
    loop: bool  # take the stable token loop (large k) instead of the cumulative-sum form
    lqk: np.ndarray  # lambda q(H)^k / k! per prefix (left-tail bound)
    geo: float  # geometric factor of the left-tail bound
    s_lo: float  # first node
    s_hi_est: float  # planned last node (the a-posteriori tail check decides)
    s_hi_need: float  # the planned last node before the cap at _S_CAP


@dataclass(frozen=True)
class _Layout:
    """Where the tokens and the requested prefixes live in the (B, nb, nodes) work arrays."""

    B: int  # rows: token b * B + r sits at [r, b]
    nb: int  # blocks
    q3: np.ndarray  # (B, nb, 1) rates, zero padded to Vp = nb * B tokens
    pos: np.ndarray  # prefix i = inclusive prefix sum at token i - 1
    ri: np.ndarray  # row of pos
    bi: np.ndarray  # block of pos
    gather: bool  # keep only the requested prefixes (else every token, picked out at the end)
    lam_g: np.ndarray  # lambda per prefix, shaped like the accumulators (plus a node axis)
    q_desc: np.ndarray  # positive rates, descending (capping error)

    @property
    def Vp(self) -> int:
        return self.nb * self.B

    @property
    def shape_acc(self) -> tuple:
        return (self.pos.size,) if self.gather else (self.B, self.nb)

    def pick(self, x: np.ndarray) -> np.ndarray:
        """The requested prefixes' entries of an accumulator (the identity when gathering)."""
        return x if self.gather else x.T.reshape(-1)[self.pos]


def _rate_cap(k: int, n_tok: int) -> tuple[float, bool]:
    """Rate cap tau for sums over ``n_tok`` tokens, and whether to take the token loop instead."""
    # With tau the product of k - 1 sums of <= n_tok terms below e^tau stays < e^650. Below
    # tau = 36 the capping error (up to e^-tau per capped token) would matter: large k then takes
    # the stable token loop instead (k >= 15 at V = 262 144).
    tau = min(50.0, 650.0 / max(k - 1, 1) - math.log(n_tok + 1.0))
    return tau, tau < 36.0


def _grid(q: np.ndarray, k: int, idx: np.ndarray, lam_idx: np.ndarray, Q_idx: np.ndarray, S: float, target: float) -> _Grid:
    """Step, rate cap and node range of the sweep for the prefixes ``idx``."""
    n_tok = int(idx.max())
    # -- quadrature step and constants ---------------------------------------------------------
    h, beta = _step(k, 0.25 * target)
    gam = _gamma_excess(h)
    tol_tail = 0.01 * target
    tau, loop = _rate_cap(k, n_tok)
    lqk, geo, s_lo = _left_end(k, h, lam_idx, Q_idx, S, tol_tail)
    s_hi_est, s_hi_need = _right_end(q, k, idx, lam_idx, S, tol_tail, h, s_lo)
    return _Grid(
        h=h, beta=beta, gam=gam, tol_tail=tol_tail, tau=tau, loop=loop, lqk=lqk, geo=geo, s_lo=s_lo, s_hi_est=s_hi_est, s_hi_need=s_hi_need
    )


def _left_end(k: int, h: float, lam_idx: np.ndarray, Q_idx: np.ndarray, S: float, tol_tail: float) -> tuple[np.ndarray, float, float]:
    """The first node: where the geometric bound on the omitted :math:`P(N \\ge k)` part of the left
    tail falls below ``tol_tail``; returns ``(lqk, geo, s_lo)``."""
    # lambda q(H)^k / k!, in logs: k! overflows a float from k = 171 on
    with np.errstate(divide="ignore"):
        lqk = lam_idx * np.exp(k * np.log(Q_idx) - math.lgamma(k + 1))
    kk1 = (k + 1) * h
    geo = h * math.exp(-kk1) / (-math.expm1(-kk1))
    cmax = float(lqk.max())
    if cmax * geo > 0:
        s_lo = math.log(tol_tail / (cmax * geo)) / (k + 1)
    elif cmax > 0:  # cmax * geo underflows (lambda near the smallest float): the same in logs
        s_lo = (math.log(tol_tail) - math.log(cmax) - math.log(geo)) / (k + 1)
    else:
        s_lo = -1.0
    s_lo = min(s_lo, -math.log(2.0 * S))  # keeps lambda t_lo <= 1/2 for the left series
    return lqk, geo, s_lo


def _right_end(
    q: np.ndarray, k: int, idx: np.ndarray, lam_idx: np.ndarray, S: float, tol_tail: float, h: float, s_lo: float
) -> tuple[float, float]:
    """The planned last node (only a plan: the a-posteriori tail check decides), capped at
    ``_S_CAP``, and the same before the cap (in logs: it may exceed the float range of t).

    The tail :math:`e^{-\\lambda t} P(N_H(t) < k)` decays at least like :math:`k e^{-(\\lambda + m_k) t}`
    and, up to a polynomial factor, like :math:`e^{-(S - M_{k-1}) t}`, :math:`M_{k-1}` the mass of
    the k - 1 largest rates of H; we plan with the faster of the two (bounds from block ends
    around i, or the two ends of a narrow window of prefixes)."""
    n_tok = int(idx.max())
    i_lo = int(idx.min())
    if 4 * (n_tok - i_lo) <= n_tok:  # a narrow window: H_{min idx} and H_{max idx} bound every H_i
        mk_lo = _top_values(q[:i_lo], k)[k - 1]
        m_hi = float(_top_values(q[:n_tok], k)[: k - 1].sum())
    else:
        blk = _top_block(n_tok)
        top = _block_top(q[:n_tok], k, blk)
        mk_lo = top[idx // blk, k - 1]  # k-th largest of a subset of H_i: a lower bound on m_k(H_i)
        big = np.cumsum(top[:, : k - 1], axis=1)[:, -1] if k > 1 else np.zeros(top.shape[0])
        m_hi = big[np.minimum(-(-idx // blk), top.shape[0] - 1)]  # top-(k-1) mass of a superset
    mu = float(np.min(np.maximum(lam_idx + mk_lo, S - m_hi)))
    s_hi_est = math.log(max(math.log(k / tol_tail), 1.0) / mu) if mu > 0 else _S_CAP
    # mu = 0 gives no plan to bring into range: -inf never asks for a rescaling
    s_hi_need = (math.log(max(math.log(k / tol_tail), 1.0)) - math.log(mu)) if mu > 0 else -math.inf
    return min(max(s_hi_est, s_lo + h), _S_CAP), s_hi_need


def _layout(q: np.ndarray, idx: np.ndarray, lam_idx: np.ndarray, loop: bool) -> _Layout:
    """Tokens 0..max(idx) in B rows x nb blocks (B about sqrt of the token count, a power of two)."""
    n_tok = int(idx.max())
    B = int(2 ** round(math.log2(max(math.sqrt(n_tok), 8.0))))
    B = min(max(B, 8), 1024)
    nb = -(-n_tok // B)
    Vp = nb * B
    qp = np.zeros(Vp)
    qp[:n_tok] = q[:n_tok]
    q3 = np.ascontiguousarray(qp.reshape(nb, B).T)[:, :, None]  # (B, nb, 1)
    pos = idx - 1  # prefix i = inclusive prefix sum at token i - 1
    ri, bi = pos % B, pos // B
    gather = loop or idx.size < Vp // 4
    if gather:
        lam_g = lam_idx[:, None]
    else:
        lam_full = np.zeros(Vp)
        lam_full[pos] = lam_idx
        lam_g = np.ascontiguousarray(lam_full.reshape(nb, B).T)[:, :, None]
    q_desc = -np.sort(-q[:n_tok])
    q_desc = q_desc[q_desc > 0]
    return _Layout(B=B, nb=nb, q3=q3, pos=pos, ri=ri, bi=bi, gather=gather, lam_g=lam_g, q_desc=q_desc)


def _chunk_dp(
    q: np.ndarray, k: int, idx: np.ndarray, lay: _Layout, t: np.ndarray, ht: np.ndarray, acc1: np.ndarray, acc2: np.ndarray, base=None
):
    """One chunk of nodes by the stable fallback for large k (the cumulative-sum form would
    overflow): the Poisson-binomial DP over tokens, vectorised over the chunk's nodes, giving
    :math:`G = e^{-\\lambda t} P(N < k)` exactly. Adds the chunk to ``acc1``, ``acc2``; returns
    ``(G at the last node, G at the node before it or None)``."""
    Pg = _dp_loop(q, k, t, idx, base)
    arg = lay.lam_g * t
    G = np.exp(-arg) * Pg
    acc1 += G @ ht
    acc2 += (G * arg) @ ht
    return G[:, -1], (G[:, -2] if t.size > 1 else None)


def _esym_chunk(lay: _Layout, k: int, tau: float, t: np.ndarray, bufs: list, base=None):
    """Capped exponents and elementary symmetric sums of one chunk, for every token up to max(idx).

    Returns ``(Y, R, c, Xc)``: ``Y`` the prefix sums of the capped exponents
    :math:`\\min(q t, \\tau)` (the :math:`e^{-q(H) t}` factor), ``R`` :math:`= \\sum_{j<k} e_j(c)`
    per prefix, and two work arrays free for reuse. With ``base`` (k, nodes), the law of the
    arrivals among the tokens before the window, the sums start from it:
    :math:`X_j = \\sum_a \\mathrm{base}_a\\, e_{j-a}(c)` (the same recursion, other initial values)."""
    c, Y, Xp, Xc, R = bufs
    with np.errstate(over="ignore"):  # q t beyond the float range is capped at tau next
        np.multiply(lay.q3, t, out=Y)
    np.minimum(Y, tau, out=Y)
    np.expm1(Y, out=c)
    _cumsum_blocked(Y)
    # elementary symmetric sums: X_1 = cumsum(c), X_j = cumsum(c * shift(X_{j-1}))
    if base is None:
        R.fill(1.0)
    else:
        R[...] = base[0]  # X_0; X_j (j >= 1) add base[j] below
    if k >= 2:
        if base is None:
            Xp[...] = c
        else:
            np.multiply(c, base[0], out=Xp)
        _cumsum_blocked(Xp)
        if base is not None:
            Xp += base[1]
        R += Xp
        for j in range(2, k):
            # term at token l is c_l * X_{j-1}(tokens < l): shift by one token in the layout
            np.multiply(c[1:], Xp[:-1], out=Xc[1:])
            np.multiply(c[0, 1:], Xp[lay.B - 1, :-1], out=Xc[0, 1:])
            Xc[0, 0] = 0.0 if base is None else c[0, 0] * base[j - 1]
            _cumsum_blocked(Xc)
            if base is not None:
                Xc += base[j]
            R += Xc
            Xp, Xc = Xc, Xp
    return Y, R, c, Xc


def _chunk_sums(lay: _Layout, k: int, tau: float, t: np.ndarray, ht: np.ndarray, bufs: list, acc1: np.ndarray, acc2: np.ndarray, base=None):
    """One chunk of nodes by the cumulative-sum form: :math:`G = e^{-\\lambda t} P(N' < k)` with
    capped rates, at the requested prefixes (gathered) or at every token (in place, in the work
    arrays). Adds the chunk to ``acc1``, ``acc2``; returns ``(G at the last node, G at the node
    before it or None)``."""
    Y, R, c, Xc = _esym_chunk(lay, k, tau, t, bufs, base)
    last2 = t.size > 1
    if lay.gather:
        Yg = Y[lay.ri, lay.bi]  # (n, Tc)
        Rg = R[lay.ri, lay.bi]
        arg = Yg + lay.lam_g * t
        G = np.exp(-arg) * Rg  # = e^{-lambda t} P(N' < k)
        acc1 += G @ ht
        acc2 += (G * arg) @ ht
        return G[:, -1], (G[:, -2] if last2 else None)
    arg = Xc
    np.multiply(lay.lam_g, t, out=arg)
    arg += Y
    G = c
    np.multiply(arg, -1.0, out=G)
    np.exp(G, out=G)
    G *= R
    acc1 += G @ ht
    G_last = G[:, :, -1].copy()
    G_prev = G[:, :, -2].copy() if last2 else None
    G *= arg
    acc2 += G @ ht
    return G_last, G_prev


def _cap_error(lay: _Layout, tau: float, t: np.ndarray, eps_max: float) -> float:
    """Largest capping error so far: at each node, the sum over capped tokens of
    :math:`e^{-\\tau} - e^{-q t}`."""
    for tn in t:
        m = int(np.searchsorted(-lay.q_desc, -tau / tn, side="left"))
        if m:
            with np.errstate(over="ignore"):  # q t = inf: e^{-q t} = 0, as it should
                eps_max = max(eps_max, float(m * math.exp(-tau) - np.exp(-lay.q_desc[:m] * tn).sum()))
    return eps_max


def _right_tail(lay: _Layout, G_last: np.ndarray, t_last: float, gam: float) -> np.ndarray:
    """Bound on the node sum right of the last node, per accumulator entry."""
    lt = (lay.lam_g[:, 0] if lay.gather else lay.lam_g[:, :, 0]) * t_last
    # (1 + WOR_TAIL_ROUNDING_RTOL) covers the rounding of G_last itself
    return G_last * np.where(lt >= 1.0, 1.0, np.exp(np.minimum(lt, 1.0)) * (1.0 + gam)) * (1.0 + WOR_TAIL_ROUNDING_RTOL)


def _integrate(q: np.ndarray, k: int, idx: np.ndarray, grid: _Grid, lay: _Layout, base: _Base | None = None):
    """The trapezoidal sums over node chunks until the right tail is below ``grid.tol_tail`` (or
    the node cap). Returns ``(acc1, acc2, tail, eps_max, n_nodes, base_err)`` at the requested
    prefixes: ``acc1`` :math:`= \\sum_n h t_n G_n` (times lambda: 1 - Q minus the left part),
    ``acc2`` :math:`= \\sum_n h t_n G_n (Y + \\lambda t)` (rounding of the exponent), ``base_err``
    the largest error of the base's law over the nodes (0 without a base)."""
    h, loop = grid.h, grid.loop
    acc1 = np.zeros(lay.shape_acc)
    acc2 = np.zeros(lay.shape_acc)
    eps_max = 0.0
    Tc_max = max(1, min(64, _CHUNK_BYTES // (5 * 8 * lay.Vp)))
    if loop:
        Tc_max = 256  # one pass over the tokens per chunk: take many nodes at once
    n_est = int(math.ceil((grid.s_hi_est - grid.s_lo) / h)) + 1
    Tc = min(n_est, Tc_max)
    # flat storage: each chunk views a contiguous (B, nb, Tc) prefix of it (never a strided slice
    # of the node axis: numpy 2.4.6 computes np.negative(x, out=y) wrongly when both have a stride
    # of 8 elements)
    bufs_full = [] if loop else [np.empty(lay.Vp * Tc_max) for _ in range(5)]
    n_done = 0
    base_err = 0.0
    G_last_old, t_last_old = None, 0.0  # last node of the previous chunk (decay-rate guess)
    while True:
        s = grid.s_lo + h * np.arange(n_done, n_done + Tc)
        t = np.exp(s)
        ht = h * t
        bstate = None
        if base is not None:
            bstate, berr = base.state(t)
            base_err = max(base_err, float(berr.max()))
        if loop:
            G_last, G_prev = _chunk_dp(q, k, idx, lay, t, ht, acc1, acc2, bstate)
        else:
            bufs = [b[: lay.Vp * Tc].reshape(lay.B, lay.nb, Tc) for b in bufs_full]
            G_last, G_prev = _chunk_sums(lay, k, grid.tau, t, ht, bufs, acc1, acc2, bstate)
            eps_max = _cap_error(lay, grid.tau, t, eps_max)
        if G_prev is None:
            G_prev = G_last_old
        n_done += Tc
        t_last = float(t[-1])
        tail = _right_tail(lay, G_last, t_last, grid.gam)
        if float(lay.pick(tail).max()) <= grid.tol_tail or s[-1] >= _S_CAP:
            break
        t_prev = float(t[-2]) if Tc > 1 else t_last_old
        Tc = _next_chunk(n_done, n_est, Tc_max, G_prev, G_last, t_prev, t_last, grid.tol_tail, h, None if lay.gather else lay.pos)
        G_last_old, t_last_old = G_last, t_last
    return lay.pick(acc1), lay.pick(acc2), lay.pick(tail), eps_max, n_done, base_err


def _assemble(
    k: int,
    n_tok: int,
    lam_idx: np.ndarray,
    grid: _Grid,
    lay: _Layout,
    acc1: np.ndarray,
    acc2: np.ndarray,
    tail: np.ndarray,
    eps_max: float,
    n_nodes: int,
    base_err: float = 0.0,
) -> _Sweep:
    """Values and per-prefix error bounds (left series, tails, rate cap, rounding, the base's law,
    discretisation)."""
    h, gam, beta = grid.h, grid.gam, grid.beta
    x_lo = lam_idx * math.exp(grid.s_lo)
    left = _left_series(x_lo, h)
    one_minus = lam_idx * acc1 + left
    values = 1.0 - one_minus
    f_left = grid.lqk * grid.geo * math.exp((k + 1) * grid.s_lo)
    if grid.loop:
        # each DP step is a convex combination: <= 4u relative per step on every P_j
        rel = 4 * n_tok + k + n_nodes + 8
        rounding = _U * (lam_idx * acc1 * rel + lam_idx * acc2 * 3 + 30.0)
    else:
        rel = (k - 1) * (grid.tau + 3 + lay.B + lay.nb) + k + n_nodes + 8
        rounding = _U * (lam_idx * acc1 * rel + lam_idx * acc2 * (lay.B + lay.nb + 3) + 30.0)
    # An error e in the base's law moves P(N_H(t) < k) by at most e (the window's law of < k - a
    # arrivals is <= 1 for each a): once in the node sum (weights <= 1 + gam) and once in the right
    # tail's bound (its factor is <= e (1 + gam)).
    base = base_err * (1.0 + gam) * (1.0 + math.e)
    other = f_left + tail + eps_max * (1.0 + gam) + rounding + base
    # discretisation: 2 sec^k(a) (1 - Q) / (e^{2 pi a / h} - 1) with 1 - Q <= computed + other
    disc = beta * np.minimum(1.0, (np.maximum(one_minus, 0.0) + other) / (1.0 - beta))
    errors = disc + other
    parts = {
        "discretisation": float(disc.max()),
        "left_tail": float(f_left.max()),
        "right_tail": float(tail.max()),
        "rate_cap": eps_max * (1.0 + gam),
        "rounding": float(rounding.max()),
        "base": base,
        "h": h,
        "s_lo": grid.s_lo,
        "s_hi": grid.s_lo + h * (n_nodes - 1),
    }
    return _Sweep(values=values, errors=errors, nodes=n_nodes, parts=parts)


def _rescale_exponent(grid: _Grid, k: int, S: float) -> int:
    r"""The power of two by which to scale every rate so that the sweep's nodes fit below ``_S_CAP``.

    :math:`Q(H^k)` is invariant under scaling all rates by c, which maps t to t / c (s to
    s - log c) and leaves :math:`q t`, :math:`\lambda t` and every error term unchanged. When a
    prefix's :math:`\lambda` and k-th largest rate are within a few orders of the smallest float
    (``q = [1, 2.5e-308, 2.5e-308]``), its integrand lives at :math:`t \approx 1/\lambda`, beyond
    the largest float: the node range would be cut at ``_S_CAP`` and the answer lost. Scaling the
    rates up by :math:`2^e` (exact in binary) brings that range back. The scale is the smallest that
    does it, and at most :math:`e^{650/(k+1)} / S` (so :math:`\lambda q(H)^k \le S^{k+1}` stays
    finite); 0 (no scaling, bit-identical results) whenever the plan already fits.
    """
    if grid.s_hi_need <= _S_PLAN_MAX:
        return 0
    e = math.ceil((grid.s_hi_need - _S_PLAN_MAX) / math.log(2.0))
    e_max = math.floor((_RESCALE_LOG_MAX / (k + 1) - math.log(S)) / math.log(2.0))
    return max(0, min(e, e_max))


def _sweep(
    q: np.ndarray, k: int, idx: np.ndarray, lam_idx: np.ndarray, Q_idx: np.ndarray, S: float, target: float, eps_lam: float = 0.0
) -> _Sweep:
    r"""Q(H_i^k) at the prefixes ``idx`` (all with lambda_i > 0 and >= k positive tokens), given
    lambda_i to a relative error ``eps_lam`` (it moves Q by at most ``2 eps_lam``:
    :math:`|\lambda\, \partial_\lambda \int \lambda e^{-\lambda t} G(t) dt| \le
    \int \lambda e^{-\lambda t} (1 + \lambda t) dt = 2` for :math:`0 \le G \le 1`).

    One sweep of the trapezoidal rule in s = log t over node chunks; for each chunk the
    elementary symmetric sums are computed for the tokens from ``min(idx) - 1`` to ``max(idx)``
    (the window), starting from the law of the arrivals among the tokens before it (the base,
    :class:`_Base`, when it is large enough to pay): plan the grid (:func:`_grid`), lay out the
    window (:func:`_layout`), integrate (:func:`_integrate`) and bound the errors
    (:func:`_assemble`).
    """
    grid = _grid(q, k, idx, lam_idx, Q_idx, S, target)
    e = _rescale_exponent(grid, k, S)
    if e:  # the same race on rates 2^e q: exact scaling, t = e^s shifted back into float range
        q, lam_idx, Q_idx, S = np.ldexp(q, e), np.ldexp(lam_idx, e), np.ldexp(Q_idx, e), math.ldexp(S, e)
        grid = _grid(q, k, idx, lam_idx, Q_idx, S, target)
    i0 = _base_split(q, k, idx, grid)
    base = None
    if i0:  # the window's sums start from the base's law; its rate cap is set by its own length
        base = _Base(q[:i0], k)
        q, idx = q[i0:], idx - i0
        tau, loop = _rate_cap(k, int(idx.max()))
        grid = dataclasses.replace(grid, tau=tau, loop=loop)
    lay = _layout(q, idx, lam_idx, grid.loop)
    acc1, acc2, tail, eps_max, n_nodes, base_err = _integrate(q, k, idx, grid, lay, base)
    sw = _assemble(k, int(idx.max()), lam_idx, grid, lay, acc1, acc2, tail, eps_max, n_nodes, base_err)
    if eps_lam:
        sw.errors[...] += 2.0 * eps_lam
        sw.parts["lambda_sums"] = 2.0 * eps_lam
    return sw


# ----------------------------------------------------------------------------------------------
# Public functions
# ----------------------------------------------------------------------------------------------
def _exact_parts(q: np.ndarray, k: int, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Masks over ``idx``: prefixes with Q = 0 exactly (fewer than k positive rates) and with Q = 1
    exactly (lambda = 0: the prefix holds the whole support)."""
    kth, last = _support_ends(q, k)
    # fewer than k positive rates among the first i tokens iff i <= (position of the k-th one)
    zero = idx <= kth
    one = (idx > last) & ~zero  # lambda = 0: nothing positive after
    return zero, one


def _support_ends(q: np.ndarray, k: int) -> tuple[int, int]:
    """Positions of the k-th positive rate (V when there are fewer) and of the last one (-1 when
    none)."""
    V = q.size
    if V and q.min() > 0:
        return (k - 1 if k <= V else V), V - 1
    positive = np.flatnonzero(q > 0)
    return (int(positive[k - 1]) if positive.size >= k else V), (int(positive[-1]) if positive.size else -1)


#: Up to this many prefixes, :func:`_prefix_at` sums each side directly (no prefix-sum arrays).
_FEW_PREFIXES = 16


def _prefix_at(q: np.ndarray, k: int, idx: np.ndarray, target: float) -> tuple[np.ndarray, float]:
    """Engine behind :func:`wor_prefix_at` with the error target exposed (tests use a 1000x
    smaller target as a high-accuracy reference)."""
    out = np.empty(idx.size)
    if k == 1:
        Q, _ = _prefix_sums(q)
        out[:] = Q[idx] / Q[-1]
        return out, float(4 * _U)
    zero, one = _exact_parts(q, k, idx)
    out[zero] = 0.0
    out[one] = 1.0
    rest = ~(zero | one)
    err = 0.0
    if rest.any():
        uniq, inv = np.unique(idx[rest], return_inverse=True)
        if uniq.size <= _FEW_PREFIXES:  # one pairwise sum per side (a cut's re-check: one prefix)
            Qu = np.array([q[:i].sum() for i in uniq.tolist()])
            lam_u = np.array([q[i:].sum() for i in uniq.tolist()])
            S, eps_lam = float(q.sum()), _pairwise_units(q.size) * _U
        else:
            Q, lam = _prefix_sums(q)
            S, Qu, lam_u = float(Q[-1]), Q[uniq], lam[uniq]
            eps_lam = q.size * float(np.finfo(np.longdouble).eps)
        sw = _sweep(q, k, uniq, lam_u, Qu, S, target, eps_lam)
        out[rest] = sw.values[inv]
        err = float(sw.errors.max())
    return out, err


def wor_prefix_at(q_sorted: np.ndarray, k: int, indices: np.ndarray) -> tuple[np.ndarray, float]:
    r""":math:`Q_{WOR}(H_i^k)` at selected prefix lengths ``indices`` of the token order.

    Parameters
    ----------
    q_sorted : (V,) float64
        Draft distribution already permuted into the token order (validated by the caller).
    k : int
        Number of drafts, ``1 <= k <=`` number of positive entries.
    indices : (m,) int
        Prefix lengths i in ``0..V``; :math:`H_i` is the first i tokens.

    Returns
    -------
    values : (m,) float64
    error_bound : float
        Bound on :math:`\max |values - Q|`; see :func:`wor_prefix_all_in` for what is rigorous.

    Examples
    --------
    >>> v, err = wor_prefix_at(np.array([0.5, 0.25, 0.25]), 2, [2])
    >>> bool(abs(v[0] - (0.5 * 0.5 + 0.25 * 2 / 3)) <= err + 1e-15)
    True
    """
    q = np.asarray(q_sorted, dtype=np.float64)
    idx = np.asarray(indices, dtype=np.int64).reshape(-1)
    return _prefix_at(q, k, idx, WOR_TARGET_ERROR)


def wor_prefix_all_in(q_sorted: np.ndarray, k: int) -> tuple[np.ndarray, float]:
    r"""Return ``(values, error_bound)`` with ``values[i]`` :math:`= Q_{WOR}(H_i^k)` for the first
    i tokens of ``q_sorted`` (a distribution already permuted into the prefix order), i = 0..V.

    Parameters
    ----------
    q_sorted : (V,) float64
        Draft distribution in the prefix order (validated by the caller; zeros allowed).
    k : int
        Number of drafts without replacement, ``1 <= k <=`` number of positive entries.

    Returns
    -------
    values : (V + 1,) float64
        :math:`Q(H_i^k) = P(\text{all } k \text{ drafts lie in the first } i \text{ tokens})`.
    error_bound : float
        Bound on :math:`\max_i |values_i - Q(H_i^k)|`.

    Notes
    -----
    Exact cases: ``k = 1`` gives :math:`q(H_i)/S` (closed form); a prefix with fewer than k positive
    rates has Q = 0; a prefix holding the whole support (:math:`\lambda = 0`) has Q = 1. Otherwise
    the race integral is evaluated by the trapezoidal rule in :math:`s = \log t` (module
    docstring). ``error_bound`` adds, per prefix and then maximised over prefixes:

    * the discretisation bound :math:`2(1-Q)\sec^k(a)/(e^{2\pi a/h} - 1)` -- rigorous (analyticity
      of the integrand in the strip :math:`|\operatorname{Im} s| < a`), with h chosen so that it
      is at most a quarter of ``WOR_TARGET_ERROR``;
    * the two truncated tails of the node sum and the rate-capping perturbation -- rigorous;
    * a first-order rounding bound (standard model, libm ``exp``/``expm1`` within 1 ulp) --
      an a-posteriori estimate, not a proof.

    Cost: :math:`O(k V T)` with T the number of nodes (25-45 on LM-like and Dirichlet inputs; about
    90 when some prefix has both :math:`\lambda` and its k-th largest rate tiny); memory
    :math:`O(V \cdot \text{chunk})`, about 80 MB of work arrays.

    References
    ----------
    :doc:`math`, sorted prefixes; L. N. Trefethen and J. A. C. Weideman, "The exponentially convergent
    trapezoidal rule", SIAM Review 56 (2014), Theorem 5.1.

    Examples
    --------
    >>> v, err = wor_prefix_all_in(np.array([0.5, 0.25, 0.25]), 2)
    >>> bool(np.allclose(v, [0.0, 0.0, 0.5 * 0.5 + 0.25 * 2 / 3, 1.0], atol=err + 1e-15))
    True
    """
    q = np.asarray(q_sorted, dtype=np.float64)
    V = q.size
    vals, err = wor_prefix_at(q, k, np.arange(V + 1))
    return vals, err


def _lower_bound(q: np.ndarray, k: int, Q: np.ndarray, S: float, idx: np.ndarray) -> np.ndarray:
    """The rigorous lower bound on :math:`Q_{WOR}(H_i^k)` of :func:`wor_dual_minimum` at the
    prefixes ``idx``: :math:`(q(H)/S) \\prod_{j<k} (q(H) - \\bar m_j)/(S - \\bar m_j)`, capped by
    :math:`(q(H)/S)^k`."""
    blk = _top_block(q.size)
    top = _block_top(q, k - 1, blk)  # (nb + 1, k - 1)
    msum = np.cumsum(top, axis=1)  # msum[b, j - 1] = top-j mass of the first b * blk tokens
    block_end = -(-idx // blk)  # superset of H_i: its top-j mass bounds m_j(H_i) from above
    Qi = Q[idx]
    r = np.minimum(Qi / S, 1.0)
    lower = r.copy()
    for j in range(1, k):
        mbar = msum[block_end, j - 1]
        # (q(H) - m)/(S - m) decreases in m; a zero or negative factor (m >= q(H)) gives 0
        lower *= np.clip((Qi - mbar) / np.maximum(S - mbar, np.finfo(np.float64).tiny), 0.0, 1.0)
    return np.minimum(lower, r**k)


def _suffix_at(q: np.ndarray, idx: np.ndarray) -> tuple[np.ndarray, float]:
    """``(lambda, eps)``: ``lambda[j] = sum(q[idx[j]:])`` at sorted ``idx`` to a relative error
    ``eps``: the tail after ``max(idx)`` by a pairwise sum, the window between by a suffix sum in
    extended precision (only the window pays for it)."""
    lo, hi = int(idx[0]), int(idx[-1])
    tail = q[hi:].sum()
    win = np.cumsum(q[lo:hi][::-1].astype(np.longdouble))[::-1]
    suf = np.concatenate([win + tail, [np.longdouble(tail)]]).astype(np.float64)
    eps = (_pairwise_units(q.size - hi) + 2) * _U + (hi - lo + 1) * float(np.finfo(np.longdouble).eps)
    return suf[idx - lo], eps


@dataclass(frozen=True)
class WorMinimum:
    r"""Result of :func:`wor_dual_minimum`.

    Attributes
    ----------
    value : float
        :math:`1 + \min_i [P(H_i) - Q(H_i^k)]` (the optimal acceptance :math:`\alpha^*_{WOR}` when
        the order is the p/q order).
    index : int
        A minimising prefix length: the cut is the first ``index`` tokens.
    error_bound : float
        Bound on :math:`|value - exact|` (rigorous parts and estimate as in
        :func:`wor_prefix_all_in`, plus the rounding of P).
    evaluated : int
        How many prefixes needed the race integral (the others were settled by bounds or are
        exact).
    """

    value: float
    index: int
    error_bound: float
    evaluated: int


# long-function: bound, prune, then integrate: one pass over shared buffers that splitting would copy
def wor_dual_minimum(p_sorted: np.ndarray, q_sorted: np.ndarray, k: int) -> WorMinimum:
    r"""Minimise :math:`P(H_i) - Q_{WOR}(H_i^k)` over the prefixes of a token order.

    Parameters
    ----------
    p_sorted, q_sorted : (V,) float64
        Target and draft distributions permuted into the prefix order (by p/q ascending, q = 0
        tokens last, for the optimum; :doc:`math`, sorted prefixes). Validated by the caller.
    k : int
        Number of drafts without replacement.

    Returns
    -------
    WorMinimum
        ``value = 1 + min_i [P(H_i) - Q(H_i^k)]``, the argmin ``index``, ``error_bound`` and the
        number of prefixes ``evaluated`` by the integral.

    Notes
    -----
    Pruning with rigorous bounds: successive draws land in H with conditional probability
    :math:`(q(H) - s)/(S - s)`, s the mass already drawn from H, which lies between 0 and
    :math:`m_j(H)` (the j largest rates of H) and the expression decreases in s. Hence

    .. math:: \prod_{j<k} \frac{q(H) - \bar m_j}{S - \bar m_j} \le Q_{WOR}(H^k)
              \le \Big(\frac{q(H)}{S}\Big)^k

    with :math:`\bar m_j \ge m_j(H_i)` the top-j mass of the first :math:`\lceil i/b \rceil b`
    tokens (blocks of b = 1 for V <= 1024, about V/1024 above). With :math:`U = \min_i [P_i - \mathrm{lower}_i]`, a prefix whose
    :math:`P_i - \mathrm{upper}_i > U` cannot be the minimiser and is skipped; the rest are
    integrated (only the tokens up to the last candidate enter the sums). The returned minimum is
    therefore the minimum over all prefixes up to ``error_bound``.

    Examples
    --------
    >>> r = wor_dual_minimum(np.array([0.1, 0.2, 0.7]), np.array([0.5, 0.3, 0.2]), 2)
    >>> r.index, round(r.value, 12)  # 1 + 0.3 - (0.5 * 0.3 / 0.5 + 0.3 * 0.5 / 0.7)
    (2, 0.785714285714)
    """
    p = np.asarray(p_sorted, dtype=np.float64)
    q = np.asarray(q_sorted, dtype=np.float64)
    V = q.size
    P, p_units = _blocked_prefix(p)
    Q, q_units = _blocked_prefix(q)
    S = float(Q[-1])
    p_round = (4 + p_units) * _U
    if k == 1:
        D = P - Q / S
        i = int(np.argmin(D))
        return WorMinimum(value=1.0 + float(D[i]), index=i, error_bound=p_round + (4 + 2 * q_units) * _U, evaluated=0)
    # -- exact prefixes: i <= kth has Q = 0 (D = P_i, least at i = 0), i > last has Q = 1 --------
    kth, last = _support_ends(q, k)
    best_i, best = 0, 0.0
    if last + 1 <= V:
        j = last + 1 + int(np.argmin(P[last + 1 :]))
        if P[j] - 1.0 < best:
            best_i, best = j, float(P[j] - 1.0)
    lo, hi = kth + 1, last  # the prefixes that need the integral (or a bound)
    err = p_round
    if lo > hi:
        return WorMinimum(value=1.0 + best, index=best_i, error_bound=err, evaluated=0)
    # -- cheap bounds ----------------------------------------------------------------------------
    # D_lo = P - (Q/S)^k at every candidate prefix (in one buffer); the upper bound U on the
    # minimum from D_hi = P - lower at the least D_lo of each block of prefixes and at the exact
    # prefixes (any set of prefixes gives a valid U; these are where D is least).
    d_lo = np.multiply(Q[lo : hi + 1], 1.0 / S)
    np.minimum(d_lo, 1.0, out=d_lo)
    d_lo = power(d_lo, k)
    np.subtract(P[lo : hi + 1], d_lo, out=d_lo)
    n = d_lo.size
    nbk = max(1, min(1024, n // 64))
    wb = n // nbk
    pick = lo + np.arange(nbk) * wb + np.argmin(d_lo[: nbk * wb].reshape(nbk, wb), axis=1)
    pick = np.concatenate([pick, [lo + int(np.argmin(d_lo))], np.arange(lo + nbk * wb, hi + 1)])
    U = min(best, float(np.min(P[pick] - _lower_bound(q, k, Q, S, pick))))
    # the bounds' own rounding (the sums P, Q in two levels; a power moves by <= k times its base's)
    slack = (p_units + 2 * (k + 2) * q_units + 8 * k) * _U
    cand = lo + np.flatnonzero(d_lo <= U + WOR_PRUNE_MARGIN + slack)
    del d_lo
    if cand.size:
        lam_c, eps_lam = _suffix_at(q, cand)
        sw = _sweep(q, k, cand, lam_c, Q[cand] * (1.0 + q_units * _U), S, WOR_TARGET_ERROR, eps_lam)
        Dc = P[cand] - sw.values
        j = int(np.argmin(Dc))
        if Dc[j] < best or (Dc[j] == best and cand[j] < best_i):
            best, best_i = float(Dc[j]), int(cand[j])
        err += float(sw.errors.max())
    return WorMinimum(value=1.0 + best, index=best_i, error_bound=err, evaluated=int(cand.size))
