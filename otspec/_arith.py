"""Elementwise float64 arithmetic shared by the closed forms (one copy of each trick).

:func:`power` is the integer power by repeated squaring that the sorted-prefix dual
(:mod:`otspec.bounds.prefix`, :mod:`otspec.bounds.primal`) and the exponential race
(:mod:`otspec._race`) use to *locate* a minimum or to bound one, never to report a value.
"""

from __future__ import annotations

import numpy as np

__all__ = ["power"]


def power(x: np.ndarray, k: int) -> np.ndarray:
    """``x ** k`` for an integer ``k >= 1`` by repeated squaring, overwriting ``x``.

    A few ulps from ``np.power``, which is ~40x slower; callers use it only to locate a minimum
    or to bound one, with the rounding in their slack.

    Parameters
    ----------
    x : ndarray of float64
        The bases (overwritten).
    k : int
        The exponent, at least 1.

    Returns
    -------
    ndarray
        ``x ** k`` (``x`` itself or a buffer derived from it).

    Examples
    --------
    >>> import numpy as np
    >>> power(np.array([0.5, 2.0]), 3).tolist()
    [0.125, 8.0]
    """
    acc = None
    while True:
        if k & 1:
            if k == 1:
                return x if acc is None else np.multiply(acc, x, out=acc)
            acc = x.copy() if acc is None else np.multiply(acc, x, out=acc)
        k >>= 1
        np.multiply(x, x, out=x)
