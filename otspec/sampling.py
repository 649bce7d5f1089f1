"""Random streams and categorical draws shared by every sampler.

Every sampler takes an explicit ``numpy.random.Generator``. A rule that flips accept coins and
draws residual tokens keeps them on two independent streams (:func:`spawn_streams` with
``parent_first=True``): reusing the accept uniform for the residual draw biases the output while
the acceptance rate looks right.
"""

from __future__ import annotations

import numpy as np

from otspec._validation import as_generator, as_int_in_range

__all__ = ["spawn_streams", "sample_categorical", "sample_categorical_rows"]


def spawn_streams(rng: np.random.Generator, n: int, *, parent_first: bool = False) -> list[np.random.Generator]:
    """``n`` independent random streams derived from ``rng`` (``Generator.spawn``, numpy >= 1.25).

    The one helper for splitting randomness. A rule that flips accept coins and draws residual
    tokens takes two streams, ``coins, draws = spawn_streams(rng, 2, parent_first=True)``: the
    coins come from ``rng`` itself and the residual draws from a child spawned from it, so an
    accept uniform is never reused for a residual draw.

    Parameters
    ----------
    rng : numpy.random.Generator
        The caller's generator (never a seed).
    n : int
        Number of streams, ``n >= 1`` (e.g. accept coins, residual draws, ...).
    parent_first : bool, default False
        ``False``: all ``n`` streams are children spawned from ``rng``
        (``rng.spawn(n)``). ``True``: the first stream is ``rng`` itself and the other
        ``n - 1`` are children spawned from it (``[rng, *rng.spawn(n - 1)]``), so the first
        stream continues the caller's sequence of uniforms.

    Returns
    -------
    list of numpy.random.Generator
        ``n`` generators; children of one parent are statistically independent of each other and
        of the parent's own continuation.

    Raises
    ------
    OtspecTypeError
        If ``rng`` is not a ``numpy.random.Generator``.
    NotAnIntegerError, InvalidDraftCountError
        If ``n`` is not an integer, or is below 1.

    Examples
    --------
    >>> import numpy as np
    >>> coins, draws = spawn_streams(np.random.default_rng(0), 2)
    >>> bool(coins.random() != draws.random())
    True
    >>> rng = np.random.default_rng(0)
    >>> coins, draws = spawn_streams(rng, 2, parent_first=True)
    >>> coins is rng
    True
    """
    rng = as_generator(rng)
    n = as_int_in_range(n, "n")
    if parent_first:
        return [rng, *rng.spawn(n - 1)]
    return rng.spawn(n)


def sample_categorical(rng: np.random.Generator, w: np.ndarray, size: int) -> np.ndarray:
    """``size`` draws from the (unnormalised, non-negative) weights ``w`` by inverse CDF.

    Draw ``i`` is the first index whose cumulative weight exceeds :math:`U_i \\sum_y w(y)`,
    :math:`U_i \\sim U[0, 1)`; rounding never lands on a trailing zero-weight token.

    Parameters
    ----------
    rng : numpy.random.Generator
        The stream to draw the ``size`` uniforms from.
    w : ndarray, shape (V,)
        Non-negative weights with a positive sum.
    size : int
        Number of draws.

    Returns
    -------
    ndarray of int64, shape (size,)
        Independent draws with :math:`P(y) = w(y) / \\sum w`.

    Examples
    --------
    >>> import numpy as np
    >>> sample_categorical(np.random.default_rng(0), np.array([0.0, 2.0, 0.0]), 3).tolist()
    [1, 1, 1]
    """
    if size == 0:
        return np.zeros(0, dtype=np.int64)
    cdf = np.cumsum(w)
    u = rng.random(size) * cdf[-1]
    idx = np.searchsorted(cdf, u, side="right")
    last = int(np.flatnonzero(w > 0)[-1])
    return np.minimum(idx, last).astype(np.int64)


def sample_categorical_rows(rng: np.random.Generator, W: np.ndarray) -> np.ndarray:
    """One draw from each row of the (unnormalised) weights ``W`` ``(n, V)``.

    Parameters
    ----------
    rng : numpy.random.Generator
        The stream to draw the ``n`` uniforms from (one per row).
    W : ndarray, shape (n, V)
        Non-negative weights, each row with a positive sum.

    Returns
    -------
    ndarray of int64, shape (n,)
        Draw ``i`` from row ``i``, :math:`P(y) = W_{iy} / \\sum_{y'} W_{iy'}`.

    Examples
    --------
    >>> import numpy as np
    >>> sample_categorical_rows(np.random.default_rng(0), np.array([[1.0, 0.0], [0.0, 3.0]])).tolist()
    [0, 1]
    """
    n = W.shape[0]
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    cdf = np.cumsum(W, axis=1)
    u = rng.random(n) * cdf[:, -1]
    idx = np.sum(cdf <= u[:, None], axis=1)
    # never step onto a trailing zero-weight token because of rounding
    pos = W > 0
    last = W.shape[1] - 1 - np.argmax(pos[:, ::-1], axis=1)
    return np.minimum(idx, last).astype(np.int64)
