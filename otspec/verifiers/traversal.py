r"""Traversal Verification (Weng et al., NeurIPS 2025): leaf-to-root verification of a draft tree.

The rule, as we reconstruct it from the paper (its per-node formulas are not public in code), is
*sequence-level recursive rejection sampling with a pseudo-token*. Every node :math:`v` (a drafted
prefix) carries a weight :math:`a_v \in [0, 1]`, with :math:`a_{root} = 1`, and the node's target is
the measure over :math:`\Omega \cup \{\bot\}`

.. math:: T_v(y) = a_v\, M_b(y \mid v), \qquad T_v(\bot) = 1 - a_v,

where :math:`\bot` means "the accepted path does not pass through v". Node :math:`v` runs recursive
rejection sampling (RRS) from its draft law :math:`M_s(\cdot \mid v)` (which puts no mass on
:math:`\bot`) to :math:`T_v`, over its children :math:`c_1, c_2, \dots` in drafting order:

* child :math:`c_j` is *tried* with weight :math:`a_{c_j} = \min(1, T^{(j)}(c_j) / q^{(j)}(c_j))`
  -- its subtree is verified first (leaves before their parents, hence "leaf to root"), and the
  child is accepted iff its own verification does not end in :math:`\bot`;
* after a rejected child, :math:`T^{(j+1)} = \mathrm{norm}((T^{(j)} - q^{(j)})_+)` and, for children
  drawn without replacement, :math:`q^{(j+1)} = \mathrm{norm}(q^{(j)}` without :math:`c_j)`;
* when every child is rejected, one draw from the residual :math:`T^{(m+1)}`: a token y ends the
  block at :math:`v` with correction y; :math:`\bot` rejects v (its parent moves on). A leaf at
  depth :math:`\gamma` has no children: it is accepted w.p. :math:`a_v` with a bonus token
  :math:`\sim M_b(\cdot \mid v)`.

The first child's weight is :math:`\min(1, a_v M_b(c \mid v)/M_s(c \mid v))`, block verification's
running ratio :math:`p_i = \min(p_{i-1} r_i, 1)` (the paper's "sequence-level acceptance"
:math:`p_\alpha`, e.g. :math:`\min(0.5 \cdot 4/3, 1) = 2/3` in its introduction); a rejected leaf
lowers its parent's residual and the next sibling's weight is re-derived from it; the pseudo-token
of target mass :math:`1 - a_v` is the paper's description of the design ("RRS without replacement
at the sequence level, transporting :math:`M_s` onto :math:`P(A) M_b`"). On a single chain the
rule *is* block verification: the parent of a rejected leaf is accepted w.p.
:math:`Z / (Z + 1 - p)` with :math:`Z = \sum (p M_b - M_s)_+` (block verification's :math:`h`), with
block verification's weighted residual, and its coins scanned from the leaf down give the same law
(the tests check both, and E[tau] against :func:`otspec.verifiers.block.expected_accepted`).

Losslessness follows by induction: a node's verification, averaged over its drafted subtree, has
output law exactly :math:`T_v` over :math:`\Omega \cup \{\bot\}` (RRS is lossless for any target
measure), so a child is accepted with exactly the probability RRS needs. The tests check it
exactly on enumerated trees (:func:`otspec.verifiers.chain.lossless_violation`).

Trees are those of :mod:`otspec.verifiers.tree`: ``k`` drafted paths of length :math:`\gamma`
(i.i.d., or distinct first tokens without replacement), merged into their trie (paths sharing a
prefix share its node; the continuations below a node are i.i.d. given it). With replacement a
token drafted n times at a node is one trie node, tried once with every continuation below it, and
the residual update :math:`T \leftarrow \mathrm{norm}((T - q)_+)` is applied once *per copy*, at
each copy's place in the drafting order, as recursive rejection sampling with replacement does (a
repeat has :math:`T(c) = 0` and is rejected surely). Reading: applying the update once per distinct
token is *not* lossless (the tests keep that variant as a negative control).

References
----------
Weng, Hu, Chen, Liu, Mei, Qiu, Tian, Shi, "Traversal Verification for Speculative Tree Decoding",
NeurIPS 2025, arXiv 2505.12398.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from otspec import models as _models
from otspec._validation import as_generator, as_int_in_range
from otspec.errors import InvalidDraftsError
from otspec.sampling import spawn_streams
from otspec.trees import draft_trees
from otspec.verifiers.tree import TreeKernel

__all__ = ["kernel", "tree_law", "expected_accepted", "block_law", "sample"]

NAME = "traversal"


def _children(paths: tuple, depth: int) -> list:
    """The drafted next tokens in drafting order, one entry per path: ``(token, paths through it)``
    at a token's first occurrence, ``(token, None)`` at a repeat (a draft with replacement)."""
    groups: dict = {}
    for path in paths:
        groups.setdefault(int(path[depth]), []).append(path)
    seen: set = set()
    out = []
    for path in paths:
        c = int(path[depth])
        out.append((c, None if c in seen else tuple(groups[c])))
        seen.add(c)
    return out


class _Traversal:
    """Exact law (``law``) or one sampled outcome (``draw``) of the rule on one drafted tree."""

    def __init__(self, p_model, q_model, gamma: int, replacement: bool):
        self.p_model, self.q_model, self.gamma, self.replacement = p_model, q_model, gamma, replacement

    def _start(self, prefix: tuple, a: float):
        V = self.p_model.V
        T = np.empty(V + 1)
        T[:V] = a * self.p_model(prefix)
        T[V] = 1.0 - a
        return T, np.concatenate([np.asarray(self.q_model(prefix), dtype=np.float64), [0.0]])

    def _child_weight(self, T, q, c) -> float:
        return 1.0 if T[c] >= q[c] else float(T[c] / q[c])

    def _after_reject(self, T, q, c, depth):
        T = np.maximum(T - q, 0.0)
        z = T.sum()
        T = T / z if z > 0 else T
        if not self.replacement and depth == 0:  # successive sampling at the branching root
            q = q.copy()
            q[c] = 0.0
            s = q.sum()
            q = q / s if s > 0 else q
        return T, q

    def law(self, prefix: tuple, a: float, paths: tuple) -> tuple[dict, float]:
        """({block: probability through this node}, P(bot)) given the drafted subtree."""
        depth = len(prefix)
        V = self.p_model.V
        out: dict = {}
        if depth == self.gamma:
            bonus = self.p_model(prefix)
            for y in np.flatnonzero(bonus > 0):
                out[prefix + (int(y),)] = a * float(bonus[y])
            return out, 1.0 - a
        T, q = self._start(prefix, a)
        alive = 1.0  # probability that every child tried so far was rejected
        for c, sub in _children(paths, depth):
            if sub is not None:  # a repeated draft was rejected before: T(c) = 0, only the update
                child_out, child_bot = self.law(prefix + (c,), self._child_weight(T, q, c), sub)
                for o, w in child_out.items():
                    out[o] = out.get(o, 0.0) + alive * w
                alive *= child_bot
            T, q = self._after_reject(T, q, c, depth)
        for y in np.flatnonzero(T[:V] > 0):
            o = prefix + (int(y),)
            out[o] = out.get(o, 0.0) + alive * float(T[y])
        return out, alive * float(T[V])

    def draw(self, prefix: tuple, a: float, paths: tuple, coins, draws):
        """The emitted block through this node, or None for bot."""
        depth = len(prefix)
        if depth == self.gamma:
            if coins.random() >= a:
                return None
            bonus = self.p_model(prefix)
            return prefix + (int(draws.choice(bonus.size, p=bonus / bonus.sum())),)
        T, q = self._start(prefix, a)
        for c, sub in _children(paths, depth):
            if sub is not None:
                got = self.draw(prefix + (c,), self._child_weight(T, q, c), sub, coins, draws)
                if got is not None:
                    return got
            T, q = self._after_reject(T, q, c, depth)
        y = int(draws.choice(T.size, p=T / T.sum()))
        return None if y == self.p_model.V else prefix + (y,)


def _models_pair(p_model, q_model):
    p_model = _models.as_model(p_model, name="p_model")
    q_model = _models.as_model(q_model, V=p_model.V, name="q_model")
    return p_model, q_model


def _as_tree(tree: Any, V: int) -> tuple:
    t = np.asarray(tree)
    if t.ndim != 2 or t.size == 0 or not np.issubdtype(t.dtype, np.integer) or t.min() < 0 or t.max() >= V:
        raise InvalidDraftsError(
            f"tree must be a (k, gamma) array of token ids in [0, {V}) (got {np.asarray(tree).tolist()!r}); "
            "pass the k drafted paths as rows, e.g. otspec.trees.sample_tree(...)"
        )
    return tuple(tuple(int(v) for v in row) for row in t)


def tree_law(p_model: Any, q_model: Any, tree: Any, *, replacement: bool = True) -> dict:
    r"""Exact law ``{O: P(O | tree)}`` of the emitted block given one drafted tree.

    Parameters
    ----------
    p_model, q_model : Model or callable
        Target :math:`M_b` and draft :math:`M_s` (:mod:`otspec.models`).
    tree : array_like of int, shape (k, gamma)
        The drafted paths, in drafting order.
    replacement : bool
        Whether the paths were drafted i.i.d. (``True``) or with distinct first tokens by successive
        sampling (``False``; the root's draft law then drops each rejected child).

    Returns
    -------
    dict of tuple of int to float
        ``{(y_1, ..., y_tau, y_{tau+1}): probability}``.

    Raises
    ------
    InvalidDistributionError, ShapeMismatchError
        If a model is invalid or the vocabularies differ.
    InvalidDraftsError
        If ``tree`` is not a (k, gamma) array of token ids.

    Examples
    --------
    >>> from otspec import models
    >>> from otspec.verifiers import traversal
    >>> p = models.context_free([0.5, 0.5])
    >>> sorted(traversal.tree_law(p, p, [[0]]).items())  # p == q: the draft is always accepted
    [((0, 0), 0.5), ((0, 1), 0.5)]
    """
    p_model, q_model = _models_pair(p_model, q_model)
    paths = _as_tree(tree, p_model.V)
    out, _ = _Traversal(p_model, q_model, len(paths[0]), bool(replacement)).law((), 1.0, paths)
    return out


def kernel(p_model: Any, q_model: Any, k: int, gamma: int, *, replacement: bool = True) -> TreeKernel:
    r"""Exact law of the emitted block for every drafted tree (enumerated).

    Parameters
    ----------
    p_model, q_model : Model or callable
        Target and draft models.
    k, gamma : int
        Number of drafted paths and their length.
    replacement : bool
        i.i.d. paths (``True``) or distinct first tokens without replacement (``False``).

    Returns
    -------
    TreeKernel
        ``verifier="traversal"``; :meth:`~otspec.verifiers.tree.TreeKernel.expected_accepted` is
        the exact :math:`E[\tau]`.

    Raises
    ------
    NotAnIntegerError, InvalidDraftCountError
        If ``k`` or ``gamma`` is not an integer ``>= 1`` (or ``k`` exceeds the first-token support
        without replacement).
    InvalidDistributionError, ShapeMismatchError
        If a model is invalid or the vocabularies differ.
    ProblemTooLargeError
        If the drafted trees are too many to enumerate.

    Examples
    --------
    >>> from otspec import models
    >>> from otspec.verifiers import traversal
    >>> p, q = models.context_free([1/3, 2/3]), models.context_free([2/3, 1/3])
    >>> round(traversal.kernel(p, q, 1, 2).expected_accepted() * 9, 9)  # block verification's 11/9
    11.0
    """
    p_model, q_model = _models_pair(p_model, q_model)
    k = as_int_in_range(k, "k")
    gamma = as_int_in_range(gamma, "gamma")
    trees, weights = draft_trees(q_model, k, gamma, replacement=bool(replacement))
    rule = _Traversal(p_model, q_model, gamma, bool(replacement))
    laws = tuple(rule.law((), 1.0, tuple(tuple(int(v) for v in path) for path in t))[0] for t in trees)
    return TreeKernel(trees=trees, weights=weights, laws=laws, verifier=NAME)


def expected_accepted(p_model: Any, q_model: Any, k: int, gamma: int, *, replacement: bool = True) -> float:
    r"""Exact :math:`E[\tau]` of Traversal Verification by enumeration over drafted trees.

    Parameters
    ----------
    p_model, q_model : Model or callable
        Target and draft models.
    k, gamma : int
        Number of drafted paths and their length.
    replacement : bool
        i.i.d. paths or distinct first tokens without replacement.

    Returns
    -------
    float

    Raises
    ------
    NotAnIntegerError, InvalidDraftCountError
        If ``k`` or ``gamma`` is invalid.
    InvalidDistributionError, ShapeMismatchError
        If a model is invalid or the vocabularies differ.
    ProblemTooLargeError
        If the drafted trees are too many to enumerate.

    Examples
    --------
    >>> from otspec import models
    >>> from otspec.verifiers import traversal
    >>> p = models.context_free([0.5, 0.5])
    >>> traversal.expected_accepted(p, p, 2, 2)
    2.0
    """
    return kernel(p_model, q_model, k, gamma, replacement=replacement).expected_accepted()


def block_law(p_model: Any, q_model: Any, k: int, gamma: int, *, replacement: bool = True) -> dict:
    """The exact law ``{O: P(O)}`` of the emitted block over drafted trees and coins.

    Parameters
    ----------
    p_model, q_model : Model or callable
        Target and draft models.
    k, gamma : int
        Number of drafted paths and their length.
    replacement : bool
        i.i.d. paths or distinct first tokens without replacement.

    Returns
    -------
    dict of tuple of int to float

    Raises
    ------
    NotAnIntegerError, InvalidDraftCountError
        If ``k`` or ``gamma`` is invalid.
    InvalidDistributionError, ShapeMismatchError
        If a model is invalid or the vocabularies differ.
    ProblemTooLargeError
        If the drafted trees are too many to enumerate.

    Examples
    --------
    >>> from otspec import models
    >>> from otspec.verifiers import traversal
    >>> p = models.context_free([0.5, 0.5])
    >>> round(float(sum(traversal.block_law(p, p, 2, 1).values())), 12)
    1.0
    """
    return kernel(p_model, q_model, k, gamma, replacement=replacement).output_law()


def sample(p_model: Any, q_model: Any, tree: Any, *, replacement: bool = True, rng: np.random.Generator) -> tuple:
    """One emitted block for one drafted tree.

    Accept coins come from ``rng``; residual and bonus draws from a child stream spawned from it
    (:func:`otspec.sampling.spawn_streams` with ``parent_first=True``).

    Parameters
    ----------
    p_model, q_model : Model or callable
        Target and draft models.
    tree : array_like of int, shape (k, gamma)
        The drafted paths, in drafting order.
    replacement : bool
        How the paths were drafted (see :func:`tree_law`).
    rng : numpy.random.Generator
        The caller's generator.

    Returns
    -------
    tuple of int
        The emitted block :math:`(y_1, \\dots, y_\\tau, y_{\\tau+1})`.

    Raises
    ------
    InvalidDistributionError, ShapeMismatchError
        If a model is invalid or the vocabularies differ.
    InvalidDraftsError
        If ``tree`` is not a (k, gamma) array of token ids.
    OtspecTypeError
        If ``rng`` is not a ``numpy.random.Generator``.

    Examples
    --------
    >>> import numpy as np
    >>> from otspec import models
    >>> from otspec.verifiers import traversal
    >>> p = models.context_free([0.5, 0.5])
    >>> len(traversal.sample(p, p, [[0, 1]], rng=np.random.default_rng(0)))  # p == q: all accepted + bonus
    3
    """
    p_model, q_model = _models_pair(p_model, q_model)
    paths = _as_tree(tree, p_model.V)
    coins, draws = spawn_streams(as_generator(rng), 2, parent_first=True)
    return _Traversal(p_model, q_model, len(paths[0]), bool(replacement)).draw((), 1.0, paths, coins, draws)
