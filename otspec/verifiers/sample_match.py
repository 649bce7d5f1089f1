r"""Sample-and-match verification of deterministic draft sets and trees (EAGLE's top-k with :math:`q = 1`).

The drafts :math:`S` (a set) or a tree of drafted prefixes are chosen from the draft model, not
sampled, so the draft law is a point mass and a ratio :math:`p/q` has nothing to divide by. The rule:
draw :math:`Y_1 \sim M_b(\cdot)`; while :math:`Y_i` is a drafted child of the current node, accept it,
move there and draw :math:`Y_{i+1} \sim M_b(\cdot \mid Y^i)`; emit the first token that is not a
drafted child (or the draw after a leaf). On a set this is ``exact_match``: accept iff :math:`Y \in S`.

**Lossless.** Every emitted token is a fresh draw from the target conditional after the tokens
emitted before it; stopping is decided by the draws themselves, so the emitted block followed by the
target's own continuation is one target sample (the block law meets the losslessness criterion of
:doc:`block` exactly; :func:`otspec.verifiers.chain.lossless_violation`).

**Acceptance.** The walk passes node :math:`u` iff :math:`Y^{|u|} = u`, which has probability
:math:`M_b(u) = \prod_i M_b(u_i \mid u^{i-1})`, so

.. math:: P(\tau \ge d) = \sum_{|u| = d} M_b(u), \qquad \mathbb{E}[\tau] = \sum_{u \ne \emptyset} M_b(u),

:math:`p(S)` on a set.

**Optimal for its drafts.** Any lossless verifier's block passes :math:`u` only if :math:`u` is
drafted and, by the losslessness criterion, with probability at most
:math:`M_b(u_{|u|} \mid u^{|u|-1})` times that of passing its parent; by induction at most
:math:`M_b(u)`. Summing over the drafted nodes bounds :math:`\mathbb{E}[\tau]` by the walk's value
(on a set: no lossless rule outputs a draft with probability above :math:`p(S)`, which is the LP
optimum :math:`\alpha^*(p, \delta_S)`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from otspec import models as _models
from otspec._validation import as_generator
from otspec.errors import ShapeMismatchError, UnsupportedMethodError
from otspec.laws import DraftLaw

__all__ = ["acceptance_by_depth", "block_law", "expected_accepted", "expected_accepted_given_paths", "sample", "tree_children"]


def tree_children(law: DraftLaw) -> dict:
    """The drafted children of every node of a deterministic law: ``{prefix: tuple of tokens}``.

    A tree law (:func:`otspec.laws.top_k_tree`, :func:`otspec.laws.dynamic_tree`) gives its tree; any
    other law with one tuple of probability 1 (:func:`otspec.laws.top_k`, a one-row
    :func:`otspec.explicit`) is the depth-1 tree of its distinct drafted tokens.

    Parameters
    ----------
    law : DraftLaw
        A deterministic draft law.

    Returns
    -------
    dict
        ``{(): root children, (x,): children of x, ...}``; leaves are absent.

    Raises
    ------
    UnsupportedMethodError
        If the law drafts more than one tuple (sampled drafts: use the tree verifiers of
        :mod:`otspec.verifiers.tree`).

    Examples
    --------
    >>> import otspec
    >>> tree_children(otspec.laws.top_k([0.2, 0.5, 0.3], 2))
    {(): (1, 2)}
    """
    children = getattr(law, "children", None)
    if isinstance(children, dict) and law.deterministic:
        return children
    if law.num_tuples() != 1:
        raise UnsupportedMethodError(
            f"sample-and-match walks a deterministic draft set or tree, but {law!r} drafts {law.num_tuples()} tuples; "
            "use otspec.laws.top_k / top_k_tree / dynamic_tree, or a sampled-tree verifier (otspec.verifiers.tree)"
        )
    tuples, _ = law.enumerate()
    return {(): tuple(dict.fromkeys(int(x) for x in tuples[0]))}


def _target(p_model: Any, law: DraftLaw):
    model = p_model if callable(p_model) else _models.context_free(p_model)
    model = _models.as_model(model, name="p_model")
    if model.V != law.V:
        raise ShapeMismatchError(f"p_model has V = {model.V} tokens but {law!r} has V = {law.V}; use one vocabulary")
    return model


def block_law(p_model: Any, law: DraftLaw) -> dict:
    r"""Exact law of the emitted block :math:`O = (Y^\tau, Y_{\tau + 1})` of the walk: ``{O: P(O)}``.

    :math:`P(O = u y) = M_b(u)\, M_b(y \mid u)` for every drafted node :math:`u` (the root included)
    and every token :math:`y` that is not a drafted child of :math:`u`.

    Parameters
    ----------
    p_model : Model, callable or array_like of shape (V,)
        The target model (one distribution: the same conditional after every prefix).
    law : DraftLaw
        A deterministic draft set or tree.

    Returns
    -------
    dict of tuple of int to float
        The block law; :func:`otspec.verifiers.chain.lossless_violation` of it is 0 up to rounding.

    Raises
    ------
    UnsupportedMethodError, ShapeMismatchError
        For a law that is not deterministic, or a target over another vocabulary.

    Examples
    --------
    >>> import otspec
    >>> block_law([0.5, 0.25, 0.25], otspec.laws.top_k([0.1, 0.6, 0.3], 1))
    {(0,): 0.5, (2,): 0.25, (1, 0): 0.125, (1, 1): 0.0625, (1, 2): 0.0625}
    """
    children = tree_children(law)
    model = _target(p_model, law)
    out: dict = {}
    stack = [((), 1.0)]
    while stack:
        u, mass = stack.pop()
        cond = model(u)
        kids = set(children.get(u, ()))
        for y in np.flatnonzero(cond):
            y = int(y)
            if y in kids:
                stack.append((u + (y,), mass * float(cond[y])))
            else:
                out[u + (y,)] = mass * float(cond[y])
    return dict(sorted(out.items(), key=lambda kv: (len(kv[0]), kv[0])))


def acceptance_by_depth(p_model: Any, law: DraftLaw) -> np.ndarray:
    r""":math:`P(\tau \ge d) = \sum_{|u| = d} M_b(u)` for :math:`d = 1, \dots, \gamma` (closed form).

    Parameters
    ----------
    p_model : Model, callable or array_like of shape (V,)
        The target model.
    law : DraftLaw
        A deterministic draft set or tree.

    Returns
    -------
    ndarray, shape (gamma,)
        One entry per depth of the tree (``gamma = 1`` for a set).

    Examples
    --------
    >>> import otspec
    >>> acceptance_by_depth([0.5, 0.25, 0.25], otspec.laws.top_k_tree([0.1, 0.6, 0.3], 1, gamma=2)).tolist()
    [0.25, 0.0625]
    """
    children = tree_children(law)
    model = _target(p_model, law)
    by_depth: list = []
    level = [((), 1.0)]
    while level:
        nxt = []
        for u, mass in level:
            cond = model(u)
            nxt += [(u + (y,), mass * float(cond[y])) for y in children.get(u, ())]
        if nxt:
            by_depth.append(sum(m for _, m in nxt))
        level = nxt
    return np.asarray(by_depth, dtype=np.float64)


def expected_accepted(p_model: Any, law: DraftLaw) -> float:
    r""":math:`\mathbb{E}[\tau] = \sum_{u \ne \emptyset} M_b(u)` over the drafted nodes: the walk's
    value and the most any lossless verifier attains on these drafts (:math:`p(S)` on a set).

    Parameters
    ----------
    p_model : Model, callable or array_like of shape (V,)
        The target model.
    law : DraftLaw
        A deterministic draft set or tree.

    Returns
    -------
    float
        Expected number of accepted draft tokens per round.

    Examples
    --------
    >>> import otspec
    >>> expected_accepted([0.5, 0.25, 0.25], otspec.laws.top_k([0.1, 0.6, 0.3], 2))
    0.5
    """
    return float(acceptance_by_depth(p_model, law).sum())


def sample(p_model: Any, law: DraftLaw, *, rng: np.random.Generator) -> tuple:
    """One round of the walk: the emitted block (accepted tokens, then one more), as a tuple.

    Parameters
    ----------
    p_model : Model, callable or array_like of shape (V,)
        The target model.
    law : DraftLaw
        A deterministic draft set or tree.
    rng : numpy.random.Generator
        The generator of the target draws (one uniform per emitted token).

    Returns
    -------
    tuple of int
        ``O = (Y_1, ..., Y_tau, Y_{tau+1})``; ``len(O) - 1`` tokens were accepted.

    Raises
    ------
    UnsupportedMethodError, ShapeMismatchError
        For a law that is not deterministic, or a target over another vocabulary.
    OtspecTypeError
        If ``rng`` is not a :class:`numpy.random.Generator`.

    Examples
    --------
    >>> import numpy as np, otspec
    >>> sample([0.0, 1.0, 0.0], otspec.laws.top_k([0.1, 0.6, 0.3], 1), rng=np.random.default_rng(0))
    (1, 1)
    """
    rng = as_generator(rng)
    children = tree_children(law)
    model = _target(p_model, law)
    u: tuple = ()
    while True:
        cond = model(u)
        cdf = np.cumsum(cond)
        y = int(min(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"), np.flatnonzero(cond)[-1]))
        if y not in children.get(u, ()):
            return u + (y,)
        u = u + (y,)


def expected_accepted_given_paths(P: Any, X: Any) -> float:
    r""":math:`\mathbb{E}[\tau]` of the walk over ``k`` drafted sequences given their target conditionals
    (a real-model round: the tree is the trie of the sequences' prefixes, each distinct node counted once).

    Parameters
    ----------
    P : array_like, shape (k, gamma + 1, V)
        ``P[j, i]`` :math:`= M_b(\cdot \mid \text{context}, X[j, :i])`.
    X : array_like of int, shape (k, gamma)
        The drafted sequences.

    Returns
    -------
    float
        :math:`\sum_u M_b(u)` over the distinct non-root prefixes :math:`u` of the sequences.

    Examples
    --------
    >>> P = np.full((2, 2, 2), 0.5)
    >>> expected_accepted_given_paths(P, [[0], [1]])            # both children of the root
    1.0
    """
    P = np.asarray(P, dtype=np.float64)
    X = np.asarray(X, dtype=np.int64)
    k, g = X.shape
    seen: set = set()
    total = 0.0
    for j in range(k):
        mass = 1.0
        for i in range(g):
            mass *= float(P[j, i, X[j, i]])
            u = tuple(X[j, : i + 1].tolist())
            if u not in seen:
                seen.add(u)
                total += mass
    return total
