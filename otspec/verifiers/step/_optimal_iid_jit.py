r"""Compiled (numba) kernels of the threshold-tree build of :mod:`otspec.verifiers.step.optimal_iid`.

Imported lazily, and only when numba is installed (the optional extra ``otspec[fast]``). Each
kernel is a line-by-line port of the pure-Python builder it replaces and performs the same IEEE
operations in the same order, so the two give bit-identical trees (the tests check this):

* :func:`heap_build` is ``_build_heap``: a min-heap of ``(ratio, boundary)`` records ordered
  lexicographically like Python's tuples (ratio first, then the boundary index), so it removes the
  boundaries in the same sequence as ``heapq`` for every input without NaN (the builder maps a NaN
  ratio to 0 in both paths). It is an indexed 4-ary heap (one record per boundary present, a
  changed ratio is sifted in place): the heap is memory-latency bound, and this layout touches
  about a quarter of the cache lines of a binary heap with lazy deletion;
* :func:`clamp_down` is ``_finish``'s top-down clamp of each node's ratio to its two neighbours
  at removal and to [0, 1].

The mathematics (why removing the boundary of smallest local ratio builds the threshold tree) is
in ``docs/optimal_verifier.rst``.
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, inline="always")
def _before(h, a, b):
    """Heap record ``a`` comes before ``b``: smaller ratio, ties by boundary index (the order of
    Python's ``(ratio, boundary)`` tuples)."""
    return h[a, 0] < h[b, 0] or (h[a, 0] == h[b, 0] and h[a, 1] < h[b, 1])


@numba.njit(cache=True)
def _swap(h, where, a, b):
    ka, ia = h[a, 0], h[a, 1]
    h[a, 0], h[a, 1] = h[b, 0], h[b, 1]
    h[b, 0], h[b, 1] = ka, ia
    where[int(h[a, 1])] = a
    where[int(h[b, 1])] = b


@numba.njit(cache=True)
def _sift_up(h, where, pos):
    while pos > 0:
        parent = (pos - 1) >> 2
        if not _before(h, pos, parent):
            break
        _swap(h, where, pos, parent)
        pos = parent


@numba.njit(cache=True)
def _sift_down(h, where, pos, end):
    while True:
        c = 4 * pos + 1
        if c >= end:
            break
        best = c
        last = min(c + 4, end)
        for j in range(c + 1, last):
            if _before(h, j, best):
                best = j
        if not _before(h, best, pos):
            break
        _swap(h, where, pos, best)
        pos = best


@numba.njit(cache=True)
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


@numba.njit(cache=True)
def heap_build(R0, Tl, Yl, Ll, dens, k):
    """Threshold tree by removing the boundary of smallest local ratio (compiled ``_build_heap``).

    ``R0`` holds the initial local ratios of boundaries ``1..m-1``. An indexed 4-ary min-heap of
    ``(ratio, boundary)`` records (one per boundary still present; a neighbour's new ratio is
    sifted in place) pops the same sequence as the pure builder's lazy ``heapq``: both return the
    smallest ``(ratio, boundary)`` among the boundaries present. Returns ``(G, left, right,
    order)``."""
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
    for pos in range((n - 2) // 4, -1, -1):
        _sift_down(h, where, pos, n)
    prv = np.arange(-1, m, dtype=np.int64)
    nxt = np.arange(1, m + 2, dtype=np.int64)
    cnt = 0
    while n > 0:
        r = h[0, 0]
        j = int(h[0, 1])
        n -= 1
        if n > 0:
            _swap(h, where, 0, n)
            _sift_down(h, where, 0, n)
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
            _rekey(h, where, a, _ratio(Tl, Yl, Ll, dens, xa, a, b, a - xa == 1, False, k), n)
        if b < m:  # right neighbour: its left side widened to a
            xb = nxt[b]
            _rekey(h, where, b, _ratio(Tl, Yl, Ll, dens, a, b, xb, False, xb - b == 1, k), n)
    return G, left, right, order[:cnt]


@numba.njit(cache=True)
def _rekey(h, where, j, rx, n):
    pos = where[j]
    old = h[pos, 0]
    h[pos, 0] = rx
    if rx < old:
        _sift_up(h, where, pos)
    elif rx > old:
        _sift_down(h, where, pos, n)


@numba.njit(cache=True)
def clamp_down(G, left, right, order):
    """Top-down clamp (compiled ``_finish`` loop): in reverse removal order,
    ``G[i] = max(0, min(G[i], G[left[i]], G[right[i]]))``. In place."""
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
