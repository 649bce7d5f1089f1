"""Index helpers over draft tuples: which tokens a tuple holds, first occurrences, set rows."""

from __future__ import annotations

import numpy as np

from otspec.errors import InvalidDraftsError

__all__ = ["membership_mask", "distinct_mask", "set_index"]


def membership_mask(tuples: np.ndarray, V: int) -> np.ndarray:
    """Boolean ``(M, V)``: ``mask[m, y]`` iff token y occurs in tuple m.

    Parameters
    ----------
    tuples : array_like of int, shape (M, k)
        Draft tuples (ids in ``[0, V)``).
    V : int
        Vocabulary size.

    Returns
    -------
    ndarray of bool, shape (M, V)
        The indicator :math:`1\\{y \\in \\bar x_m\\}`.

    Examples
    --------
    >>> membership_mask([[0, 2], [1, 1]], 3).tolist()
    [[True, False, True], [False, True, False]]
    """
    tuples = np.asarray(tuples, dtype=np.int64)
    mask = np.zeros((tuples.shape[0], V), dtype=bool)
    rows = np.repeat(np.arange(tuples.shape[0]), tuples.shape[1])
    mask[rows, tuples.ravel()] = True
    return mask


def distinct_mask(tuples: np.ndarray) -> np.ndarray:
    """Boolean ``(n, k)``: True at the first occurrence of each token within its tuple.

    Parameters
    ----------
    tuples : array_like of int, shape (n, k)
        Draft tuples.

    Returns
    -------
    ndarray of bool, shape (n, k)
        ``keep[m, j]`` iff ``tuples[m, j]`` differs from every earlier entry of row ``m``.

    Examples
    --------
    >>> distinct_mask([[3, 1, 3]]).tolist()
    [[True, True, False]]
    """
    t = np.asarray(tuples)
    keep = np.ones(t.shape, dtype=bool)
    for j in range(1, t.shape[1]):
        keep[:, j] = np.all(t[:, :j] != t[:, j : j + 1], axis=1)
    return keep


def set_index(sets: np.ndarray, tuples: np.ndarray) -> np.ndarray:
    """Row of ``sets`` (distinct tokens, ``-1`` padded, as from ``law.enumerate_sets()``) holding
    the set of distinct tokens of each draft tuple ``(n, k)``; raises if a set is absent.

    Parameters
    ----------
    sets : ndarray of int, shape (S, k)
        Draft sets, ``-1`` padded.
    tuples : array_like of int, shape (n, k)
        Ordered draft tuples.

    Returns
    -------
    ndarray of int64, shape (n,)
        ``sets[out[m]]`` holds exactly the distinct tokens of ``tuples[m]``.

    Raises
    ------
    InvalidDraftsError
        If a tuple's set is not among ``sets`` (it has probability 0 under the law).
    """
    index = {tuple(sorted(int(x) for x in row if x >= 0)): s for s, row in enumerate(sets)}
    srt = np.sort(np.asarray(tuples, dtype=np.int64), axis=1)
    uniq, inv = np.unique(srt, axis=0, return_inverse=True)
    idx = np.empty(uniq.shape[0], dtype=np.int64)
    for u, row in enumerate(uniq):
        key = tuple(sorted(set(int(x) for x in row)))
        s = index.get(key)
        if s is None:
            raise InvalidDraftsError(f"drafts {list(key)} form a set of probability 0 under the law; pass drafts from the law")
        idx[u] = s
    return idx[inv.ravel()]
