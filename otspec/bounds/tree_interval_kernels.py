r"""Compiled (numba) per-node passes of the tree interval (:mod:`otspec.bounds.tree_interval`).

Imported lazily (never by ``import otspec``) and only where numba imports; when they run is
:mod:`otspec.bounds.jit_policy`'s rule. The numpy reference makes about thirty O(V) passes per
expanded node (two argpartitions, the unexplored tokens' masked copies, their sums, the child caps,
the tangents' binning, and the lower bound's first unexplored depth once per candidate law); here
each expanded node costs three passes over its rows, and the input's validation one:

* :func:`check_rows`: finite, non-negative entries and the row sums (one pass);
* :func:`top_k`: the K largest entries of a row (p and q in one pass);
* :func:`rest_stats`: over the unexplored tokens of a non-root node (every token but the
  explored children, a sorted list walked alongside), the target and draft masses, the first
  unexplored depth's cap and the tangent bins of :math:`F_v`;
* :func:`min_sum`: :math:`\sum_c \min(a\,p_c, b\,q_c / Q)` over the unexplored tokens, for the
  lower bound (both candidate laws at once).

Each sum is numpy's: the pairwise summation of the same compressed array (:func:`pairwise_sum`),
or the token-order accumulation of ``np.bincount``, so the bucket LP gets the reference's data bit
for bit and HiGHS takes the same path (the root node, whose cap needs ``expm1``/``log1p``, runs
the reference's numpy code).
"""

from __future__ import annotations

import numba
import numpy as np

__all__ = ["check_rows", "min_sum", "pairwise_sum", "rest_stats", "top_k"]

_njit = numba.njit(cache=True, fastmath=False, boundscheck=False)


@_njit
def _push(vals, ids, count, K, v, i):
    """Keep the K largest values seen (ties: the first index seen wins); returns the new count."""
    if count < K:
        vals[count] = v
        ids[count] = i
        return count + 1
    lo = 0
    for t in range(1, K):
        if vals[t] < vals[lo]:
            lo = t
    if v > vals[lo]:
        vals[lo] = v
        ids[lo] = i
    return count


@_njit
def top_k(p, q, K, out):
    """The K largest tokens under p and under q, in one pass.

    Parameters
    ----------
    p, q : ndarray, shape (V,)
        A node's target and draft rows.
    K : int
        Children kept per model (at most V).
    out : ndarray of int64, shape (2 K,)
        Output: ``out[:K]`` the top tokens under p, ``out[K:]`` under q (ties: the first seen).
    """
    vp = np.empty(K)
    vq = np.empty(K)
    ip = np.empty(K, dtype=np.int64)
    iq = np.empty(K, dtype=np.int64)
    cp = 0
    cq = 0
    minp = -1.0
    minq = -1.0
    for i in range(p.size):
        a = p[i]
        b = q[i]
        if cp < K or a > minp:
            cp = _push(vp, ip, cp, K, a, i)
            if cp == K:
                minp = vp.min()
        if cq < K or b > minq:
            cq = _push(vq, iq, cq, K, b, i)
            if cq == K:
                minq = vq.min()
    out[:K] = ip
    out[K:] = iq


@_njit
def check_rows(rows, sums):
    """One pass over rows: their sums, and whether every entry is finite and non-negative.

    An entry is checked through the row's minimum and sum (a NaN or an infinity makes the sum
    non-finite, a negative entry the minimum negative): four running sums and minima, no branch
    per entry.

    Parameters
    ----------
    rows : ndarray, shape (n, V)
        C-contiguous rows.
    sums : ndarray, shape (n,)
        Output: the row sums (four running sums each; for the tolerance check only).

    Returns
    -------
    bool
        True when every entry is finite and non-negative (otherwise, or when a row's sum
        overflows, numpy finds the culprit).
    """
    ok = True
    V = rows.shape[1]
    for r in range(rows.shape[0]):
        s0 = 0.0  # four running sums and minima: no chain of dependent operations
        s1 = 0.0
        s2 = 0.0
        s3 = 0.0
        m0 = np.inf
        m1 = np.inf
        m2 = np.inf
        m3 = np.inf
        c = 0
        while c + 4 <= V:
            x0, x1, x2, x3 = rows[r, c], rows[r, c + 1], rows[r, c + 2], rows[r, c + 3]
            s0 += x0
            s1 += x1
            s2 += x2
            s3 += x3
            m0 = min(m0, x0)
            m1 = min(m1, x1)
            m2 = min(m2, x2)
            m3 = min(m3, x3)
            c += 4
        while c < V:
            x0 = rows[r, c]
            s0 += x0
            m0 = min(m0, x0)
            c += 1
        total = (s0 + s1) + (s2 + s3)
        sums[r] = total
        ok &= min(min(m0, m1), min(m2, m3)) >= 0.0 and abs(total) < np.inf  # NaN fails the second
    return ok


@_njit
def pairwise_sum(a, n):
    """``a[:n].sum()`` as numpy adds a contiguous float64 array (pairwise: blocks of at most 128
    summed by eight running sums, halves split at a multiple of 8): the same bits. Iterative
    (numba does not load a cached caller of a recursive function reliably).

    Parameters
    ----------
    a : ndarray of float64
        The values (contiguous).
    n : int
        How many leading entries to add.

    Returns
    -------
    float
        Their sum, bit for bit numpy's.
    """
    if n <= 128:
        return 0.0 + _block(a, 0, n)
    lo_s = np.empty(64, dtype=np.int64)  # the recursion's frames: depth <= log2(n / 128) + 1
    n_s = np.empty(64, dtype=np.int64)
    stage = np.zeros(64, dtype=np.int64)
    left = np.empty(64)
    top = 0
    lo_s[0], n_s[0], stage[0] = 0, n, 0
    ret = 0.0
    while top >= 0:
        lo, m = lo_s[top], n_s[top]
        if m <= 128:
            ret = _block(a, lo, m)
            top -= 1
            continue
        half = m // 2
        half -= half % 8
        if stage[top] == 0:  # first the left half
            stage[top] = 1
            top += 1
            lo_s[top], n_s[top], stage[top] = lo, half, 0
        elif stage[top] == 1:  # then the right half
            left[top] = ret
            stage[top] = 2
            top += 1
            lo_s[top], n_s[top], stage[top] = lo + half, m - half, 0
        else:
            ret = left[top] + ret
            top -= 1
    return 0.0 + ret


@_njit
def _block(a, lo, n):
    """numpy's pairwise sum of at most 128 entries."""
    if n < 8:
        res = 0.0
        for i in range(lo, lo + n):
            res += a[i]
        return res
    r0, r1, r2, r3 = a[lo], a[lo + 1], a[lo + 2], a[lo + 3]
    r4, r5, r6, r7 = a[lo + 4], a[lo + 5], a[lo + 6], a[lo + 7]
    i = 8
    while i < n - (n % 8):
        r0 += a[lo + i]
        r1 += a[lo + i + 1]
        r2 += a[lo + i + 2]
        r3 += a[lo + i + 3]
        r4 += a[lo + i + 4]
        r5 += a[lo + i + 5]
        r6 += a[lo + i + 6]
        r7 += a[lo + i + 7]
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < n:
        res += a[lo + i]
        i += 1
    return res


@_njit
def rest_stats(p, q, skip, kms, grid, cap_h, cap_p, buf):
    r"""The unexplored tokens' statistics at a non-root expanded node (module docstring).

    Parameters
    ----------
    p, q : ndarray, shape (V,)
        The node's target and draft rows.
    skip : ndarray of int64
        The explored children's tokens, sorted.
    kms : float
        ``k`` times the node's draft prefix mass.
    grid : ndarray, shape (G,)
        The tangent points, sorted ascending.
    cap_h, cap_p : ndarray, shape (G + 1,)
        Output: the tangent bins, :math:`\sum h_c` and :math:`\sum p_c` over the tokens whose kink
        :math:`h_c / p_c` exceeds exactly ``j`` grid values (in token order, as ``np.bincount``).
    buf : ndarray, shape (4, V)
        Scratch.

    Returns
    -------
    tuple
        ``(rho, qsum, cap1, total_p)``: the unexplored target and draft masses, the first
        depth's cap :math:`\sum \min(k M_s q_c, 1)` and the target mass of the tokens with
        :math:`p_c > 0`, each numpy's pairwise sum of the compressed array (the reference's bits).
    """
    G = grid.size
    for j in range(G + 1):
        cap_h[j] = 0.0
        cap_p[j] = 0.0
    top = grid[G - 1] if G else -np.inf
    h_free = 0.0  # the bin above every grid value (most of a long tail), kept in registers
    p_free = 0.0
    n = 0
    nk = 0
    s = 0
    nxt = skip[0] if skip.size else -1
    for c in range(p.size):
        if c == nxt:
            s += 1
            nxt = skip[s] if s < skip.size else -1
            continue
        a = p[c]
        b = q[c]
        hb = min(kms * b, 1.0)
        buf[0, n] = a
        buf[1, n] = b
        buf[2, n] = hb
        n += 1
        if a > 0:
            buf[3, nk] = a
            nk += 1
            w = hb / a
            if w > top:
                h_free += hb
                p_free += a
                continue
            lo = 0
            for t in range(G):  # the number of grid values below w (branch-free)
                lo += grid[t] < w
            cap_h[lo] += hb
            cap_p[lo] += a
    cap_h[G] += h_free
    cap_p[G] += p_free
    return pairwise_sum(buf[0], n), pairwise_sum(buf[1], n), pairwise_sum(buf[2], n), pairwise_sum(buf[3], nk)


@_njit
def min_sum(p, q, skip, a0, b0, a1, b1, qrest, buf):
    r"""The lower bound's first unexplored depth for two candidate laws in one pass.

    Parameters
    ----------
    p, q : ndarray, shape (V,)
        The node's target and draft rows.
    skip : ndarray of int64
        The explored children's tokens, sorted.
    a0, b0, a1, b1 : float
        The candidates' :math:`W(v)` and bucket masses.
    qrest : float
        The unexplored draft mass (positive).
    buf : ndarray, shape (2, V)
        Scratch.

    Returns
    -------
    tuple of float
        :math:`\sum_c \min(a\,p_c, b\,q_c / Q)` over the unexplored tokens for each candidate
        (numpy's terms and pairwise sum).
    """
    s = 0
    nxt = skip[0] if skip.size else -1
    n = 0
    for c in range(p.size):
        if c == nxt:
            s += 1
            nxt = skip[s] if s < skip.size else -1
            continue
        pc = p[c]
        qc = q[c]
        buf[0, n] = min(a0 * pc, b0 * qc / qrest)
        buf[1, n] = min(a1 * pc, b1 * qc / qrest)
        n += 1
    return pairwise_sum(buf[0], n), pairwise_sum(buf[1], n)
