r"""Deterministic top-k drafts (EAGLE's draft set with :math:`q = 1`): the k most probable tokens of
q, proposed with certainty.

The law is the point mass :math:`Q = \delta_S` on the tuple :math:`S = (s_1, \dots, s_k)` of the k
largest entries of the draft distribution (larger q first, ties to the lower id). Its cut function
is :math:`Q(H^k) = 1\{S \subseteq H\}`, so the dual of the optimum gives

.. math:: \alpha^*(p, \delta_S) = \min_H \bigl[p(H) + 1 - 1\{S \subseteq H\}\bigr] = p(S),

attained by sample-and-match (draw :math:`Y \sim p`, accept iff :math:`Y \in S`; the verifier
``exact_match``): no lossless verifier does better, since its output lies in :math:`S` with
probability at most :math:`p(S)` (:doc:`engine_rules`).

The drafts are chosen, not sampled: :attr:`TopKLaw.source_q` is the q they are chosen from, and
:attr:`TopKLaw.q` -- the proposal a rule written as ``f(p, q, drafts)`` receives -- is the point
mass of the one draft (``k = 1``) or ``None``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from otspec._validation import as_generator
from otspec.errors import InvalidDraftsError
from otspec.laws.base import DraftLaw, q_and_k_in_support
from otspec.laws.tokens import as_token_mask

__all__ = ["TopKLaw", "top_k", "top_tokens"]


def top_tokens(q: np.ndarray, k: int) -> np.ndarray:
    """The ``k`` largest entries of ``q`` among its positive ones, larger first, ties to the lower id.

    Parameters
    ----------
    q : ndarray, shape (V,)
        A validated distribution.
    k : int
        How many tokens (at most the support size of ``q``; fewer are returned otherwise).

    Returns
    -------
    ndarray of int64, shape (min(k, support),)
        The token ids, read-only.

    Examples
    --------
    >>> top_tokens(np.array([0.2, 0.5, 0.3]), 2).tolist()
    [1, 2]
    """
    m = min(int(k), int(np.count_nonzero(q)))
    if m == 0:
        out = np.zeros(0, dtype=np.int64)
    else:
        part = np.argpartition(-q, m - 1)[:m]
        cand = np.flatnonzero(q >= q[part].min())  # every token tied with the m-th largest
        out = cand[np.argsort(-q[cand], kind="stable")][:m].astype(np.int64)
    out.setflags(write=False)
    return out


def top_k(q: Any, k: int) -> TopKLaw:
    r"""The k most probable tokens of ``q``, drafted with certainty (EAGLE's top-k set, :math:`q = 1`).

    .. math:: Q = \delta_S, \qquad S = \text{top-}k(q), \qquad \alpha^*(p, Q) = p(S).

    Parameters
    ----------
    q : array_like, shape (V,)
        The draft distribution whose top tokens are drafted.
    k : int
        Number of drafts, at most the support size of ``q``.

    Returns
    -------
    TopKLaw

    Raises
    ------
    InvalidDistributionError
        If ``q`` is not a distribution.
    InvalidDraftCountError
        If ``k`` is not an integer in ``[1, support size of q]``.

    Examples
    --------
    >>> import otspec
    >>> law = otspec.laws.top_k([0.1, 0.6, 0.3], 2)
    >>> law.drafted.tolist(), law.closed_form_optimum(np.array([0.5, 0.25, 0.25]))
    ([1, 2], 0.5)
    """
    q, k = q_and_k_in_support(q, k, "top-k drafting", "lower k")
    return TopKLaw(k=k, V=q.shape[0], _q=q, _drafted=top_tokens(q, k))


@dataclass(frozen=True, eq=False, repr=False)
class TopKLaw(DraftLaw):
    r"""The point mass on one drafted tuple :math:`S` chosen from a draft distribution (top-k of q).

    The tree laws (:mod:`otspec.laws.deterministic_tree`, :mod:`otspec.laws.deterministic_dynamic`)
    subclass it: their single-step view is the tuple of the root's children.
    """

    _q: np.ndarray = field(default=None)  # type: ignore[assignment]
    _drafted: np.ndarray = field(default=None)  # type: ignore[assignment]
    kind: str = field(init=False, default="top_k")

    parameters: ClassVar[str] = "q"
    constructor: ClassVar[Callable[..., DraftLaw]] = staticmethod(top_k)
    torch_sampler: ClassVar[str | None] = "otspec_gpu.deterministic:draw_top_k"
    k_within_support: ClassVar[bool] = True
    cut_function_enumerates: ClassVar[bool] = False
    deterministic: ClassVar[bool] = True

    @property
    def drafted(self) -> np.ndarray:
        """The drafted tuple :math:`S`, shape ``(k,)`` (read-only)."""
        return self._drafted

    @property
    def source_q(self) -> np.ndarray:
        """The draft distribution the drafts are chosen from (its top tokens), shape ``(V,)``."""
        return self._q

    @property
    def q(self) -> np.ndarray | None:
        r"""The law the drafts follow, as a proposal: the point mass :math:`\delta_{s_1}` when
        ``k = 1`` (speculative sampling against it is the one-hot rule), else ``None``."""
        if self.k != 1:
            return None
        delta = np.zeros(self.V)
        delta[int(self._drafted[0])] = 1.0
        delta.setflags(write=False)
        return delta

    def num_tuples(self) -> int:
        return 1

    def _enumerate(self):
        return self._drafted[None, :].astype(np.int64), np.ones(1)

    def prob_all_in(self, H):
        return float(np.all(as_token_mask(H, self.V)[self._drafted]))

    def prefix_prob_all_in(self, order):
        order = self._as_order(order)
        rank = np.empty(self.V, dtype=np.int64)
        rank[order] = np.arange(self.V)
        need = int(rank[self._drafted].max()) + 1  # the first prefix holding all of S
        return (np.arange(self.V + 1) >= need).astype(np.float64), 0.0

    def prefix_cut_order(self, p):
        # the optimal cut is S itself: S first (in draft order), then the rest by id
        rest = np.ones(self.V, dtype=bool)
        rest[self._drafted] = False
        return np.concatenate([self._drafted, np.flatnonzero(rest)]).astype(np.int64)

    def subset_prob_all_in(self, *, memory_cap=None):
        r""":math:`1\{S \subseteq H\}` for every set :math:`H` (no enumeration; ``memory_cap`` unused)."""
        s_mask = int(np.bitwise_or.reduce(np.left_shift(1, self._drafted)))
        masks = np.arange(2**self.V, dtype=np.int64)
        return ((masks & s_mask) == s_mask).astype(np.float64)

    def tuple_probability(self, drafts):
        d = np.asarray(drafts, dtype=np.int64).reshape(-1)
        return float(np.array_equal(d, self._drafted))

    def _check_possible(self, d):
        ok = np.all(d == self._drafted[None, :], axis=1)
        if not np.all(ok):
            bad = d[int(np.flatnonzero(~ok)[0])]
            raise InvalidDraftsError(
                f"drafts {bad.tolist()} have probability 0 under {self!r}: it always drafts {self._drafted.tolist()}; "
                "pass the law's drafted tuple"
            )
        return d

    def first_draft_marginal(self):
        m = np.zeros(self.V)
        m[int(self._drafted[0])] = 1.0
        return m

    def inclusion_probabilities(self):
        r""":math:`1\{y \in S\}` per token."""
        hit = np.zeros(self.V)
        hit[self._drafted] = 1.0
        return hit

    def closed_form_optimum(self, p):
        """:math:`p(S)`: no lossless verifier outputs a draft more often."""
        return float(p[self._drafted].sum())

    def closed_form_lower(self, p):
        """:math:`p(S)`, attained by sample-and-match (``exact_match``)."""
        return float(p[self._drafted].sum())

    def sample(self, rng, size):
        as_generator(rng)  # the law draws nothing, but the contract of sample() is one checked generator
        return np.broadcast_to(self._drafted, (int(size), self.k)).astype(np.int64)
