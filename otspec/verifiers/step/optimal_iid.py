r"""The optimal verifier for k i.i.d. drafts at any vocabulary size (registered as ``optimal_iid``).

It attains :math:`\alpha^*(p, q^{\otimes k}) = 1 + \min_H [p(H) - q(H)^k]` exactly, with a
selection law in closed form and a draw in :math:`O(k + \log V)` after an
:math:`O(V (\log V + k))` preparation. The mathematics (and the proofs) are in the documentation page
``docs/optimal_verifier.rst``; in brief:

1. **Two-step form.** A selection rule picks one drafted token, with law :math:`r`; single-draft
   speculative sampling from :math:`r` to :math:`p` (keep y w.p. :math:`\min(1, p(y)/r(y))`,
   else draw from :math:`\mathrm{norm}((p-r)_+)`) is lossless and accepts with
   :math:`\sum_y \min(p(y), r(y))`.
2. **Selection law.** With :math:`\Phi(t) = 1-(1-t)^k`, the achievable laws are those with
   :math:`r(S) \le \Phi(q(S))` for every S. With :math:`H^*` the optimal cut (a prefix in p/q
   order) and A its complement, :math:`r^* = \min(p, c\,q)` on A and :math:`\max(p, c'q)` on
   :math:`H^*` (:func:`selection_law`) is achievable and accepts with :math:`\alpha^*`.
3. **Sampling r\*.** Tokens are grouped into super-tokens of equal density :math:`r^*/q`, sorted
   by density; a random level :math:`s \sim U(0,1)` activates the cuts whose threshold
   :math:`\kappa_i \le s`; the block of the first drafted super-token is found with a range-minimum
   table, and a uniformly chosen draft of that block is the selected token. The thresholds come
   from the *threshold tree*, the upper convex hull of the points
   :math:`(t_i, \Phi(t_i), L(t_i))`, built by removing points in order of their local ratio
   (:func:`threshold_tree`; compiled with numba when the extra ``otspec[fast]`` is installed,
   bit-identical to the pure-Python builder, see :data:`TREE_METHODS`).

Laws covered: ``otspec.iid(q, k)`` and ``otspec.product([q, ..., q])`` with identical drafters.
Refused (with the reason): product laws with different drafters, without replacement, greedy and
explicit laws -- there :math:`P(\text{some draft in } S)` is not a function of one measure of S,
so the closed form and the threshold construction do not apply.
"""

from __future__ import annotations

import heapq
import itertools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from otspec._validation import as_distribution, as_int_in_range, check_same_vocab
from otspec.errors import UnsupportedMethodError
from otspec.laws import DraftLaw
from otspec.sampling import spawn_streams
from otspec.verifiers.base import Verifier
from otspec.verifiers.tuples import membership_mask

__all__ = [
    "TREE_METHODS",
    "OptimalIIDState",
    "OptimalIIDVerifier",
    "ThresholdTree",
    "optimal_iid",
    "prepare",
    "selection_law",
    "threshold_tree",
]

#: Threshold-tree builders. ``"heap"``: remove the boundary of smallest local ratio one at a time
#: with a binary heap, O(m (log m + k)) worst case, pure Python. ``"heap_compiled"``: the same
#: algorithm compiled with numba (optional extra ``otspec[fast]``), bit-identical trees, 15-50x
#: faster in the benchmark. ``"flip"``: randomized incremental construction with flips, expected
#: O(m k) for every input (compiled when numba is installed, else the same code in plain Python);
#: the best proven bound, about as fast as the compiled heap in practice (memory-latency bound).
#: ``"auto"`` (the default): ``"heap_compiled"`` when numba is installed, else ``"heap"``.
#: ``"argmax"``: the direct recursion, worst case O(m^2), a reference for tests.
TREE_METHODS = ("auto", "flip", "heap", "heap_compiled", "argmax")


# ------------------------------------------------------------------------------------------------
# Selection law r* (closed form)


@dataclass(frozen=True, eq=False)
class _Selection:
    r: np.ndarray  # (V,) r*
    alpha: float  # 1 + p(H*) - q(H*)^k
    desc: np.ndarray  # tokens with q > 0 in density-descending order
    dens: np.ndarray  # r*/q of those tokens (non-increasing)
    cut: np.ndarray  # token ids of H*
    c: float  # A-side cap constant (inf when the A pool is empty)
    c_prime: float  # H*-side floor constant (nan when H* is empty)


def _one_minus_pow(x: float, k: int) -> float:
    """:math:`1 - (1-x)^k` without cancellation for small x."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    return -math.expm1(k * math.log1p(-x))


def _selection(p: np.ndarray, q: np.ndarray, k: int) -> _Selection:
    V = p.shape[0]
    pos = np.flatnonzero(q > 0)
    pp, qq = p[pos], q[pos]
    with np.errstate(over="ignore"):  # a denormal q gives p/q = +inf, the right limit
        pi = pp / qq
    o = np.argsort(pi)  # ascending p/q (tie order is irrelevant: ties are merged)
    pis, ps, qs = pi[o], pp[o], qq[o]
    n = pos.size
    r_sorted = np.empty(n)
    if k == 1:  # Phi(t) = t: the base polytope is {q}
        r = np.zeros(V)
        r[pos] = qq
        alpha = float(np.minimum(p, q).sum())
        desc = pos[o[::-1]]
        return _Selection(r, alpha, desc, np.ones(n), pos[o[pis < 1.0]], 1.0, 1.0)
    cp = np.concatenate([[0.0], np.cumsum(ps)])
    cq = np.minimum(np.concatenate([[0.0], np.cumsum(qs)]), 1.0)
    g = cp - cq**k
    # the optimum is attained at the boundary of a block of tied ratios: only those are candidates
    boundary = np.ones(n + 1, dtype=bool)
    boundary[1:n] = pis[1:] != pis[:-1]
    g[~boundary] = np.inf
    nH = int(np.argmin(g))  # first minimiser: H* = empty set when alpha* = 1
    h = float(cq[nH])
    hk = h**k
    # --- A = tokens nH..n-1 (ascending): r = min(p, c q), sum = Phi(q(A)) = 1 - h^k
    c = math.inf
    if nH < n:
        target = 1.0 - hk
        pA, qA, rA = ps[nH:], qs[nH:], pis[nH:]
        P_lt = np.concatenate([[0.0], np.cumsum(pA)[:-1]])  # p-mass of A-tokens before j
        Q_ge = np.cumsum(qA[::-1])[::-1]  # q-mass of A-tokens from j on
        F = P_lt + rA * Q_ge  # sum_A min(p, pi_j q), non-decreasing in j
        j = int(np.searchsorted(F, target, side="left"))
        if j < pA.size:
            c = (target - P_lt[j]) / Q_ge[j]
            lo = rA[j - 1] if j > 0 else 0.0
            c = min(max(c, lo), rA[j])  # rounding only: keep the densities sorted
            r_sorted[nH:] = np.where(np.arange(pA.size) < j, pA, c * qA)
        else:  # F never reaches the target (rounding): r = p on A
            r_sorted[nH:] = pA
    # --- H* = tokens 0..nH-1: r = max(p, c' q), sum = h^k
    c_prime = math.nan
    if nH > 0:
        pH, qH, rH = ps[:nH], qs[:nH], pis[:nH]
        Q_le = np.cumsum(qH)  # q-mass of tokens 0..j
        P_gt = np.concatenate([np.cumsum(pH[::-1])[::-1][1:], [0.0]])  # p-mass after j
        S = rH * Q_le + P_gt  # sum_H max(p, pi_j q), non-decreasing in j
        j = int(np.searchsorted(S, hk, side="left"))  # pool = tokens < j, c' in [pi_{j-1}, pi_j]
        j = max(j, 1)
        if j <= nH - 1:
            c_prime = (hk - (P_gt[j - 1])) / Q_le[j - 1]
            c_prime = min(max(c_prime, rH[j - 1]), rH[j])
        else:
            c_prime = max(hk / Q_le[-1], rH[-1])
        idx = np.arange(nH)
        r_sorted[:nH] = np.where(idx < j, c_prime * qH, pH)
    r = np.zeros(V)
    r[pos[o]] = r_sorted
    dens = _densities(r_sorted, ps, qs, pis, nH, c, c_prime)
    alpha = float(min(1.0, 1.0 + cp[nH] - hk))
    desc = pos[o[::-1]]
    return _Selection(r, alpha, desc, dens[::-1].copy(), pos[o[:nH]], float(c), float(c_prime))


def _densities(r_sorted, ps, qs, pis, nH, c, c_prime) -> np.ndarray:
    """Densities r*/q in ascending p/q order, with the pools at exactly their constant (so that
    equal densities are recognised as equal) and p-tokens at exactly p/q."""
    d = pis.copy()
    n = pis.size
    is_p = r_sorted == ps
    if nH < n and np.isfinite(c):
        d[nH:] = np.where(is_p[nH:], pis[nH:], c)
    if nH > 0:
        d[:nH] = np.where(is_p[:nH] & (pis[:nH] >= c_prime), pis[:nH], c_prime)
    # rounding guard: densities must be non-decreasing in this order
    return np.maximum.accumulate(d)


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
    p, q, k = _check_pqk(p, q, k)
    return _selection(p, q, k).r.copy()


def _check_pqk(p, q, k):
    p = as_distribution(p, "p")
    q = as_distribution(q, "q")
    check_same_vocab(p, q)
    return p, q, as_int_in_range(k, "k")


# ------------------------------------------------------------------------------------------------
# Geometry of the threshold tree


def _hsum3(x: np.ndarray, y: np.ndarray, z: np.ndarray, n: int) -> np.ndarray:
    r"""Complete homogeneous symmetric polynomial :math:`h_n(x, y, z) = \sum_{a+b+c=n} x^a y^b z^c`
    (all terms positive: no cancellation)."""
    h2 = np.ones_like(x)  # h_m(x, y)
    h3 = np.ones_like(x)  # h_m(x, y, z)
    xm = np.ones_like(x)
    for _ in range(n):
        xm = xm * x
        h2 = xm + y * h2
        h3 = h2 + z * h3
    return h3


@dataclass(frozen=True, eq=False)
class _Geometry:
    T: np.ndarray  # (m+1,) cumulative q-mass of super-tokens, T[0] = 0, T[m] = 1
    Y: np.ndarray  # (m+1,) 1 - T from suffix sums (accurate near 1)
    L: np.ndarray  # (m+1,) cumulative r*-mass
    w: np.ndarray  # (m,) q-mass of each super-token
    rho: np.ndarray  # (m,) r*-mass of each super-token
    k: int

    @property
    def m(self) -> int:
        return self.w.size

    def phi(self) -> np.ndarray:
        return 1.0 - self.Y**self.k

    def ratio(self, a: np.ndarray, i: np.ndarray, b: np.ndarray) -> np.ndarray:
        r"""Local ratio :math:`R_{a,b}(i) = (L - \bar L)(t_i) / (\Phi - \bar\Phi)(t_i)`, chords
        over :math:`[t_a, t_b]`, for arrays of index triples ``a < i < b``.

        Written as :math:`(d_- - d_+) / (W\, h_{k-2}(Y_a, Y_i, Y_b))` with :math:`d_\pm` the mean
        densities left and right of i and W the block's q-mass: the denominator has no
        cancellation."""
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            return self._ratio(a, i, b)

    def _ratio(self, a, i, b):
        T, L = self.T, self.L
        w1 = T[i] - T[a]
        w2 = T[b] - T[i]
        one = (i - a) == 1
        two = (b - i) == 1
        dl = np.where(one, self.rho[np.maximum(i - 1, 0)] / self.w[np.maximum(i - 1, 0)], (L[i] - L[a]) / np.where(w1 > 0, w1, 1.0))
        dr = np.where(
            two, self.rho[np.minimum(i, self.m - 1)] / self.w[np.minimum(i, self.m - 1)], (L[b] - L[i]) / np.where(w2 > 0, w2, 1.0)
        )
        den = (w1 + w2) * _hsum3(self.Y[a], self.Y[i], self.Y[b], self.k - 2)
        out = (dl - dr) / den
        # 0 where the block has no q-mass at float64 resolution, or where inf - inf gave NaN
        return np.where((den > 0) & ~np.isnan(out), out, 0.0)


def _geometry(sel: _Selection, q: np.ndarray, k: int) -> tuple[_Geometry, np.ndarray]:
    """Super-tokens (runs of equal density in descending order) and the token -> super-token map
    (1-based; 0 for tokens with q = 0, never drafted)."""
    desc, dens = sel.desc, sel.dens
    n = desc.size
    start = np.ones(n, dtype=bool)
    start[1:] = dens[1:] != dens[:-1]
    starts = np.flatnonzero(start)
    qd = q[desc]
    tot = qd.sum()
    w = np.add.reduceat(qd, starts) / tot
    rho = np.add.reduceat(sel.r[desc], starts)
    rho = rho / rho.sum()
    T = np.concatenate([[0.0], np.cumsum(w)])
    T[-1] = 1.0
    Y = np.concatenate([np.cumsum(w[::-1])[::-1], [0.0]])
    Y[0] = 1.0
    L = np.concatenate([[0.0], np.cumsum(rho)])
    L[-1] = 1.0
    st = np.zeros(q.shape[0], dtype=np.int64)
    st[desc] = np.cumsum(start)
    return _Geometry(T=T, Y=Y, L=L, w=w, rho=rho, k=k), st


@dataclass(frozen=True, eq=False)
class ThresholdTree:
    r"""The threshold tree over the super-token boundaries ``0..m``.

    Attributes
    ----------
    G : ndarray, shape (m+1,)
        Ratio of the node splitting at boundary i (interior i), clamped to be non-increasing down
        the tree; ``G[0] = G[m] = 1``. The cut at i is active at level s iff
        :math:`\kappa_i = 1 - G_i \le s`.
    left, right : ndarray of int64, shape (m+1,)
        The block ``(left[i], right[i])`` that node i splits (-1 at the two ends).
    order : ndarray of int64
        Interior boundaries in removal order (leaves first, root last).
    method : str
        Builder used (``"heap_compiled"``, ``"heap"``, ``"flip"`` or ``"argmax"``; ``"auto"``
        resolves to one of the first two).
    max_clamp : float
        Largest amount by which a raw ratio exceeded its parent's and was clamped (rounding).
    work : int or None
        Elementary steps of the build (a complexity guard the tests check on adversarial inputs):
        ``"flip"``: the number of flips (expected below 2 per boundary, at most
        ``MAX_FLIPS_PER_BOUNDARY`` per boundary); ``"heap_compiled"``: heap record swaps, at most
        :math:`(m-1) + 4(m-1)(\lfloor \log_4 (m-1) \rfloor + 1)`; None for the other builders.
    """

    G: np.ndarray
    left: np.ndarray
    right: np.ndarray
    order: np.ndarray
    method: str
    max_clamp: float
    work: int | None = None

    @property
    def kappa(self) -> np.ndarray:
        """Thresholds :math:`\\kappa = 1 - G` (ends: :math:`-\\infty`, always active)."""
        kap = 1.0 - self.G
        kap[0] = kap[-1] = -np.inf
        return kap


def _parents(left: np.ndarray, right: np.ndarray, order: np.ndarray) -> np.ndarray:
    """Parent of each node: of its two neighbours at removal, the one removed first (the other is
    a further ancestor). The two ends are their own parents."""
    m = left.size - 1
    rank = np.full(m + 1, order.size, dtype=np.int64)  # the ends are never removed
    rank[order] = np.arange(order.size)
    par = np.arange(m + 1)
    lo, hi = left[order], right[order]
    par[order] = np.where(rank[lo] < rank[hi], lo, hi)
    return par


def _clamp_down(G: np.ndarray, left: np.ndarray, right: np.ndarray, order: np.ndarray) -> np.ndarray:
    r"""Top-down clamp :math:`G_i \leftarrow \max(0, \min(G_i, G_{left_i}, G_{right_i}))` in reverse
    removal order, vectorised.

    The clamped ratios are nested, and of a node's two neighbours at removal one is its parent and
    the other a further ancestor, so the clamped value is :math:`\max(0, \min)` of the raw ratios
    on the node's path to the root: a path minimum, computed by pointer jumping in
    :math:`\lceil \log_2(\text{depth}) \rceil + 1` rounds of O(m) work. Min and max are exact, so the
    result equals the sequential loop's bit for bit."""
    val = G.copy()
    anc = _parents(left, right, order)
    while True:
        val = np.minimum(val, val[anc])
        nxt = anc[anc]
        if np.array_equal(nxt, anc):
            break
        anc = nxt
    return np.where(val > 0.0, val, 0.0)  # max(0.0, g) as the loop computes it (0.0 for -0.0)


def _finish(
    geo: _Geometry, G: np.ndarray, left: np.ndarray, right: np.ndarray, order, method: str, jit=None, work: int | None = None
) -> ThresholdTree:
    """Make the ratios nested despite rounding and record the largest change: top-down (reverse
    removal order; a node's neighbours at removal are removed later), clamp each node to its two
    neighbours at removal and to [0, 1]. The clamp is local on purpose: a garbage ratio in a block
    of q-mass below float64 resolution then only affects that block's own subtree. ``jit``: the
    compiled kernels (same result)."""
    m = geo.m
    G[0] = G[m] = 1.0
    raw = G.copy()
    order = np.asarray(order, dtype=np.int64)
    G = jit.clamp_down(G, left, right, order) if jit is not None else _clamp_down(G, left, right, order)
    excess = float(np.max(raw[1:m] - G[1:m])) if m > 1 else 0.0
    return ThresholdTree(G=G, left=left, right=right, order=order, method=method, max_clamp=max(excess, 0.0), work=work)


def _build_heap(geo: _Geometry):
    r"""Remove the boundary of smallest local ratio one at a time (binary heap with lazy deletion).

    Each removal records the removed boundary's block (its two current neighbours) and ratio; the
    two neighbours get their ratios recomputed. :math:`O(m \log m)` heap operations. (The two
    neighbour updates are written out twice: this loop is the hot path of the build.)"""
    m, k = geo.m, geo.k
    G = np.zeros(m + 1)
    left = np.full(m + 1, -1, dtype=np.int64)
    right = np.full(m + 1, -1, dtype=np.int64)
    i = np.arange(1, m)
    R0 = geo.ratio(i - 1, i, i + 1)
    cur = [None, *R0.tolist(), None]
    heap = list(zip(cur[1:m], range(1, m), strict=False))
    heapq.heapify(heap)
    prv = list(range(-1, m))
    nxt = list(range(1, m + 2))
    Tl, Yl, Ll = geo.T.tolist(), geo.Y.tolist(), geo.L.tolist()
    with np.errstate(over="ignore"):
        dens = (geo.rho / geo.w).tolist()
    kr = range(k - 2)
    order = []
    gl, ll, rl = [0.0] * (m + 1), [-1] * (m + 1), [-1] * (m + 1)
    pop, push, append = heapq.heappop, heapq.heappush, order.append
    while heap:
        r, j = pop(heap)
        if cur[j] != r:
            continue
        cur[j] = None
        a = prv[j]
        b = nxt[j]
        gl[j] = r
        ll[j] = a
        rl[j] = b
        append(j)
        nxt[a] = b
        prv[b] = a
        if a > 0:  # left neighbour: its right side widened to b
            xa = prv[a]
            w1 = Tl[a] - Tl[xa]
            w2 = Tl[b] - Tl[a]
            dl = dens[a - 1] if a - xa == 1 else ((Ll[a] - Ll[xa]) / w1 if w1 > 0 else 0.0)
            dr = (Ll[b] - Ll[a]) / w2 if w2 > 0 else 0.0
            y1, y2, y3 = Yl[xa], Yl[a], Yl[b]
            h2 = h3 = ym = 1.0
            for _ in kr:
                ym *= y1
                h2 = ym + y2 * h2
                h3 = h2 + y3 * h3
            den = (w1 + w2) * h3
            rx = (dl - dr) / den if den > 0 else 0.0
            if rx != rx:  # NaN: inf - inf on blocks below float64 resolution
                rx = 0.0
            cur[a] = rx
            push(heap, (rx, a))
        if b < m:  # right neighbour: its left side widened to a
            xb = nxt[b]
            w1 = Tl[b] - Tl[a]
            w2 = Tl[xb] - Tl[b]
            dl = (Ll[b] - Ll[a]) / w1 if w1 > 0 else 0.0
            dr = dens[b] if xb - b == 1 else ((Ll[xb] - Ll[b]) / w2 if w2 > 0 else 0.0)
            y1, y2, y3 = Yl[a], Yl[b], Yl[xb]
            h2 = h3 = ym = 1.0
            for _ in kr:
                ym *= y1
                h2 = ym + y2 * h2
                h3 = h2 + y3 * h3
            den = (w1 + w2) * h3
            rx = (dl - dr) / den if den > 0 else 0.0
            if rx != rx:
                rx = 0.0
            cur[b] = rx
            push(heap, (rx, b))
    G[:] = gl
    left[:] = ll
    right[:] = rl
    return G, left, right, order


def _build_argmax(geo: _Geometry):
    """The direct recursion: split every block at the argmax of its ratio (reference builder,
    worst case :math:`O(m^2)`)."""
    m = geo.m
    G = np.zeros(m + 1)
    left = np.full(m + 1, -1, dtype=np.int64)
    right = np.full(m + 1, -1, dtype=np.int64)
    order = []
    stack = [(0, m)]
    while stack:
        a, b = stack.pop()
        if b - a < 2:
            continue
        i = np.arange(a + 1, b)
        R = geo.ratio(np.full(i.size, a), i, np.full(i.size, b))
        j = int(i[int(np.argmax(R))])
        G[j], left[j], right[j] = float(R.max()), a, b
        order.append(j)
        stack.append((a, j))
        stack.append((j, b))
    return G, left, right, order[::-1]


#: Flips allowed per boundary before the flip builder gives up and the heap builds the tree (the
#: expected number is below 2; exceeding 16 is a rounding cycle or an astronomically rare order).
MAX_FLIPS_PER_BOUNDARY = 16
#: Largest clamp of a non-root node the flip builder's tree may need; above it the heap builds the
#: tree (see ``_tree``).
FLIP_CLAMP_LIMIT = 1e-9
_FLIP_SEED = 0x07A5EED  # the insertion order is random but fixed: the tree is unique anyway


def _jit_kernels(need_compiled: bool = False):
    """The kernels module (compiled with numba when installed, plain Python otherwise), or None
    when compiled kernels are needed and numba is missing."""
    from otspec.verifiers.step import optimal_iid_kernels

    if need_compiled and not optimal_iid_kernels.COMPILED:
        return None
    return optimal_iid_kernels


def _dens(geo: _Geometry) -> np.ndarray:
    with np.errstate(over="ignore"):
        return geo.rho / geo.w


def _packed(geo: _Geometry) -> tuple[np.ndarray, ...]:
    """``(T, Y, L, dens)`` as column views of one (m+1, 4) array, so that the values of one
    boundary share a cache line (the compiled builders are memory-latency bound); same values."""
    P = np.zeros((geo.m + 1, 4))
    P[:, 0], P[:, 1], P[:, 2] = geo.T, geo.Y, geo.L
    P[:-1, 3] = _dens(geo)
    return P[:, 0], P[:, 1], P[:, 2], P[:, 3]


def _build_heap_compiled(geo: _Geometry, jit):
    """``_build_heap`` compiled (bit-identical; see :mod:`otspec.verifiers.step.optimal_iid_kernels`)."""
    packed = _packed(geo)
    return jit.heap_build(jit.local_ratios(*packed, geo.k), *packed, geo.k)


def _flip_order(m: int, order: str) -> np.ndarray:
    """Deletion order of the boundaries ``1..m-1`` (insertion is the reverse). ``"random"``: a
    uniformly random permutation. ``"brio"``: a biased randomized insertion order -- each boundary
    gets an independent level (geometric, parameter 1/2), levels are inserted from the highest
    down, and within a level in index order -- so that consecutive insertions touch nearby memory.
    Both are fixed by a seed (the tree is unique, only the work depends on the order)."""
    rng = np.random.default_rng(_FLIP_SEED)
    if order == "random":
        return rng.permutation(np.arange(1, m, dtype=np.int64))
    level = np.minimum(rng.geometric(0.5, size=m - 1), 127).astype(np.int8)
    return np.argsort(level, kind="stable").astype(np.int64) + 1  # radix sort: O(m)


def _build_flip(geo: _Geometry, jit, order: str = "brio"):
    """Randomized incremental construction (``optimal_iid_kernels.flip_build``); ``None`` when it
    exceeded its flip budget."""
    m = geo.m
    out = jit.flip_build(*_packed(geo), geo.k, _flip_order(m, order), MAX_FLIPS_PER_BOUNDARY * m + 64)
    return None if out[4] < 0 else out


def _resolve_method(method: str) -> tuple[str, Any]:
    if method not in TREE_METHODS:
        raise UnsupportedMethodError(f"tree method must be one of {TREE_METHODS} (got {method!r}); pick one of those")
    if method == "auto":
        jit = _jit_kernels(need_compiled=True)
        return ("heap_compiled", jit) if jit is not None else ("heap", None)
    if method == "flip":
        return "flip", _jit_kernels()
    if method == "heap_compiled":
        jit = _jit_kernels(need_compiled=True)
        if jit is None:
            raise UnsupportedMethodError(
                "tree method 'heap_compiled' needs numba, which is not installed; install the extra (pip install 'otspec[fast]') "
                "or use method='heap' (same tree, pure Python)"
            )
        return method, jit
    return method, None


def _tree(geo: _Geometry, method: str) -> ThresholdTree:
    method, jit = _resolve_method(method)
    if geo.m <= 1 or geo.k == 1:
        z = np.full(geo.m + 1, -1, dtype=np.int64)
        return ThresholdTree(G=np.ones(geo.m + 1), left=z, right=z.copy(), order=np.zeros(0, dtype=np.int64), method=method, max_clamp=0.0)
    if method == "flip":
        out = _build_flip(geo, jit)
        if out is not None:
            G, left, right, order, flips = out
            raw = G.copy()
            tree = _finish(geo, G, left, right, order, method, jit=jit if jit.COMPILED else None, work=int(flips))
            # nesting below the root (the root's own clamp to 1 is rounding of L <= Phi, as for the heap)
            below_root = (left[order] > 0) | (right[order] < geo.m)
            if not below_root.any() or float(np.max((raw[order] - tree.G[order])[below_root])) <= FLIP_CLAMP_LIMIT:
                return tree
        # budget exceeded, or rounding made some ratios inconsistent (blocks of q-mass below float64
        # resolution): local flips then settle on a tree that depends on the insertion order, so
        # the heap (global order of removal, robust there) builds the tree instead
        method = "heap_compiled" if jit.COMPILED else "heap"
    if method == "heap_compiled":
        G, left, right, order, moves = _build_heap_compiled(geo, jit)
        return _finish(geo, G, left, right, order, method, jit=jit, work=int(moves))
    build = _build_heap if method == "heap" else _build_argmax
    return _finish(geo, *build(geo), method)


def threshold_tree(p: Any, q: Any, k: Any, *, method: str = "auto") -> ThresholdTree:
    r"""The threshold tree of :math:`r^*` (see :class:`ThresholdTree` and the docs page).

    ``method="heap"`` removes, one at a time, the boundary whose ratio with its two current
    neighbours is smallest (:math:`O(m (\log m + k))`), in pure Python; ``"heap_compiled"`` is the
    same algorithm compiled with numba (optional extra ``otspec[fast]``; bit-identical tree);
    ``"auto"`` (default) is ``"heap_compiled"`` when numba is installed, else ``"heap"``;
    ``"flip"`` is the randomized incremental construction (expected :math:`O(m k)` for every
    input); ``"argmax"`` is the direct recursion (worst case :math:`O(m^2)`), kept as a reference.

    Parameters
    ----------
    p, q : array_like, shape (V,)
        Target and draft distributions.
    k : int
        Number of i.i.d. drafts.
    method : {"auto", "heap", "heap_compiled", "flip", "argmax"}
        Tree builder (all give a valid tree; the heap builders give bit-identical ones).

    Returns
    -------
    ThresholdTree
        The tree over the ``m + 1`` super-token boundaries, with its thresholds ``G``.

    Raises
    ------
    InvalidDistributionError, ShapeMismatchError
        If ``p`` or ``q`` is not a distribution, or their vocabularies differ.
    NotAnIntegerError, InvalidDraftCountError
        If ``k`` is not an integer ``>= 1``.
    UnsupportedMethodError
        If ``method`` is unknown, or ``"heap_compiled"`` is asked for without numba.

    Examples
    --------
    >>> t = threshold_tree([0.5, 0.3, 0.2], [0.2, 0.3, 0.5], 2)
    >>> t.G.shape, bool(np.all(t.G <= 1.0))
    ((4,), True)
    """
    p, q, k = _check_pqk(p, q, k)
    sel = _selection(p, q, k)
    geo, _ = _geometry(sel, q, k)
    return _tree(geo, method)


# ------------------------------------------------------------------------------------------------
# Prepared state: everything a draw needs


def _sparse_table(kappa: np.ndarray) -> list[np.ndarray]:
    """``tab[b][i] = min(kappa[i : i + 2**b])``."""
    tab = [kappa]
    span = 1
    while 2 * span <= kappa.size:
        prev = tab[-1]
        tab.append(np.minimum(prev[:-span], prev[span:]))
        span *= 2
    return tab


@dataclass(frozen=True, eq=False)
class OptimalIIDState:
    r"""Everything one draw of the optimal i.i.d. verifier needs, built once per (p, q, k).

    Attributes
    ----------
    p, r : ndarray, shape (V,)
        Target and optimal selection law :math:`r^*`.
    k : int
    alpha : float
        :math:`\alpha^* = \sum_y \min(p, r^*)`.
    super_token : ndarray of int64, shape (V,)
        1-based super-token of each token (0: q = 0, never drafted).
    tree : ThresholdTree
    table : list of ndarray
        Range-minimum table over the thresholds :math:`\kappa`.
    accept : ndarray, shape (V,)
        :math:`\min(1, p/r^*)` (1 where :math:`r^* = 0`; never used there).
    residual_cdf : ndarray, shape (V,)
        Cumulative :math:`(p - r^*)_+` (unnormalised).
    geometry : object
        The super-token geometry the tree was built on (boundaries, cumulative masses, the
        integrand :math:`\Phi`); read by :meth:`integrated_selection_law`.
    """

    p: np.ndarray
    r: np.ndarray
    k: int
    alpha: float
    super_token: np.ndarray
    tree: ThresholdTree
    table: list
    accept: np.ndarray
    residual_cdf: np.ndarray
    geometry: _Geometry

    # -- selection -----------------------------------------------------------------------------
    def block_end(self, first: np.ndarray, s: np.ndarray) -> np.ndarray:
        r"""Right end of the block holding super-token ``first`` at level ``s``: the smallest
        boundary :math:`i \ge` ``first`` with :math:`\kappa_i \le s` (binary lifting on the
        range-minimum table, :math:`O(\log m)`).

        Parameters
        ----------
        first : ndarray of int
            Super-token indices (1-based), any shape.
        s : ndarray
            Levels in ``[0, 1)``, broadcastable with ``first``.

        Returns
        -------
        ndarray of int64
            The block's right boundary for each entry.
        """
        pos = np.asarray(first, dtype=np.int64).copy()
        m = self.geometry.m
        for b in range(len(self.table) - 1, -1, -1):
            span = 1 << b
            ok = pos + span <= m
            if not ok.any():
                continue
            tb = self.table[b]
            cand = np.where(ok, pos, 0)
            skip = ok & (tb[cand] > s)
            pos = np.where(skip, pos + span, pos)
        return pos

    def select(self, drafts: np.ndarray, s: np.ndarray, u: np.ndarray) -> np.ndarray:
        """Selected token per row of ``drafts`` ``(n, k)`` at levels ``s`` with choice uniforms ``u``.

        The block of the row's first (lowest) super-token at level ``s`` is found, and one of the
        drafts inside it is chosen uniformly with ``u``.

        Parameters
        ----------
        drafts : ndarray of int64, shape (n, k)
            Validated draft tuples.
        s : ndarray, shape (n,)
            Levels :math:`s \\sim U[0, 1)`.
        u : ndarray, shape (n,)
            Uniforms for the choice within the block.

        Returns
        -------
        ndarray of int64, shape (n,)
            The selected draft of each row.
        """
        st = self.super_token[drafts]  # (n, k)
        end = self.block_end(st.min(axis=1), s)
        elig = st <= end[:, None]
        cnt = elig.sum(axis=1)
        rank = np.minimum((u * cnt).astype(np.int64), cnt - 1)
        col = np.argmax(np.cumsum(elig, axis=1) > rank[:, None], axis=1)
        return drafts[np.arange(drafts.shape[0]), col]

    def selection_rows(self, tuples: np.ndarray) -> np.ndarray:
        r"""Exact selection law :math:`\beta(\cdot \mid \bar x)` per draft tuple, ``(n, V)``,
        integrated over the level s (the layout is constant between sorted thresholds).

        Parameters
        ----------
        tuples : ndarray of int64, shape (n, k)
            Draft tuples.

        Returns
        -------
        ndarray, shape (n, V)
            Row ``m``: probability that each token is the selected draft; sums to 1 and is 0 off
            the tuple.
        """
        n, k = tuples.shape
        V = self.p.shape[0]
        kap = self.tree.kappa[1:-1]
        brk = np.unique(np.clip(np.concatenate([[0.0, 1.0], kap]), 0.0, 1.0))
        st = self.super_token[tuples]
        first = st.min(axis=1)
        beta = np.zeros((n, V))
        rows = np.repeat(np.arange(n), k)
        for lo, hi in itertools.pairwise(brk):
            if hi <= lo:
                continue
            end = self.block_end(first, np.full(n, 0.5 * (lo + hi)))
            elig = st <= end[:, None]
            wgt = (hi - lo) * elig / elig.sum(axis=1, keepdims=True)
            np.add.at(beta, (rows, tuples.ravel()), wgt.ravel())
        return beta

    def integrated_selection_law(self) -> np.ndarray:
        r"""Selection law of the sampler integrated over s, from the tree alone (no enumeration):
        block ``(a, b]`` is a layout block for a level interval of length
        :math:`\min(G_a, G_b) - G_{split}` and sends :math:`\Phi(t_b) - \Phi(t_a)` spread in
        proportion to q. Shape ``(V,)``; equals :math:`r^*` when the thresholds are right.

        Returns
        -------
        ndarray, shape (V,)
            The induced selection law (a check of the tree against :attr:`r`).
        """
        geo, tr = self.geometry, self.tree
        m = geo.m
        phi = geo.phi()
        G = tr.G
        diff = np.zeros(m + 2)
        # internal nodes: block (left, right) split at i
        i = tr.order
        if i.size:
            a, b = tr.left[i], tr.right[i]
            dur = np.minimum(G[a], G[b]) - G[i]
            dT = geo.T[b] - geo.T[a]  # 0 only for blocks whose q-mass is below float64 resolution near t = 1
            dens = np.divide(dur * (phi[b] - phi[a]), dT, out=np.zeros_like(dT), where=dT > 0)
            np.add.at(diff, a + 1, dens)
            np.add.at(diff, b + 1, -dens)
        # leaves: super-token j = (j-1, j] for the levels above both its boundaries
        j = np.arange(1, m + 1)
        dur = np.minimum(G[j - 1], G[j])
        diff[1 : m + 1] += dur * (phi[j] - phi[j - 1]) / geo.w
        diff[2 : m + 2] -= dur * (phi[j] - phi[j - 1]) / geo.w
        d = np.cumsum(diff)[1 : m + 1]  # density of each super-token
        out = np.zeros(self.p.shape[0])
        tok = np.flatnonzero(self.super_token)
        qn = self._q_norm
        out[tok] = d[self.super_token[tok] - 1] * qn[tok]
        return out

    @property
    def _q_norm(self) -> np.ndarray:
        return self._q / self._q.sum()

    # -- sampling ------------------------------------------------------------------------------
    def sample_rows(self, drafts: np.ndarray, streams: list) -> np.ndarray:
        """One output per row of validated ``drafts`` ``(n, k)``; ``streams`` = [level, choice,
        coin, residual] generators (independent).

        Parameters
        ----------
        drafts : ndarray of int64, shape (n, k)
            Validated draft tuples.
        streams : list of numpy.random.Generator
            Four independent streams: level, choice, accept coin, residual draw.

        Returns
        -------
        ndarray of int64, shape (n,)
            The selected draft if its coin accepts (:math:`\\min(1, p/r^*)`), else a residual
            draw from :math:`\\mathrm{norm}((p - r^*)_+)`.
        """
        n = drafts.shape[0]
        s = streams[0].random(n)
        u = streams[1].random(n)
        y = self.select(drafts, s, u)
        keep = streams[2].random(n) < self.accept[y]
        rej = np.flatnonzero(~keep)
        if rej.size:
            cdf = self.residual_cdf
            x = np.searchsorted(cdf, streams[3].random(rej.size) * cdf[-1], side="right")
            y = y.copy()
            y[rej] = np.minimum(x, self._last_residual)
        return y.astype(np.int64)

    def sample(self, drafts: Any, *, rng: np.random.Generator) -> int:
        """One output token for one draft tuple (streams spawned from ``rng``).

        Parameters
        ----------
        drafts : array_like of int, shape (k,)
            One draft tuple (not validated: use the verifier's ``sample`` for user input).
        rng : numpy.random.Generator
            The caller's generator; four child streams are spawned from it.

        Returns
        -------
        int
            The output token.
        """
        d = np.asarray(drafts, dtype=np.int64).reshape(1, -1)
        return int(self.sample_rows(d, spawn_streams(rng, 4))[0])

    def sample_batch(self, drafts: Any, *, rng: np.random.Generator) -> np.ndarray:
        """One output token per row of ``drafts`` ``(n, k)``.

        Parameters
        ----------
        drafts : array_like of int, shape (n, k)
            Draft tuples (not validated).
        rng : numpy.random.Generator
            The caller's generator; four child streams are spawned from it.

        Returns
        -------
        ndarray of int64, shape (n,)
            One output token per row.
        """
        return self.sample_rows(np.asarray(drafts, dtype=np.int64), spawn_streams(rng, 4))


def _build_state(p: np.ndarray, q: np.ndarray, k: int, method: str = "auto", sel: _Selection | None = None) -> OptimalIIDState:
    sel = _selection(p, q, k) if sel is None else sel
    geo, st = _geometry(sel, q, k)
    tree = _tree(geo, method)
    table = _sparse_table(tree.kappa)
    r = sel.r
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        accept = np.where(r > 0, np.minimum(1.0, p / np.where(r > 0, r, 1.0)), 1.0)
    res = np.maximum(p - r, 0.0)
    cdf = np.cumsum(res)
    state = OptimalIIDState(
        p=p, r=r, k=k, alpha=sel.alpha, super_token=st, tree=tree, table=table, accept=accept, residual_cdf=cdf, geometry=geo
    )
    pos_res = np.flatnonzero(res > 0)
    object.__setattr__(state, "_last_residual", int(pos_res[-1]) if pos_res.size else int(np.flatnonzero(p > 0)[-1]))
    object.__setattr__(state, "_q", q)
    return state


def prepare(p: Any, q: Any, k: Any, *, method: str = "auto") -> OptimalIIDState:
    r"""Build the sampler state for (p, q, k) once: :math:`r^*`, super-tokens, threshold tree,
    range-minimum table, accept ratios and residual CDF.

    Parameters
    ----------
    p, q : array_like, shape (V,)
        Target and draft distributions.
    k : int
        Number of i.i.d. drafts.
    method : str
        Threshold-tree builder (see :func:`threshold_tree`).

    Returns
    -------
    OptimalIIDState
        Everything a draw needs; ``alpha`` is :math:`\alpha^*`.

    Raises
    ------
    InvalidDistributionError, ShapeMismatchError
        If ``p`` or ``q`` is not a distribution, or their vocabularies differ.
    NotAnIntegerError, InvalidDraftCountError
        If ``k`` is not an integer ``>= 1``.

    Examples
    --------
    >>> st = prepare([0.5, 0.3, 0.2], [0.2, 0.3, 0.5], 2)
    >>> round(st.alpha, 12)  # 1 + min_H [p(H) - q(H)^2], at H = {1, 2}: 1 + 0.5 - 0.8**2
    0.86
    >>> st.sample([2, 0], rng=np.random.default_rng(0)) in (0, 1, 2)
    True
    """
    p, q, k = _check_pqk(p, q, k)
    return _build_state(p, q, k, method)


# ------------------------------------------------------------------------------------------------
# The verifier


def _iid_source(law: DraftLaw) -> tuple[np.ndarray | None, str]:
    """``(q, "")`` when the law is k i.i.d. drafts from q, else ``(None, reason)``."""
    if law.kind == "iid":
        return law.q, ""
    if law.kind == "product":
        q0 = law.qs[0]
        if all(np.array_equal(q0, qj) for qj in law.qs[1:]):
            return q0, ""
        return None, (
            "the drafters of this product law differ, so P(some draft in S) = 1 - prod_j (1 - q_j(S)) is not a function of one "
            "measure of S and the closed-form selection law does not apply"
        )
    if law.kind == "without_replacement":
        return None, (
            "without replacement, P(some draft in S) is not a function of q(S) alone, so the closed-form selection law and the "
            "threshold construction fail (an exact method at scale is open)"
        )
    return None, f"it is built for k i.i.d. drafts and the {law.kind} law is not of that form"


class OptimalIIDVerifier(Verifier):
    r"""The optimal verifier for i.i.d. drafts at any V: acceptance :math:`\alpha^*` exactly.

    Examples
    --------
    >>> import otspec
    >>> from otspec.verifiers import optimal_iid
    >>> p, law = [0.5, 0.3, 0.2], otspec.iid([0.2, 0.3, 0.5], 2)
    >>> est = optimal_iid.acceptance(p, law)
    >>> est.how, round(est.value, 12) == round(otspec.optimal_acceptance(p, law).value, 12)
    ('closed_form', True)
    """

    name = "optimal_iid"
    optimal = True
    rule = "the optimal i.i.d. verifier needs k i.i.d. drafts (otspec.iid, or otspec.product with identical drafters)"
    fix = "build the law with otspec.iid(q, k), or use khisti / optimal_plan on small laws"
    reference = "two-step form of Khisti et al. (ICLR 2025) with the closed-form optimal selection law (docs: optimal_verifier)"

    def applies_to(self, law: DraftLaw) -> bool:
        return _iid_source(law)[0] is not None

    def _check(self, p, law):
        if isinstance(law, DraftLaw):
            q, why = _iid_source(law)
            if q is None:
                raise UnsupportedMethodError(f"verifier {self.name!r} does not apply to the draft law {law!r}: {why}; {self.fix}")
        return super()._check(p, law)

    def state(self, p: Any, law: DraftLaw) -> OptimalIIDState:
        """The prepared state for ``(p, law)`` (memoised per law object and target).

        Parameters
        ----------
        p : array_like, shape (V,)
            Target distribution.
        law : DraftLaw
            i.i.d. drafts (or a product of identical drafters).

        Returns
        -------
        OptimalIIDState
            The state :func:`prepare` builds, cached on the law.

        Raises
        ------
        UnsupportedMethodError
            If the law is not i.i.d.
        NotADraftLawError
            If ``law`` is not a draft law.
        InvalidDistributionError, ShapeMismatchError
            If ``p`` is not a distribution over the law's vocabulary.
        """
        p = self._check(p, law)
        return self._state(p, law)

    def _state(self, p: np.ndarray, law: DraftLaw) -> OptimalIIDState:
        q = _iid_source(law)[0]
        return law.cached("optimal_iid.state", p, lambda: _build_state(p, q, law.k, sel=self._selection(p, law)))

    def _selection(self, p: np.ndarray, law: DraftLaw) -> _Selection:
        q = _iid_source(law)[0]
        return law.cached("optimal_iid.selection", p, lambda: _selection(p, q, law.k))

    def _prepare(self, p, law):
        self._state(p, law)

    def _rows(self, p, law, tuples):
        stt = self._state(p, law)
        beta = stt.selection_rows(tuples)
        acc = beta * stt.accept[None, :]
        cdf = stt.residual_cdf
        res = np.diff(np.concatenate([[0.0], cdf]))
        res = res / cdf[-1] if cdf[-1] > 0 else p
        return acc + (1.0 - acc.sum(axis=1))[:, None] * res[None, :]

    def _tuple_acceptance(self, p, law, tuples):
        pi = self._rows(p, law, tuples)
        return np.sum(np.where(membership_mask(tuples, law.V), pi, 0.0), axis=1)

    def _closed_form(self, p, law):
        # O(V log V): needs r* only, not the threshold tree
        return self._selection(p, law).alpha, {"formula": "1 + p(H*) - q(H*)^k"}

    def sample(self, p: Any, law: DraftLaw, drafts: Any, *, rng: np.random.Generator) -> int:
        """One output token for one draft tuple. Four independent child streams are spawned from
        ``rng``: the level s, the within-block choice, the accept coin and the residual draw."""
        p = self._check(p, law)
        d = law.validate_drafts(drafts)
        streams = spawn_streams(rng, 4)
        return int(self._state(p, law).sample_rows(d[None, :], streams)[0])

    def sample_batch(self, p: Any, law: DraftLaw, drafts: Any, *, rng: np.random.Generator) -> np.ndarray:
        """One output token per row of ``drafts`` ``(N, k)``, with the streams of :meth:`sample`
        (``sample(d) == sample_batch([d])[0]`` for the same generator state)."""
        p = self._check(p, law)
        d = law.validate_draft_batch(drafts)
        streams = spawn_streams(rng, 4)
        return self._state(p, law).sample_rows(d, streams)


optimal_iid = OptimalIIDVerifier()
