r"""Compiled (numba) kernels of the i.i.d. optimum and its certificate (:mod:`otspec.bounds.iid_compiled`).

Imported lazily (never by ``import otspec``) and only where numba imports. Every kernel performs
the IEEE operations of the numpy reference (:func:`otspec.bounds.prefix.iid_prefix` and
:func:`otspec.bounds.primal.prefix_lower`) in the same order, without fast-math, so that its
results are bit-identical (the tests compare them on seeded cases with ties and zeros):

* :func:`pack_words` and :func:`unpack_order` are the two O(V) passes around the sort of
  :func:`otspec.bounds.prefix.ratio_sort`;
* :func:`scan` gathers p and q in the p/q order (:func:`otspec.bounds.prefix.ratio_sort`) and
  runs the sorted-prefix dual in one pass: the prefix sums, the powers
  :math:`\min(Q_{\le i}, 1)^k` by repeated squaring and the first minimum of
  :math:`P_{\le i} - Q_{\le i}^k`;
* :func:`primal` builds the closed-form selection law :math:`r^*` (cap on the suffix, floor on
  the cut) and runs its Lorenz test in two passes over the suffix and one
  over all tokens.
"""

from __future__ import annotations

import numba
import numpy as np

__all__ = ["CHECKPOINT", "ipow", "pack_words", "primal", "scan", "unpack_order"]

#: The prefix sums are kept at every CHECKPOINT-th token only; a value in between is re-summed
#: from the checkpoint before it (the same additions in the same order: the same bits).
CHECKPOINT = 64

_njit = numba.njit(cache=True, fastmath=False, boundscheck=False)


@_njit
def ipow(x, k):
    """``x ** k`` (integer ``k >= 1``) by the multiplications of :func:`otspec._arith.power`.

    Parameters
    ----------
    x : float
        The base.
    k : int
        The exponent, at least 1.

    Returns
    -------
    float
        The power, bit for bit :func:`~otspec._arith.power`'s.
    """
    acc = 1.0
    first = True
    while True:
        if k & 1:
            if first:
                acc = x
                first = False
            else:
                acc = acc * x
            if k == 1:
                return acc
        k >>= 1
        x = x * x


@_njit
def pack_words(key_bits, idbits, words):
    """The words of :func:`otspec.bounds.prefix.ratio_sort`: each key's bits (-0.0 as 0) with
    the low ``idbits`` bits replaced by its id.

    Parameters
    ----------
    key_bits : ndarray of int64, shape (V,)
        The non-negative keys' float64 bit patterns.
    idbits : int
        Bits kept for the ids (at least ``log2(V)``).
    words : ndarray of int64, shape (V,)
        Output.
    """
    low = (np.int64(1) << idbits) - 1
    for i in range(key_bits.size):
        words[i] = (max(key_bits[i], 0) & ~low) | i


@_njit
def unpack_order(words, idbits, order):
    """The ids of the sorted words into ``order``.

    Parameters
    ----------
    words : ndarray of int64, shape (V,)
        The sorted words of :func:`pack_words`.
    idbits : int
        Bits of the ids.
    order : ndarray of int64, shape (V,)
        Output: the token ids in the words' order.

    Returns
    -------
    bool
        True when two neighbours share their kept bits (a run the caller re-sorts by (key, id)).
    """
    low = (np.int64(1) << idbits) - 1
    runs = False
    for i in range(words.size):
        order[i] = words[i] & low
        if i > 0 and (words[i] >> idbits) == (words[i - 1] >> idbits):
            runs = True
    return runs


@_njit
def scan(p, q, order, k, ps, qs, ckp, ckq):
    r"""The sorted-prefix dual along ``order`` (module docstring).

    Parameters
    ----------
    p, q : ndarray, shape (V,)
        Target and draft distributions.
    order : ndarray of int64, shape (V,)
        The tokens in ascending p/q, ties by id.
    k : int
        Number of i.i.d. drafts.
    ps, qs : ndarray, shape (V,)
        Output: p and q in order.
    ckp, ckq : ndarray, shape (V // CHECKPOINT + 1,)
        Output: the prefix sums through token ``c * CHECKPOINT - 1`` at index ``c``.

    Returns
    -------
    tuple
        ``(j, f_j, P_j, Q_j)``: the first minimiser of :math:`P_{\le j} - \min(Q_{\le j}, 1)^k`,
        that minimum and the two prefix sums there.
    """
    V = order.size
    for i in range(V):  # the gather alone: its cache misses overlap best without the chains below
        o = order[i]
        ps[i] = p[o]
        qs[i] = q[o]
    sp = 0.0
    sq = 0.0
    best = np.inf
    jbest = 0
    bp = 0.0
    bq = 0.0
    for i in range(V):
        if i % CHECKPOINT == 0:
            ckp[i // CHECKPOINT] = sp
            ckq[i // CHECKPOINT] = sq
        a = ps[i]
        b = qs[i]
        # numpy's cumsum starts from the first element; 0.0 + x is x for every x >= 0 (and
        # -0.0 becomes 0.0, a zero either way)
        sp = a if i == 0 else sp + a
        sq = b if i == 0 else sq + b
        f = sp - ipow(min(sq, 1.0), k)
        if f < best:
            best = f
            jbest = i
            bp = sp
            bq = sq
    if V % CHECKPOINT == 0:
        ckp[V // CHECKPOINT] = sp
        ckq[V // CHECKPOINT] = sq
    return jbest, best, bp, bq


@_njit
def _prefix_sum(xs, ck, i):
    """The running sum through index ``i`` (numpy's cumsum of ``xs`` at ``i``) from the
    checkpoint before it."""
    c = (i + 1) // CHECKPOINT
    s = ck[c]
    start = c * CHECKPOINT
    for t in range(start, i + 1):
        s = xs[t] if t == 0 else s + xs[t]
    return s


@_njit
def _floor_constant(ps, qs, ckp, ckq, n, g):
    """c' of the floor ``max(p, c'q)`` on the cut (sum g): the binary search of
    :func:`otspec.bounds.primal._iid_primal_scan`, probe for probe."""
    top = _prefix_sum(ps, ckp, n - 1)
    lo = 0
    hi = n
    while lo < hi:
        mid = (lo + hi) >> 1
        if mid == 0:
            s_mid = top
        else:
            s_mid = (top - _prefix_sum(ps, ckp, mid - 1)) + (ps[mid] / qs[mid]) * _prefix_sum(qs, ckq, mid - 1)
        if s_mid <= g:
            lo = mid + 1
        else:
            hi = mid
    j = max(lo - 1, 0)
    p_gt = top - _prefix_sum(ps, ckp, j) if j + 1 < n else 0.0
    q_le = _prefix_sum(qs, ckq, j)
    return (g - p_gt) / q_le, top


@_njit
def _cap_constant(ps, qs, n, target, qgt, s):
    """The cap ``min(p, c q)`` on the suffix ``n:`` (sum ``target``) as :func:`otspec.bounds.primal._cap`:
    returns ``(c, whole)``; ``whole``: no constant binds (r = p there)."""
    V = ps.size
    acc = 0.0
    for i in range(V - 1, n - 1, -1):  # Q_gt: the reversed cumulative sum, shifted by one
        qgt[i] = acc
        acc = qs[i] if i == V - 1 else acc + qs[i]
    pl = 0.0
    for i in range(n, V):  # S = P_le + (p/q) Q_gt
        pl = ps[i] if i == n else pl + ps[i]
        qg = qgt[i]
        s[i] = pl + ((ps[i] / qs[i]) * qg if qg > 0 else 0.0)
    lo = n
    hi = V
    while lo < hi:  # numpy's searchsorted(S, target, side="left")
        mid = lo + ((hi - lo) >> 1)
        if s[mid] < target:
            lo = mid + 1
        else:
            hi = mid
    if lo >= V:
        return 0.0, True
    p_lt = 0.0
    if lo > n:  # P_le at lo - 1, re-summed from the suffix's start
        for i in range(n, lo):
            p_lt = ps[i] if i == n else p_lt + ps[i]
    q_ge = qgt[lo] + qs[lo]
    return (target - p_lt) / q_ge, False


# long-function: one pass each for the two constants and the Lorenz test, in the reference's order
@_njit
def primal(ps, qs, ckp, ckq, n, g, k, eps, r, qgt, s):
    r"""The closed-form selection law and its Lorenz violation (module docstring).

    Parameters
    ----------
    ps, qs : ndarray, shape (V,)
        p and q in ascending p/q (:func:`scan`'s output; every q positive).
    ckp, ckq : ndarray
        :func:`scan`'s checkpoints.
    n : int
        Size of the optimal prefix (the cut).
    g : float
        :math:`\min(Q(H^*), 1)^k`.
    k : int
        Number of i.i.d. drafts.
    eps : float
        Relative density inversions tolerated (the reference's constant).
    r : ndarray, shape (V,)
        Output: :math:`r^*` on the suffix ``n:`` (numpy then adds it up).
    qgt, s : ndarray, shape (V,)
        Scratch for the cap's constant.

    Returns
    -------
    tuple
        ``(lower_cut, violation, ok)``: the cut's share of the acceptance, the membership
        violation, and False where the reference would leave its O(V) path (a constant
        overflows, or the p/q order is not a density order of r*): the caller then runs it.
    """
    V = ps.size
    has_floor = g > 0 and n > 0
    if has_floor:
        c_floor, lower_cut = _floor_constant(ps, qs, ckp, ckq, n, g)
        if not np.isfinite(c_floor):
            return 0.0, 0.0, False
    else:
        c_floor, lower_cut = 0.0, 0.0
    c_cap, whole = 0.0, True
    if n < V:
        c_cap, whole = _cap_constant(ps, qs, n, 1.0 - g, qgt, s)
        if not whole and not np.isfinite(c_cap):
            return 0.0, 0.0, False
    # r on every token, its running sum and the Lorenz gaps, in one pass
    scale = 1.0 + eps
    dmax = -np.inf
    sq = 0.0
    cr = 0.0
    gap = 0.0
    rmin = 0.0
    for i in range(V):
        a = ps[i]
        b = qs[i]
        if i < n:
            ri = max(b * c_floor, a) if has_floor else 0.0
        else:
            ri = a if whole else min(a, c_cap * b)
            rmin = min(rmin, ri)
            r[i] = ri
        d = ri / b
        if dmax > scale * d:  # a density above (1 + eps) times a later one: not a density order
            return 0.0, 0.0, False
        dmax = max(dmax, d)
        sq = b if i == 0 else sq + b
        cr = ri if i == 0 else cr + ri
        if i < V - 1:
            gap = max(gap, ipow(min(sq, 1.0), k) - cr)
    total = cr
    excess = max(0.0, (total - 1.0) + gap) + eps
    viol = max(0.0, max(excess, abs(total - 1.0)))
    return lower_cut, max(viol, -min(rmin, 0.0)), True
