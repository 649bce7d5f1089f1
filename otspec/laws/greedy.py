r"""Hu et al.'s greedy drafts: the top-(k-1) tokens of q, then one token from the rest
(:math:`k = 2`: SpecHub's draft law); the optimum in closed form (:doc:`math`, greedy drafts)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from otspec._tolerances import ROUNDING_PER_TERM
from otspec._validation import as_generator
from otspec.errors import InvalidDraftsError
from otspec.laws.base import DraftLaw, q_and_k_in_support
from otspec.laws.tokens import as_token_mask, ratio_order

__all__ = ["GreedyLaw", "greedy"]


def greedy(q: Any, k: int) -> GreedyLaw:
    r"""Hu et al.'s greedy drafts: top-(k-1) tokens of ``q`` plus one drawn from the rest.

    With :math:`G` the top-(k-1) tokens and :math:`\tilde q = q\,1_{G^c} / q(G^c)`:
    :math:`Q(G, x) = \tilde q(x)`. ``k = 2`` is SpecHub's draft law. Ties in q are broken by the
    lower token id. Requires at least k tokens with ``q > 0`` so that the last draft has mass.

    Parameters
    ----------
    q : array_like, shape (V,)
        Draft distribution.
    k : int
        Number of drafts (``k - 1`` deterministic, one random), at most the support size of ``q``.

    Returns
    -------
    GreedyLaw

    Raises
    ------
    InvalidDistributionError
        If ``q`` is not a distribution.
    InvalidDraftCountError
        If ``k`` is not an integer in ``[1, support size]``.

    Examples
    --------
    >>> import otspec
    >>> otspec.greedy([0.1, 0.6, 0.3], 2).top.tolist()
    [1]
    """
    q, k = q_and_k_in_support(q, k, "greedy drafting", "lower k")
    return GreedyLaw(k=k, V=q.shape[0], _q=q)


@dataclass(frozen=True, eq=False, repr=False)
class GreedyLaw(DraftLaw):
    r"""Hu et al.'s greedy drafts: the top-(k-1) tokens of q (ties: lower id first) followed by one
    token drawn from :math:`\tilde q = q / q(\Omega \setminus G)` on the remaining tokens."""

    _q: np.ndarray = field(default=None)  # type: ignore[assignment]
    kind: str = field(init=False, default="greedy")

    parameters: ClassVar[str] = "q"
    constructor: ClassVar[Callable[..., DraftLaw]] = staticmethod(greedy)
    torch_sampler: ClassVar[str | None] = "otspec_gpu.drafting:draw_greedy"
    k_within_support: ClassVar[bool] = True

    @property
    def q(self) -> np.ndarray:
        """The draft distribution ``q`` whose top tokens and rest the drafts come from, shape ``(V,)``."""
        return self._q

    @functools.cached_property
    def top(self) -> np.ndarray:
        """The k-1 deterministic drafts G, in draft order (larger q first, then lower id; computed
        once with a partial sort; read-only)."""
        q, m = self._q, self.k - 1
        if m == 0:
            g = np.zeros(0, dtype=np.int64)
        else:
            part = np.argpartition(-q, m - 1)[:m]
            cand = np.flatnonzero(q >= q[part].min())  # every token tied with the m-th largest
            g = cand[np.argsort(-q[cand], kind="stable")][:m].astype(np.int64)
        g.setflags(write=False)
        return g

    @functools.cached_property
    def q_rest(self) -> np.ndarray:
        r""":math:`\tilde q`: the law of the last (random) draft, zero on G (computed once)."""
        qt = self._q.copy()
        qt[self.top] = 0.0
        qt = qt / qt.sum()
        qt.setflags(write=False)
        return qt

    def optimum(self, p: np.ndarray) -> float:
        r"""The optimal acceptance in closed form (Hu et al.; :doc:`math`, greedy drafts):
        :math:`\alpha^* = P(G) + \sum_{x \notin G} \min(p(x), \tilde q(x))`.

        Parameters
        ----------
        p : ndarray, shape (V,)
            Validated target distribution.

        Returns
        -------
        float
            The value, unclamped (it exceeds 1 only by rounding).
        """
        # q_rest vanishes on G, so the second sum may run over every token.
        return float(p[self.top].sum() + np.minimum(p, self.q_rest).sum())

    @property
    def top_and_rest(self) -> tuple[np.ndarray, np.ndarray]:
        r"""``(top, q_rest)``: the fixed drafts G and the law :math:`\tilde q` of the last one."""
        return self.top, self.q_rest

    def closed_form_optimum(self, p):
        """:meth:`optimum`."""
        return self.optimum(p)

    def closed_form_lower(self, p):
        r"""The coupling that routes the excess of :math:`\tilde q` over p to G and keeps the rest:
        :math:`\min(p(G), \sum_x (\tilde q - p)^+) + \sum_x \min(p, \tilde q)`."""
        top, qt = self.top, self.q_rest
        routed = min(float(p[top].sum()), float(np.maximum(qt - p, 0.0).sum()))
        return routed + float(np.minimum(p, qt).sum())

    def inclusion_probabilities(self):
        r""":math:`\tilde q(y)` off G, 1 on G."""
        hit = self.q_rest.copy()
        hit[self.top] = 1.0
        return hit

    def num_tuples(self) -> int:
        return int(np.count_nonzero(self.q_rest))

    def _enumerate(self):
        qt = self.q_rest
        last = np.flatnonzero(qt)
        tuples = np.concatenate([np.broadcast_to(self.top, (last.size, self.k - 1)), last[:, None]], axis=1)
        return tuples.astype(np.int64), qt[last]

    def tuple_probability(self, drafts):
        d = np.asarray(drafts, dtype=np.int64).reshape(-1)
        if not np.array_equal(d[:-1], self.top):
            return 0.0
        return float(self.q_rest[d[-1]])

    def _check_possible(self, d):
        ok = np.all(d[:, :-1] == self.top[None, :], axis=1) & (self.q_rest[d[:, -1]] > 0)
        if not np.all(ok):
            bad = d[int(np.flatnonzero(~ok)[0])]
            raise InvalidDraftsError(f"drafts {bad.tolist()} have probability 0 under {self!r}; pass drafts sampled from this law")
        return d

    def prefix_cut_order(self, p):
        # G is in every tuple, so a useful cut contains G: put it first, then the rest by p / q~.
        order_rest = ratio_order(p, self.q_rest)
        in_top = np.zeros(self.V, dtype=bool)
        in_top[self.top] = True
        return np.concatenate([self.top, order_rest[~in_top[order_rest]]])

    def first_draft_marginal(self):
        if self.k == 1:
            return self.q_rest
        m = np.zeros(self.V)
        m[int(self.top[0])] = 1.0
        return m

    def prob_all_in(self, H):
        mask = as_token_mask(H, self.V)
        if not np.all(mask[self.top]):
            return 0.0
        return float(self.q_rest[mask].sum())

    def prefix_prob_all_in(self, order):
        order = self._as_order(order)
        rank = np.empty(self.V, dtype=np.int64)
        rank[order] = np.arange(self.V)
        need = int(rank[self.top].max()) + 1 if self.k > 1 else 0
        vals = np.concatenate([[0.0], np.cumsum(self.q_rest[order])])
        vals[:need] = 0.0
        return np.minimum(vals, 1.0), ROUNDING_PER_TERM * self.V

    def sample(self, rng, size):
        rng = as_generator(rng)
        last = rng.choice(self.V, size=int(size), p=self.q_rest)
        return np.concatenate([np.broadcast_to(self.top, (int(size), self.k - 1)), last[:, None]], axis=1).astype(np.int64)
