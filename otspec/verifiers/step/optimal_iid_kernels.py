r"""Compiled (numba) kernels of the threshold-tree build of :mod:`otspec.verifiers.step.optimal_iid`.

Imported lazily. With numba installed (the optional extra ``otspec[fast]``) every function is
compiled; without it the same functions run as plain Python on numpy arrays and give the same
results (``COMPILED`` says which). The heap kernels are line-by-line ports of the pure-Python
builder and perform the same IEEE operations in the same order, so the trees are bit-identical
(the tests check this):

* :func:`heap_build` is ``_build_heap``: a min-heap of ``(ratio, boundary)`` records ordered
  lexicographically like Python's tuples (ratio first, then the boundary index), so it removes the
  boundaries in the same sequence as ``heapq`` for every input without NaN (the builder maps a NaN
  ratio to 0 in both paths). It is an indexed 4-ary heap (one record per boundary present, a
  changed ratio is sifted in place): the heap is memory-latency bound, and this layout touches
  about a quarter of the cache lines of a binary heap with lazy deletion;
* :func:`clamp_down` is ``_finish``'s top-down clamp of each node's ratio to its two neighbours
  at removal and to [0, 1].

:func:`flip_build` is the randomized incremental construction (expected O(m k)), the default
builder. The mathematics (why both build the threshold tree, and the cost bounds) is in
``docs/optimal_verifier.rst``.
"""

from __future__ import annotations

import numpy as np

__all__ = ["COMPILED", "clamp_down", "flip_build", "heap_build", "local_ratios"]

try:
    import numba

    njit = numba.njit
    COMPILED = True
except ImportError:  # the same code runs as plain Python (same operations, same results)

    def njit(*args, **kwargs):
        if args and callable(args[0]):
            return args[0]
        return lambda f: f

    COMPILED = False


@njit(cache=True)
def _before(h, a, b):
    """Heap record ``a`` comes before ``b``: smaller ratio, ties by boundary index (the order of
    Python's ``(ratio, boundary)`` tuples)."""
    return h[a, 0] < h[b, 0] or (h[a, 0] == h[b, 0] and h[a, 1] < h[b, 1])


@njit(cache=True)
def _lt(ka, ia, kb, ib):
    return ka < kb or (ka == kb and ia < ib)


@njit(cache=True)
def _sift_up(h, where, pos):
    """Move the record at ``pos`` towards the root (a hole moves down instead of swaps)."""
    nk, ni = h[pos, 0], h[pos, 1]
    moves = 0
    while pos > 0:
        parent = (pos - 1) >> 2
        if not _lt(nk, ni, h[parent, 0], h[parent, 1]):
            break
        h[pos, 0], h[pos, 1] = h[parent, 0], h[parent, 1]
        where[int(h[pos, 1])] = pos
        pos = parent
        moves += 1
    h[pos, 0], h[pos, 1] = nk, ni
    where[int(ni)] = pos
    return moves


@njit(cache=True)
def _sift_down(h, where, pos, end):
    """Move the record at ``pos`` towards the leaves (a hole moves up instead of swaps)."""
    nk, ni = h[pos, 0], h[pos, 1]
    moves = 0
    while True:
        c = 4 * pos + 1
        if c >= end:
            break
        best = c
        last = min(c + 4, end)
        for j in range(c + 1, last):
            if _before(h, j, best):
                best = j
        if not _lt(h[best, 0], h[best, 1], nk, ni):
            break
        h[pos, 0], h[pos, 1] = h[best, 0], h[best, 1]
        where[int(h[pos, 1])] = pos
        pos = best
        moves += 1
    h[pos, 0], h[pos, 1] = nk, ni
    where[int(ni)] = pos
    return moves


@njit(cache=True)
def _pop_root(h, where, n):
    """Replace the root by the last record ``h[n]`` (heap size n after the pop): move the hole at
    the root down along the smallest children to a leaf, put the last record there and sift it
    up (Floyd's trick, as heapq does: fewer comparisons than sifting the last record down)."""
    lk, li = h[n, 0], h[n, 1]
    hole = 0
    moves = 0
    while True:
        c = 4 * hole + 1
        if c >= n:
            break
        best = c
        last = min(c + 4, n)
        for j in range(c + 1, last):
            if _before(h, j, best):
                best = j
        h[hole, 0], h[hole, 1] = h[best, 0], h[best, 1]
        where[int(h[hole, 1])] = hole
        hole = best
        moves += 1
    h[hole, 0], h[hole, 1] = lk, li
    where[int(li)] = hole
    return moves + _sift_up(h, where, hole)


@njit(cache=True)
def _ratio(Tl, Yl, Ll, dens, x, a, b, adj_left, adj_right, k):
    """Local ratio of boundary ``a`` between its neighbours ``x < a < b`` (the builder's formula)."""
    w1 = Tl[a] - Tl[x]
    w2 = Tl[b] - Tl[a]
    if adj_left:
        dl = dens[a - 1]
    elif w1 > 0:
        dl = (Ll[a] - Ll[x]) / w1
    else:
        dl = 0.0
    if adj_right:
        dr = dens[a]
    elif w2 > 0:
        dr = (Ll[b] - Ll[a]) / w2
    else:
        dr = 0.0
    y1, y2, y3 = Yl[x], Yl[a], Yl[b]
    h2 = 1.0
    h3 = 1.0
    ym = 1.0
    for _ in range(k - 2):
        ym *= y1
        h2 = ym + y2 * h2
        h3 = h2 + y3 * h3
    den = (w1 + w2) * h3
    rx = (dl - dr) / den if den > 0 else 0.0
    if rx != rx:  # NaN (inf - inf on blocks of q-mass below float64 resolution)
        rx = 0.0
    return rx


@njit(cache=True)
def heap_build(R0, Tl, Yl, Ll, dens, k):
    """Threshold tree by removing the boundary of smallest local ratio (compiled ``_build_heap``).

    ``R0`` holds the initial local ratios of boundaries ``1..m-1``. An indexed 4-ary min-heap of
    ``(ratio, boundary)`` records (one per boundary still present; a neighbour's new ratio is
    sifted in place) pops the same sequence as the pure builder's lazy ``heapq``: both return the
    smallest ``(ratio, boundary)`` among the boundaries present. Returns ``(G, left, right,
    order, moves)``, ``moves`` the number of heap record moves (a complexity guard: at most
    ``m + 4 m (log_4 m + 1)``: each pop moves at most two records per level, each re-key one).

    Parameters
    ----------
    R0 : ndarray, shape (m - 1,)
        Initial local ratios of the interior boundaries (:func:`local_ratios`).
    Tl, Yl, Ll : ndarray, shape (m + 1,)
        Super-token geometry: cumulative q-mass :math:`t_i`, :math:`1 - t_i` from suffix sums, and
        cumulative :math:`r^*`-mass, at the boundaries ``0..m``.
    dens : ndarray, shape (m + 1,)
        Density :math:`r^*/q` of the super-token right of each boundary (the last entry is unused).
    k : int
        Number of i.i.d. drafts.

    Returns
    -------
    G : ndarray, shape (m + 1,)
        Ratio of the node splitting at each boundary (before the clamp).
    left, right : ndarray of int64, shape (m + 1,)
        The block each node splits.
    order : ndarray of int64, shape (m - 1,)
        Boundaries in removal order.
    moves : int
        Heap record moves.
    """
    m = Tl.size - 1
    G = np.zeros(m + 1)
    left = np.full(m + 1, -1, dtype=np.int64)
    right = np.full(m + 1, -1, dtype=np.int64)
    n = max(m - 1, 0)
    order = np.empty(n, dtype=np.int64)
    h = np.empty((max(n, 1), 2))  # records (ratio, boundary); boundaries < 2**53 are exact floats
    where = np.full(m + 1, -1, dtype=np.int64)  # heap position of each boundary present
    for j in range(1, m):
        h[j - 1, 0] = R0[j - 1]
        h[j - 1, 1] = j
        where[j] = j - 1
    moves = 0
    for pos in range((n - 2) // 4, -1, -1):
        moves += _sift_down(h, where, pos, n)
    prv = np.arange(-1, m, dtype=np.int64)
    nxt = np.arange(1, m + 2, dtype=np.int64)
    cnt = 0
    while n > 0:
        r = h[0, 0]
        j = int(h[0, 1])
        n -= 1
        if n > 0:
            moves += _pop_root(h, where, n)
        where[j] = -1
        a = prv[j]
        b = nxt[j]
        G[j] = r
        left[j] = a
        right[j] = b
        order[cnt] = j
        cnt += 1
        nxt[a] = b
        prv[b] = a
        if a > 0:  # left neighbour: its right side widened to b
            xa = prv[a]
            moves += _rekey(h, where, a, _ratio(Tl, Yl, Ll, dens, xa, a, b, a - xa == 1, False, k), n)
        if b < m:  # right neighbour: its left side widened to a
            xb = nxt[b]
            moves += _rekey(h, where, b, _ratio(Tl, Yl, Ll, dens, a, b, xb, False, xb - b == 1, k), n)
    return G, left, right, order[:cnt], moves


@njit(cache=True)
def _rekey(h, where, j, rx, n):
    pos = where[j]
    old = h[pos, 0]
    h[pos, 0] = rx
    if rx < old:
        return _sift_up(h, where, pos)
    if rx > old:
        return _sift_down(h, where, pos, n)
    return 0


@njit(cache=True)
def clamp_down(G, left, right, order):
    """Top-down clamp (compiled ``_finish`` loop): in reverse removal order,
    ``G[i] = max(0, min(G[i], G[left[i]], G[right[i]]))``. In place.

    Parameters
    ----------
    G : ndarray, shape (m + 1,)
        Node ratios, clamped in place.
    left, right : ndarray of int64, shape (m + 1,)
        The block each node splits.
    order : ndarray of int64
        Boundaries in removal order (leaves first).

    Returns
    -------
    ndarray
        ``G`` itself, non-increasing down the tree and in ``[0, 1]``.
    """
    for t in range(order.size - 1, -1, -1):
        i = order[t]
        g = G[i]
        gl = G[left[i]]
        gr = G[right[i]]
        if gl < g:
            g = gl
        if gr < g:
            g = gr
        if not g > 0.0:  # max(0.0, g) as Python computes it (0.0 for -0.0)
            g = 0.0
        G[i] = g
    return G


# ------------------------------------------------------------------------------------------------
# Randomized incremental construction with flips (rotations)


@njit(cache=True)
def _ratio3(Tl, Yl, Ll, dens, a, i, b, k):
    """Ratio of boundary i in block (a, b), the heap builders' formula for any triple."""
    return _ratio(Tl, Yl, Ll, dens, a, i, b, i - a == 1, b - i == 1, k)


@njit(cache=True)
def _rotate_up(y, lft, rgt, cl, cr, par, G, Tl, Yl, Ll, dens, k, stack, top, root):
    """Rotate node y above its parent x (the flip of the edge between their triangles); push the
    four outer edges of the flipped quadrilateral. Returns ``(top, root)``."""
    x = par[y]
    lo, hi = lft[x], rgt[x]
    g = par[x]
    if cl[x] == y:  # y's block (lo, x): right rotation, quadrilateral lo < y < x < hi
        B = cr[y]
        cr[y] = x
        cl[x] = B
        if B >= 0:
            par[B] = x
        lft[y], rgt[y] = lo, hi
        lft[x], rgt[x] = y, hi
        G[y] = _ratio3(Tl, Yl, Ll, dens, lo, y, hi, k)
        G[x] = _ratio3(Tl, Yl, Ll, dens, y, x, hi, k)
        e0, e1, e2, e3 = lo, y, x, hi
    else:  # y's block (x, hi): left rotation, quadrilateral lo < x < y < hi
        A = cl[y]
        cl[y] = x
        cr[x] = A
        if A >= 0:
            par[A] = x
        lft[y], rgt[y] = lo, hi
        lft[x], rgt[x] = lo, y
        G[y] = _ratio3(Tl, Yl, Ll, dens, lo, y, hi, k)
        G[x] = _ratio3(Tl, Yl, Ll, dens, lo, x, y, k)
        e0, e1, e2, e3 = lo, x, y, hi
    par[y] = g
    par[x] = y
    if g < 0:
        root = y
    elif cl[g] == x:
        cl[g] = y
    else:
        cr[g] = y
    stack[top, 0], stack[top, 1] = e0, e1
    stack[top + 1, 0], stack[top + 1, 1] = e1, e2
    stack[top + 2, 0], stack[top + 2, 1] = e2, e3
    stack[top + 3, 0], stack[top + 3, 1] = e0, e3
    return top + 4, root


@njit(cache=True)
def local_ratios(Tl, Yl, Ll, dens, k):
    """Ratios of the boundaries ``1..m-1`` with their two neighbours (the heap's initial keys; the
    same floating-point operations as the vectorised ``_Geometry.ratio``).

    Parameters
    ----------
    Tl, Yl, Ll : ndarray, shape (m + 1,)
        Super-token geometry (see :func:`heap_build`).
    dens : ndarray, shape (m + 1,)
        Density :math:`r^*/q` of the super-token right of each boundary (the last entry is unused).
    k : int
        Number of i.i.d. drafts.

    Returns
    -------
    ndarray, shape (m - 1,)
        Local ratio of each interior boundary ``1..m-1`` between its two neighbours.
    """
    m = Tl.size - 1
    R0 = np.empty(max(m - 1, 0))
    for i in range(1, m):
        R0[i - 1] = _ratio(Tl, Yl, Ll, dens, i - 1, i, i + 1, True, True, k)
    return R0


# long-function: a numba kernel: one compiled loop, splitting it costs calls inside the hot loop
@njit(cache=True)
def flip_build(Tl, Yl, Ll, dens, k, perm, max_flips):
    """Threshold tree by randomized incremental construction (Chew's algorithm for a convex
    polygon, in tree form).

    Delete the interior boundaries in the order ``perm`` from the chain ``0..m``, recording each
    one's neighbours at deletion; re-insert them in reverse order. Inserting v between its
    recorded neighbours (a, b) -- adjacent at that moment -- hangs the leaf v (block (a, b)) under
    the node owning the edge (a, b); then every edge whose two triangles violate nesting
    (child ratio > parent ratio) is flipped, i.e. the child is rotated above its parent, and the
    four outer edges of the flipped quadrilateral are re-checked. When no edge violates nesting
    the tree is the threshold tree. Only edges opposite v are candidates (in exact arithmetic the
    others stay legal), so each flip adds an edge at v and none is undone: an insertion makes at
    most (present boundaries) flips even under rounding, and ends with v of degree
    ``2 + flips``. With a uniformly random order the expected number of flips is below 2 per
    insertion (backward analysis), so the expected cost is O(m k). Violations left by rounding
    are clamped by the caller, as for the heap.

    Returns ``(G, left, right, order, flips)``; ``flips = -1`` when ``max_flips`` was exceeded
    (the caller then uses another builder).

    Parameters
    ----------
    Tl, Yl, Ll : ndarray, shape (m + 1,)
        Super-token geometry (see :func:`heap_build`).
    dens : ndarray, shape (m + 1,)
        Density :math:`r^*/q` of the super-token right of each boundary (the last entry is unused).
    k : int
        Number of i.i.d. drafts.
    perm : ndarray of int64
        Deletion order of the interior boundaries ``1..m-1`` (uniformly random for the expected bound).
    max_flips : int
        Flip budget; exceeding it aborts the build.

    Returns
    -------
    G : ndarray, shape (m + 1,)
        Node ratios (before the clamp).
    left, right : ndarray of int64, shape (m + 1,)
        The block each node splits.
    order : ndarray of int64
        Boundaries in removal order.
    flips : int
        Number of flips, or -1 when ``max_flips`` was exceeded.
    """
    m = Tl.size - 1
    G = np.zeros(m + 1)
    # the fields of a node share one cache line (column views of one array): the random order of
    # insertion makes the build memory-latency bound
    nodes = np.full((m + 1, 8), -1, dtype=np.int64)
    lft, rgt, cl, cr, par = nodes[:, 0], nodes[:, 1], nodes[:, 2], nodes[:, 3], nodes[:, 4]
    present = nodes[:, 5]  # 1 once inserted
    n = perm.size
    # deletion phase: neighbours at deletion
    prv = np.arange(-1, m, dtype=np.int64)
    nxt = np.arange(1, m + 2, dtype=np.int64)
    da = np.empty(n, dtype=np.int64)
    db = np.empty(n, dtype=np.int64)
    for t in range(n):
        v = perm[t]
        a, b = prv[v], nxt[v]
        da[t], db[t] = a, b
        nxt[a] = b
        prv[b] = a
    stack = np.empty((4 * n + 8, 2), dtype=np.int64)
    root = -1
    flips = 0
    for t in range(n - 1, -1, -1):
        v = perm[t]
        a, b = da[t], db[t]
        lft[v], rgt[v] = a, b
        G[v] = _ratio3(Tl, Yl, Ll, dens, a, v, b, k)
        present[v] = 1
        if root < 0:
            root = v
            continue
        if a > 0 and present[a] > 0 and rgt[a] == b:
            par[v] = a
            cr[a] = v
        else:  # the edge (a, b) belongs to b's triangle
            par[v] = b
            cl[b] = v
        stack[0, 0], stack[0, 1] = a, b
        top = 1
        while top > 0:
            top -= 1
            lo, hi = stack[top, 0], stack[top, 1]
            # the triangle above the edge (lo, hi) (node x, third vertex c) and the one below (y)
            if lo > 0 and lo < m and present[lo] > 0 and rgt[lo] == hi:
                y, c = cr[lo], lft[lo]
            elif hi > 0 and hi < m and present[hi] > 0 and lft[hi] == lo:
                y, c = cl[hi], rgt[hi]
            else:  # the root edge (0, m), or an edge flipped away meanwhile
                continue
            # only edges opposite v are flipped (in exact arithmetic no other edge is illegal):
            # each flip then adds an edge at v and none is ever undone, so rounding cannot cycle
            if y < 0 or (y != v and c != v) or not G[y] > G[par[y]]:
                continue
            flips += 1
            if flips > max_flips or top + 4 > stack.shape[0]:
                return G, lft, rgt, np.empty(0, dtype=np.int64), -1
            top, root = _rotate_up(y, lft, rgt, cl, cr, par, G, Tl, Yl, Ll, dens, k, stack, top, root)
    # removal order: descendants before ancestors (reverse breadth-first order)
    order = np.empty(n, dtype=np.int64)
    if n > 0:
        order[0] = root
        head, tail = 0, 1
        while head < tail:
            x = order[head]
            head += 1
            if cl[x] >= 0:
                order[tail] = cl[x]
                tail += 1
            if cr[x] >= 0:
                order[tail] = cr[x]
                tail += 1
    return G, lft, rgt, order[::-1].copy(), flips
