r"""The tree-free draw of the optimal i.i.d. verifier: one hull edge ("bridge") per draw (part of
:mod:`otspec.verifiers.step.optimal_iid`; the mathematics and the proof of exactness are in
``docs/optimal_verifier.rst``).

A draw at level :math:`G \in (0, 1]` needs only the block of the first drafted super-token
:math:`j_0`, and that block is the edge of the upper concave hull of the points
:math:`(t_j, L_j - G\,\Phi(t_j))`, ``j = 0..m``, above the gap :math:`(t_{j_0-1}, t_{j_0})`. The
edge is the optimal basis of a linear programme in two variables (the line's intercept and slope),
solved here in :math:`O(m)` by Clarkson-style sampling: solve on about :math:`2\sqrt{m}` random
points (by alternating tangents), add every point above that line found in one pass, solve again;
the loop ends when no point outside the working set lies above the line (usually two or three
passes; the answer never depends on the sample, only the work does).

Numerics: every coordinate is a difference from the left end ``c = j0 - 1`` of the gap, computed
from compensated (double-float) suffix sums, with :math:`Y_c^k - Y_j^k` written as
:math:`(Y_c - Y_j)\,h_{k-1}(Y_c, Y_j)` (all terms positive); so a super-token of q-mass
:math:`10^{-10}` keeps its abscissa to about :math:`10^{-16}` relative, as the tree's local
formulas do.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

__all__ = ["BridgeGeometry", "bridge", "bridge_geometry", "block_end"]

#: Working sets at most this large are solved directly (alternating tangents on the set).
_SMALL = 64
#: Seed of the sample of the first round (the sample changes the work, never the edge).
_SAMPLE_SEED = 0x0B21D6E
#: Bound on the alternations of one direct solve (each strictly raises the edge above the gap, so
#: the loop ends by itself; the bound only stops a cycle that rounding could make).
_MAX_ALTERNATIONS = 256
#: Points whose distance below the edge (in gap-anchored coordinates, relative to the edge's
#: extent) is under this are re-examined in end-anchored coordinates; the gap-anchored error is
#: about 1e-15, so this margin is generous.
_NEAR = 1e-9


@lru_cache(maxsize=1)
def _kernels():
    """The compiled kernels (:mod:`.iid_bridge_kernels`, same results as the numpy code), or
    None without numba. Imported on first use: ``import otspec`` never imports numba."""
    from otspec.verifiers.step import iid_bridge_kernels as kb

    return kb if kb.COMPILED else None


def _suffix(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Compensated suffix sums ``S[j] = sum(x[j:])``, ``j = 0..n`` (``S[n] = 0``), as ``hi + lo``
    equal to the exact sums to about ``eps**2 * n`` relative: ``hi`` is the sequential scan from
    the end, each step's rounding error (found by two-sum) is scanned apart into ``lo``. Three
    arrays of size n in all (fresh pages cost more than the arithmetic)."""
    n = x.size
    hi = np.empty(n + 1)
    lo = np.empty(n + 1)
    kb = _kernels()
    if kb is not None and n:
        kb.suffix(np.ascontiguousarray(x), hi, lo)
        return hi, lo
    hi[n] = lo[n] = 0.0
    np.cumsum(x[::-1], out=hi[n - 1 :: -1] if n else hi[:0])  # hi[j] = fl(hi[j + 1] + x[j])
    if n == 0:
        return hi, lo
    prev, cur = hi[1:], hi[:n]
    bb = np.subtract(cur, prev)  # two-sum of prev + x[j] = cur + err
    err = lo[:n]
    np.subtract(cur, bb, out=err)
    np.subtract(prev, err, out=err)
    np.subtract(x, bb, out=bb)
    err += bb
    np.cumsum(err[::-1], out=err[::-1])  # lo[j] = sum of the errors of steps j..n-1, from the end
    return hi, lo


@dataclass(frozen=True, eq=False)
class BridgeGeometry:
    """Compensated suffix sums of the super-tokens' q-mass (``Y``) and r*-mass (``S``), each as a
    ``(hi, lo)`` pair over the boundaries ``0..m``, and the draft count ``k``."""

    Yh: np.ndarray
    Yl: np.ndarray
    Sh: np.ndarray
    Sl: np.ndarray
    k: int

    @property
    def m(self) -> int:
        return self.Yh.size - 1


def bridge_geometry(w: np.ndarray, rho: np.ndarray, k: int) -> BridgeGeometry:
    """The bridge's geometry from the super-tokens' q-masses ``w`` and r*-masses ``rho`` (both
    normalised, in density-descending order).

    Parameters
    ----------
    w, rho : ndarray, shape (m,)
        q-mass and :math:`r^*`-mass of each super-token.
    k : int
        Number of drafts.

    Returns
    -------
    BridgeGeometry
        Compensated suffix sums of both masses.
    """
    Yh, Yl = _suffix(np.asarray(w, dtype=np.float64))
    Sh, Sl = _suffix(np.asarray(rho, dtype=np.float64))
    return BridgeGeometry(Yh=Yh, Yl=Yl, Sh=Sh, Sl=Sl, k=int(k))


def _anchored(geo: BridgeGeometry, c: int, G: float, idx: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    r"""Coordinates relative to boundary c: ``D[j] = t_j - t_c`` and
    ``E[j] = (L_j - G Phi_j) - (L_c - G Phi_c)``, from differences of the compensated sums (for
    the boundaries ``idx``, default all)."""
    Yh, Yl, Sh, Sl = (geo.Yh, geo.Yl, geo.Sh, geo.Sl) if idx is None else (geo.Yh[idx], geo.Yl[idx], geo.Sh[idx], geo.Sl[idx])
    D = np.subtract(geo.Yh[c], Yh)  # exact near c (Sterbenz)
    tmp = np.subtract(geo.Yl[c], Yl)
    D += tmp
    E = np.subtract(geo.Sh[c], Sh)
    np.subtract(geo.Sl[c], Sl, out=tmp)
    E += tmp  # L_j - L_c
    yc = geo.Yh[c]
    # Phi_j - Phi_c = Y_c^k - Y_j^k = (Y_c - Y_j) h_{k-1}(Y_c, Y_j), all terms of h positive
    h = tmp
    h.fill(1.0)
    ycp = 1.0
    for _ in range(geo.k - 1):
        ycp *= yc
        h *= Yh
        h += ycp
    h *= D
    h *= G
    E -= h
    return D, E


def _tangents(D: np.ndarray, E: np.ndarray, left: np.ndarray, right: np.ndarray, a: int, b: int) -> tuple[int, int]:
    """Alternate tangents from the current right end to the left points and from the left end to
    the right points until neither changes (the fixed point is the bridge of the two sets). Ties
    go to the point nearest the gap."""
    DL, EL, DR, ER = D[left], E[left], D[right], E[right]
    for _ in range(_MAX_ALTERNATIONS):
        with np.errstate(divide="ignore", invalid="ignore"):
            # from b: the left point of least slope (E_b - E_j) / (D_b - D_j); ties -> largest index
            sl = (E[b] - EL) / (D[b] - DL)
            sl[np.isnan(sl)] = np.inf  # no q-mass between the two at float64 resolution: never a tangent
            na = int(left[np.flatnonzero(sl == sl.min())[-1]])
            # from na: the right point of largest slope (E_j - E_a) / (D_j - D_a); ties -> smallest index
            sr = (ER - E[na]) / (DR - D[na])
            sr[np.isnan(sr)] = -np.inf
            nb = int(right[np.flatnonzero(sr == sr.max())[0]])
        if na == a and nb == b:
            break
        a, b = na, nb
    return a, b


def _solve(D: np.ndarray, E: np.ndarray, idx: np.ndarray, c: int, rng: np.random.Generator) -> tuple[int, int]:
    """Bridge over the gap ``(c, c+1)`` of the points ``idx`` (sorted, containing c and c+1)."""
    if idx.size > _SMALL:
        n = idx.size
        s = min(n, max(_SMALL // 2, int(2 * np.sqrt(n))))
        work = np.union1d(idx[rng.integers(0, n, size=s)], [c, c + 1])
        while True:
            a, b = _solve(D, E, work, c, rng)
            v = _above(D, E, idx, a, b)
            new = np.setdiff1d(v, work, assume_unique=True)
            if new.size == 0:
                return a, b
            work = np.union1d(work, new)
            if work.size >= n:  # the sample did not shrink the problem: solve the whole set directly
                break
    left = idx[idx <= c]
    right = idx[idx > c]
    return _tangents(D, E, left, right, c, c + 1)


def _above(D: np.ndarray, E: np.ndarray, idx: np.ndarray, a: int, b: int) -> np.ndarray:
    """Points of ``idx`` strictly above the line through a and b (one fused pass)."""
    full = idx.size == D.size  # the first round looks at every point: no gather
    if full and (kb := _kernels()) is not None:  # one fused pass, the same operations
        out = np.empty(D.size, dtype=np.int64)
        return out[: kb.above_all(D, E, int(a), int(b), out)].copy()
    Di, Ei = (D, E) if full else (D[idx], E[idx])
    lhs = np.subtract(Ei, E[a])  # (Ei - E[a]) * (D[b] - D[a]) > (E[b] - E[a]) * (Di - D[a])
    lhs *= D[b] - D[a]
    rhs = np.subtract(Di, D[a])
    np.multiply(E[b] - E[a], rhs, out=rhs)
    viol = np.greater(lhs, rhs)
    return np.flatnonzero(viol) if full else idx[viol]


def bridge(geo: BridgeGeometry, j0: int, G: float) -> tuple[int, int]:
    r"""The hull edge over super-token ``j0`` at level ``G``: the block ``(a, b]`` of the layout
    at that level that holds ``j0``.

    Parameters
    ----------
    geo : BridgeGeometry
        From :func:`bridge_geometry`.
    j0 : int
        Super-token (1-based, ``1..m``).
    G : float
        Level in ``[0, 1]`` (the threshold tree's level ``s`` is ``1 - G``).

    Returns
    -------
    tuple of int
        ``(a, b)`` with ``a < j0 <= b``: the boundaries of the block.
    """
    m = geo.m
    c = int(j0) - 1
    if m <= 1:
        return 0, m
    D, E = _anchored(geo, c, float(G))
    rng = np.random.default_rng(_SAMPLE_SEED)
    a, b = _solve(D, E, np.arange(m + 1), c, rng)
    # the points within rounding of the edge (gap-anchored coordinates are accurate to ~1e-15
    # absolute): only these can change the ends once each is compared in its own coordinates
    dD, dE = D[b] - D[a], E[b] - E[a]
    tol = _NEAR * (abs(dD) + abs(dE))
    if (kb := _kernels()) is not None:  # one fused pass, the same operations
        out = np.empty(D.size, dtype=np.int64)
        near = out[: kb.near_all(D, E, int(a), int(b), tol, out)]
    else:
        v = np.subtract(E, E[a])  # v = (E - E[a]) * dD - dE * (D - D[a])
        v *= dD
        w = np.subtract(D, D[a])
        np.multiply(dE, w, out=w)
        v -= w
        near = np.flatnonzero(v > -tol)
    return _polish(geo, c, float(G), a, b, np.union1d(near, [a, b]))


def _polish(geo: BridgeGeometry, c: int, G: float, a: int, b: int, cand: np.ndarray) -> tuple[int, int]:
    r"""Settle the edge's ends among the candidates ``cand`` (sorted boundaries within rounding of
    the edge), with coordinates anchored at each end.

    Coordinates anchored at the gap lose the relative accuracy of points far from it, so two
    nearly stacked points near an end (a super-token of tiny q-mass between them) can be
    misordered. Here the right end is re-chosen with coordinates anchored at b and the left end
    with coordinates anchored at a: the test "j improves on the current end" is written as
    :math:`E_j D_{other} - E_{other} D_j` (no cancellation for j near the anchor), the tree's
    local formulas in other words. Usually one round confirms the ends."""
    right = cand[cand > c]
    left = cand[cand <= c]
    for _ in range(_MAX_ALTERNATIONS):
        Db, Eb = _anchored(geo, b, G, np.array([a]))
        DR, ER = _anchored(geo, b, G, right)
        with np.errstate(divide="ignore", invalid="ignore"):
            # slope(a, j) - slope(a, b), times positive factors, for the right points j
            gain = (Eb[0] * DR - ER * Db[0]) / (DR - Db[0])
        gain[np.isnan(gain)] = -np.inf
        top = gain.max()
        nb = int(right[np.flatnonzero(gain == top)[0]]) if top > 0 else b
        Da, Ea = _anchored(geo, a, G, np.array([nb]))
        DL, EL = _anchored(geo, a, G, left)
        with np.errstate(divide="ignore", invalid="ignore"):
            # slope(a, nb) - slope(j, nb), times positive factors, for the left points j
            gain = (Da[0] * EL - Ea[0] * DL) / (Da[0] - DL)
        gain[np.isnan(gain)] = -np.inf
        top = gain.max()
        na = int(left[np.flatnonzero(gain == top)[-1]]) if top > 0 else a
        if na == a and nb == b:
            break
        a, b = na, nb
    return a, b


def block_end(geo: BridgeGeometry, first: np.ndarray, s: np.ndarray) -> np.ndarray:
    r"""Right end of the block holding super-token ``first`` at the tree's level ``s`` (the bridge
    at :math:`G = 1 - s`), one bridge per entry.

    Parameters
    ----------
    geo : BridgeGeometry
        From :func:`bridge_geometry`.
    first : ndarray of int
        Super-tokens (1-based), shape (n,).
    s : ndarray
        Levels in ``[0, 1)``, shape (n,).

    Returns
    -------
    ndarray of int64, shape (n,)
        The right boundary ``b`` of each entry's block.
    """
    first = np.asarray(first, dtype=np.int64).reshape(-1)
    s = np.broadcast_to(np.asarray(s, dtype=np.float64), first.shape)
    return np.array([bridge(geo, int(j), 1.0 - float(x))[1] for j, x in zip(first, s, strict=True)], dtype=np.int64)
