r"""The min-cut dual of the membership transport problem, evaluated in plain numpy.

For any token set :math:`H`, weak duality gives :math:`\alpha^*(p, Q) \le P(H) + 1 - Q(H^k)`
(:doc:`math`, the min-cut dual), with equality at the optimal :math:`H^*`. These helpers evaluate that cut
value independently of any solver; they are the re-check of every answer.
"""

from __future__ import annotations

import numpy as np

__all__ = ["cut_value", "prefix_cut_values_from_sets"]


def cut_value(p: np.ndarray, law, H: np.ndarray) -> float:
    """:math:`P(H) + 1 - Q(H^k)` for a token set given as ids.

    By weak duality this upper-bounds the optimal acceptance :math:`\\alpha^*(p, Q)` for every
    ``H``, with equality at an optimal cut.

    Parameters
    ----------
    p : ndarray, shape (V,)
        Target distribution.
    law : DraftLaw
        The draft law :math:`Q` (its ``prob_all_in`` is called once).
    H : array_like of int
        Token ids of the set (repeats allowed; may be empty).

    Returns
    -------
    float
        The cut value, in ``[0, 2]``.

    Examples
    --------
    >>> import numpy as np, otspec
    >>> cut_value(np.array([0.5, 0.5]), otspec.iid([0.9, 0.1], 2), [1])
    1.49
    """
    H = np.asarray(H, dtype=np.int64)
    mask = np.zeros(p.shape[0], dtype=bool)
    mask[H] = True
    return float(p[mask].sum() + 1.0 - law.prob_all_in(mask))


def prefix_cut_values_from_sets(p: np.ndarray, sets: np.ndarray, weights: np.ndarray, order: np.ndarray) -> np.ndarray:
    """Cut values :math:`P(H_i) + 1 - Q(H_i^k)` for every prefix ``H_i`` of ``order`` (i = 0..V),
    for a law given by draft sets (``-1`` padded rows) and their weights.

    A set lies inside :math:`H_i` iff the largest rank (position in ``order``) of its tokens is
    below ``i``, so one histogram of the sets' largest ranks gives every :math:`Q(H_i^k)`.

    Parameters
    ----------
    p : ndarray, shape (V,)
        Target distribution.
    sets : ndarray of int, shape (S, k)
        Draft sets, distinct token ids padded with ``-1`` (:meth:`DraftLaw.enumerate_sets`).
    weights : ndarray, shape (S,)
        Probability of each set.
    order : ndarray of int, shape (V,)
        A permutation of the token ids.

    Returns
    -------
    ndarray, shape (V + 1,)
        ``out[i]`` is the cut value of the first ``i`` tokens of ``order`` (``out[0] = 1``).
    """
    V = p.shape[0]
    rank = np.empty(V + 1, dtype=np.int64)
    rank[order] = np.arange(V)
    rank[V] = -1  # the padding id -1 reads rank[-1] = rank[V], below every token's rank
    # Column by column (a max over a short axis is slow in numpy); no padded copy of the sets.
    max_rank = rank[sets[:, 0]]
    for j in range(1, sets.shape[1]):
        np.maximum(max_rank, rank[sets[:, j]], out=max_rank)
    inside = np.cumsum(np.bincount(max_rank + 1, weights=weights, minlength=V + 1))
    P = np.concatenate([[0.0], np.cumsum(p[order])])
    return P + 1.0 - inside
