"""Token sets and token orders of the draft laws: a set as a boolean mask, the :math:`p/q` order of
the sorted-prefix dual (:doc:`math`) and its tie rule."""

from __future__ import annotations

from typing import Any

import numpy as np

from otspec._validation import as_token_tuples
from otspec.errors import ShapeMismatchError

__all__ = ["as_token_mask", "ratio_order", "stable_argsort"]


def as_token_mask(H: Any, V: int) -> np.ndarray:
    """Boolean ``(V,)`` mask of a token set given as a mask or as an iterable of token ids.

    Parameters
    ----------
    H : array_like of bool, shape (V,), or iterable of int
        The token set: one flag per token, or the ids of its members (repeats allowed).
    V : int
        Vocabulary size.

    Returns
    -------
    ndarray of bool, shape (V,)
        ``mask[y]`` is True iff token ``y`` is in ``H`` (the input itself when it already is a mask).

    Raises
    ------
    ShapeMismatchError
        If ``H`` is a boolean array of a shape other than ``(V,)``.
    InvalidDraftsError
        If an id is not an integer in ``[0, V)``.

    Examples
    --------
    >>> as_token_mask([2, 0], 4).tolist()
    [True, False, True, False]
    """
    arr = np.asarray(H)
    if arr.dtype == bool:
        if arr.shape != (V,):
            raise ShapeMismatchError(f"H as a boolean mask must have shape ({V},) (got {arr.shape}); pass one flag per token")
        return arr
    ids = as_token_tuples(arr.reshape(-1, 1), V, name="H") if arr.size else np.zeros((0, 1), np.int64)
    mask = np.zeros(V, dtype=bool)
    mask[ids[:, 0]] = True
    return mask


def ratio_order(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Token order by :math:`p/q` ascending; q = 0 < p goes last (ratio +inf), p = q = 0 first.

    Ties keep token-id order (stable sort), which is harmless: a tied block is optimally taken
    all-or-nothing and every block boundary is a prefix (:doc:`math`, the sorted-prefix dual).

    Parameters
    ----------
    p, q : ndarray, shape (V,)
        Target and draft distributions (validated by the caller).

    Returns
    -------
    ndarray of int64, shape (V,)
        A permutation of ``0..V-1``: ``order[0]`` has the smallest ratio :math:`p/q`.

    Examples
    --------
    >>> import numpy as np
    >>> ratio_order(np.array([0.2, 0.5, 0.3]), np.array([0.4, 0.1, 0.5])).tolist()
    [0, 2, 1]
    """
    # over: a denormal q (e.g. 5e-324) overflows p/q to +inf, which is the right order key
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        key = np.where(q > 0, p / np.where(q > 0, q, 1.0), np.where(p > 0, np.inf, 0.0))
    return stable_argsort(key)


def stable_argsort(key: np.ndarray) -> np.ndarray:
    """``np.argsort(key, kind="stable")``, computed as the default (unstable, ~3x faster) argsort
    followed by re-sorting only the runs of tied keys by index: the same permutation exactly.

    Parameters
    ----------
    key : ndarray, shape (n,)
        Sort keys.

    Returns
    -------
    ndarray of int64, shape (n,)
        The stable ascending order of ``key``.

    Examples
    --------
    >>> stable_argsort(np.array([2.0, 1.0, 2.0, 1.0, 0.5])).tolist()
    [4, 1, 3, 0, 2]
    """
    order = np.argsort(key)
    ks = key[order]
    tie = ks[1:] == ks[:-1]
    if tie.any():
        involved = np.zeros(ks.size, dtype=bool)
        involved[1:] |= tie
        involved[:-1] |= tie
        pos = np.flatnonzero(involved)
        sub = order[pos]
        order[pos] = sub[np.lexsort((sub, ks[pos]))]
    return order
