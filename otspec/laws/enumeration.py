"""Enumeration helpers shared by the draft laws: prefix probabilities and draft sets from an
enumeration, the successive-sampling normalisers, every tuple over a support, subset sums and the
zeta transform (:math:`Q(H^k)` for every token set :math:`H`)."""

from __future__ import annotations

import math

import numpy as np

__all__ = ["all_tuples", "prefix_by_max_rank", "sets_from_tuples", "subset_prob_all_in", "subset_sums", "successive_denominators"]


def prefix_by_max_rank(tuples: np.ndarray, weights: np.ndarray, order: np.ndarray, V: int) -> np.ndarray:
    """:math:`Q(H_i^k)` for every prefix :math:`H_i` of ``order`` from an enumeration: a tuple lies
    in :math:`H_i` iff the largest rank of its tokens is below ``i``.

    Parameters
    ----------
    tuples : ndarray of int64, shape (M, k)
        Draft tuples.
    weights : ndarray, shape (M,)
        Their probabilities.
    order : ndarray of int64, shape (V,)
        A permutation of the token ids.
    V : int
        Vocabulary size.

    Returns
    -------
    ndarray, shape (V + 1,)
        Entry ``i`` is the mass of the tuples inside the first ``i`` tokens of ``order``.

    Examples
    --------
    >>> prefix_by_max_rank(np.array([[0, 1], [1, 1]]), np.array([0.5, 0.5]), np.array([1, 0]), 2).tolist()
    [0.0, 0.5, 1.0]
    """
    rank = np.empty(V, dtype=np.int64)
    rank[order] = np.arange(V)
    max_rank = rank[tuples].max(axis=1)
    hist = np.bincount(max_rank + 1, weights=weights, minlength=V + 1)
    return np.cumsum(hist)


def sets_from_tuples(tuples: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Group tuples by their set of distinct tokens: sorted rows, repeated ids replaced by -1.

    Parameters
    ----------
    tuples : ndarray of int, shape (M, k)
        Draft tuples.
    weights : ndarray, shape (M,)
        Their probabilities.

    Returns
    -------
    sets : ndarray of int64, shape (S, k)
        Each distinct set once: its token ids descending, then ``-1`` padding (the order of
        ``numpy.unique(axis=0)`` on these rows).
    weights : ndarray, shape (S,)
        The mass of the tuples with that set.

    Examples
    --------
    >>> s, w = sets_from_tuples(np.array([[0, 1], [1, 0], [1, 1]]), np.array([0.25, 0.25, 0.5]))
    >>> s.tolist(), w.tolist()
    ([[1, -1], [1, 0]], [0.5, 0.5])
    """
    t = np.asarray(tuples, dtype=np.int64)
    M, k = t.shape
    if k == 2:  # a two-column sort is a min and a max
        s = np.empty_like(t)
        np.minimum(t[:, 0], t[:, 1], out=s[:, 0])
        np.maximum(t[:, 0], t[:, 1], out=s[:, 1])
    else:
        s = np.sort(t, axis=1)
    base = int(s[:, -1].max(initial=-1)) + 2  # digits s + 1 in [0, base)
    if k * math.log2(max(base, 2)) < 62.5:
        # One int64 key per row: the base-`base` number whose digits are the row's distinct ids + 1
        # in descending order, then zeros (the canonical row: distinct ids descending, -1 padding).
        # It is read off the ascending row directly: an id that differs from its right neighbour is
        # distinct, and its digit position is the number of distinct ids to its right. The map is
        # monotone in the lexicographic order of the canonical rows, so the sets come out in the
        # same order as np.unique(axis=0) would give them, ~10x faster (one 1-D sort, or a count
        # when the key space is small).
        powers = np.array([base ** (k - 1 - c) for c in range(k)] + [0], dtype=np.int64)
        key = (s[:, k - 1] + 1) * powers[0]
        if k > 1:
            distinct_right = np.ones(M, dtype=np.int64)
            for j in range(k - 2, -1, -1):
                new = s[:, j] != s[:, j + 1]
                key += np.where(new, (s[:, j] + 1) * powers[distinct_right], 0)
                distinct_right += new
        del s
        if base**k <= 4 * M + 1024:
            present = np.zeros(base**k, dtype=bool)
            present[key] = True
            ukey = np.flatnonzero(present)
            del present
            remap = np.zeros(base**k, dtype=np.int64)
            remap[ukey] = np.arange(ukey.size)
            inverse = remap[key]
            del remap
        else:
            ukey, inverse = np.unique(key, return_inverse=True)
        uniq = np.empty((ukey.size, k), dtype=np.int64)
        rest = ukey.astype(np.int64)
        for j in range(k - 1, -1, -1):
            rest, digit = np.divmod(rest, base)
            uniq[:, j] = digit - 1
    else:  # the key would not fit in int64 (huge V ** k): group canonical rows directly
        if k > 1:
            dup = np.zeros_like(s, dtype=bool)
            dup[:, 1:] = s[:, 1:] == s[:, :-1]
            s = np.where(dup, -1, s)
            s = np.ascontiguousarray(np.sort(s, axis=1)[:, ::-1])  # distinct ids first (descending), -1 last
        uniq, inverse = np.unique(s, axis=0, return_inverse=True)
    w = np.bincount(inverse.ravel(), weights=weights, minlength=uniq.shape[0])
    return uniq, w


def successive_denominators(q: np.ndarray, tuples: np.ndarray) -> np.ndarray:
    r"""The normalisers of successive sampling without replacement, one per draft.

    .. math:: \text{out}[m, j] = \sum_{y \notin \{x_{m,1}, \dots, x_{m,j-1}\}} q(y)
              = q(\Omega) - \sum_{l < j} q(x_{m,l}),

    so that :math:`Q(x_m) = \prod_j q(x_{m,j}) / \text{out}[m, j]`. ``total - chosen`` cancels
    catastrophically when the chosen tokens carry almost all the mass (e.g.
    q = (1 - 1e-10, 1e-10)); those rows are recomputed as a direct sum over the complement.

    Parameters
    ----------
    q : ndarray, shape (V,)
        Draft distribution.
    tuples : ndarray of int, shape (M, k)
        Draft tuples of distinct token ids.

    Returns
    -------
    ndarray, shape (M, k)
        ``out[m, j]``: the mass of q left when draft ``j`` of tuple ``m`` is taken.

    Examples
    --------
    >>> import numpy as np
    >>> successive_denominators(np.array([0.5, 0.25, 0.25]), np.array([[0, 1]])).tolist()
    [[1.0, 0.5]]
    """
    qs = q[tuples]
    chosen = np.cumsum(qs, axis=1) - qs
    total = float(np.sum(q))
    out = total - chosen
    bad_rows = np.flatnonzero(np.any(out < 1e-3 * total, axis=1))
    for start in range(0, bad_rows.size, 4096):
        rows = bad_rows[start : start + 4096]
        taken = np.zeros((rows.size, q.size), dtype=bool)
        for j in range(tuples.shape[1]):
            out[rows, j] = np.where(taken, 0.0, q[None, :]).sum(axis=1)
            taken[np.arange(rows.size), tuples[rows, j]] = True
    return out


def all_tuples(support: np.ndarray, k: int) -> np.ndarray:
    """Every k-tuple over ``support`` in lexicographic (row-major) order.

    Parameters
    ----------
    support : ndarray of int, shape (n,)
        The tokens each draft may take.
    k : int
        Tuple length.

    Returns
    -------
    ndarray, shape (n**k, k)
        Row ``m`` is the ``m``-th tuple in row-major order.

    Examples
    --------
    >>> all_tuples(np.array([3, 5]), 2).tolist()
    [[3, 3], [3, 5], [5, 3], [5, 5]]
    """
    n = support.size
    out = np.empty((n**k, k), dtype=support.dtype)
    grid = out.reshape((n,) * k + (k,))
    for j in range(k):  # column j is support broadcast along axis j
        grid[..., j] = support.reshape((1,) * j + (n,) + (1,) * (k - 1 - j))
    return out


def subset_sums(x: np.ndarray) -> np.ndarray:
    """``out[mask] = sum of x over the bits of mask`` for all 2^V masks (bit b = token b).

    Parameters
    ----------
    x : ndarray, shape (V,)
        Per-token values.

    Returns
    -------
    ndarray, shape (2**V,)
        The sum over every subset, indexed by its bit mask.

    Examples
    --------
    >>> subset_sums(np.array([1.0, 2.0])).tolist()
    [0.0, 1.0, 2.0, 3.0]
    """
    out = np.zeros(1)
    for b in range(x.size):
        out = np.concatenate([out, out + x[b]])
    return out


def subset_prob_all_in(sets: np.ndarray, weights: np.ndarray, V: int) -> np.ndarray:
    r""":math:`Q(H^k)` for every token set :math:`H` (bit b of the index = token b), from the law's
    draft sets: one zeta transform (sum over subsets) of the set probabilities.

    Parameters
    ----------
    sets : ndarray of int64, shape (S, k)
        Draft sets as :meth:`~otspec.laws.DraftLaw.enumerate_sets` returns them (``-1`` padding).
    weights : ndarray, shape (S,)
        Their probabilities.
    V : int
        Vocabulary size (the result has ``2**V`` entries).

    Returns
    -------
    ndarray, shape (2**V,)
        ``out[mask]`` is the probability that every draft lies in the set ``mask``.

    Examples
    --------
    >>> subset_prob_all_in(np.array([[0, -1], [1, 0]]), np.array([0.25, 0.75]), 2).tolist()
    [0.0, 0.25, 0.0, 1.0]
    """
    bits = np.where(sets >= 0, np.left_shift(1, np.maximum(sets, 0)), 0).sum(axis=1)
    f = np.bincount(bits, weights=weights, minlength=2**V)
    # Sum over subsets (zeta transform): f[H] <- sum of f[m] over m subset of H.
    for b in range(V):
        g = f.reshape(-1, 2, 2**b)
        g[:, 1, :] += g[:, 0, :]
    return f
