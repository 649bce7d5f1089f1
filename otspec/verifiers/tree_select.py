r"""Select one drafted sequence, then block-verify it: the optimal tree verifier and the BV boosts.

A *select-then-BV* tree verifier (:doc:`trees`, Theorem 2) sees the drafted tree, picks one of the
``k`` drafted sequences with some rule whose law over sequences is :math:`\mu`, and runs block
verification (Sun et al., Algorithm 2; :mod:`otspec.verifiers.block`) on the chosen sequence with
:math:`\mu`'s conditionals :math:`\mu(y \mid u) = \mu(uy) / \mu(u)` as the draft model. Block
verification is lossless for whatever chain law it is told, and the chosen sequence has law
:math:`\mu` exactly, so every such rule is lossless; its :math:`E[\tau]` is
:math:`\Phi(\mu) = \sum_{u} W_\mu(u)` with :math:`W_\mu(uy) = \min(W_\mu(u) M_b(y \mid u), \mu(uy))`.

Rules (``verifier=`` of :mod:`otspec.verifiers.tree`):

* ``"optimal"`` -- :math:`\mu^*` from the node LP (:func:`otspec.tree_optimum`): the accepted prefix
  :math:`Z` of an optimal rule ends at node :math:`v` with probability
  :math:`E(v) = A^*(v) - \sum_y A^*(vy)`; an exact transport plan (network simplex) couples the
  drafted tree with :math:`v` among the tree's own nodes (Hall's condition is the node LP's
  constraint), and a uniformly chosen draft through :math:`v` is selected. Then
  :math:`\mu^*(u) \ge A^*(u)`, so :math:`\Phi(\mu^*) = T^*`. i.i.d. drafts.
* ``"kseq_bv"``, ``"rrs_bv"``, ``"rrs_wor_bv"`` -- the *BV boost* of a top-down tree verifier: run
  it, keep only its accepted prefix :math:`Z`, select a uniformly chosen draft through :math:`Z`,
  and block-verify. Its :math:`\mu` passes every prefix the base rule accepts, so
  :math:`W_\mu \ge A_{\text{base}}` and :math:`E[\tau]` never drops (:doc:`trees`, corollary).
* ``"selj_bv"`` -- the law in :math:`B_k` maximising the depth-:math:`\gamma` joint acceptance
  :math:`\sum_l \min(\mu(l), M_b(l))` (:func:`joint_selection_law`: capped polymatroid greedy in
  descending :math:`M_b/M_s` order), realised by an exact transport coupling of the drafted tree
  with the drafted sequences, then block-verified. A closed-form lower bound on :math:`T^*`.

The selection law is computed by enumerating every drafted tree (small V, k, gamma only).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from otspec import prefixes
from otspec.errors import UnsupportedMethodError
from otspec.trees import draft_trees

__all__ = [
    "SELECT_VERIFIERS",
    "BASE_RULE",
    "SelectionPlan",
    "selection_plan",
    "tree_laws",
    "mu_conditional",
    "selection_value",
    "joint_selection_law",
]

#: The select-then-BV rules and, for the boosts, the top-down rule whose accepted prefix they keep.
SELECT_VERIFIERS = ("optimal", "kseq_bv", "rrs_bv", "rrs_wor_bv", "selj_bv")
BASE_RULE = {"kseq_bv": "kseq", "rrs_bv": "rrs", "rrs_wor_bv": "rrs_wor"}


@dataclass(frozen=True, eq=False)
class SelectionPlan:
    r"""Which drafted sequence a select-then-BV rule picks, for every drafted tree.

    Attributes
    ----------
    trees : ndarray of int64, shape (M, k, gamma)
        Every drafted tree of positive probability (:func:`otspec.trees.draft_trees`).
    weights : ndarray, shape (M,)
        Their probabilities.
    select : ndarray, shape (M, k)
        ``select[m, j]``: probability of selecting draft ``j`` given tree ``m`` (rows sum to 1).
    mu : ndarray, shape (V**gamma,)
        The selection law on sequences (lexicographic index), :math:`\sum_m Q_m \sum_j
        \text{select}[m, j]\, \delta_{\text{tree}_m[j]}`.
    V, gamma : int
        Vocabulary size and sequence length.
    """

    trees: np.ndarray
    weights: np.ndarray
    select: np.ndarray
    mu: np.ndarray
    V: int
    gamma: int

    def tree_index(self, tree: np.ndarray) -> int:
        """Row of a drafted tree in :attr:`trees`.

        Parameters
        ----------
        tree : array_like of int, shape (k, gamma)
            The drafted sequences, one per row.

        Returns
        -------
        int
            Its row, or -1 when the tree has probability 0.
        """
        hit = np.flatnonzero((self.trees == np.asarray(tree)[None]).all(axis=(1, 2)))
        return int(hit[0]) if hit.size else -1


def _leaf_index(paths: np.ndarray, V: int) -> np.ndarray:
    g = paths.shape[-1]
    return paths @ (V ** np.arange(g - 1, -1, -1, dtype=np.int64))


def _mu_from(trees: np.ndarray, weights: np.ndarray, select: np.ndarray, V: int) -> np.ndarray:
    leaf = _leaf_index(trees, V)  # (M, k)
    return np.bincount(leaf.ravel(), weights=(weights[:, None] * select).ravel(), minlength=V ** trees.shape[2])


def _through(tree: np.ndarray, prefix: tuple) -> np.ndarray:
    """Indices of the drafts of ``tree`` that start with ``prefix``."""
    t = len(prefix)
    if t == 0:
        return np.arange(tree.shape[0])
    return np.flatnonzero((tree[:, :t] == np.asarray(prefix)[None]).all(axis=1))


def _boost_select(trees: np.ndarray, laws: tuple, k: int) -> np.ndarray:
    """``select[m, j]``: a uniform draft through the accepted prefix of the base rule's law."""
    select = np.zeros((trees.shape[0], k))
    for m, (tr, law) in enumerate(zip(trees, laws, strict=True)):
        for o, pr in law.items():
            js = _through(tr, tuple(o[:-1]))
            select[m, js] += pr / js.size
    return select / select.sum(axis=1, keepdims=True)  # each law sums to 1 up to rounding


def _optimal_plan(p_model, q_model, k: int, gamma: int) -> tuple:
    from otspec.bounds.tree import tree_optimum

    res = tree_optimum(p_model, q_model, k, gamma, method="node")
    if not res.ok:
        raise UnsupportedMethodError(
            f"the node LP did not certify on this model pair (status {res.status!r}); the optimal tree verifier needs it"
        )
    A = [np.asarray(a) for a in res.node_weights]
    V = res.V
    # End-node law of the accepted prefix: E(v) = A(v) - sum_y A(vy) (>= 0 by the chain rule).
    ends, end_mass = [], []
    for d in range(gamma + 1):
        below = A[d + 1].reshape(-1, V).sum(axis=1) if d < gamma else 0.0
        e = np.maximum(A[d] - below, 0.0)
        for u in np.flatnonzero(e > 0):
            ends.append((d, int(u)))
            end_mass.append(float(e[u]))
    trees, weights = draft_trees(q_model, k, gamma, replacement=True)
    return trees, weights, _transport_select(trees, weights, ends, np.asarray(end_mass), V)


def _transport_select(trees: np.ndarray, weights: np.ndarray, ends: list, end_mass: np.ndarray, V: int) -> np.ndarray:
    """``select[m, j]`` of a Hall coupling of the drafted trees with end nodes ``ends`` ``[(depth, node)]``
    of masses ``end_mass``: a uniform draft through the end node the plan sends tree ``m`` to."""
    import ot

    M, k, gamma = trees.shape
    # node index of every draft prefix, per depth: (M, k) arrays
    node_of = [np.zeros(trees.shape[:2], dtype=np.int64)]
    for d in range(1, gamma + 1):
        node_of.append(_leaf_index(trees[:, :, :d], V))
    allowed = np.zeros((M, len(ends)), dtype=bool)
    for c, (d, u) in enumerate(ends):
        allowed[:, c] = (node_of[d] == u).any(axis=1)
    a = np.asarray(weights, dtype=np.float64)
    b = np.asarray(end_mass, dtype=np.float64)
    # Network simplex on the 0/1 cost: Hall's condition (membership in B_k) makes the zero-cost
    # plan feasible; the plan's rows, renormalised, are the selection rule (so the rule's law is
    # exactly the mu built from them, whatever rounding the plan carries).
    plan = ot.emd(a / a.sum(), b / b.sum(), np.where(allowed, 0.0, 1.0), numItermax=10_000_000)
    plan = np.where(allowed, plan, 0.0)
    rows = plan.sum(axis=1)
    select = np.zeros((M, k))
    for m in range(M):
        if rows[m] <= 0:  # a tree the plan gives no mass: any draft (it has no effect on mu's law beyond 0)
            select[m] = 1.0 / k
            continue
        for c in np.flatnonzero(plan[m] > 0):
            d, u = ends[c]
            js = np.flatnonzero(node_of[d][m] == u)
            select[m, js] += plan[m, c] / rows[m] / js.size
    return select


def _level_set_room(others_mu: np.ndarray, others_ms: np.ndarray, ms_l: float, k: int) -> float:
    r""":math:`\min_T h(M_s(l) + M_s(T)) - \mu(T)` over the level sets T of :math:`\mu / M_s` (the
    empty set included): how much :math:`\mu(l)` can grow inside :math:`B_k`. The minimum over
    all sets T is attained on a level set because :math:`h(M_s(l) + \cdot)` is concave."""
    from otspec.bounds.tree_node import coverage

    if others_mu.size == 0:
        return float(coverage(ms_l, k))
    order = np.argsort(-(others_mu / others_ms), kind="stable")
    cmu = np.concatenate([[0.0], np.cumsum(others_mu[order])])
    cms = np.concatenate([[0.0], np.cumsum(others_ms[order])])
    return float(max(0.0, (coverage(ms_l + cms, k) - cmu).min()))


def joint_selection_law(mb: Any, ms: Any, k: int) -> np.ndarray:
    r"""The law in :math:`B_k` maximising the joint acceptance :math:`\sum_l \min(\mu(l), M_b(l))`.

    Capped polymatroid greedy over the sequences ``l`` in descending :math:`M_b(l)/M_s(l)` order
    (one sort): first :math:`\mu(l) \mathrel{+}= \min(M_b(l) - \mu(l), \text{room}(l))`, then a second
    pass in the same order with no cap fills :math:`\mu` up to a base of :math:`B_k` (total mass 1).
    :math:`\text{room}(l) = \min_{S \ni l} h(M_s(S)) - \mu(S)` with :math:`h(m) = 1 - (1 - m)^k`, found
    on the level sets of :math:`\mu / M_s`. After the first pass :math:`\min(\mu, M_b)` is a maximal
    vector of the polymatroid :math:`B_k` capped at :math:`M_b`, so its total, the joint acceptance,
    is the largest any law in :math:`B_k` reaches.

    Parameters
    ----------
    mb, ms : array_like, shape (n,)
        Target and draft probabilities of the sequences (each sums to 1).
    k : int
        Number of i.i.d. drafted sequences.

    Returns
    -------
    ndarray, shape (n,)
        :math:`\mu`, a law in :math:`B_k` (zero where :math:`M_s = 0`).

    Notes
    -----
    Cost :math:`O(n^2 \log n)` in this exact form (a level-set scan per sequence); the sequences
    are enumerated, so it serves small vocabularies.

    Examples
    --------
    >>> mu = joint_selection_law([0.5, 0.5], [0.9, 0.1], 2)  # h(0.1) = 0.19 caps the second
    >>> [round(float(x), 12) for x in mu]
    [0.81, 0.19]
    """
    mb = np.asarray(mb, dtype=np.float64)
    ms = np.asarray(ms, dtype=np.float64)
    mu = np.zeros_like(ms)
    live = np.flatnonzero(ms > 0)
    with np.errstate(divide="ignore"):
        key = mb[live] / ms[live]
    order = live[np.argsort(-key, kind="stable")]
    for cap in (mb, np.full_like(mb, np.inf)):
        for seq in order:
            others = np.flatnonzero(mu > 0)
            others = others[others != seq]
            room = _level_set_room(mu[others], ms[others], ms[seq], k) - mu[seq]
            mu[seq] += max(0.0, min(cap[seq] - mu[seq], room))
    return mu


def _selj_plan(p_model, q_model, k: int, gamma: int) -> tuple:
    table = prefixes.enumerate_prefixes(p_model, q_model, gamma)
    mu = joint_selection_law(table.p_joint[gamma], table.q_joint[gamma], k)
    leaves = np.flatnonzero(mu > 0)
    trees, weights = draft_trees(q_model, k, gamma, replacement=True)
    ends = [(gamma, int(u)) for u in leaves]
    return trees, weights, _transport_select(trees, weights, ends, mu[leaves], p_model.V)


def selection_plan(p_model: Any, q_model: Any, k: int, gamma: int, verifier: str, *, base: Any = None) -> SelectionPlan:
    r"""The selection rule of a select-then-BV verifier for every drafted tree (see the module docstring).

    Parameters
    ----------
    p_model, q_model : Model
        Target and draft models (validated).
    k, gamma : int
        Number of drafted sequences and their length.
    verifier : {"optimal", "kseq_bv", "rrs_bv", "rrs_wor_bv", "selj_bv"}
        The rule.
    base : TreeKernel, optional
        For a boost: the exact kernel of its base rule (:func:`otspec.verifiers.tree.kernel` with
        :data:`BASE_RULE` ``[verifier]``); required for the boosts, unused for ``"optimal"`` and ``"selj_bv"``.
        :func:`otspec.verifiers.tree.selection_plan` supplies it.

    Returns
    -------
    SelectionPlan
        The drafted trees, their weights, the selection probabilities and the law :math:`\mu`.

    Raises
    ------
    UnsupportedMethodError
        If ``verifier`` is not a select-then-BV rule, a boost has no ``base``, or the node LP fails
        to certify.
    ProblemTooLargeError
        If the drafted trees cannot be enumerated.

    Examples
    --------
    >>> from otspec import models
    >>> from otspec.verifiers.tree_select import selection_plan
    >>> p, q = models.context_free([1/3, 2/3]), models.context_free([2/3, 1/3])
    >>> round(float(selection_plan(p, q, 2, 2, "optimal").mu.sum()), 12)
    1.0
    """
    if verifier == "optimal":
        trees, weights, select = _optimal_plan(p_model, q_model, k, gamma)
    elif verifier == "selj_bv":
        trees, weights, select = _selj_plan(p_model, q_model, k, gamma)
    elif verifier in BASE_RULE:
        if base is None or base.verifier != BASE_RULE[verifier]:
            raise UnsupportedMethodError(f"{verifier!r} needs the exact kernel of {BASE_RULE[verifier]!r} as base=")
        trees, weights = np.array(base.trees), np.array(base.weights)
        select = _boost_select(trees, base.laws, k)
    else:
        raise UnsupportedMethodError(f"verifier must be one of {SELECT_VERIFIERS} (got {verifier!r})")
    V = p_model.V
    for arr in (trees, weights, select):
        arr.setflags(write=False)
    mu = _mu_from(trees, weights, select, V)
    mu.setflags(write=False)
    return SelectionPlan(trees=trees, weights=weights, select=select, mu=mu, V=V, gamma=gamma)


def mu_conditional(plan: SelectionPlan, prefix: tuple) -> np.ndarray:
    r""":math:`\mu(\cdot \mid u)`, shape ``(V,)``: the selection law's next-token conditional after ``prefix``.

    Parameters
    ----------
    plan : SelectionPlan
        The selection rule.
    prefix : tuple of int
        A prefix :math:`u` with :math:`\mu(u) > 0` (shorter than ``gamma``).

    Returns
    -------
    ndarray, shape (V,)
        :math:`\mu(uy) / \mu(u)`.
    """
    V, g = plan.V, plan.gamma
    t = len(prefix)
    start = int(_leaf_index(np.asarray(prefix, dtype=np.int64), V)) * V ** (g - t) if t else 0
    block = plan.mu[start : start + V ** (g - t)].reshape(V, -1).sum(axis=1)
    return block / block.sum()


def tree_laws(p_model: Any, plan: SelectionPlan) -> tuple:
    """``laws[m]``: the exact law ``{O: P(O)}`` of the emitted block given drafted tree ``m``.

    Parameters
    ----------
    p_model : Model
        The target.
    plan : SelectionPlan
        The selection rule.

    Returns
    -------
    tuple of dict
        One ``{emitted block: probability}`` per drafted tree.
    """
    from otspec import models as _models
    from otspec.verifiers.block import conditional_law

    g = plan.gamma
    cache: dict = {}
    mu_model = _models.as_model(lambda prefix: mu_conditional(plan, tuple(prefix)), V=plan.V, name="selection law")

    def path_law(path: tuple) -> np.ndarray:
        hit = cache.get(path)
        if hit is None:
            hit = cache[path] = conditional_law(p_model, mu_model, list(path))
        return hit

    laws = []
    for tr, sel in zip(plan.trees, plan.select, strict=True):
        out: dict = {}
        for j in np.flatnonzero(sel > 0):
            path = tuple(int(v) for v in tr[j])
            law = path_law(path)
            for t in range(g + 1):
                for y in np.flatnonzero(law[t] > 0):
                    key = path[:t] + (int(y),)
                    out[key] = out.get(key, 0.0) + sel[j] * float(law[t, y])
        laws.append(out)
    return tuple(laws)


def selection_value(p_model: Any, q_model: Any, plan: SelectionPlan) -> float:
    r""":math:`\Phi(\mu)`: the rule's exact :math:`E[\tau]` in closed form (the W recursion with :math:`\mu` as the draft).

    Parameters
    ----------
    p_model, q_model : Model
        Target and draft models.
    plan : SelectionPlan
        The selection rule.

    Returns
    -------
    float
        :math:`\sum_u W_\mu(u)`.
    """
    from otspec.bounds.tree_node import selection_value as phi

    return phi(prefixes.enumerate_prefixes(p_model, q_model, plan.gamma), np.asarray(plan.mu))[0]
