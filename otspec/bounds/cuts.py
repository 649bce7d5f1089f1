r"""The min-cut dual of the membership transport problem, evaluated in plain numpy.

For any token set :math:`H`, weak duality gives :math:`\alpha^*(p, Q) \le P(H) + 1 - Q(H^k)`
(:doc:`math`, the min-cut dual), with equality at the optimal :math:`H^*`. These helpers evaluate that cut
value independently of any solver; they are the re-check of every answer.
"""

from __future__ import annotations

import numpy as np


__all__ = ["cut_value", "prefix_cut_values_from_sets"]


def cut_value(p: np.ndarray, law, H: np.ndarray) -> float:
    """:math:`P(H) + 1 - Q(H^k)` for a token set given as ids."""
    H = np.asarray(H, dtype=np.int64)
    mask = np.zeros(p.shape[0], dtype=bool)
    mask[H] = True
    return float(p[mask].sum() + 1.0 - law.prob_all_in(mask))


def prefix_cut_values_from_sets(p: np.ndarray, sets: np.ndarray, weights: np.ndarray, order: np.ndarray) -> np.ndarray:
    """Cut values :math:`P(H_i) + 1 - Q(H_i^k)` for every prefix ``H_i`` of ``order`` (i = 0..V),
    for a law given by draft sets (``-1`` padded rows) and their weights."""
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
