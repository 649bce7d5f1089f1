"""Random streams and categorical draws shared by every sampler.

Every sampler takes an explicit ``numpy.random.Generator``. A rule that flips accept coins and
draws residual tokens keeps them on two independent streams (:func:`split_streams`): reusing the
accept uniform for the residual draw biases the output while the acceptance rate looks right.
"""

from __future__ import annotations

import numpy as np

from otspec._validation import as_generator

__all__ = ["spawn_streams", "split_streams", "sample_categorical", "sample_categorical_rows"]


def spawn_streams(rng: np.random.Generator, n: int) -> list[np.random.Generator]:
    """``n`` independent child generators spawned from ``rng`` (``Generator.spawn``, numpy >= 1.25).

    Parameters
    ----------
    rng : numpy.random.Generator
        The caller's generator (never a seed).
    n : int
        Number of streams (e.g. accept coins, residual draws, ...).

    Returns
    -------
    list of numpy.random.Generator

    Raises
    ------
    OtspecTypeError
        If ``rng`` is not a ``numpy.random.Generator``.

    Examples
    --------
    >>> import numpy as np
    >>> coins, draws = spawn_streams(np.random.default_rng(0), 2)
    >>> bool(coins.random() != draws.random())
    True
    """
    return as_generator(rng).spawn(n)


def split_streams(rng: np.random.Generator) -> tuple[np.random.Generator, np.random.Generator]:
    """Two independent generators derived from ``rng``: (coins, residual draws).

    The coin stream is ``rng`` itself; the residual stream is a child spawned from it
    (``Generator.spawn``, numpy >= 1.25). Accept uniforms are therefore never reused for residual
    draws.
    """
    rng = as_generator(rng)
    return rng, spawn_streams(rng, 1)[0]


def sample_categorical(rng: np.random.Generator, w: np.ndarray, size: int) -> np.ndarray:
    """``size`` draws from the (unnormalised, non-negative) weights ``w`` by inverse CDF."""
    if size == 0:
        return np.zeros(0, dtype=np.int64)
    cdf = np.cumsum(w)
    u = rng.random(size) * cdf[-1]
    idx = np.searchsorted(cdf, u, side="right")
    last = int(np.flatnonzero(w > 0)[-1])
    return np.minimum(idx, last).astype(np.int64)


def sample_categorical_rows(rng: np.random.Generator, W: np.ndarray) -> np.ndarray:
    """One draw from each row of the (unnormalised) weights ``W`` ``(n, V)``."""
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
