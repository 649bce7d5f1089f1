r"""k distinct drafts by successive sampling proportional to q (RSD, EAGLE-style trees):
:math:`Q(x_1..x_k) = \prod_j q(x_j) / (1 - \sum_{l<j} q(x_l))`; :math:`Q(H^k)` and the
sorted-prefix dual by the exponential-race integral (:mod:`otspec._race`)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from otspec import _race
from otspec._validation import as_generator, as_supported_drafts
from otspec.errors import InvalidDraftsError
from otspec.laws.base import DraftLaw, q_and_k_in_support
from otspec.laws.enumeration import successive_denominators
from otspec.laws.tokens import as_token_mask, ratio_order

__all__ = ["WithoutReplacementLaw", "without_replacement"]


def without_replacement(q: Any, k: int) -> WithoutReplacementLaw:
    r"""k distinct drafts by successive sampling proportional to ``q`` (RSD, EAGLE-style trees).

    .. math:: Q(x_1, \dots, x_k) = \prod_{j=1}^k \frac{q(x_j)}{1 - \sum_{l<j} q(x_l)}
              \quad (x_j \text{ distinct}).

    ``k`` must not exceed the number of tokens with ``q > 0``.

    Parameters
    ----------
    q : array_like, shape (V,)
        Draft distribution.
    k : int
        Number of drafts, at most the support size of ``q``.

    Returns
    -------
    WithoutReplacementLaw

    Raises
    ------
    InvalidDistributionError
        If ``q`` is not a distribution.
    InvalidDraftCountError
        If ``k`` is not an integer in ``[1, support size]``.

    Examples
    --------
    >>> import otspec
    >>> law = otspec.without_replacement([0.5, 0.25, 0.25], 2)
    >>> round(law.tuple_probability([0, 1]), 12)
    0.25
    """
    q, k = q_and_k_in_support(q, k, "drafting without replacement", "lower k or use otspec.iid")
    return WithoutReplacementLaw(k=k, V=q.shape[0], _q=q)


@dataclass(frozen=True, eq=False, repr=False)
class WithoutReplacementLaw(DraftLaw):
    r"""k drafts by successive sampling proportional to q without replacement:
    :math:`Q(x_1..x_k) = \prod_j q(x_j) / (1 - \sum_{l<j} q(x_l))` on distinct tokens."""

    _q: np.ndarray = field(default=None)  # type: ignore[assignment]
    kind: str = field(init=False, default="without_replacement")

    parameters: ClassVar[str] = "q"
    constructor: ClassVar[Callable[..., DraftLaw]] = staticmethod(without_replacement)
    torch_sampler: ClassVar[str | None] = "otspec_gpu.drafting:draw_without_replacement"
    k_within_support: ClassVar[bool] = True

    @property
    def q(self) -> np.ndarray:
        """The draft distribution ``q`` sampled without replacement, shape ``(V,)``."""
        return self._q

    def num_tuples(self) -> int:
        s = int(np.count_nonzero(self._q))
        return math.perm(s, self.k)

    def _enumerate(self):
        supp = np.flatnonzero(self._q)
        tuples = np.array(list(itertools.permutations(supp.tolist(), self.k)), dtype=np.int64).reshape(-1, self.k)
        weights = np.prod(self._q[tuples] / successive_denominators(self._q, tuples), axis=1)
        return tuples, weights

    def tuple_probability(self, drafts):
        d = np.asarray(drafts, dtype=np.int64).reshape(-1)
        if len(set(d.tolist())) < d.size:
            return 0.0
        return float(np.prod(self._q[d] / successive_denominators(self._q, d[None, :])[0]))

    def validate_drafts(self, drafts):
        arr = np.asarray(drafts)
        if arr.ndim == 1 and arr.size == self.k and arr.dtype.kind in "iu" and len(set(arr.tolist())) < arr.size:
            raise InvalidDraftsError(
                f"drafts {arr.tolist()} repeat a token, which a without-replacement law never does; pass distinct tokens"
            )
        return super().validate_drafts(drafts)

    def _check_possible(self, d):
        return as_supported_drafts(d, self._q, distinct=True)

    def prefix_cut_order(self, p):
        return ratio_order(p, self._q)

    def first_draft_marginal(self):
        return np.asarray(self._q)

    @property
    def without_replacement_q(self) -> np.ndarray:
        """The draft distribution ``q`` the drafts are sampled from without replacement."""
        return self._q

    def prefix_minimum(self, p, order):
        """The dual over the prefixes by the exponential-race integral
        (:func:`otspec._race.wor_dual_minimum`)."""
        # Integrates only the prefixes that cheap rigorous bounds cannot exclude; its error bound
        # already covers the rounding of P's prefix sums (accumulated in extended precision).
        res = _race.wor_dual_minimum(p[order], self._q[order], self.k)
        return int(res.index), float(res.value), float(res.error_bound)

    def prob_all_in(self, H):
        mask = as_token_mask(H, self.V)
        order = np.concatenate([np.flatnonzero(mask), np.flatnonzero(~mask)])
        vals, _ = _race.wor_prefix_at(self._q[order], self.k, [int(mask.sum())])
        return float(vals[0])

    def prefix_prob_all_in(self, order):
        order = self._as_order(order)
        return _race.wor_prefix_all_in(self._q[order], self.k)

    def sample(self, rng, size):
        rng = as_generator(rng)
        # Successive sampling by inverse CDF: draw j is u ~ U[0, remaining mass) mapped through the
        # cumulative q with the intervals of the drafts already taken skipped (in ascending id
        # order). O(size * k * (k + log V)) instead of Gumbel-top-k's O(size * V) (2000
        # draws at V = 262 144 took ~100 s that way).
        n, k, q = int(size), self.k, self._q
        # the O(V) tables once per law: Monte Carlo callers draw in many small batches
        cum, ends = self.cached("sample.cumulative", None, lambda: _cumulative_and_support(q))
        out = np.empty((n, k), dtype=np.int64)
        taken = np.full((n, k), np.iinfo(np.int64).max, dtype=np.int64)  # ascending per row
        mass = np.zeros(n)
        for j in range(k):
            todo = np.arange(n)
            while todo.size:
                u = rng.random(todo.size) * (cum[-1] - mass[todo])
                for col in range(j):
                    e = taken[todo, col]
                    u = u + np.where(cum[e] <= u, q[e], 0.0)
                x = np.clip(np.searchsorted(cum, u, side="right") - 1, ends[0], ends[1])
                # rounding can land u on an edge of a taken or zero-probability interval: redraw
                bad = (q[x] <= 0) | np.any(taken[todo, :j] == x[:, None], axis=1)
                good = todo[~bad]
                out[good, j] = x[~bad]
                todo = todo[bad]
            mass += q[out[:, j]]
            taken[:, j] = out[:, j]
            taken[:, : j + 1] = np.sort(taken[:, : j + 1], axis=1)
        return out


def _cumulative_and_support(q: np.ndarray) -> tuple[np.ndarray, tuple[int, int]]:
    """``(cum, (first, last))``: the cumulative q with a leading 0, and the first and last token
    with q > 0 (the inverse-CDF draw's table, built once per law)."""
    positive = np.flatnonzero(q > 0)
    return np.concatenate([[0.0], np.cumsum(q)]), (int(positive[0]), int(positive[-1]))
