r"""k i.i.d. drafts from one distribution (sampling with replacement; SpecTr, SpecInfer):
:math:`Q(x) = \prod_j q(x_j)`, :math:`Q(H^k) = q(H)^k`; the sorted-prefix dual is exact in the
:math:`p/q` order (:doc:`math`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from otspec._tolerances import ROUNDING_PER_TERM
from otspec._validation import as_distribution, as_generator, as_int_in_range, as_supported_drafts
from otspec.laws.base import DraftLaw
from otspec.laws.enumeration import all_tuples, subset_sums
from otspec.laws.tokens import as_token_mask, ratio_order

__all__ = ["IIDLaw", "iid"]


def iid(q: Any, k: int) -> IIDLaw:
    r"""k i.i.d. drafts from ``q`` (sampling with replacement; SpecTr, SpecInfer).

    .. math:: Q(x_1, \dots, x_k) = \prod_{j=1}^k q(x_j), \qquad Q(H^k) = q(H)^k.

    Parameters
    ----------
    q : array_like, shape (V,)
        Draft distribution (float64, sums to 1).
    k : int
        Number of drafts, ``k >= 1``.

    Returns
    -------
    IIDLaw

    Raises
    ------
    InvalidDistributionError
        If ``q`` is not a distribution.
    InvalidDraftCountError
        If ``k`` is not an integer >= 1.

    Examples
    --------
    >>> import otspec
    >>> law = otspec.iid([0.5, 0.5], 2)
    >>> law.prob_all_in([0])
    0.25
    """
    q = as_distribution(q, "q")
    k = as_int_in_range(k, "k")
    return IIDLaw(k=k, V=q.shape[0], _q=q)


@dataclass(frozen=True, eq=False, repr=False)
class IIDLaw(DraftLaw):
    r"""k independent drafts from one distribution q (with replacement): :math:`Q(x) = \prod_j q(x_j)`."""

    _q: np.ndarray = field(default=None)  # type: ignore[assignment]
    kind: str = field(init=False, default="iid")

    parameters: ClassVar[str] = "q"
    constructor: ClassVar[Callable[..., DraftLaw]] = staticmethod(iid)
    torch_sampler: ClassVar[str | None] = "otspec_gpu.drafting:draw_iid"
    cut_function_enumerates: ClassVar[bool] = False

    @property
    def q(self) -> np.ndarray:
        """The draft distribution ``q``, shape ``(V,)``."""
        return self._q

    def num_tuples(self) -> int:
        return int(np.count_nonzero(self._q)) ** self.k

    def _enumerate(self):
        supp = np.flatnonzero(self._q)
        tuples = all_tuples(supp, self.k)
        # prod_j q(x_j) in the same order as np.prod(q[tuples], axis=1): ((q_1 q_2) q_3)..., as
        # outer products over the support (the tuples are in row-major order).
        qs = self._q[supp]
        weights = qs
        for _ in range(self.k - 1):
            weights = np.multiply.outer(weights, qs).ravel()
        return tuples, weights

    def prob_all_in(self, H):
        return float(self._q[as_token_mask(H, self.V)].sum() ** self.k)

    def prefix_prob_all_in(self, order):
        order = self._as_order(order)
        cq = np.concatenate([[0.0], np.cumsum(self._q[order])])
        return np.minimum(cq, 1.0) ** self.k, ROUNDING_PER_TERM * self.V * self.k

    def tuple_probability(self, drafts):
        d = np.asarray(drafts, dtype=np.int64).reshape(-1)
        return float(np.prod(self._q[d]))

    def _check_possible(self, d):
        return as_supported_drafts(d, self._q)

    def prefix_cut_order(self, p):
        return ratio_order(p, self._q)

    def first_draft_marginal(self):
        return np.asarray(self._q)

    def sample(self, rng, size):
        rng = as_generator(rng)
        return rng.choice(self.V, size=(int(size), self.k), p=self._q)

    @property
    def iid_q(self) -> np.ndarray:
        """The draft distribution ``q``: the drafts are k i.i.d. draws from it."""
        return self._q

    @property
    def independent_qs(self) -> tuple:
        """``(q, ..., q)``, k times: the drafts are independent."""
        return (self._q,) * self.k

    def inclusion_probabilities(self):
        r""":math:`1 - (1 - q(y))^k` per token (``expm1``/``log1p``: accurate for small q)."""
        with np.errstate(divide="ignore"):  # q == 1 gives log1p(-1) = -inf and hit = 1
            return -np.expm1(self.k * np.log1p(-self._q))

    def subset_prob_all_in(self, *, memory_cap=None):
        r""":math:`q(H)^k` for every set :math:`H` (no enumeration; ``memory_cap`` is not used)."""
        return subset_sums(self._q) ** self.k
