r"""Compiled (numba) kernels of the tree-free draw (:mod:`otspec.verifiers.step._iid_bridge`).

Imported lazily, so ``import otspec`` never imports numba. Each kernel fuses passes over the
super-tokens that the numpy code makes one array operation at a time, and performs the same IEEE
operations in the same order (no fast-math: no reassociation, no fused multiply-add), so the
results are bit-identical to the numpy path (the tests check this). Without numba
(``COMPILED`` is False) the bridge module keeps its numpy code.
"""

from __future__ import annotations

__all__ = ["COMPILED", "above_all", "near_all", "suffix"]

try:
    import numba

    njit = numba.njit
    COMPILED = True
except ImportError:  # the numpy path of the bridge module is used instead

    def njit(*args, **kwargs):
        if args and callable(args[0]):
            return args[0]
        return lambda f: f

    COMPILED = False


@njit(cache=True)
def suffix(x, hi, lo):  # pragma: no cover - compiled
    """Compensated suffix sums of ``x`` (n,) into ``hi``, ``lo`` (n + 1,): ``hi[j]`` the
    sequential sum from the end, ``lo[j]`` the sum from the end of each step's two-sum error.

    Parameters
    ----------
    x : ndarray of float64, shape (n,)
        The terms.
    hi, lo : ndarray of float64, shape (n + 1,)
        Outputs (``hi[n] = lo[n] = 0``).

    Returns
    -------
    None
        ``hi`` and ``lo`` are filled in place.
    """
    n = x.size
    hi[n] = 0.0
    lo[n] = 0.0
    prev = 0.0
    acc = 0.0
    for j in range(n - 1, -1, -1):
        cur = prev + x[j] if j < n - 1 else x[j]
        bb = cur - prev
        err = prev - (cur - bb)
        err = err + (x[j] - bb)
        acc = acc + err if j < n - 1 else err
        hi[j] = cur
        lo[j] = acc
        prev = cur


@njit(cache=True)
def above_all(D, E, a, b, out):  # pragma: no cover - compiled
    """Indices j of the points strictly above the line through a and b (the bridge module's
    ``_above`` over every point), in increasing order.

    Parameters
    ----------
    D, E : ndarray of float64, shape (n,)
        Gap-anchored coordinates.
    a, b : int
        The line's two points.
    out : ndarray of int64, shape (n,)
        Work space.

    Returns
    -------
    int
        How many indices were written to ``out``.
    """
    dD = D[b] - D[a]
    dE = E[b] - E[a]
    ea, da = E[a], D[a]
    cnt = 0
    for j in range(D.size):
        if (E[j] - ea) * dD > dE * (D[j] - da):
            out[cnt] = j
            cnt += 1
    return cnt


@njit(cache=True)
def near_all(D, E, a, b, tol, out):  # pragma: no cover - compiled
    """Indices j with ``(E_j - E_a) dD - dE (D_j - D_a) > -tol`` (the bridge module's points within
    rounding of the edge), in increasing order.

    Parameters
    ----------
    D, E : ndarray of float64, shape (n,)
        Gap-anchored coordinates.
    a, b : int
        The edge's ends.
    tol : float
        The margin.
    out : ndarray of int64, shape (n,)
        Work space.

    Returns
    -------
    int
        How many indices were written to ``out``.
    """
    dD = D[b] - D[a]
    dE = E[b] - E[a]
    ea, da = E[a], D[a]
    cnt = 0
    for j in range(D.size):
        v = (E[j] - ea) * dD
        v = v - dE * (D[j] - da)
        if v > -tol:
            out[cnt] = j
            cnt += 1
    return cnt
