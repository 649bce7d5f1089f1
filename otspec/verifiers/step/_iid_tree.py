r"""The threshold tree of the optimal i.i.d. verifier: the upper convex hull of the points
:math:`(t_i, \Phi(t_i), L(t_i))` whose thresholds :math:`\kappa_i` drive the selection (part of
:mod:`otspec.verifiers.step.optimal_iid`; the mathematics is in ``docs/optimal_verifier.rst``).
Built by removing points in order of their local ratio, with the builders of :data:`TREE_METHODS`.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from otspec._docs import fill_doc
from otspec.errors import UnsupportedMethodError
from otspec.verifiers.step._iid_selection import Selection, check_pqk, solve_selection

__all__ = [
    "FLIP_CLAMP_LIMIT",
    "Geometry",
    "MAX_FLIPS_PER_BOUNDARY",
    "TREE_METHODS",
    "ThresholdTree",
    "build_tree",
    "geometry",
    "resolve_method",
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


def _cumulative(x: np.ndarray) -> np.ndarray:
    """(m+1,) cumulative sums of ``x`` from 0, the last pinned to 1 (``x`` sums to 1 up to rounding)."""
    c = np.concatenate([[0.0], np.cumsum(x)])
    c[-1] = 1.0
    return c


@dataclass(frozen=True, eq=False)
class Geometry:
    w: np.ndarray  # (m,) q-mass of each super-token
    rho: np.ndarray  # (m,) r*-mass of each super-token
    k: int

    # the cumulative masses are built on first use (a bridge draw never reads them)
    @cached_property
    def T(self) -> np.ndarray:
        """(m+1,) cumulative q-mass of super-tokens, T[0] = 0, T[m] = 1."""
        return _cumulative(self.w)

    @cached_property
    def Y(self) -> np.ndarray:
        """(m+1,) 1 - T from suffix sums (accurate near 1)."""
        Y = np.concatenate([np.cumsum(self.w[::-1])[::-1], [0.0]])
        Y[0] = 1.0
        return Y

    @cached_property
    def L(self) -> np.ndarray:
        """(m+1,) cumulative r*-mass."""
        return _cumulative(self.rho)

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


def geometry(sel: Selection, q: np.ndarray, k: int) -> tuple[Geometry, np.ndarray]:
    """Super-tokens (runs of equal density in descending order) and the token -> super-token map
    (1-based; 0 for tokens with q = 0, never drafted)."""
    desc, dens = sel.desc, sel.dens
    n = desc.size
    start = np.ones(n, dtype=bool)
    start[1:] = dens[1:] != dens[:-1]
    starts = np.flatnonzero(start)
    qd = q[desc] if sel.q_desc is None else sel.q_desc
    tot = qd.sum()
    w = np.add.reduceat(qd, starts) / tot
    rho = np.add.reduceat(sel.r[desc] if sel.r_desc is None else sel.r_desc, starts)
    rho = rho / rho.sum()
    st = np.zeros(q.shape[0], dtype=np.int64)
    st[desc] = np.cumsum(start)
    return Geometry(w=w, rho=rho, k=k), st


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
    geo: Geometry, G: np.ndarray, left: np.ndarray, right: np.ndarray, order, method: str, jit=None, work: int | None = None
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


def _build_heap(geo: Geometry):
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


def _build_argmax(geo: Geometry):
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
#: tree (see ``build_tree``).
FLIP_CLAMP_LIMIT = 1e-9
_FLIP_SEED = 0x07A5EED  # the insertion order is random but fixed: the tree is unique anyway


def _jit_kernels(need_compiled: bool = False):
    """The kernels module (compiled with numba when installed, plain Python otherwise), or None
    when compiled kernels are needed and numba is missing."""
    from otspec.verifiers.step import optimal_iid_kernels

    if need_compiled and not optimal_iid_kernels.COMPILED:
        return None
    return optimal_iid_kernels


def _dens(geo: Geometry) -> np.ndarray:
    with np.errstate(over="ignore"):
        return geo.rho / geo.w


def _packed(geo: Geometry) -> tuple[np.ndarray, ...]:
    """``(T, Y, L, dens)`` as column views of one (m+1, 4) array, so that the values of one
    boundary share a cache line (the compiled builders are memory-latency bound); same values."""
    P = np.zeros((geo.m + 1, 4))
    P[:, 0], P[:, 1], P[:, 2] = geo.T, geo.Y, geo.L
    P[:-1, 3] = _dens(geo)
    return P[:, 0], P[:, 1], P[:, 2], P[:, 3]


def _build_heap_compiled(geo: Geometry, jit):
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


def _build_flip(geo: Geometry, jit, order: str = "brio"):
    """Randomized incremental construction (``optimal_iid_kernels.flip_build``); ``None`` when it
    exceeded its flip budget."""
    m = geo.m
    out = jit.flip_build(*_packed(geo), geo.k, _flip_order(m, order), MAX_FLIPS_PER_BOUNDARY * m + 64)
    return None if out[4] < 0 else out


def resolve_method(method: str) -> tuple[str, Any]:
    """``(builder, kernels module or None)`` for a :data:`TREE_METHODS` name; raises
    ``UnsupportedMethodError`` for an unknown name or a compiled builder without numba."""
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


def build_tree(geo: Geometry, method: str) -> ThresholdTree:
    method, jit = resolve_method(method)
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


@fill_doc
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
    {pqk_args}
    method : {"auto", "heap", "heap_compiled", "flip", "argmax"}
        Tree builder (all give a valid tree; the heap builders give bit-identical ones).

    Returns
    -------
    ThresholdTree
        The tree over the ``m + 1`` super-token boundaries, with its thresholds ``G``.

    Raises
    ------
    {pq_raises}
    {k_raises}
    UnsupportedMethodError
        If ``method`` is unknown, or ``"heap_compiled"`` is asked for without numba.

    Examples
    --------
    >>> t = threshold_tree([0.5, 0.3, 0.2], [0.2, 0.3, 0.5], 2)
    >>> t.G.shape, bool(np.all(t.G <= 1.0))
    ((4,), True)
    """
    p, q, k = check_pqk(p, q, k)
    sel = solve_selection(p, q, k)
    geo, _ = geometry(sel, q, k)
    return build_tree(geo, method)
