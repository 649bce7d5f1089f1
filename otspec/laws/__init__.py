r"""Draft laws: the joint law :math:`Q` of the :math:`k` tokens a drafter proposes.

Every law offers the same small interface (:doc:`verifiers`, the verifier contract; the full
protocol, required and optional members, is :mod:`otspec.laws.base`):

* ``k``, ``V``, ``kind`` and, when the law is built from one draft distribution, ``source_q`` (and
  ``q``, the distribution the drafts are drawn from: ``None`` for deterministic drafts of k >= 2);
* ``prob_all_in(H)`` -- :math:`Q(H^k) = P(\text{every draft lies in } H)`;
* ``prefix_prob_all_in(order)`` -- :math:`Q(H_i^k)` for every prefix :math:`H_i` of a token order,
  in one pass, together with a bound on its numerical error (what the dual of the optimum needs);
* ``enumerate()`` -- every ordered draft tuple of positive probability and its probability;
* ``enumerate_sets()`` -- the same mass grouped by the *set* of distinct drafted tokens (all that
  membership acceptance depends on);
* ``sample(rng, size)`` -- i.i.d. draft tuples, with an explicit ``numpy.random.Generator``;
* ``validate_drafts(drafts)`` -- raise unless ``drafts`` is a tuple the law can produce.

Each law is one module (:mod:`~otspec.laws.iid`, :mod:`~otspec.laws.without_replacement`,
:mod:`~otspec.laws.greedy`, :mod:`~otspec.laws.product`, :mod:`~otspec.laws.explicit`, and the
deterministic drafts :mod:`~otspec.laws.deterministic` (top-k set),
:mod:`~otspec.laws.deterministic_tree` (static top-k tree) and :mod:`~otspec.laws.deterministic_dynamic`
(EAGLE-2-style dynamic tree)) holding its class and its public constructor; :data:`ALL` registers them and :func:`by_kind` finds one by name,
as :func:`otspec.verifiers.by_name` finds a verifier.

Laws are immutable. Token ids are ``0..V-1``; tuples are int64 arrays of shape ``(M, k)``.
"""

from __future__ import annotations

from otspec.errors import UnsupportedMethodError
from otspec.laws.base import DraftLaw
from otspec.laws.deterministic import TopKLaw, top_k
from otspec.laws.deterministic_dynamic import DynamicTreeLaw, dynamic_tree
from otspec.laws.deterministic_tree import TopKTreeLaw, top_k_tree
from otspec.laws.enumeration import all_tuples, prefix_by_max_rank, sets_from_tuples, successive_denominators
from otspec.laws.explicit import ExplicitLaw, explicit
from otspec.laws.greedy import GreedyLaw, greedy
from otspec.laws.iid import IIDLaw, iid
from otspec.laws.product import ProductLaw, product
from otspec.laws.tokens import as_token_mask, ratio_order, stable_argsort
from otspec.laws.without_replacement import WithoutReplacementLaw, without_replacement

__all__ = [
    "DraftLaw",
    "IIDLaw",
    "WithoutReplacementLaw",
    "GreedyLaw",
    "ProductLaw",
    "ExplicitLaw",
    "TopKLaw",
    "TopKTreeLaw",
    "DynamicTreeLaw",
    "ALL",
    "KINDS",
    "by_kind",
    "iid",
    "without_replacement",
    "greedy",
    "product",
    "explicit",
    "top_k",
    "top_k_tree",
    "dynamic_tree",
    "as_token_mask",
    "ratio_order",
    "stable_argsort",
    "successive_denominators",
]

#: Every draft law (its class), in table order. Adding a law: its module, plus one line here.
ALL: tuple[type[DraftLaw], ...] = (
    IIDLaw,
    WithoutReplacementLaw,
    GreedyLaw,
    ProductLaw,
    ExplicitLaw,
    TopKLaw,
    TopKTreeLaw,
    DynamicTreeLaw,
)

#: The registered laws' names (``law.kind``), in table order.
KINDS: tuple[str, ...] = tuple(cls.kind for cls in ALL)

# The names these helpers had when laws were one module (kept for existing imports).
_sets_from_tuples, _prefix_by_max_rank, _all_tuples = sets_from_tuples, prefix_by_max_rank, all_tuples


def by_kind(kind: str) -> type[DraftLaw]:
    """The draft-law class of :data:`ALL` whose ``kind`` is ``kind``.

    Its :attr:`~DraftLaw.constructor` builds one (called as :attr:`~DraftLaw.parameters` says);
    its class attributes tell what it supports before any law is built.

    Parameters
    ----------
    kind : str
        A law's ``kind`` (``"iid"``, ``"without_replacement"``, ...).

    Returns
    -------
    type
        The :class:`DraftLaw` subclass.

    Raises
    ------
    UnsupportedMethodError
        If no registered law has that kind.

    Examples
    --------
    >>> by_kind("iid").constructor([0.5, 0.5], 2).kind
    'iid'
    """
    for cls in ALL:
        if cls.kind == kind:
            return cls
    raise UnsupportedMethodError(f"unknown draft law {kind!r}; pick one of {list(KINDS)}")
