r"""A dynamic deterministic draft tree chosen by draft probability (EAGLE-2 style, :math:`q = 1`).

Every node may have its top-k children under the draft model (the candidates); the tree keeps the
``budget`` candidate nodes of highest cumulative draft probability
:math:`M_s(u) = \prod_i M_s(u_i \mid u^{i-1})` with depth at most :math:`\gamma`. Since
:math:`M_s(uy) \le M_s(u)`, a best-first expansion (pop the candidate of largest :math:`M_s`, push its
top-k children) visits candidates in non-increasing :math:`M_s`, so the first ``budget`` popped are
exactly the global top ``budget`` and form a tree (every parent is popped before its children; ties:
shallower first, then the order of drafting). This is EAGLE-2's expand-then-rerank selection in one
pass: the tree adapts to the context because confident draft steps leave mass for deeper nodes.

Verification and optimality are those of the static tree (:mod:`otspec.laws.deterministic_tree`):
sample-and-match attains :math:`\sum_u M_b(u)` over the chosen nodes, the most any lossless verifier
can on them.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from otspec._validation import as_int_in_range
from otspec.errors import ProblemTooLargeError
from otspec.laws.base import DraftLaw, q_and_k_in_support
from otspec.laws.deterministic import top_tokens
from otspec.laws.deterministic_tree import MAX_TREE_NODES, TopKTreeLaw, as_draft_model

__all__ = ["DynamicTreeLaw", "dynamic_tree"]


def dynamic_tree(q: Any, k: int, gamma: int = 1, *, budget: int | None = None) -> DynamicTreeLaw:
    r"""The ``budget`` nodes of highest draft probability among top-k children, depth <= gamma (EAGLE-2).

    Parameters
    ----------
    q : Model, callable or array_like of shape (V,)
        The draft model, or one distribution used after every prefix.
    k : int
        Candidate children per node (its top-k under the draft model); at most the root's support.
    gamma : int
        Largest depth.
    budget : int, optional
        Number of non-root nodes kept (default ``k * gamma``; with ``gamma = 1`` the top-k set).

    Returns
    -------
    DynamicTreeLaw

    Raises
    ------
    InvalidDistributionError
        If ``q`` (or a conditional of the model) is not a distribution.
    InvalidDraftCountError
        If ``k``, ``gamma`` or ``budget`` is not a positive integer, or ``k`` exceeds the root's support.
    ProblemTooLargeError
        If ``budget`` exceeds :data:`~otspec.laws.deterministic_tree.MAX_TREE_NODES`.

    Examples
    --------
    >>> import otspec
    >>> law = otspec.laws.dynamic_tree([0.6, 0.3, 0.1], 2, gamma=3, budget=4)
    >>> law.nodes            # masses 0.6, 0.36, 0.3, 0.216: the confident chain goes deeper
    ((0,), (0, 0), (1,), (0, 0, 0))
    """
    model = as_draft_model(q)
    g = as_int_in_range(gamma, "gamma")
    root_q, k = q_and_k_in_support(model(()), k, "a dynamic tree's candidates", "lower k")
    n = as_int_in_range(k * g if budget is None else budget, "budget")
    if n > MAX_TREE_NODES:
        raise ProblemTooLargeError(f"budget = {n:,} nodes is above the cap of {MAX_TREE_NODES:,}; lower the budget")
    heap: list = []
    counter = 0

    def push(u: tuple, mass: float, cond) -> None:
        nonlocal counter
        for y in top_tokens(cond, k):
            heapq.heappush(heap, (-mass * float(cond[y]), len(u) + 1, counter, u + (int(y),)))
            counter += 1

    push((), 1.0, root_q)
    nodes, children = [], {}
    while heap and len(nodes) < n:
        neg, depth, _, u = heapq.heappop(heap)
        nodes.append(u)
        children[u[:-1]] = (*children.get(u[:-1], ()), u[-1])
        if depth < g:
            push(u, -neg, model(u))
    root = np.array(children[()], dtype=np.int64)
    root.setflags(write=False)
    return DynamicTreeLaw(
        k=root.size, V=root_q.shape[0], _q=root_q, _drafted=root, model=model, nodes=tuple(nodes), children=children, gamma=g
    )


@dataclass(frozen=True, eq=False, repr=False)
class DynamicTreeLaw(TopKTreeLaw):
    """A deterministic tree of the nodes of highest draft probability (EAGLE-2 style); the attributes
    are those of :class:`~otspec.laws.deterministic_tree.TopKTreeLaw` (``nodes`` in the order chosen)."""

    kind: str = field(init=False, default="dynamic_tree")

    constructor: ClassVar[Callable[..., DraftLaw]] = staticmethod(dynamic_tree)
