r"""A static deterministic draft tree: the top-:math:`b_d` children of every node at depth
:math:`d - 1`, down to depth :math:`\gamma` (EAGLE's static tree with :math:`q = 1`).

Given a draft model :math:`M_s` (or one distribution q, the same conditional after every prefix)
and a branching :math:`(b_1, \dots, b_\gamma)`, the tree holds the root, its :math:`b_1` most
probable children under :math:`M_s(\cdot)`, each child's :math:`b_2` most probable children under
:math:`M_s(\cdot \mid x_1)`, and so on (ties to the lower id; a node with fewer tokens of positive
draft probability gets only those). Nothing is sampled: the tree is a function of the draft model.

Sample-and-match verification walks it (:mod:`otspec.verifiers.sample_match`): draw
:math:`Y_1 \sim M_b(\cdot)`, descend while :math:`Y_i` is a child of the current node, emit the
first token that is not. The expected number of accepted tokens is
:math:`\sum_{u \ne \emptyset} M_b(u)` over the tree's nodes, the most any lossless tree verifier
attains on this tree (:doc:`engine_rules`).

As a single-step law it is the point mass on the root's children (:class:`~otspec.laws.deterministic.TopKLaw`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from otspec import models as _models
from otspec._validation import as_distribution, as_int_in_range
from otspec.errors import InvalidDraftCountError, ProblemTooLargeError
from otspec.laws.base import DraftLaw, q_and_k_in_support
from otspec.laws.deterministic import TopKLaw, top_tokens

__all__ = ["MAX_TREE_NODES", "TopKTreeLaw", "top_k_tree", "as_draft_model"]

#: Most nodes a deterministic tree may hold (each costs one call of the draft model here).
MAX_TREE_NODES = 200_000


def as_draft_model(q: Any) -> _models.Model:
    """A draft model from a model (any callable ``prefix -> distribution``) or one distribution
    ``q`` (the same conditional after every prefix).

    Parameters
    ----------
    q : Model, callable or array_like of shape (V,)
        The draft model, or its one conditional.

    Returns
    -------
    Model
        The validated draft model.

    Raises
    ------
    InvalidDistributionError
        If ``q`` (or the model's root conditional) is not a distribution.

    Examples
    --------
    >>> as_draft_model([0.5, 0.5])((1, 0)).tolist()
    [0.5, 0.5]
    """
    if callable(q):
        return _models.as_model(q, name="q")
    return _models.context_free(as_distribution(q, "q"))


def _branching(branching: Any, gamma: Any) -> tuple[int, ...]:
    if np.ndim(branching) == 0:
        g = as_int_in_range(gamma, "gamma")
        return (as_int_in_range(branching, "branching"),) * g
    out = tuple(as_int_in_range(b, "branching") for b in np.asarray(branching).tolist())
    if not out:
        raise InvalidDraftCountError("branching must hold one child count per depth (got an empty sequence); pass e.g. (4, 2, 1)")
    if gamma not in (1, len(out)):
        raise InvalidDraftCountError(
            f"gamma = {gamma} does not match branching {list(out)} (one count per depth); pass gamma = {len(out)} or leave it out"
        )
    return out


def top_k_tree(q: Any, branching: Any, gamma: int = 1) -> TopKTreeLaw:
    r"""The static tree of top-:math:`b_d` children, depth :math:`\gamma` (EAGLE's static tree, :math:`q = 1`).

    Parameters
    ----------
    q : Model, callable or array_like of shape (V,)
        The draft model (``prefix -> (V,) distribution``), or one distribution used after every prefix.
    branching : int or sequence of int
        Children per node at each depth: an int ``k`` means ``k`` at every one of ``gamma`` depths;
        a sequence ``(b_1, ..., b_gamma)`` gives them depth by depth. ``b_1`` is at most the support
        size of the root conditional.
    gamma : int
        Depth, when ``branching`` is an int (default 1: the top-k set).

    Returns
    -------
    TopKTreeLaw

    Raises
    ------
    InvalidDistributionError
        If ``q`` (or a conditional of the model) is not a distribution.
    InvalidDraftCountError
        If a child count or ``gamma`` is not a positive integer, or ``b_1`` exceeds the root's support.
    ProblemTooLargeError
        If the tree would hold more than :data:`MAX_TREE_NODES` nodes.

    Examples
    --------
    >>> import otspec
    >>> law = otspec.laws.top_k_tree([0.5, 0.3, 0.2], (2, 1))
    >>> law.nodes
    ((0,), (1,), (0, 0), (1, 0))
    """
    model = as_draft_model(q)
    b = _branching(branching, gamma)
    root_q, k = q_and_k_in_support(model(()), b[0], "a top-k tree's root", "lower the first child count")
    n_max = sum(int(np.prod(b[: d + 1])) for d in range(len(b)))
    if n_max > MAX_TREE_NODES:
        raise ProblemTooLargeError(
            f"a top-k tree with branching {list(b)} holds up to {n_max:,} nodes, above the cap of {MAX_TREE_NODES:,}; "
            "lower the branching or gamma"
        )
    nodes, children, level = [], {}, [()]
    for d, bd in enumerate(b):
        nxt = []
        for u in level:
            kids = top_tokens(model(u), bd) if d else top_tokens(root_q, k)
            children[u] = tuple(int(y) for y in kids)
            nxt += [u + (int(y),) for y in kids]
        nodes += nxt
        level = nxt
    return TopKTreeLaw(
        k=k, V=root_q.shape[0], _q=root_q, _drafted=top_tokens(root_q, k), model=model, nodes=tuple(nodes), children=children, gamma=len(b)
    )


@dataclass(frozen=True, eq=False, repr=False)
class TopKTreeLaw(TopKLaw):
    r"""A deterministic draft tree (its nodes are chosen from the draft model, not sampled).

    Attributes
    ----------
    model : Model
        The draft model the tree is built from.
    nodes : tuple of tuple of int
        Every non-root node (a prefix), parents before children.
    children : dict
        ``children[u]``: the drafted children of node ``u`` (a tuple of token ids; absent: a leaf).
    gamma : int
        The depth the tree may reach.
    """

    model: Any = field(default=None)
    nodes: tuple = field(default=())
    children: dict = field(default_factory=dict)
    gamma: int = 1
    kind: str = field(init=False, default="top_k_tree")

    constructor: ClassVar[Callable[..., DraftLaw]] = staticmethod(top_k_tree)
    torch_sampler: ClassVar[str | None] = "otspec_gpu.deterministic:draw_top_k"
    draft_tree: ClassVar[bool] = True

    def children_of(self, prefix: Any) -> tuple:
        """The drafted children of node ``prefix`` (``()`` for a leaf or a prefix off the tree).

        Parameters
        ----------
        prefix : tuple of int
            A node of the tree (``()``: the root).

        Returns
        -------
        tuple of int
            Token ids, in drafting order.
        """
        return self.children.get(tuple(int(x) for x in prefix), ())

    def draft_mass(self, prefix: Any) -> float:
        r""":math:`M_s(u) = \prod_i M_s(u_i \mid u^{i-1})`, the draft probability of node ``prefix``.

        Parameters
        ----------
        prefix : tuple of int
            A prefix.

        Returns
        -------
        float
            Its cumulative draft probability (1 for the root).
        """
        u = tuple(int(x) for x in prefix)
        return float(np.prod([self.model(u[:i])[u[i]] for i in range(len(u))]))
