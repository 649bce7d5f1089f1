r"""Compiled (numba) per-node passes of the tree interval (:mod:`otspec.bounds.tree_interval`).

Imported lazily (never by ``import otspec``) and only where numba imports; when they run is
:mod:`otspec.bounds.jit_policy`'s rule. The numpy reference makes about thirty O(V) passes per
expanded node (two argpartitions, the unexplored tokens' masked copies, their sums, the child caps,
the tangents' binning, and the lower bound's first unexplored depth once per candidate law); here
each expanded node costs three passes over its rows, and the input's validation one:

* :func:`check_rows`: finite, non-negative entries and the row sums (one pass);
* :func:`top_k`: the K largest entries of a row (p and q in one pass);
* :func:`rest_stats`: over the unexplored tokens (every token but the explored children, a sorted
  list walked alongside), the target and draft masses, the first unexplored depth's cap and the
  tangent bins of :math:`F_v` (the reference's quantities; the sums run in token order, so they
  differ from numpy's pairwise sums by rounding only);
* :func:`min_sum`: :math:`\sum_c \min(a\,p_c, b\,q_c / Q)` over the unexplored tokens, for the
  lower bound (both candidate laws at once).
"""

from __future__ import annotations

import math

import numba
import numpy as np

__all__ = ["check_rows", "min_sum", "rest_stats", "top_k"]

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
    """``out[:K]``: the K largest tokens under p; ``out[K:2K]``: under q (K <= V)."""
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
    """One pass over ``(n, V)`` rows: their sums into ``sums``; True when every entry is finite
    and non-negative (the caller then checks the sums; otherwise numpy finds the culprit)."""
    ok = True
    V = rows.shape[1]
    for r in range(rows.shape[0]):
        s0 = 0.0  # four running sums: no chain of dependent additions
        s1 = 0.0
        s2 = 0.0
        s3 = 0.0
        bad = False
        c = 0
        while c + 4 <= V:
            x0, x1, x2, x3 = rows[r, c], rows[r, c + 1], rows[r, c + 2], rows[r, c + 3]
            bad |= not (x0 >= 0.0 and x0 < np.inf)  # NaN fails both
            bad |= not (x1 >= 0.0 and x1 < np.inf)
            bad |= not (x2 >= 0.0 and x2 < np.inf)
            bad |= not (x3 >= 0.0 and x3 < np.inf)
            s0 += x0
            s1 += x1
            s2 += x2
            s3 += x3
            c += 4
        while c < V:
            x0 = rows[r, c]
            bad |= not (x0 >= 0.0 and x0 < np.inf)
            s0 += x0
            c += 1
        ok &= not bad
        sums[r] = (s0 + s1) + (s2 + s3)
    return ok


@_njit
def _coverage(b, k):
    r""":math:`h(b) = -\mathrm{expm1}(k \log1p(-b))` on b clipped to [0, 1] (tree_node.coverage)."""
    m = min(max(b, 0.0), 1.0)
    return -math.expm1(k * math.log1p(-m)) if m < 1.0 else 1.0


@_njit
def rest_stats(p, q, skip, k, ms, grid, root, cap_h, cap_p):
    """Over the tokens not in ``skip`` (sorted ids): ``(rho, qsum, cap1, total_p)`` and, for a
    non-root node, the tangent bins ``cap_h[j]``, ``cap_p[j]`` (children whose kink
    :math:`h_c / p_c` exceeds exactly ``j`` grid values; ``grid`` sorted ascending)."""
    G = grid.size
    for j in range(G + 1):
        cap_h[j] = 0.0
        cap_p[j] = 0.0
    kms = k * ms
    rho = 0.0
    qsum = 0.0
    cap1 = 0.0
    total = 0.0
    s = 0
    nxt = skip[0] if skip.size else -1
    half = 0.5 * (k - 1)
    top = grid[G - 1] if G else -np.inf
    h_free = 0.0  # the tokens capped at no grid value (most of a long tail), kept in registers
    p_free = 0.0
    for c in range(p.size):
        if c == nxt:
            s += 1
            nxt = skip[s] if s < skip.size else -1
            continue
        a = p[c]
        b = q[c]
        rho += a
        qsum += b
        if root:
            # min(p, h(q)); h(b) >= k b (1 - (k - 1) b / 2) (Bonferroni), so below that p is the
            # minimum without the transcendental functions
            if a <= k * b * (1.0 - half * b):
                cap1 += a
            else:
                cap1 += min(a, _coverage(b, k))
        else:
            hb = min(kms * b, 1.0)
            cap1 += hb
            if a > 0:
                total += a
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
    return rho, qsum, cap1, total


@_njit
def min_sum(p, q, skip, a0, b0, a1, b1, qrest):
    """``sum over the tokens not in skip of min(a p_c, b q_c / qrest)`` for two candidates
    ``(a0, b0)`` and ``(a1, b1)`` in one pass (the lower bound's bucket laws)."""
    s = 0
    nxt = skip[0] if skip.size else -1
    out0 = 0.0
    out1 = 0.0
    c0 = b0 / qrest  # one division per node (the reference divides per token: rounding apart, the same)
    c1 = b1 / qrest
    for c in range(p.size):
        if c == nxt:
            s += 1
            nxt = skip[s] if s < skip.size else -1
            continue
        pc = p[c]
        qc = q[c]
        out0 += min(a0 * pc, c0 * qc)
        out1 += min(a1 * pc, c1 * qc)
    return out0, out1
