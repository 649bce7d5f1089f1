r"""Independent drafts from different drafters: :math:`Q(x) = \prod_j q_j(x_j)`; no sorted-prefix
theorem, so the optimum is a flow or an LP, or the branch-and-bound of :mod:`otspec.bounds.product`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from otspec._tolerances import ROUNDING_PER_TERM
from otspec._validation import as_distribution, as_generator, as_supported_drafts, check_same_vocab
from otspec.errors import InvalidDraftCountError
from otspec.laws.base import DraftLaw
from otspec.laws.tokens import as_token_mask

__all__ = ["ProductLaw", "product"]


def product(qs: Sequence[Any]) -> ProductLaw:
    r"""Independent drafts from different drafters ``qs = [q_1, ..., q_k]`` (with replacement).

    .. math:: Q(x_1, \dots, x_k) = \prod_{j=1}^k q_j(x_j).

    Parameters
    ----------
    qs : sequence of array_like, each shape (V,)
        One draft distribution per drafter (``k = len(qs)``).

    Returns
    -------
    ProductLaw

    Raises
    ------
    InvalidDistributionError
        If some ``qs[j]`` is not a distribution.
    ShapeMismatchError
        If the drafters do not share the vocabulary.
    InvalidDraftCountError
        If ``qs`` is empty or not a sequence.

    Examples
    --------
    >>> import otspec
    >>> otspec.product([[1.0, 0.0], [0.5, 0.5]]).prob_all_in([0])
    0.5
    """
    if isinstance(qs, np.ndarray) and qs.ndim == 2:
        qs = list(qs)
    if not isinstance(qs, (list, tuple)) or len(qs) == 0:
        raise InvalidDraftCountError(f"qs must be a non-empty list of draft distributions (got {type(qs).__name__}); pass [q1, ..., qk]")
    arrs = tuple(as_distribution(qj, f"qs[{j}]") for j, qj in enumerate(qs))
    for j, a in enumerate(arrs[1:], start=1):
        check_same_vocab(arrs[0], a, ("qs[0]", f"qs[{j}]"))
    return ProductLaw(k=len(arrs), V=arrs[0].shape[0], qs=arrs)


@dataclass(frozen=True, eq=False, repr=False)
class ProductLaw(DraftLaw):
    r"""Independent drafts from different drafters: :math:`Q(x) = \prod_j q_j(x_j)`.

    Attributes
    ----------
    qs : tuple of ndarray, each shape (V,)
        The drafters' distributions :math:`q_1, \dots, q_k`, in draft order.
    """

    qs: tuple = field(default=())
    kind: str = field(init=False, default="product")

    parameters: ClassVar[str] = "qs"
    constructor: ClassVar[Callable[..., DraftLaw]] = staticmethod(product)
    branch_and_bound: ClassVar[bool] = True

    @property
    def independent_qs(self) -> tuple:
        """:attr:`qs`: the drafts are independent."""
        return self.qs

    def inclusion_probabilities(self):
        r""":math:`1 - \prod_j (1 - q_j(y))` per token."""
        return 1.0 - np.prod([1.0 - qj for qj in self.qs], axis=0)

    def num_tuples(self) -> int:
        return int(np.prod([np.count_nonzero(qj) for qj in self.qs], dtype=object))

    def _enumerate(self):
        supports = [np.flatnonzero(qj) for qj in self.qs]
        grids = np.indices(tuple(s.size for s in supports)).reshape(self.k, -1)
        tuples = np.stack([supports[j][grids[j]] for j in range(self.k)], axis=1)
        weights = np.ones(tuples.shape[0])
        for j, qj in enumerate(self.qs):
            weights = weights * qj[tuples[:, j]]
        return tuples.astype(np.int64), weights

    def tuple_probability(self, drafts):
        d = np.asarray(drafts, dtype=np.int64).reshape(-1)
        return float(np.prod([qj[x] for qj, x in zip(self.qs, d, strict=False)]))

    def _check_possible(self, d):
        return as_supported_drafts(d, np.stack(self.qs), q_name="qs")

    def first_draft_marginal(self):
        return np.asarray(self.qs[0])

    def prob_all_in(self, H):
        mask = as_token_mask(H, self.V)
        return float(np.prod([qj[mask].sum() for qj in self.qs]))

    def prefix_prob_all_in(self, order):
        order = self._as_order(order)
        vals = np.ones(self.V + 1)
        for qj in self.qs:
            vals = vals * np.minimum(np.concatenate([[0.0], np.cumsum(qj[order])]), 1.0)
        return vals, ROUNDING_PER_TERM * self.V * self.k

    def sample(self, rng, size):
        rng = as_generator(rng)
        return np.stack([rng.choice(self.V, size=int(size), p=qj) for qj in self.qs], axis=1).astype(np.int64)
