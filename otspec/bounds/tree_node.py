r"""The tree optimum :math:`T^*` as a polynomial LP over prefixes, solved by exact cutting planes.

Setting (:doc:`trees`): ``k`` draft sequences of length :math:`\gamma`, i.i.d. from the draft model
:math:`M_s`; a lossless verifier sees the whole drafted tree and emits an accepted prefix (a node
of the drafted trie) and one more token. :math:`T^*` is the largest :math:`E[\tau]` of any such
verifier. With :math:`h(m) = 1 - (1 - m)^k` (the chance that some of the k drafts falls in a set of
draft mass m), the selection form of the optimum (:doc:`trees`, Theorem 2) is

.. math::
    T^* = \max \sum_{u \ne \emptyset} W(u) \quad \text{s.t.} \quad
    W(u y) \le M_b(y \mid u)\, W(u), \quad W(u) \le \mu(u), \quad W(\emptyset) = 1,
    \quad \mu \in B_k,

where :math:`\mu` is a law on the depth-:math:`\gamma` sequences (the law of *which* draft a rule
selects), :math:`\mu(u)` its prefix marginal and
:math:`B_k = \{\mu : \mu(S) \le h(M_s(S))\ \forall S,\ \mu(\Omega^\gamma) = 1\}`. One variable per
prefix for :math:`W` and one "mass" variable per prefix for :math:`\mu(u)` (with flow conservation
:math:`\mu(u) = \sum_y \mu(uy)`), independent of ``k``: the full-information trie LP
(:func:`otspec.bounds.tree.tree_optimum` with ``method="trie"``) has one block per drafted trie,
exponential in ``k``.

**Exact separation.** The node caps :math:`\mu(u) \le h(M_s(u))` are column bounds. For the other
sets, :math:`\max_S \mu(S) - h(M_s(S))` is attained on a level set of :math:`\mu / M_s` (write the
concave :math:`h` as a minimum of affine functions :math:`\lambda m + c(\lambda)`; for a fixed
:math:`\lambda` the best set is :math:`\{\mu / M_s > \lambda\}`). So one sort of the sequences by
:math:`\mu / M_s` and a prefix scan find the most violated constraint; every prefix of the sorted
order is a valid cut. A cut is written over the largest prefixes (nodes) whose every sequence it
contains, which keeps the rows short.

**Certificate.** The primal is re-computed in numpy: :math:`\Phi(\mu) = \sum_u W_\mu(u)` with
:math:`W_\mu(u) = \min(W_\mu(\text{parent})\, M_b(u_{\text{last}} \mid \text{parent}), \mu(u))`, and
membership of :math:`\mu` in :math:`B_k` by the same sort. The dual (:doc:`trees`, Theorem 3): for
any cut weights :math:`\beta \ge 0` on the non-root prefixes,

.. math::
    \alpha_\beta(u) = \Big(1 + \sum_y M_b(y \mid u)\, \alpha_\beta(uy) - \beta(u)\Big)_+, \qquad
    T^* \le \sum_y M_b(y)\, \alpha_\beta(y) + E\big[\max_{t \le k} B_\beta(X^{(t)})\big],

with :math:`B_\beta(l)` the sum of :math:`\beta` over the prefixes of :math:`l` and
:math:`X^{(t)}` i.i.d. :math:`\sim M_s` (the expectation is one sort of the sequences by
:math:`B_\beta`). The LP's row duals of :math:`W(u) \le \mu(u)` are such a :math:`\beta`; the bound
is evaluated in numpy for whatever :math:`\beta` the solver returns, so it is rigorous.

References
----------
Sun, Mendlovic, Leviathan, Aharoni, Ro, Beirami, Suresh, "Block Verification Accelerates Speculative
Decoding" (ICLR 2025): the W recursion (k = 1). SpecTr (Sun et al., NeurIPS 2023): the setting of k
drafted sequences. Fujishige, "Submodular Functions and Optimization" (2005): base polytopes of
:math:`h(M_s(\cdot))` and the greedy / level-set facts used here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from otspec import prefixes
from otspec._tolerances import (
    LP_FEASIBILITY_TOL,
    POLISH_NEGATIVE_ATOL,
    TREE_ANTICHAIN_ROWS_PER_ROUND,
    TREE_CUT_TOL,
    TREE_CUTS_PER_ROUND,
    TREE_MAX_CUT_ROUNDS,
)

#: Before the exact re-solve, blocks are added only for violations HiGHS itself can see (its
#: feasibility tolerance is absolute); smaller ones are settled after the float64 re-solve.
TREE_CHAIN_TOL = 10 * LP_FEASIBILITY_TOL

__all__ = [
    "coverage",
    "NodeLPSolution",
    "solve_node_lp",
    "selection_value",
    "membership_violation",
    "antichain_violation",
    "dual_bound",
    "prefix_marginals",
]


def coverage(m: np.ndarray | float, k: int) -> np.ndarray:
    r""":math:`h(m) = 1 - (1 - m)^k`: the chance that some of k i.i.d. drafts falls in a set of draft mass m.

    Computed as :math:`-\mathrm{expm1}(k \log1p(-m))` (no cancellation for small m); ``m`` is
    clipped to ``[0, 1]`` first (cumulative sums can exceed 1 by rounding).

    Parameters
    ----------
    m : float or ndarray
        Draft mass(es) in ``[0, 1]``.
    k : int
        Number of i.i.d. drafts.

    Returns
    -------
    ndarray
        :math:`h(m)`, same shape as ``m``.

    Examples
    --------
    >>> float(coverage(0.5, 2))
    0.75
    """
    m = np.clip(np.asarray(m, dtype=np.float64), 0.0, 1.0)
    with np.errstate(divide="ignore"):
        return -np.expm1(k * np.log1p(-m))


def prefix_marginals(mu: np.ndarray, V: int, gamma: int) -> list:
    r"""``[mu_0, ..., mu_gamma]``: the prefix marginals :math:`\mu(u)` of a law on :math:`\Omega^\gamma`.

    Parameters
    ----------
    mu : ndarray, shape (V**gamma,)
        The law on sequences, in lexicographic order.
    V, gamma : int
        Vocabulary size and sequence length.

    Returns
    -------
    list of ndarray
        ``out[d]`` has shape ``(V**d,)``; ``out[gamma] = mu``, ``out[0] = [mu.sum()]``.

    Examples
    --------
    >>> [m.tolist() for m in prefix_marginals(np.array([0.1, 0.2, 0.3, 0.4]), 2, 2)]
    [[1.0], [0.30000000000000004, 0.7], [0.1, 0.2, 0.3, 0.4]]
    """
    out = [np.asarray(mu, dtype=np.float64)]
    for _ in range(gamma):
        out.append(out[-1].reshape(-1, V).sum(axis=1))
    return out[::-1]


def selection_value(table: prefixes.PrefixTable, mu: np.ndarray) -> tuple[float, list]:
    r""":math:`\Phi(\mu) = \sum_{u \ne \emptyset} W_\mu(u)`: block verification's :math:`E[\tau]` with :math:`\mu` as the draft.

    .. math:: W_\mu(\emptyset) = 1, \qquad W_\mu(uy) = \min\{W_\mu(u)\, M_b(y \mid u),\ \mu(uy)\}.

    Parameters
    ----------
    table : PrefixTable
        The enumerated pair (:func:`otspec.prefixes.enumerate_prefixes`); only the target is used.
    mu : ndarray, shape (V**gamma,)
        A (sub-)probability law on sequences of length ``gamma``.

    Returns
    -------
    value : float
        :math:`\Phi(\mu)`.
    W : list of ndarray
        ``W[d]``, shape ``(V**d,)``, per depth.

    Examples
    --------
    >>> from otspec import models, prefixes
    >>> p, q = models.context_free([1/3, 2/3]), models.context_free([2/3, 1/3])
    >>> t = prefixes.enumerate_prefixes(p, q, 2)
    >>> round(selection_value(t, t.q_joint[2])[0] * 9, 9)
    11.0
    """
    V, g = table.V, table.gamma
    marg = prefix_marginals(mu, V, g)
    W = [np.ones(1)]
    for d in range(1, g + 1):
        W.append(np.minimum((W[-1][:, None] * table.p_cond[d - 1]).ravel(), marg[d]))
    return float(sum(w.sum() for w in W[1:])), W


def membership_violation(mu: np.ndarray, ms: np.ndarray, k: int) -> tuple[float, np.ndarray, np.ndarray]:
    r"""How far a law on sequences is from :math:`B_k`: :math:`\max_S\, \mu(S) - h(M_s(S))` (exact, one sort).

    Parameters
    ----------
    mu, ms : ndarray, shape (n,)
        The law and the draft probability of each sequence (entries with ``ms = 0`` must have
        ``mu = 0``; otherwise the violation is at least that mass).
    k : int
        Number of i.i.d. drafts.

    Returns
    -------
    violation : float
        The largest excess over all sets (>= 0; 0 for the empty set).
    order : ndarray of int64
        The sequences sorted by :math:`\mu / M_s` descending (ties broken by index).
    excess : ndarray, shape (n,)
        :math:`\mu(S_j) - h(M_s(S_j))` for the sorted prefixes :math:`S_j` (first ``j + 1`` items).

    Examples
    --------
    >>> v, _, _ = membership_violation(np.array([0.8, 0.2]), np.array([0.5, 0.5]), 2)
    >>> round(v, 12)
    0.05
    """
    mu = np.asarray(mu, dtype=np.float64)
    ms = np.asarray(ms, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(ms > 0, mu / np.where(ms > 0, ms, 1.0), np.where(mu > 0, np.inf, 0.0))
    order = np.argsort(-ratio, kind="stable")
    excess = np.cumsum(mu[order]) - coverage(np.cumsum(ms[order]), k)
    return float(max(0.0, excess.max(initial=0.0))), order, excess


def dual_bound(table: prefixes.PrefixTable, beta: list, k: int) -> float:
    r"""The Theorem-3 upper bound on :math:`T^*` for cut weights ``beta`` (any ``beta >= 0`` is valid).

    .. math::
        \alpha(u) = \Big(1 + \sum_y M_b(y \mid u)\, \alpha(uy) - \beta(u)\Big)_+, \qquad
        U(\beta) = \sum_y M_b(y)\, \alpha(y) + \sum_j B_{(j)} \big(F_j^k - F_{j-1}^k\big),

    the last sum over the sequences sorted by :math:`B_\beta` ascending, :math:`F_j` the cumulative
    draft mass (:math:`E \max_{t \le k} B_\beta(X^{(t)})` for i.i.d. :math:`X^{(t)} \sim M_s`).
    Prefixes the draft never reaches get :math:`\alpha = 0` (their :math:`\beta` is free: no draft
    passes them).

    Parameters
    ----------
    table : PrefixTable
        The enumerated pair.
    beta : list of ndarray
        ``beta[d]``, shape ``(V**d,)`` for ``d = 1..gamma`` (``beta[0]`` is ignored); negative
        entries are clipped to 0.
    k : int
        Number of i.i.d. drafts.

    Returns
    -------
    float
        A certified upper bound on :math:`T^*` (up to float64 rounding of the sums).

    Examples
    --------
    >>> from otspec import models, prefixes
    >>> p, q = models.context_free([1/3, 2/3]), models.context_free([2/3, 1/3])
    >>> t = prefixes.enumerate_prefixes(p, q, 1)
    >>> round(dual_bound(t, [np.zeros(1), np.zeros(2)], 1), 12)  # beta = 0: the trivial bound gamma
    1.0
    """
    V, g = table.V, table.gamma
    b = [np.zeros(1)] + [np.maximum(np.asarray(beta[d], dtype=np.float64), 0.0) for d in range(1, g + 1)]
    alpha = np.maximum(1.0 - b[g], 0.0) * (table.q_joint[g] > 0)
    for d in range(g - 1, 0, -1):
        cont = (table.p_cond[d] * alpha.reshape(-1, V)).sum(axis=1)
        alpha = np.maximum(1.0 + cont - b[d], 0.0) * (table.q_joint[d] > 0)
    first = float(table.p_cond[0][0] @ alpha)
    B = np.zeros(1)
    for d in range(1, g + 1):
        B = (B[:, None] + b[d].reshape(-1, V)).ravel()
    ms = table.q_joint[g]
    keep = ms > 0
    Bk, mk = B[keep], ms[keep]
    order = np.argsort(Bk, kind="stable")
    F = np.minimum(np.cumsum(mk[order]), 1.0)
    Fk = F**k
    inc = np.diff(np.concatenate([[0.0], Fk]))
    inc[-1] += 1.0 - Fk[-1]  # the masses sum to 1 up to rounding: the top sequence carries the rest
    return first + float(Bk[order] @ inc)


def _upper_chain(m: np.ndarray, a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Vertices of the increasing part of the upper concave hull of the points ``(m, a)`` and the
    origin, sorted by ``m`` (monotone chain)."""
    order = np.lexsort((-a, m))
    hm, ha = [0.0], [0.0]
    for x, y in zip(m[order].tolist(), a[order].tolist(), strict=False):
        if y <= ha[-1]:
            continue  # not increasing: never on the part of the hull that lambda >= 0 sees
        if x <= hm[-1]:
            hm[-1], ha[-1] = x, y
        else:
            hm.append(x)
            ha.append(y)
        while len(hm) >= 3 and (ha[-2] - ha[-3]) * (hm[-1] - hm[-3]) <= (ha[-1] - ha[-3]) * (hm[-2] - hm[-3]):
            del hm[-2], ha[-2]
    return np.asarray(hm), np.asarray(ha)


def _root_chain(table: prefixes.PrefixTable, A: list) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The concave chains of every node, merged up to depth 1, one depth at a time for all nodes at once.

    Returns ``(owner, em, ea)``: the edges of the depth-1 chains (owner = depth-1 node, in node order,
    each chain's edges in slope order). Per node: the children's edges concatenated in child order
    and stably sorted by slope (decreasing) form the lower part; if the node's own point
    :math:`(M_s(u), A(u))` lies above that chain's end, the edges past the tangent vertex seen from
    the point are replaced by one edge to it (the point's draft mass is at least any antichain's
    below it). Written on a zero-padded matrix with one row per node (padding at the end of a row
    leaves its cumulative sums unchanged), it gives bit for bit what a loop over the nodes gives.
    """
    V, g = table.V, table.gamma
    ms = table.q_joint
    # Leaves: the origin and one point, i.e. one edge (or none).
    owner = np.flatnonzero((ms[g] > 0) & (A[g] > 0))
    em, ea = ms[g][owner], A[g][owner]
    for d in range(g - 1, 0, -1):
        n = V**d
        par = owner // V  # children of a node are contiguous and in index order: rows are their concatenation
        cnt = np.bincount(par, minlength=n)
        start = np.concatenate([[0], np.cumsum(cnt)[:-1]])
        pos = np.arange(par.size) - start[par]
        width = int(cnt.max(initial=0)) + 1  # room for the node's own edge
        M, Aa = np.zeros((n, width)), np.zeros((n, width))
        key = np.full((n, width), np.inf)
        M[par, pos], Aa[par, pos], key[par, pos] = em, ea, -(ea / em)
        order = np.argsort(key, axis=1, kind="stable")
        M, Aa = np.take_along_axis(M, order, 1), np.take_along_axis(Aa, order, 1)
        cm = np.concatenate([np.zeros((n, 1)), np.cumsum(M, axis=1)], axis=1)
        ca = np.concatenate([np.zeros((n, 1)), np.cumsum(Aa, axis=1)], axis=1)
        rows = np.arange(n)
        pm, pa = ms[d], A[d]
        act = (pm > 0) & (pa > 0) & (pa > ca[rows, cnt])  # the node's point lies above its children's chain
        vert = np.arange(width + 1)[None, :]
        left = (vert <= cnt[:, None]) & (cm < pm[:, None])
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(left, (pa[:, None] - ca) / (pm[:, None] - cm), np.inf)
        j = np.argmin(ratio, axis=1)  # tangent vertex from the new right end (first minimum, as argmin)
        new_cnt = np.where(act, j + 1, cnt)
        M = np.where(act[:, None], np.diff(cm, axis=1), M)
        Aa = np.where(act[:, None], np.diff(ca, axis=1), Aa)
        r = np.flatnonzero(act)
        M[r, j[r]] = pm[r] - cm[r, j[r]]
        Aa[r, j[r]] = pa[r] - ca[r, j[r]]
        keep = np.arange(width)[None, :] < new_cnt[:, None]
        owner = np.nonzero(keep)[0]
        em, ea = M[keep], Aa[keep]
    return owner, em, ea


def antichain_violation(table: prefixes.PrefixTable, A: list, k: int, *, top: int = 1) -> tuple[float, list]:
    r"""Exact :math:`\max_R A(R) - h(M_s(R))` over antichains :math:`R` of prefixes, and the maximisers.

    For a slope :math:`\lambda \ge 0`, :math:`D(\lambda) = \max_R A(R) - \lambda M_s(R)` is a tree
    recursion (take a node, or the best of its children). As a function of :math:`\lambda` it is the
    upper envelope of the lines of all antichains, i.e. the concave chain of the points
    :math:`(M_s(R), A(R))`: a leaf contributes the origin and one point, children combine by a
    Minkowski sum (merge of edges by slope), a node adds its own point. Because :math:`h` is
    concave, the maximum of :math:`A(R) - h(M_s(R))` is attained at a vertex of the root's chain
    (between two vertices the value is convex in :math:`M_s(R)`), and that vertex's antichain is the
    recursion's choice at any slope strictly between its two edges.

    Parameters
    ----------
    table : PrefixTable
        The enumerated pair (only ``q_joint`` is used).
    A : list of ndarray
        ``A[d]``, shape ``(V**d,)``, for ``d = 1..gamma`` (``A[0]`` unused).
    k : int
        Number of i.i.d. drafts.
    top : int
        Most antichains returned (the most violated chain vertices first).

    Returns
    -------
    violation : float
        The largest excess (>= 0: the empty antichain gives 0).
    antichains : list of list of ndarray
        Up to ``top`` violated antichains, each as boolean masks per depth (``mask[d]`` of shape
        ``(V**d,)``), most violated first.

    Examples
    --------
    >>> from otspec import models, prefixes
    >>> t = prefixes.enumerate_prefixes(models.context_free([0.5, 0.5]), models.context_free([0.5, 0.5]), 1)
    >>> v, R = antichain_violation(t, [None, np.array([0.9, 0.9])], 1)  # one draft: A(R) <= Ms(R)
    >>> round(v, 12), R[0][1].tolist()
    (0.8, [True, True])
    """
    _, em, ea = _root_chain(table, A)
    if em.size == 0:
        return 0.0, []
    slope = ea / np.where(em > 0, em, 1.0)
    order = np.argsort(-slope, kind="stable")
    cm, ca = np.cumsum(em[order]), np.cumsum(ea[order])
    excess = ca - coverage(cm, k)
    viol = float(max(0.0, excess.max()))
    out = []
    for j in np.argsort(-excess, kind="stable")[:top]:
        if excess[j] <= 0:
            break
        s_left = slope[order[j]]
        s_right = slope[order[j + 1]] if j + 1 < order.size else 0.0
        out.append(_antichain_at(table, A, 0.5 * (s_left + s_right)))
    return viol, out


def _antichain_at(table: prefixes.PrefixTable, A: list, lam: float) -> list:
    """The recursion's antichain at slope ``lam``: masks per depth."""
    V, g = table.V, table.gamma
    val = [None] * (g + 1)
    take = [None] * (g + 1)
    for d in range(g, 0, -1):
        ok = table.q_joint[d] > 0
        own = np.where(ok, A[d] - lam * table.q_joint[d], -np.inf)
        below = val[d + 1].reshape(-1, V).sum(axis=1) if d < g else np.zeros(V**d)
        take[d] = own > below
        val[d] = np.maximum(np.maximum(own, below), 0.0) if d == g else np.maximum(own, below)
    masks = [np.zeros(1, dtype=bool)]
    blocked = np.zeros(1, dtype=bool)
    for d in range(1, g + 1):
        blocked = np.repeat(blocked, V)
        m = take[d] & ~blocked
        masks.append(m)
        blocked = blocked | m
    return masks


@dataclass(frozen=True, eq=False)
class NodeLPSolution:
    """What :func:`solve_node_lp` returns (the front door :func:`otspec.tree_optimum` certifies it).

    Attributes
    ----------
    A : list of ndarray
        The optimal node variables :math:`A(u) = P(Z \\text{ passes } u)` per depth (``A[0] = [1]``).
    beta : list of ndarray
        Cut weights per depth for the dual bound (``beta[0]`` unused).
    objective : float
        The LP's objective :math:`\\sum_u A(u)`.
    ok : bool
        Whether HiGHS reported an optimal model in the last round (the one whose solution is
        returned; an earlier failed round only cost cuts, which stay valid).
    rounds, cuts : int
        Cutting-plane rounds and cuts added.
    polished : bool
        Whether the final basis was re-solved exactly in float64.
    info : str
        HiGHS' last model status.
    """

    A: list
    beta: list
    objective: float
    ok: bool
    rounds: int
    cuts: int
    polished: bool
    info: str


class _NodeLP:
    """Columns ``A(u)`` for the prefixes both models reach; rows (L) ``A(uy) <= p(y|u) A(u)`` and
    the antichain cuts (each divided by its right-hand side); column bounds ``h(Ms(u))``."""

    def __init__(self, table: prefixes.PrefixTable, k: int):
        self.table, self.k = table, k
        V, g = table.V, table.gamma
        self.V, self.g = V, g
        self.col = [np.full(1, -1, dtype=np.int64)]
        n = 0
        for d in range(1, g + 1):
            keep = (table.q_joint[d] > 0) & (table.p_joint[d] > 0)
            c = np.full(V**d, -1, dtype=np.int64)
            c[keep] = n + np.arange(int(keep.sum()))
            n += int(keep.sum())
            self.col.append(c)
        self.n = n
        self.col_lower = np.zeros(n)
        self.col_upper = np.zeros(n)
        for d in range(1, g + 1):
            c = self.col[d]
            ok = c >= 0
            cap = coverage(table.q_joint[d][ok], k)
            if d == 1:
                cap = np.minimum(cap, table.p_cond[0][0][ok])
            self.col_upper[c[ok]] = cap
        # column bounds that are Hall cuts of one node (not the root's (L) row A(y) <= p(y))
        self.cap_is_cut = np.ones(n, dtype=bool)
        c1 = self.col[1]
        ok1 = c1 >= 0
        self.cap_is_cut[c1[ok1]] = coverage(table.q_joint[1][ok1], k) <= table.p_cond[0][0][ok1]
        self.cost = np.ones(n)
        rows = []
        for d in range(2, g + 1):
            c, cp = self.col[d], self.col[d - 1]
            u = np.flatnonzero(c >= 0)
            par = u // V
            for uu, pp in zip(u.tolist(), par.tolist(), strict=False):
                rows.append((np.array([c[uu], cp[pp]]), np.array([1.0, -table.p_cond[d - 1][pp, uu % V]])))
        self.rows = rows
        self.row_lower = [-np.inf] * len(rows)
        self.row_upper = [0.0] * len(rows)
        self.n_l = len(rows)
        self.n_a = n
        self.blocks: list = []
        self.cut_rows: list = []
        self.seen: set = set()
        self.seen_rows: set = set()

    def csc(self):
        import scipy.sparse as sp

        if not self.rows:
            return sp.csc_matrix((0, self.n))
        r = np.concatenate([np.full(c.size, i, dtype=np.int64) for i, (c, _) in enumerate(self.rows)])
        c = np.concatenate([c for c, _ in self.rows])
        v = np.concatenate([v for _, v in self.rows])
        return sp.csc_matrix((v, (r, c)), shape=(len(self.rows), self.n))

    def nodes(self, x: np.ndarray) -> list:
        out = [np.ones(1)]
        for d in range(1, self.g + 1):
            a = np.zeros(self.V**d)
            c = self.col[d]
            a[c >= 0] = np.maximum(x[c[c >= 0]], 0.0)
            out.append(a)
        return out

    def cuts_for(self, x: np.ndarray, tol: float) -> tuple[float, list, list]:
        """The largest Hall violation, the slopes of new tangent blocks (for the most violated
        antichains, at the tangent of h at their draft mass) and single antichain rows."""
        viol, chains = antichain_violation(self.table, self.nodes(x), self.k, top=TREE_ANTICHAIN_ROWS_PER_ROUND)
        blocks, rows = [], []
        if viol <= tol:
            return viol, blocks, rows
        for i, masks in enumerate(chains):
            m = float(sum(self.table.q_joint[d][masks[d]].sum() for d in range(1, self.g + 1)))
            cols = np.sort(np.concatenate([self.col[d][masks[d] & (self.col[d] >= 0)] for d in range(1, self.g + 1)]))
            key = cols.tobytes()
            if cols.size and key not in self.seen_rows:
                self.seen_rows.add(key)
                rows.append((cols, float(coverage(m, self.k))))
            if i < TREE_CUTS_PER_ROUND:
                lam = float(self.k * (1.0 - min(m, 1.0)) ** (self.k - 1))
                lk = np.round(lam, 12)
                if lk not in self.seen:
                    self.seen.add(lk)
                    blocks.append((lam, float(coverage(m, self.k)) - lam * m))
        return viol, blocks, rows

    def add_block(self, h, lam: float, c: float) -> None:
        """Rows and columns enforcing max_R A(R) - lam Ms(R) <= c for every antichain R:
        g(u) >= A(u) - lam Ms(u), g(u) >= sum_y g(uy), sum over depth 1 of g <= c, g >= 0."""
        import highspy

        V, g, t = self.V, self.g, self.table
        gcol = []
        first = self.n
        n_new = 0
        for d in range(0, g + 1):
            keep = t.q_joint[d] > 0 if d else np.zeros(1, dtype=bool)
            cidx = np.full(V**d, -1, dtype=np.int64)
            cidx[keep] = first + n_new + np.arange(int(keep.sum()))
            n_new += int(keep.sum())
            gcol.append(cidx)
        self.n += n_new
        self.cost = np.concatenate([self.cost, np.zeros(n_new)])
        self.col_lower = np.concatenate([self.col_lower, np.zeros(n_new)])
        self.col_upper = np.concatenate([self.col_upper, np.full(n_new, np.inf)])
        self.cap_is_cut = np.concatenate([self.cap_is_cut, np.zeros(n_new, dtype=bool)])
        h.addCols(
            n_new,
            np.zeros(n_new),
            np.zeros(n_new),
            np.full(n_new, highspy.kHighsInf),
            0,
            np.zeros(n_new + 1, dtype=np.int32)[:n_new],
            np.zeros(0, dtype=np.int32),
            np.zeros(0),
        )
        rows, lo, up = [], [], []
        own_rows = []
        for d in range(1, g + 1):
            gc, ac = gcol[d], self.col[d]
            for u in np.flatnonzero(gc >= 0).tolist():
                if ac[u] >= 0:
                    own_rows.append((len(self.rows) + len(rows), int(ac[u])))
                    rows.append((np.array([gc[u], ac[u]]), np.array([1.0, -1.0])))
                    lo.append(-lam * float(t.q_joint[d][u]))
                    up.append(np.inf)
                if d < g:
                    kids = gcol[d + 1][u * V : (u + 1) * V]
                    kids = kids[kids >= 0]
                    rows.append((np.concatenate([[gc[u]], kids]), np.concatenate([[1.0], -np.ones(kids.size)])))
                    lo.append(0.0)
                    up.append(np.inf)
        top = gcol[1][gcol[1] >= 0]
        rows.append((top, np.ones(top.size)))
        lo.append(-np.inf)
        up.append(c)
        self.blocks.append(own_rows)
        for (cols, vals), l_, u_ in zip(rows, lo, up, strict=False):
            self.rows.append((cols, vals))
            self.row_lower.append(l_)
            self.row_upper.append(u_)
        nnz = sum(cc.size for cc, _ in rows)
        starts = np.cumsum([0] + [cc.size for cc, _ in rows[:-1]]).astype(np.int32)
        idx = np.concatenate([cc for cc, _ in rows]).astype(np.int32)
        val = np.concatenate([vv for _, vv in rows])
        inf = highspy.kHighsInf
        h.addRows(len(rows), np.where(np.isfinite(lo), lo, -inf), np.where(np.isfinite(up), up, inf), nnz, starts, idx, val)

    def beta_from(self, y: np.ndarray, reduced: np.ndarray) -> list:
        """Cut weights: each tangent block's multipliers on its rows g(u) >= A(u) - lam Ms(u), plus
        the multiplier of an active column bound (a one-node cut)."""
        b = np.maximum(reduced[: self.n_a], 0.0)
        for own in self.blocks:
            for r, c in own:
                b[c] += abs(y[r])  # a lower-bound row: its multiplier has the opposite sign convention
        for r in self.cut_rows:
            cols, vals = self.rows[r]
            b[cols] += max(y[r], 0.0) * vals
        out = [np.zeros(1)]
        for d in range(1, self.g + 1):
            c = self.col[d]
            bd = np.zeros(self.V**d)
            bd[c >= 0] = b[c[c >= 0]]
            out.append(bd)
        return out


def _polish(lp: _NodeLP, h, cost: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """Re-solve HiGHS' final basis in float64 (sparse LU): exact basic primal values and row duals.

    Nonbasic columns sit at the bound their status names, nonbasic rows at theirs; the basic
    columns and the activities of the basic rows solve ``[A_B, -I_R] z = -A_N x_N + r_N``."""
    import highspy
    import scipy.sparse as sp
    from scipy.sparse.linalg import splu

    try:
        basis = h.getBasis()
        S = highspy.HighsBasisStatus
        cst = list(basis.col_status)
        rst = list(basis.row_status)
        A = lp.csc()
        nrow = A.shape[0]
        cb = np.array([s == S.kBasic for s in cst], dtype=bool)
        rb = np.array([s == S.kBasic for s in rst], dtype=bool)
        if cb.sum() + rb.sum() != nrow:
            return None
        x = np.zeros(lp.n)
        up_c = np.array([s == S.kUpper for s in cst], dtype=bool)
        x[up_c] = lp.col_upper[up_c]
        lo_c = ~cb & ~up_c
        x[lo_c] = lp.col_lower[lo_c]
        if nrow == 0:
            return x, np.zeros(0)
        rlo, rup = np.asarray(lp.row_lower), np.asarray(lp.row_upper)
        up_r = np.array([s == S.kUpper for s in rst], dtype=bool)
        r_fixed = np.where(up_r, rup, rlo)
        r_fixed[rb] = 0.0
        if not (np.all(np.isfinite(x)) and np.all(np.isfinite(r_fixed))):
            return None
        nb = int(rb.sum())
        slack = sp.csc_matrix((-np.ones(nb), (np.flatnonzero(rb), np.arange(nb))), shape=(nrow, nb))
        M = sp.hstack([A[:, np.flatnonzero(cb)], slack], format="csc")
        lu = splu(M)
        rhs = r_fixed - A[:, np.flatnonzero(~cb)] @ x[~cb]
        z = lu.solve(rhs)
        x[cb] = z[: int(cb.sum())]
        y = lu.solve(np.concatenate([cost[cb], np.zeros(nb)]), trans="T")
        if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
            return None
        return x, y
    except Exception:  # singular or odd basis: keep HiGHS' solution (the certificate still runs)
        return None


# long-function: one cutting-plane loop (solve, separate, add rows, stop test) whose state is shared by every step
def solve_node_lp(table: prefixes.PrefixTable, k: int) -> NodeLPSolution:
    r"""Solve the node LP (:doc:`trees`, Theorem 1) by cutting planes with exact antichain separation.

    .. math::
        \max \sum_{u \ne \emptyset} A(u) \quad \text{s.t.} \quad A(uy) \le M_b(y \mid u) A(u),\quad
        A(\emptyset) = 1, \quad \sum_{r \in R} A(r) \le h(M_s(R))\ \ \forall \text{ antichains } R.

    Each round HiGHS (dual simplex, warm-started) solves the LP with the cuts so far;
    :func:`antichain_violation` finds the most violated antichains exactly. Up to
    :data:`~otspec._tolerances.TREE_ANTICHAIN_ROWS_PER_ROUND` of them are added as single rows
    :math:`A(R) / h(M_s(R)) \le 1`, and the most violated one also as a *tangent block*: the
    antichain recursion at the slope :math:`\lambda = h'(M_s(R))` written as LP rows (one variable
    per prefix), which enforces :math:`A(R') - \lambda M_s(R') \le h(M_s(R)) - \lambda M_s(R)`
    for every antichain :math:`R'` at once
    (:data:`~otspec._tolerances.TREE_CUTS_PER_ROUND` blocks per round). When nothing is violated
    beyond HiGHS' tolerance, the basis is re-solved exactly in float64 and checked again at
    :data:`~otspec._tolerances.TREE_CUT_TOL`. Capped at
    :data:`~otspec._tolerances.TREE_MAX_CUT_ROUNDS` rounds.

    Parameters
    ----------
    table : PrefixTable
        The enumerated target/draft pair (:func:`otspec.prefixes.enumerate_prefixes`).
    k : int
        Number of i.i.d. drafted sequences.

    Returns
    -------
    NodeLPSolution
        The node variables, cut weights for the dual bound, the LP objective and solver facts.
        When the last HiGHS run did not end optimal (e.g. it returned an error without solving),
        ``ok`` is False and the variables are whatever HiGHS left (zeros, or a stale round's):
        :func:`otspec.tree_optimum` then reports ``status="solver_failed"``, never ``"optimal"``.
    """
    import highspy

    from otspec.bounds.highs import solve_colwise

    lp = _NodeLP(table, k)
    A = lp.csc()
    h, ok, info = solve_colwise(
        cost=lp.cost,
        row_lower=np.asarray(lp.row_lower, dtype=np.float64),
        row_upper=np.asarray(lp.row_upper, dtype=np.float64),
        start=A.indptr,
        index=A.indices,
        value=A.data,
        col_upper=lp.col_upper,
        options={"solver": "simplex"},
    )
    if lp.n == 0:  # no prefix is reachable by both models: T* = 0 (HiGHS calls the model empty)
        ok, info = True, "empty model: no prefix is reachable by both models"
    all_ok, rounds, cuts, polished = ok, 1, 0, False
    while True:
        sol = h.getSolution()
        x = np.asarray(sol.col_value, dtype=np.float64)
        y = np.asarray(sol.row_dual, dtype=np.float64)
        polished = False
        _, new, cutrows = lp.cuts_for(x, TREE_CHAIN_TOL)
        if not new and not cutrows:
            pol = _polish(lp, h, lp.cost) if ok else None
            if pol is not None and pol[0].min(initial=0.0) >= -POLISH_NEGATIVE_ATOL:
                x, y, polished = np.maximum(pol[0], 0.0), pol[1], True
            _, new, cutrows = lp.cuts_for(x, TREE_CUT_TOL)
        if (not new and not cutrows) or rounds >= TREE_MAX_CUT_ROUNDS:
            break
        for lam, c in new:
            lp.add_block(h, lam, c)
        for cols, rhs in cutrows:
            # sum A / h(Ms(R)) <= 1: HiGHS' feasibility tolerance is absolute, and an antichain of
            # tiny draft mass would otherwise pass with a large relative violation.
            scale = 1.0 / rhs if rhs > 0 else 1.0
            vals = np.full(cols.size, scale)
            lp.rows.append((cols, vals))
            lp.row_lower.append(-np.inf)
            lp.row_upper.append(rhs * scale)
            lp.cut_rows.append(len(lp.rows) - 1)
            h.addRow(-highspy.kHighsInf, rhs * scale, cols.size, cols.astype(np.int32), vals)
        cuts += len(new)
        h.run()
        status = h.getModelStatus()
        ok = status == highspy.HighsModelStatus.kOptimal
        info = h.modelStatusToString(status)
        # the status of the LP whose solution is returned: an earlier round's trouble (HiGHS once
        # reported Unknown mid-loop on a 7-token case) only cost it cuts, which stay valid
        all_ok = ok
        rounds += 1
    Amat = lp.csc()
    cands = []
    for sign in (1.0, -1.0):
        yy = sign * y
        reduced = lp.cost - (Amat.T @ yy if Amat.shape[0] else 0.0)
        at_upper = np.isclose(x, lp.col_upper, rtol=0.0, atol=POLISH_NEGATIVE_ATOL) & (lp.col_upper > 0) & lp.cap_is_cut
        cands.append(lp.beta_from(yy, np.where(at_upper, reduced, 0.0)))
    beta = min(cands, key=lambda b: dual_bound(table, b, k))
    return NodeLPSolution(
        A=lp.nodes(x),
        beta=beta,
        objective=float(x[: lp.n_a].sum()),
        ok=bool(all_ok),
        rounds=rounds,
        cuts=cuts,
        polished=polished,
        info=info,
    )
