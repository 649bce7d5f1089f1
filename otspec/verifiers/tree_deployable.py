r"""Deployable select-then-BV tree verifiers: the selection law's conditionals in closed form.

A select-then-BV tree verifier (:mod:`otspec.verifiers.tree_select`, :doc:`trees`, Theorem 2) picks
one drafted sequence with a rule whose law over sequences is :math:`\mu`, then block-verifies it with
:math:`\mu`'s conditionals. To run it at a real vocabulary, :math:`\mu(\cdot \mid u)` is needed at the
nodes :math:`u` of the *selected* path only. For the two rules here it follows from a count
recursion along that path, with no enumeration of drafted trees: the drafts through a node
:math:`u` continue i.i.d. from :math:`M_s(\cdot \mid u)` whatever happened above :math:`u`, so the
state of the recursion is the law of *how many* drafts pass the node.

``"kseq_bv"`` -- K-SEQ's BV boost. K-SEQ walks the tree top-down (SpecTr Algorithm 2 at every node
with :math:`\rho^*` for its number n of alive drafts), its accepted prefix :math:`Z` is kept, one
draft through :math:`Z` is chosen uniformly and block-verified. With :math:`a = \min(1, p/(\rho^* q))`,
:math:`\beta = \sum_x q(x) a(x)`, residual :math:`r`, and :math:`\bar q(x) = q(x)(1 - a(x))` (a rejected
draft's token), K-SEQ with n drafts at a node has

.. math::
    L_n(y, m) &= P(\text{output } y,\ m \text{ drafts equal } y)
      = q_y a_y \sum_{j=1}^{n} [z^{m-1}] (1 - \beta - \bar q_y + \bar q_y z)^{j-1} (1 - q_y + q_y z)^{n-j}
      + r_y [z^m] (1 - \beta - \bar q_y + \bar q_y z)^n, \\
    J_n(x) &= P(\text{no draft equals the output, the chosen draft has } x)
      = \bar q(x) (1-\beta)^{n-1} \Big(\sum_y r_y (1 - \tfrac{\bar q_y}{1-\beta})^{n-1} - r_x (1 - \tfrac{\bar q_x}{1-\beta})^{n-1}\Big).

With :math:`\pi_u(n) = P(Z \text{ passes } u \text{ with } n \text{ drafts through } u)` and
:math:`\sigma_u = P(Z \text{ ends above } u,\ \text{the chosen draft passes } u)`:
:math:`\mu(u) = \sum_n \pi_u(n) + \sigma_u`,
:math:`\mu(y \mid u) \mu(u) = \sum_n \pi_u(n) (p_y - L_n(y, 0) + J_n(y)) + \sigma_u q_y`,
:math:`\pi_{uy}(m) = \sum_n \pi_u(n) L_n(y, m)` and :math:`\sigma_{uy} = \sigma_u q_y + \sum_n \pi_u(n) J_n(y)`.
Cost :math:`O(kV)` per node of the selected path.

``"nested"`` -- nested optimal selection. At a node with n drafts through it, choose a child with the
optimal single-step i.i.d. selection law :math:`r^*_n(p(\cdot \mid u), q(\cdot \mid u))` (the
realisation of :mod:`otspec.verifiers.step.optimal_iid`), keep the drafts through it, recurse to depth
:math:`\gamma`; block-verify the selected chain. With :math:`K_{u,n}(y, m) = P(\text{choose } y,\ m
\text{ drafts pass } y \mid n \text{ pass } u)`: :math:`\pi_{\emptyset} = \delta_k`,
:math:`\pi_{uy}(m) = \sum_n \pi_u(n) K_{u,n}(y, m)`, :math:`\mu(u) = \sum_n \pi_u(n)` and
:math:`\mu(y \mid u) = \sum_n \pi_u(n) r^*_n(y \mid u) / \mu(u)`. For :math:`n \le 2` the count update
holds under any realisation of :math:`r^*_n`: :math:`K_1(y, 1) = q_y`, :math:`K_2(y, 2) = q_y^2`,
:math:`K_2(y, 1) = r^*_2(y) - q_y^2`, so with :math:`k \le 2` the rule costs one sort of
:math:`p/q` and two :math:`O(V)` scans per node of the selected path. For :math:`n \ge 3` the count
law depends on the realisation; here it is computed by enumerating the :math:`V^n` draft tuples
(small vocabularies only, :func:`nested_counts`).

Both rules are lossless: the chosen sequence has law :math:`\mu` exactly and block verification is
lossless for any chain law it is told. Inputs at real vocabulary are the drafted tree ``(k, gamma)``
and the conditionals at its nodes: ``p_conds`` ``(k, gamma + 1, V)`` with
``p_conds[j, i]`` :math:`= M_b(\cdot \mid \text{tree}[j, :i])` and ``q_conds`` ``(k, gamma, V)``
(rows of sequences sharing a prefix are equal; the lowest-index sequence's row is read).

References
----------
Sun, Suresh, Ro, Beirami, Jain, Yu, "SpecTr" (NeurIPS 2023), Algorithm 2; Sun et al., "Block
Verification Accelerates Speculative Decoding" (ICLR 2025), Algorithm 2.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from otspec import models as _models
from otspec import prefixes
from otspec._validation import as_generator
from otspec.errors import InvalidDraftsError, ProblemTooLargeError, ShapeMismatchError, UnsupportedMethodError
from otspec.trees import draft_trees
from otspec.verifiers.block import conditional_law, expected_accepted_given_path
from otspec.verifiers.schedule import accept_ratio, residual
from otspec.verifiers.step.kseq import kseq_details
from otspec.verifiers.step.optimal_iid import prepare
from otspec.verifiers.step.optimal_iid import selection_law as iid_selection_law
from otspec.verifiers.tree_select import SelectionPlan

__all__ = [
    "RULES",
    "MAX_COUNT_TUPLES",
    "kseq_node",
    "kseq_counts",
    "kseq_next",
    "nested_counts",
    "mu_conditionals",
    "selection_given_tree",
    "block_law_given_tree",
    "expected_accepted_given_tree",
    "sample",
    "sample_many",
    "sequence_law",
    "selection_plan",
]

#: The deployable select-then-BV rules.
RULES = ("kseq_bv", "nested")
#: Largest number of draft tuples :math:`V^n` enumerated for a nested count law with n >= 3.
MAX_COUNT_TUPLES = 200_000


#: Memo of per-node quantities keyed by the node's (p, q, n): the paths of one tree share their
#: upper nodes, and an enumeration meets the same node in many trees.
_NODE_CACHE: dict = {}
_NODE_CACHE_SIZE = 64


def _memo(build, p: np.ndarray, q: np.ndarray, n: int, *extra):
    """``build(p, q, n, *extra)``, memoised on the node's (p, q, n)."""
    key = (build.__name__, p.tobytes(), q.tobytes(), n)
    hit = _NODE_CACHE.get(key)
    if hit is None:
        if len(_NODE_CACHE) >= _NODE_CACHE_SIZE:
            _NODE_CACHE.pop(next(iter(_NODE_CACHE)))
        hit = _NODE_CACHE[key] = build(p, q, n, *extra)
    return hit


def _check_rule(rule: str) -> None:
    if rule not in RULES:
        raise UnsupportedMethodError(f"rule must be one of {RULES} (got {rule!r}); pick one of those")


# ------------------------------------------------------------------------------------------------
# K-SEQ at one node with n alive drafts


def kseq_node(p: np.ndarray, q: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray, float]:
    r"""K-SEQ with ``n`` i.i.d. drafts at one node: accept probability per token, residual, :math:`\beta`.

    ``n = 1`` is token verification (:math:`a = \min(1, p/q)`, :math:`r = \mathrm{norm}((p-q)_+)`), as
    the library's K-SEQ tree uses it at a node with one alive draft.

    Parameters
    ----------
    p, q : ndarray, shape (V,)
        The node's target and draft conditionals (validated distributions).
    n : int
        Number of drafts through the node (>= 1).

    Returns
    -------
    accept : ndarray, shape (V,)
        :math:`a(x) = \min(1, p(x)/(\rho^*_n q(x)))`.
    residual : ndarray, shape (V,)
        The residual law.
    beta : float
        :math:`\sum_x q(x) a(x)`, one draft's acceptance.

    Examples
    --------
    >>> import numpy as np
    >>> a, r, b = kseq_node(np.array([0.5, 0.5]), np.array([0.75, 0.25]), 1)
    >>> a.round(6).tolist(), r.tolist(), b
    ([0.666667, 1.0], [0.0, 1.0], 0.75)
    """
    if n == 1:
        a = accept_ratio(p, q)
        res, _ = residual(p, q)
        return a, res, float(np.minimum(p, q).sum())
    det = kseq_details(p, q, n)
    a = accept_ratio(p, det.rho_star * q)
    res, _ = residual(p, det.gamma * np.minimum(p / det.rho_star, q))
    return a, res, float(det.beta)


def kseq_counts(p: np.ndarray, q: np.ndarray, n: int, y: int, node: tuple | None = None) -> np.ndarray:
    r""":math:`L_n(y, m)`, ``m = 0..n``: K-SEQ with n drafts outputs ``y`` and m drafts equal ``y``.

    Parameters
    ----------
    p, q : ndarray, shape (V,)
        The node's conditionals.
    n : int
        Number of drafts through the node.
    y : int
        The output token.
    node : tuple, optional
        :func:`kseq_node` ``(p, q, n)`` if already computed.

    Returns
    -------
    ndarray, shape (n + 1,)
        Sums to :math:`p(y)` (K-SEQ is lossless).

    Examples
    --------
    >>> import numpy as np
    >>> p, q = np.array([0.5, 0.5]), np.array([0.75, 0.25])
    >>> round(float(kseq_counts(p, q, 2, 0).sum()), 12)
    0.5
    """
    a, r, beta = kseq_node(p, q, n) if node is None else node
    qy, ay = float(q[y]), float(a[y])
    rej_y = qy * (1.0 - ay)
    rej = np.array([max(1.0 - beta - rej_y, 0.0), rej_y])  # a rejected draft: (not y, y) as a polynomial in z
    fresh = np.array([1.0 - qy, qy])  # an unexamined draft
    rej_pow, fresh_pow = [np.ones(1)], [np.ones(1)]
    for _ in range(n):
        rej_pow.append(np.convolve(rej_pow[-1], rej))
        fresh_pow.append(np.convolve(fresh_pow[-1], fresh))
    acc = np.zeros(n)  # coefficient of z^(m-1), m = 1..n
    for j in range(1, n + 1):
        acc += np.convolve(rej_pow[j - 1], fresh_pow[n - j])
    out = r[y] * rej_pow[n]
    out[1:] += qy * ay * acc
    return out


def kseq_next(p: np.ndarray, q: np.ndarray, n: int, node: tuple | None = None) -> tuple[np.ndarray, np.ndarray]:
    r"""``(A, J)``: :math:`A(y) = P(\text{output } y \text{ and some draft equals } y)`,
    :math:`J(x) = P(\text{no draft equals the output, a uniformly chosen draft has token } x)`.

    Parameters
    ----------
    p, q : ndarray, shape (V,)
        The node's conditionals.
    n : int
        Number of drafts through the node.
    node : tuple, optional
        :func:`kseq_node` ``(p, q, n)`` if already computed.

    Returns
    -------
    A, J : ndarray, shape (V,)
        ``A + J`` is the law of the chosen draft's next token; it sums to 1.

    Examples
    --------
    >>> import numpy as np
    >>> A, J = kseq_next(np.array([0.5, 0.5]), np.array([0.75, 0.25]), 2)
    >>> round(float(A.sum() + J.sum()), 12)
    1.0
    """
    a, r, beta = kseq_node(p, q, n) if node is None else node
    rej_tok = q * (1.0 - a)
    miss = np.maximum(1.0 - beta - rej_tok, 0.0)  # a rejected draft whose token is not x
    A = p - r * miss**n
    surv = miss ** (n - 1)
    J = rej_tok * (float(r @ surv) - r * surv)
    return np.maximum(A, 0.0), np.maximum(J, 0.0)


# ------------------------------------------------------------------------------------------------
# Nested optimal selection: the count law of one node


def nested_counts(p: np.ndarray, q: np.ndarray, n: int, y: int, r: np.ndarray | None = None) -> np.ndarray:
    r""":math:`K_n(y, m)`, ``m = 0..n``: the n-draft selection chooses ``y`` and m drafts equal ``y``.

    Closed form for ``n <= 2`` (any realisation of :math:`r^*_n`); for ``n >= 3`` the realisation of
    :mod:`otspec.verifiers.step.optimal_iid`, by enumerating the :math:`V^n` draft tuples.

    Parameters
    ----------
    p, q : ndarray, shape (V,)
        The node's conditionals.
    n : int
        Number of drafts through the node.
    y : int
        The chosen token.
    r : ndarray, shape (V,), optional
        :math:`r^*_n` if already computed.

    Returns
    -------
    ndarray, shape (n + 1,)
        Sums to :math:`r^*_n(y)`.

    Raises
    ------
    ProblemTooLargeError
        For ``n >= 3`` when :math:`V^n` exceeds :data:`MAX_COUNT_TUPLES`.

    Examples
    --------
    >>> import numpy as np
    >>> K = nested_counts(np.array([0.5, 0.5]), np.array([0.75, 0.25]), 2, 1)
    >>> K.round(12).tolist()  # r*_2(1) = 0.4375 here: 1 - 0.75**2
    [0.0, 0.375, 0.0625]
    """
    qy = float(q[y])
    out = np.zeros(n + 1)
    if n == 1:
        out[1] = qy
        return out
    if n == 2:
        r = iid_selection_law(p, q, 2) if r is None else r
        out[2] = qy * qy
        out[1] = max(float(r[y]) - qy * qy, 0.0)
        return out
    V = q.shape[0]
    if V**n > MAX_COUNT_TUPLES:
        raise ProblemTooLargeError(
            f"the nested count law with n = {n} drafts enumerates V**n = {V**n} tuples (limit {MAX_COUNT_TUPLES}); "
            "use k <= 2 at this vocabulary"
        )
    return _enumerated_counts(p, q, n)[y]


_COUNT_CACHE: dict = {}


def _enumerated_counts(p: np.ndarray, q: np.ndarray, n: int) -> np.ndarray:
    """``(V, n + 1)`` count law of the realisation, by enumeration (memoised per (p, q, n))."""
    key = (p.tobytes(), q.tobytes(), n)
    hit = _COUNT_CACHE.get(key)
    if hit is not None:
        return hit
    V = q.shape[0]
    live = np.flatnonzero(q > 0)
    tuples = np.array(list(itertools.product(live.tolist(), repeat=n)), dtype=np.int64)
    w = np.prod(q[tuples], axis=1)
    sel = prepare(p, q, n).selection_rows(tuples)  # (T, V)
    counts = np.stack([(tuples == v).sum(axis=1) for v in range(V)], axis=1)  # (T, V)
    out = np.zeros((V, n + 1))
    for m in range(n + 1):
        out[:, m] = (w[:, None] * sel * (counts == m)).sum(axis=0)
    if len(_COUNT_CACHE) > 4096:
        _COUNT_CACHE.clear()
    _COUNT_CACHE[key] = out
    return out


# ------------------------------------------------------------------------------------------------
# The selection law's conditionals along one path


def _kseq_step(p, q, pi, sigma, y):
    """One node of the K-SEQ boost recursion: ``(mu(. | u) unnormalised, pi', sigma')``."""
    k = pi.size - 1
    num = sigma * q
    pi_next = np.zeros(k + 1)
    sigma_next = sigma * (float(q[y]) if y is not None else 0.0)
    for n in np.flatnonzero(pi > 0):
        node = _memo(kseq_node, p, q, int(n))
        A, J = _memo(kseq_next, p, q, int(n), node)
        num = num + pi[n] * (A + J)
        if y is not None:
            L = kseq_counts(p, q, int(n), y, node)
            pi_next[1 : n + 1] += pi[n] * L[1:]
            sigma_next += pi[n] * float(J[y])
    return num, pi_next, sigma_next


def _nested_step(p, q, pi, y):
    """One node of the nested recursion: ``(mu(. | u) unnormalised, pi')``."""
    k = pi.size - 1
    num = np.zeros_like(q)
    pi_next = np.zeros(k + 1)
    for n in np.flatnonzero(pi > 0):
        r = q if n == 1 else _memo(iid_selection_law, p, q, int(n))
        num = num + pi[n] * r
        if y is not None:
            K = nested_counts(p, q, int(n), y, r)
            pi_next[1 : n + 1] += pi[n] * K[1:]
    return num, pi_next


def mu_conditionals(path: Any, p_conds: Any, q_conds: Any, k: int, *, rule: str) -> np.ndarray:
    r"""The selection law's conditionals :math:`\mu(\cdot \mid x^i)`, ``i = 0..gamma-1``, along one path.

    Closed form by the count recursion of the module docstring; no tree is enumerated.

    Parameters
    ----------
    path : array_like of int, shape (gamma,)
        The sequence :math:`x^\gamma`.
    p_conds : array_like, shape (gamma, V) or (gamma + 1, V)
        Target conditionals along the path (row ``i`` = :math:`M_b(\cdot \mid x^i)`).
    q_conds : array_like, shape (gamma, V)
        Draft conditionals along the path.
    k : int
        Number of drafted sequences.
    rule : {"kseq_bv", "nested"}
        The selection rule.

    Returns
    -------
    ndarray, shape (gamma, V)
        Row ``i`` is :math:`\mu(\cdot \mid x^i)` (a distribution; rows after a node with
        :math:`\mu = 0` repeat the draft conditional).

    Examples
    --------
    >>> import numpy as np
    >>> P, Q = np.array([[0.5, 0.5]] * 2), np.array([[0.75, 0.25]] * 2)
    >>> mu_conditionals([0, 1], P, Q, 1, rule="nested").tolist()  # one draft: mu = M_s
    [[0.75, 0.25], [0.75, 0.25]]
    """
    _check_rule(rule)
    x = [int(v) for v in np.asarray(path).reshape(-1)]
    P = np.asarray(p_conds, dtype=np.float64)
    Qc = np.asarray(q_conds, dtype=np.float64)
    g = len(x)
    pi = np.zeros(k + 1)
    pi[k] = 1.0
    sigma = 0.0
    out = np.empty((g, Qc.shape[1]))
    for i in range(g):
        p, q = P[i], Qc[i]
        if rule == "kseq_bv":
            num, pi, sigma = _kseq_step(p, q, pi, sigma, x[i])
        else:
            num, pi = _nested_step(p, q, pi, x[i])
        tot = float(num.sum())
        out[i] = num / tot if tot > 0 else q
    return out


# ------------------------------------------------------------------------------------------------
# One drafted tree


def _check_tree(tree: Any, p_conds: Any, q_conds: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    T = np.asarray(tree)
    if T.ndim != 2 or T.shape[0] < 1 or T.shape[1] < 1 or not np.issubdtype(T.dtype, np.integer):
        raise InvalidDraftsError(
            f"tree must be an integer array of shape (k, gamma) (got shape {T.shape}); pass one drafted sequence per row"
        )
    k, g = T.shape
    P = np.asarray(p_conds, dtype=np.float64)
    Qc = np.asarray(q_conds, dtype=np.float64)
    if P.shape[:2] != (k, g + 1) or Qc.shape[:2] != (k, g) or P.ndim != 3 or Qc.ndim != 3 or P.shape[2] != Qc.shape[2]:
        raise ShapeMismatchError(
            f"p_conds must be (k, gamma + 1, V) and q_conds (k, gamma, V) for a tree of shape {T.shape} "
            f"(got {P.shape} and {Qc.shape}); pass the conditionals at every node of every drafted sequence"
        )
    V = P.shape[2]
    if T.min() < 0 or T.max() >= V:
        raise InvalidDraftsError(f"tree holds token ids outside [0, {V}) (got {T.min()}..{T.max()}); pass ids of the vocabulary")
    qx = np.take_along_axis(Qc, T[:, :, None], axis=2)[:, :, 0]
    if (qx <= 0).any():
        j, i = np.argwhere(qx <= 0)[0]
        raise InvalidDraftsError(f"tree[{j}, {i}] = {T[j, i]} has draft probability 0 at its node; the draft could not have produced it")
    return T.astype(np.int64), P, Qc


def _kseq_node_law(p, q, toks: tuple) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """K-SEQ at a node with drafts ``toks`` (visited in order): ``(accept per draft, residual, output law)``."""
    a, res, _ = _memo(kseq_node, p, q, len(toks))
    acc = a[np.asarray(toks, dtype=np.int64)]
    law = np.zeros_like(p)
    surv = 1.0
    for x, ax in zip(toks, acc, strict=True):
        law[x] += surv * ax
        surv *= 1.0 - ax
    return acc, res, law + surv * res


def _selection_walk(T, P, Qc, choose) -> np.ndarray:
    """Selection probability of each drafted sequence: a walk over the drafted tree's nodes.

    ``choose(p, q, toks)`` gives a node's law as ``({token: P(continue to it)}, P(stop here))``;
    the mass that stops at a node, or reaches a leaf, is spread uniformly over the drafts through it.
    """
    k, g = T.shape
    sel = np.zeros(k)
    stack = [(0, tuple(range(k)), 1.0)]
    while stack:
        t, alive, mass = stack.pop()
        if t == g:
            sel[list(alive)] += mass / len(alive)
            continue
        j0 = alive[0]
        toks = tuple(int(T[j, t]) for j in alive)
        children, stop = choose(P[j0, t], Qc[j0, t], toks)
        for y, w in children.items():
            stack.append((t + 1, tuple(j for j in alive if T[j, t] == y), mass * w))
        if stop > 0:
            sel[list(alive)] += mass * stop / len(alive)
    return sel


def _kseq_choice(p, q, toks: tuple) -> tuple[dict, float]:
    """K-SEQ at a node: ``({token: P(output it)}, P(output a token no draft has))``."""
    law = _kseq_node_law(p, q, toks)[2]
    children = {y: float(law[y]) for y in sorted(set(toks))}
    go = 0.0
    for w in children.values():
        go += w
    return children, max(1.0 - go, 0.0)


def _pair_choice(state, a: int, b: int) -> float:
    """P(the optimal i.i.d. realisation picks ``a`` from the two drafts ``(a, b)``), ``a != b``:
    the lower super-token's block at level s holds the other iff s is below every threshold between."""
    st = state.super_token
    sa, sb = int(st[a]), int(st[b])
    lo, hi = min(sa, sb), max(sa, sb)
    both = 1.0 if lo == hi else float(np.clip(state.tree.kappa[lo:hi].min(), 0.0, 1.0))
    first = 1.0 - 0.5 * both
    return first if sa < sb else 1.0 - first


def _nested_choice(p, q, toks: tuple) -> dict:
    """``{token: P(chosen)}`` for the node's draft tokens under the optimal i.i.d. realisation."""
    distinct = sorted(set(toks))
    if len(distinct) == 1:
        return {distinct[0]: 1.0}
    state = _memo(prepare, p, q, len(toks))
    if len(toks) == 2:
        pa = _pair_choice(state, toks[0], toks[1])
        return {toks[0]: pa, toks[1]: 1.0 - pa}
    row = state.selection_rows(np.asarray(toks, dtype=np.int64)[None])[0]
    return {y: float(row[y]) for y in distinct}


def _nested_walk_choice(p, q, toks: tuple) -> tuple[dict, float]:
    """The nested rule at a node: the chosen child's law; the walk never stops above a leaf."""
    return {y: w for y, w in _nested_choice(p, q, toks).items() if w > 0}, 0.0


def _selection(T, P, Qc, rule: str) -> np.ndarray:
    """Exact selection probability of each drafted sequence under ``rule`` (checked inputs)."""
    return _selection_walk(T, P, Qc, _kseq_choice if rule == "kseq_bv" else _nested_walk_choice)


def selection_given_tree(tree: Any, p_conds: Any, q_conds: Any, *, rule: str) -> np.ndarray:
    r"""Exact probability that the rule selects each drafted sequence of one tree, shape ``(k,)``.

    ``"kseq_bv"``: K-SEQ's law of its accepted prefix :math:`Z` (a walk over the drafted nodes),
    spread uniformly over the drafts through :math:`Z`. ``"nested"``: the product of the per-node
    choice probabilities of the optimal i.i.d. realisation (closed form for two drafts at a node).

    Parameters
    ----------
    tree : array_like of int, shape (k, gamma)
        The drafted sequences.
    p_conds, q_conds : array_like, shapes (k, gamma + 1, V) and (k, gamma, V)
        Conditionals at the nodes of each drafted sequence.
    rule : {"kseq_bv", "nested"}
        The selection rule.

    Returns
    -------
    ndarray, shape (k,)
        Sums to 1; duplicated sequences share their mass equally.

    Raises
    ------
    InvalidDraftsError, ShapeMismatchError
        If the tree or the conditionals are malformed.

    Examples
    --------
    >>> import numpy as np
    >>> P, Q = np.full((2, 2, 2), 0.5), np.full((2, 1, 2), 0.5)
    >>> selection_given_tree([[0], [1]], P, Q, rule="nested").tolist()
    [0.5, 0.5]
    """
    _check_rule(rule)
    T, P, Qc = _check_tree(tree, p_conds, q_conds)
    return _selection(T, P, Qc, rule)


def _array_models(P: np.ndarray, M: np.ndarray, path: list):
    """Models that answer the conditionals along one path (block verification reads only those)."""
    g = len(path)

    def at(rows, prefix):
        return rows[len(prefix)] if len(prefix) < rows.shape[0] else rows[-1]

    V = P.shape[1]
    return (
        _models.as_model(lambda prefix: at(P, prefix), V=V, name="p_conds"),
        _models.as_model(lambda prefix: at(M, prefix) if len(prefix) < g else P[-1], V=V, name="mu"),
    )


def block_law_given_tree(tree: Any, p_conds: Any, q_conds: Any, *, rule: str) -> dict:
    r"""Exact law ``{emitted block: probability}`` of the rule on one drafted tree.

    :math:`\sum_j P(\text{select } j)\, \mathrm{BV}(\text{tree}[j];\ M_b,\ \mu(\cdot \mid \cdot))`.

    Parameters
    ----------
    tree : array_like of int, shape (k, gamma)
        The drafted sequences.
    p_conds, q_conds : array_like, shapes (k, gamma + 1, V) and (k, gamma, V)
        Conditionals at the nodes of each drafted sequence.
    rule : {"kseq_bv", "nested"}
        The selection rule.

    Returns
    -------
    dict of tuple of int to float
        ``{(y_1, ..., y_tau, y_{tau+1}): probability}``; sums to 1.

    Examples
    --------
    >>> import numpy as np
    >>> P, Q = np.full((1, 2, 2), 0.5), np.full((1, 1, 2), 0.5)
    >>> sorted(block_law_given_tree([[1]], P, Q, rule="kseq_bv").items())
    [((1, 0), 0.5), ((1, 1), 0.5)]
    """
    _check_rule(rule)
    T, P, Qc = _check_tree(tree, p_conds, q_conds)
    g = T.shape[1]
    sel = _selection(T, P, Qc, rule)
    out: dict = {}
    for j in np.flatnonzero(sel > 0):
        path, law = _path_law(T, P, Qc, int(j), rule)
        for t in range(g + 1):
            for y in np.flatnonzero(law[t] > 0):
                key = tuple(path[:t]) + (int(y),)
                out[key] = out.get(key, 0.0) + float(sel[j]) * float(law[t, y])
    return out


def expected_accepted_given_tree(tree: Any, p_conds: Any, q_conds: Any, *, rule: str) -> float:
    r"""Exact :math:`E[\tau \mid \text{drafted tree}]` of the rule (a zero-variance per-round estimator).

    Parameters
    ----------
    tree : array_like of int, shape (k, gamma)
        The drafted sequences.
    p_conds, q_conds : array_like, shapes (k, gamma + 1, V) and (k, gamma, V)
        Conditionals at the nodes of each drafted sequence.
    rule : {"kseq_bv", "nested"}
        The selection rule.

    Returns
    -------
    float
        :math:`\sum_j P(\text{select } j)\, E_{\mathrm{BV}}[\tau \mid \text{tree}[j]]`, in ``[0, gamma]``.

    Examples
    --------
    >>> import numpy as np
    >>> P, Q = np.full((2, 3, 2), 0.5), np.full((2, 2, 2), 0.5)
    >>> expected_accepted_given_tree([[0, 1], [1, 1]], P, Q, rule="kseq_bv")
    2.0
    """
    _check_rule(rule)
    T, P, Qc = _check_tree(tree, p_conds, q_conds)
    k = T.shape[0]
    sel = _selection(T, P, Qc, rule)
    total = 0.0
    for j in np.flatnonzero(sel > 0):
        mu = mu_conditionals(T[j], P[j], Qc[j], k, rule=rule)
        total += float(sel[j]) * expected_accepted_given_path(P[j], mu, T[j], validate=False)
    return total


def _kseq_walk(T, P, Qc, coins, draws) -> tuple[int, list]:
    """K-SEQ's accepted prefix length on the drafted tree and the drafts through it (accept coins and
    residual draws on their own streams)."""
    k, g = T.shape
    alive = list(range(k))
    for t in range(g):
        j0 = alive[0]
        toks = tuple(int(T[j, t]) for j in alive)
        acc, res, _ = _kseq_node_law(P[j0, t], Qc[j0, t], toks)
        y = None
        for a, x in zip(acc, toks, strict=True):
            if coins.random() < a:
                y = x
                break
        if y is None:
            y = int(draws.choice(res.size, p=res / res.sum()))
        nxt = [j for j in alive if T[j, t] == y]
        if not nxt:
            return t, alive
        alive = nxt
    return g, alive


def _nested_walk(T, P, Qc, level, choice) -> list:
    """The drafts through the nested rule's selected leaf."""
    k, g = T.shape
    alive = list(range(k))
    for t in range(g):
        toks = np.asarray([int(T[j, t]) for j in alive], dtype=np.int64)
        if np.unique(toks).size > 1:
            j0 = alive[0]
            state = _memo(prepare, P[j0, t], Qc[j0, t], int(toks.size))
            y = int(state.select(toks[None], np.array([level.random()]), np.array([choice.random()]), method="bridge")[0])
        else:
            y = int(toks[0])
        alive = [j for j in alive if T[j, t] == y]
    return alive


def sample(tree: Any, p_conds: Any, q_conds: Any, *, rule: str, rng: np.random.Generator) -> tuple[int, tuple]:
    r"""Verify one drafted tree at any vocabulary size; returns ``(tau, block)``.

    Select a drafted sequence (``"kseq_bv"``: a K-SEQ walk, then a uniform draft through its accepted
    prefix; ``"nested"``: the per-node optimal i.i.d. selection), compute :math:`\mu`'s conditionals
    along it (:func:`mu_conditionals`) and draw block verification's output from its exact law given
    the path. Selection and verification draw from independent streams spawned from ``rng``.

    Parameters
    ----------
    tree : array_like of int, shape (k, gamma)
        The drafted sequences.
    p_conds, q_conds : array_like, shapes (k, gamma + 1, V) and (k, gamma, V)
        Conditionals at the nodes of each drafted sequence.
    rule : {"kseq_bv", "nested"}
        The selection rule.
    rng : numpy.random.Generator
        The caller's generator.

    Returns
    -------
    tau : int
        Accepted draft tokens.
    block : tuple of int
        The emitted tokens :math:`(y_1, \dots, y_{\tau+1})`.

    Raises
    ------
    InvalidDraftsError, ShapeMismatchError
        If the tree or the conditionals are malformed.
    ProblemTooLargeError
        ``"nested"`` with three or more drafts through a node of a large vocabulary.

    Examples
    --------
    >>> import numpy as np
    >>> P, Q = np.full((2, 3, 2), 0.5), np.full((2, 2, 2), 0.5)
    >>> sample([[0, 1], [1, 1]], P, Q, rule="nested", rng=np.random.default_rng(0))[0]
    2
    """
    _check_rule(rule)
    T, P, Qc = _check_tree(tree, p_conds, q_conds)
    rng = as_generator(rng)
    s1, s2, pick, bv = rng.spawn(4)
    j = _select_one(T, P, Qc, rule, s1, s2, pick)
    return _verify(T, P, Qc, j, rule, {}, bv)


def sample_many(tree: Any, p_conds: Any, q_conds: Any, size: int, *, rule: str, rng: np.random.Generator) -> list:
    r"""``size`` independent verifications of one drafted tree (each path's law computed once).

    Parameters
    ----------
    tree : array_like of int, shape (k, gamma)
        The drafted sequences.
    p_conds, q_conds : array_like, shapes (k, gamma + 1, V) and (k, gamma, V)
        Conditionals at the nodes of each drafted sequence.
    size : int
        Number of verifications.
    rule : {"kseq_bv", "nested"}
        The selection rule.
    rng : numpy.random.Generator
        The caller's generator (selection and verification streams are spawned from it).

    Returns
    -------
    list of tuple
        ``size`` pairs ``(tau, block)`` as :func:`sample` returns them.

    Raises
    ------
    InvalidDraftsError, ShapeMismatchError
        If the tree or the conditionals are malformed.

    Examples
    --------
    >>> import numpy as np
    >>> P, Q = np.full((2, 3, 2), 0.5), np.full((2, 2, 2), 0.5)
    >>> len(sample_many([[0, 1], [1, 1]], P, Q, 4, rule="kseq_bv", rng=np.random.default_rng(0)))
    4
    """
    _check_rule(rule)
    T, P, Qc = _check_tree(tree, p_conds, q_conds)
    rng = as_generator(rng)
    s1, s2, pick, bv = rng.spawn(4)
    laws: dict = {}
    out = []
    for _ in range(int(size)):
        j = _select_one(T, P, Qc, rule, s1, s2, pick)
        out.append(_verify(T, P, Qc, j, rule, laws, bv))
    return out


def _select_one(T, P, Qc, rule: str, s1, s2, pick) -> int:
    """One drafted sequence chosen by ``rule`` (streams ``s1``, ``s2`` for the walk, ``pick`` for K-SEQ's uniform draft)."""
    if rule == "kseq_bv":
        _, alive = _kseq_walk(T, P, Qc, s1, s2)
        return alive[int(pick.integers(len(alive)))]
    return _nested_walk(T, P, Qc, s1, s2)[0]


def _path_law(T, P, Qc, j: int, rule: str) -> tuple[list, np.ndarray]:
    """``(path, law)``: drafted sequence ``j`` and block verification's ``(gamma + 1, V)`` output law on it."""
    path = T[j].tolist()
    mu = mu_conditionals(path, P[j], Qc[j], T.shape[0], rule=rule)
    pm, mm = _array_models(P[j], mu, path)
    return path, conditional_law(pm, mm, path)


def _verify(T, P, Qc, j: int, rule: str, laws: dict, bv) -> tuple[int, tuple]:
    """Block verification of drafted sequence ``j`` with the selection law's conditionals (law memoised in ``laws``)."""
    path = T[j].tolist()
    law = laws.get(tuple(path))
    if law is None:
        law = laws[tuple(path)] = _path_law(T, P, Qc, j, rule)[1]
    flat = int(bv.choice(law.size, p=law.ravel() / law.sum()))
    t, y = divmod(flat, law.shape[1])
    return t, tuple(path[:t]) + (int(y),)


# ------------------------------------------------------------------------------------------------
# Small vocabularies: the whole law on sequences, and the enumerated plan it must equal


def sequence_law(p_model: Any, q_model: Any, k: int, gamma: int, *, rule: str) -> np.ndarray:
    r""":math:`\mu` on every sequence of length ``gamma`` (lexicographic), by the count recursion.

    Parameters
    ----------
    p_model, q_model : Model or callable
        Target and draft models over one (small) vocabulary.
    k, gamma : int
        Number of drafted sequences and their length.
    rule : {"kseq_bv", "nested"}
        The selection rule.

    Returns
    -------
    ndarray, shape (V**gamma,)
        The selection law; sums to 1.

    Raises
    ------
    ProblemTooLargeError
        If the prefixes cannot be enumerated.

    Examples
    --------
    >>> from otspec import models
    >>> p, q = models.context_free([0.5, 0.5]), models.context_free([0.75, 0.25])
    >>> sequence_law(p, q, 1, 1, rule="nested").tolist()
    [0.75, 0.25]
    """
    _check_rule(rule)
    p_model = _models.as_model(p_model, name="p_model")
    q_model = _models.as_model(q_model, V=p_model.V, name="q_model")
    table = prefixes.enumerate_prefixes(p_model, q_model, gamma)
    V = table.V
    start = np.zeros(k + 1)
    start[k] = 1.0
    level = [(start, 0.0)]  # per node of the current depth: (pi, sigma)
    mass = np.ones(1)
    for d in range(gamma):
        nxt, nxt_mass = [], np.zeros(V ** (d + 1))
        for u, (pi, sigma) in enumerate(level):
            p, q = table.p_cond[d][u], table.q_cond[d][u]
            for y in range(V):
                if rule == "kseq_bv":
                    num, pi_y, sig_y = _kseq_step(p, q, pi, sigma, y)
                else:
                    (num, pi_y), sig_y = _nested_step(p, q, pi, y), 0.0
                nxt.append((pi_y, sig_y))
                nxt_mass[u * V + y] = float(num[y])
        level, mass = nxt, nxt_mass
    return mass


def selection_plan(p_model: Any, q_model: Any, k: int, gamma: int, *, rule: str) -> SelectionPlan:
    r"""The rule's selection probabilities on every drafted tree (:func:`selection_given_tree`), enumerated.

    The reference the count recursion (:func:`sequence_law`) is checked against.

    Parameters
    ----------
    p_model, q_model : Model or callable
        Target and draft models over one (small) vocabulary.
    k, gamma : int
        Number of drafted sequences and their length.
    rule : {"kseq_bv", "nested"}
        The selection rule.

    Returns
    -------
    SelectionPlan
        Trees, weights, selection probabilities and the law :math:`\mu` they induce.

    Raises
    ------
    ProblemTooLargeError
        If the drafted trees cannot be enumerated.

    Examples
    --------
    >>> from otspec import models
    >>> p, q = models.context_free([0.5, 0.5]), models.context_free([0.75, 0.25])
    >>> round(float(selection_plan(p, q, 2, 1, rule="nested").mu.sum()), 12)
    1.0
    """
    _check_rule(rule)
    p_model = _models.as_model(p_model, name="p_model")
    q_model = _models.as_model(q_model, V=p_model.V, name="q_model")
    V = p_model.V
    trees, weights = draft_trees(q_model, k, gamma, replacement=True)
    select = np.zeros(trees.shape[:2])
    for m, tr in enumerate(trees):
        P = np.stack([_models.conditionals_along(p_model, row.tolist()) for row in tr])
        Qc = np.stack([_models.conditionals_along(q_model, row.tolist(), include_last=False) for row in tr])
        select[m] = selection_given_tree(tr, P, Qc, rule=rule)
    leaf = trees @ (V ** np.arange(gamma - 1, -1, -1, dtype=np.int64))
    mu = np.bincount(leaf.ravel(), weights=(weights[:, None] * select).ravel(), minlength=V**gamma)
    for arr in (trees, weights, select, mu):
        arr.setflags(write=False)
    return SelectionPlan(trees=trees, weights=weights, select=select, mu=mu, V=V, gamma=gamma)
