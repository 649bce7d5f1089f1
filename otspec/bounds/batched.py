r"""Exact optima of many (p, q) pairs, one pair at a time without a full sort: the batched
companions of :mod:`otspec.bounds.prefix` for dataset-level bounds (:mod:`otspec_gpu.corpus`).

:func:`all_optima` gives :math:`1 - d_{TV}`, the i.i.d. optima :math:`\alpha^*(p, \mathrm{iid}(q,
k))` and the greedy optima :math:`\alpha^*(p, \mathrm{greedy}(q, k))` of one pair for several k
from one binning of the tokens by their ratio :math:`p/q` (the keys of
:func:`otspec.bounds.prefix.ratio_keys`) and one gather of the few bins a scan needs. The minima are
those of the sorted-prefix dual (:func:`otspec.bounds.prefix.iid_prefix`, the greedy closed form of
:meth:`otspec.laws.GreedyLaw.optimum`); only the summation order, hence the last bits, differs
(a few hundred ulps at V <= 3000). Pure numpy, no state across pairs except reused scratch buffers,
so a pair's numbers never depend on which pairs were solved before it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from otspec.bounds.prefix import ratio_keys

__all__ = ["all_optima", "greedy_optima", "iid_optima", "one_minus_tv"]

# Ratio bins: the top 12 bits of a non-negative float64's bit pattern after its sign (11 exponent
# bits and 6 mantissa bits: 64 bins per octave) are a monotone function of the value. Keys below
# 2^-40 share the first bin and keys above 2^40 (and +inf: q = 0 < p) the last one.
_SHIFT = 46
_LO = int(np.float64(2.0**-40).view(np.int64) >> _SHIFT)
_HI = int(np.float64(2.0**40).view(np.int64) >> _SHIFT)
_NBINS = _HI - _LO + 1
_BLOCK = 64  # block width of the top-m search of greedy drafts


_BUFFERS: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}  # V -> (ratios, bins, a flag per token)


def _buffers(V: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Scratch arrays reused from one position to the next (a ratio, a bin index and a byte per
    token): fresh pages for three V-arrays per position cost more than the arithmetic."""
    buf = _BUFFERS.get(V)
    if buf is None:
        _BUFFERS.clear()
        buf = _BUFFERS[V] = (np.empty(V), np.empty(V, dtype=np.int64), np.empty(V, dtype=bool))
    return buf


def _bin_of(x: np.ndarray | float) -> Any:
    b = np.asarray(x, dtype=np.float64).view(np.int64) >> _SHIFT
    if b.ndim == 0:
        return int(np.clip(b, _LO, _HI)) - _LO
    np.clip(b, _LO, _HI, out=b)
    b -= _LO
    return b


#: The smallest ratio of each bin (its lower edge; 0 for the first, which also holds every smaller key).
_EDGES = ((np.arange(_NBINS, dtype=np.int64) + _LO) << _SHIFT).view(np.float64).copy()
_EDGES[0] = 0.0


class _Binned:
    """One position's tokens grouped in ratio bins, with per-bin masses and their prefix sums
    (arrays restricted to the bins between the first and the last one holding any mass)."""

    def __init__(self, p: np.ndarray, q: np.ndarray):
        self.p, self.q = p, q
        keybuf, binbuf, self._codebuf = _buffers(p.size)
        self.key = ratio_keys(p, q, out=keybuf)
        self.bins = np.right_shift(self.key.view(np.int64), _SHIFT, out=binbuf)
        np.clip(self.bins, _LO, _HI, out=self.bins)
        self.bins -= _LO
        Pb = np.bincount(self.bins, weights=p, minlength=_NBINS)
        Qb = np.bincount(self.bins, weights=q, minlength=_NBINS)
        used = np.flatnonzero(Pb + Qb)
        j0, j1 = (int(used[0]), int(used[-1]) + 1) if used.size else (0, 1)
        self.j0 = j0
        self.Qbin = Qb[j0:j1]
        self.Pc = np.cumsum(Pb[j0:j1])
        self.Qc = np.cumsum(self.Qbin)
        # mass of the bins above each one, summed from the top: Qc[-1] - Qc[j] cancels when the bins
        # up to j hold nearly all of q, and greedy's 1 / rest then amplifies that
        self.Qabove = np.append(np.cumsum(self.Qbin[::-1])[::-1][1:], 0.0)
        self.Pprev = np.concatenate([[0.0], self.Pc[:-1]])
        self.Qprev = np.concatenate([[0.0], self.Qc[:-1]])
        self.edges = _EDGES[j0:j1]

    def local(self, j: int) -> int:
        """Index into the restricted arrays of global bin ``j`` (clipped to the used range)."""
        return min(max(j - self.j0, 0), self.Pc.size - 1)

    def gather(self, sort_bins: np.ndarray, other_bins: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Token ids of two sets of bins (restricted range) in one pass: those of ``sort_bins``
        sorted by ratio (ties: lower id), and those of ``other_bins`` in id order."""
        full_sort = np.zeros(_NBINS, dtype=bool)
        full_sort[self.j0 : self.j0 + sort_bins.size] = sort_bins
        full_other = np.zeros(_NBINS, dtype=bool)
        full_other[self.j0 : self.j0 + other_bins.size] = other_bins
        idx = np.flatnonzero(np.take(full_sort | full_other, self.bins, out=self._codebuf))  # a bool pass: fast nonzero
        b = self.bins[idx]
        s = idx[full_sort[b]]
        return s[np.argsort(self.key[s], kind="stable")], idx[full_other[b]]


def _iid_bounds(b: _Binned, ks: Sequence[int]) -> dict[int, tuple[float, np.ndarray]]:
    """For each k: the best prefix value at bin ends, and the bins whose interior could beat it.

    A prefix ending inside bin j takes masses ``x_q <= Q_j`` and ``x_p >= r_j x_q`` of it (every
    ratio in the bin is at least its lower edge ``r_j``), so its value is at least
    ``P_prev + r_j x_q - (Q_prev + x_q)^k``: concave in ``x_q``, hence at least its smaller end value.
    """
    if not ks:
        return {}
    kk = np.asarray(ks, dtype=np.float64)[:, None]
    Qk = np.minimum(b.Qc, 1.0)[None, :] ** kk  # [len(ks), bins]
    best = np.minimum(np.min(b.Pc[None, :] - Qk, axis=1), 0.0)
    lower = np.minimum(b.Pprev - np.minimum(b.Qprev, 1.0)[None, :] ** kk, (b.Pprev + b.edges * b.Qbin)[None, :] - Qk)
    cand = lower < best[:, None]
    return {int(k): (float(best[i]), cand[i]) for i, k in enumerate(ks)}


def _iid_interior(b: _Binned, tokens: np.ndarray, bounds: dict) -> dict[int, float]:
    """The minimum over every prefix ending inside the gathered bins, for each k (sorted ``tokens``)."""
    if tokens.size == 0:
        return {k: best for k, (best, _) in bounds.items()}
    tb = b.bins[tokens] - b.j0
    start = np.flatnonzero(np.concatenate([[True], tb[1:] != tb[:-1]]))
    first = np.repeat(start, np.diff(np.append(start, tokens.size)))
    cp = np.cumsum(b.p[tokens])
    cq = np.cumsum(b.q[tokens])
    P = b.Pprev[tb] + (cp - np.concatenate([[0.0], cp])[first])
    Q = np.minimum(b.Qprev[tb] + (cq - np.concatenate([[0.0], cq])[first]), 1.0)
    return {k: min(best, float(np.min(P - Q**k))) for k, (best, _) in bounds.items()}


def iid_optima(p: np.ndarray, q: np.ndarray, ks: Sequence[int]) -> dict[int, float]:
    r"""Exact i.i.d. optima :math:`\alpha^*(p, \mathrm{iid}(q, k))` for several k, without a full sort.

    .. math:: \alpha^* = 1 + \min_t \big[P(r \le t) - Q(r \le t)^k\big], \qquad r = p/q .

    The minimum over the prefixes of the ratio order is found in three steps: (1) the tokens are
    put in ratio bins (64 per octave, from the float's bits: one pass, no sort) and the prefix
    value is evaluated at every bin end; (2) a prefix ending inside bin ``j`` has
    :math:`P \ge P(\text{bins} < j)` and :math:`Q \le Q(\text{bins} \le j)`, which bounds its
    value from below; (3) only bins whose bound is below the best bin-end value are sorted and
    scanned (usually one or two). The minimum is the same as over the fully sorted order; only the
    summation order (hence the last bits) differs from :func:`otspec.optimal_acceptance`.

    Parameters
    ----------
    p, q : ndarray, shape (V,)
        Validated float64 distributions.
    ks : sequence of int
        Numbers of drafts (>= 1).

    Returns
    -------
    dict of int to float
        ``k -> value`` (clipped to at most 1).

    Examples
    --------
    >>> import numpy as np
    >>> v = iid_optima(np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.3, 0.5]), [1, 2])
    >>> round(v[1], 12), round(v[2], 12)
    (0.7, 0.86)
    """
    return all_optima(p, q, ks, ())[1]


def _sum_min_scaled(b: _Binned, c: float, tokens: np.ndarray) -> float:
    r""":math:`\sum_x \min(p(x), c\,q(x))` from the bins: p below the bin of c, c q above it, and
    the tokens of that bin (which ``tokens`` must hold) one by one."""
    g = _bin_of(c)
    inside = tokens[b.bins[tokens] == g]
    j = b.local(g)
    if g < b.j0:  # every token's ratio exceeds c
        return float(c * b.Qc[-1])
    if g >= b.j0 + b.Pc.size:  # every token's ratio is below c
        return float(b.Pc[-1])
    below = b.Pprev[j]
    above = c * b.Qabove[j]
    return float(below + above + np.minimum(b.p[inside], c * b.q[inside]).sum())


def _top(q: np.ndarray, m: int) -> np.ndarray:
    """The m largest entries of q (larger first, ties: lower id), as :attr:`otspec.laws.GreedyLaw.top`.

    One pass of group maxima (group j = tokens ``j, j + n, j + 2n, ...``: 64 rows of a ``(64, n)``
    view, reduced across rows): the m-th largest group maximum ``thr`` is at most the m-th largest
    entry (m groups hold an entry >= thr), so the top m, ties included, lie in the groups whose
    maximum reaches ``thr`` (or in the last ``V mod 64`` tokens); only those are sorted.
    """
    if m == 0:
        return np.zeros(0, dtype=np.int64)
    n = q.size // _BLOCK
    if n >= 2 * m:
        group_max = q[: n * _BLOCK].reshape(_BLOCK, n).max(axis=0)
        thr = np.partition(group_max, n - m)[n - m]
        groups = np.flatnonzero(group_max >= thr)
        cand = (np.arange(_BLOCK)[:, None] * n + groups[None, :]).ravel()
        cand = np.concatenate([cand, np.arange(n * _BLOCK, q.size)])
    else:
        cand = np.arange(q.size)
    order = np.lexsort((cand, -q[cand]))
    return cand[order[:m]].astype(np.int64)


def _greedy_constants(p: np.ndarray, q: np.ndarray, ks: Sequence[int]) -> dict[int, tuple[np.ndarray, float, float]]:
    top = _top(q, max(ks) - 1)
    # q's rest off G is summed over the tokens off G, never 1 - q(G): for a confident draft that
    # difference is rounding (and q's own sum may miss 1 by up to SIMPLEX_SUM_ATOL), which 1 / rest
    # amplifies into a wrong optimum; GreedyLaw.q_rest normalises the same way.
    off = q.copy()
    off[top] = 0.0
    rest_all = float(off.sum())
    out = {}
    for k in ks:
        G = top[: k - 1]
        rest = rest_all + float(q[top[k - 1 :]].sum())
        out[k] = (G, rest, float(p[G].sum()))
    return out


def greedy_optima(p: np.ndarray, q: np.ndarray, ks: Sequence[int]) -> dict[int, float]:
    r"""Exact greedy optima :math:`P(G) + \sum_{x \notin G} \min(p(x), \tilde q(x))` for several k.

    :math:`G` is the top-(k-1) of q (:attr:`otspec.laws.GreedyLaw.top`'s tie rule), :math:`\tilde
    q = q / (1 - q(G))` off G. The sum over all tokens of :math:`\min(p, c\,q)` is read from the
    ratio bins (tokens with :math:`p/q \le c` give p, the others :math:`c\,q`), so only the bin
    holding :math:`c` is visited token by token; G's own terms are then taken out.

    Parameters
    ----------
    p, q : ndarray, shape (V,)
        Validated float64 distributions.
    ks : sequence of int
        Numbers of drafts (>= 1; ``k - 1 < V``).

    Returns
    -------
    dict of int to float
        ``k -> value`` (clipped to at most 1).

    Examples
    --------
    >>> import numpy as np
    >>> greedy_optima(np.array([0.2, 0.5, 0.3]), np.array([0.5, 0.3, 0.2]), [2])  # G = {0}: 0.2 + 0.5 + 0.3
    {2: 1.0}
    """
    out = {}  # alone, three direct passes per k cost less than binning the vocabulary
    for k, (G, rest, pG) in _greedy_constants(p, q, ks).items():
        if rest <= 0:
            out[k] = min(1.0, pG)
            continue
        c = 1.0 / rest
        cq = c * q
        out[k] = min(1.0, pG + float(np.minimum(p, cq).sum()) - float(np.minimum(p[G], cq[G]).sum()))
    return out


def _want(b: _Binned, wanted: np.ndarray, c: float) -> None:
    g = _bin_of(c)
    if b.j0 <= g < b.j0 + wanted.size:
        wanted[g - b.j0] = True


def all_optima(
    p: np.ndarray, q: np.ndarray, iid_ks: Sequence[int], greedy_ks: Sequence[int]
) -> tuple[float, dict[int, float], dict[int, float]]:
    r""":math:`1 - d_{TV}`, the i.i.d. optima and the greedy optima of one pair, from one binning and
    one gather of the few bins the scans need (:func:`iid_optima`, :func:`greedy_optima`).

    Parameters
    ----------
    p, q : ndarray, shape (V,)
        Validated float64 distributions.
    iid_ks, greedy_ks : sequence of int
        Numbers of drafts of each law (greedy: k at most the number of tokens with q > 0).

    Returns
    -------
    one_minus_tv : float
        :math:`\sum_x \min(p, q)`.
    iid : dict of int to float
        ``k -> value``.
    greedy : dict of int to float
        ``k -> value``.

    Examples
    --------
    >>> import numpy as np
    >>> tv, iid, greedy = all_optima(np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.3, 0.5]), [2], [2])
    >>> round(tv, 12), round(iid[2], 12), round(greedy[2], 12)
    (0.7, 0.86, 0.9)
    """
    b = _Binned(p, q)
    scan = np.zeros(b.Pc.size, dtype=bool)
    bounds = _iid_bounds(b, list(iid_ks))
    for _, cand in bounds.values():
        scan |= cand
    consts = _greedy_constants(p, q, greedy_ks) if greedy_ks else {}
    visit = np.zeros(b.Pc.size, dtype=bool)
    for _, rest, _ in consts.values():
        if rest > 0:
            _want(b, visit, 1.0 / rest)
    sorted_tokens, bin_tokens = b.gather(scan, visit)
    iid = {k: min(1.0, 1.0 + v) for k, v in _iid_interior(b, sorted_tokens, bounds).items()}
    greedy = {}
    for k, (G, rest, pG) in consts.items():
        if rest <= 0:  # q lives on G: the last draft has no law; every p-mass on G is accepted
            greedy[k] = min(1.0, pG)
            continue
        c = 1.0 / rest
        total = _sum_min_scaled(b, c, bin_tokens) - float(np.minimum(p[G], c * q[G]).sum())
        greedy[k] = min(1.0, pG + total)
    return one_minus_tv(p, q), iid, greedy


def one_minus_tv(p: np.ndarray, q: np.ndarray) -> float:
    r""":math:`\sum_x \min(p(x), q(x)) = 1 - d_{TV}(p, q)`.

    Parameters
    ----------
    p, q : ndarray, shape (V,)
        Distributions.

    Returns
    -------
    float
        The single-draft acceptance.

    Examples
    --------
    >>> import numpy as np
    >>> round(one_minus_tv(np.array([0.5, 0.5]), np.array([0.75, 0.25])), 12)
    0.75
    """
    return float(np.minimum(p, q).sum())
