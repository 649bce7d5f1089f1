r"""A certified interval for the tree optimum :math:`T^*` at real vocabulary, from an explored tree.

:math:`T^*` (:doc:`trees`) is an LP over every prefix, out of reach at :math:`V = 49\,152`. A
decoding round only sees the drafted trie and the two models' full next-token rows at its nodes.
Let the *explored set* :math:`E` be the drafted trie, plus the top-``K`` children under :math:`p` and
under :math:`q` of every *expanded* node (a node whose rows are known: the drafted nodes, and the
nodes an optional expansion pass scores). Every sequence :math:`l` of length :math:`\gamma` has a
deepest explored prefix :math:`v`; the sequences whose deepest explored prefix is :math:`v` form the
*bucket* :math:`b(v)`, with exact draft mass
:math:`M_s(b(v)) = M_s(v)\,(1 - q(\text{explored children} \mid v))` (:math:`M_s(v)` at an unexpanded
node) and, below :math:`v`, target mass
:math:`\rho(v) = 1 - p(\text{explored children} \mid v)` (1 at an unexpanded node) at every depth.

**Upper bound.** For a selection law :math:`\mu \in B_k` (Theorem 2 of :doc:`trees`) the block
verification value :math:`\Phi(\mu) = \sum_u W_\mu(u)` splits into the explored nodes and the rest.
:math:`W_\mu` on :math:`E` depends on :math:`\mu` only through the bucket masses
:math:`m(b) = \mu(b)`; below an explored :math:`v`, the unexplored nodes at one depth partition
:math:`b(v)` and have target mass :math:`\rho(v)` given :math:`v`, so by (L) their :math:`W` sum to at
most :math:`\min(W(v)\rho(v), m(b(v)))`. Hence

.. math::
    T^* \le \mathrm{UB}(E) = \max_{m \in B_k(\text{buckets})} \sum_{v \in E} W(v)
    + \sum_{v \in E} \sum_{i > |v|} \min\big(W(v)\,\rho(v),\ m(b(v))\big),

an LP with one variable per explored node and bucket (the bucket polytope
:math:`m(S) \le h(M_s(S))` is separated exactly by one sort, as in
:mod:`otspec.bounds.tree_node`). At an expanded node the first unexplored depth is also capped by
:math:`\sum_{c \notin E} h(M_s(v)\, q(c \mid v))` (a child's selection mass is at most the chance a draft
passes it), and deeper depths by the first (:math:`W` shrinks down a path). The bound holds for
*any* :math:`E`, also one chosen after seeing the drafts. It is certified by weak duality: for any
row multipliers :math:`y` of the LP (HiGHS' duals, signs clipped),
:math:`\mathrm{UB} \le y^\top r + \sum_j u_j\,(c - A^\top y)_j^+` with finite column bounds
:math:`u`, evaluated in numpy; an unfinished cutting-plane loop still gives a valid bound (it
relaxes the LP). The loop stops once further cuts could take little off: they cannot push the dual
bound below the LP's value at a feasible point (the current bucket law moved into the polytope,
with the best :math:`W` and bucket terms for it), and when that room is at most
:data:`~otspec._tolerances.TREE_INTERVAL_CUT_ROOM` of the width the upper bound is kept.

**Lower bound.** A bucket law :math:`m \in B_k` is realised by a selection rule: choose a bucket
by a Hall coupling with the drafted tree (possible exactly because :math:`m(S) \le h(M_s(S))`),
then a uniformly chosen draft inside it. Its law on sequences is :math:`\mu(l) = m(b) M_s(l) / M_s(b)`,
so :math:`T^* \ge \Phi(\mu) \ge \sum_{v \in E} W_\mu(v) + \sum_{v \text{ expanded}} \sum_{c \notin E}
\min\big(W_\mu(v)\, p(c \mid v),\ m(b(v))\, q(c \mid v) / q(\text{unexplored} \mid v)\big)`
(the first unexplored depth is known exactly at an expanded node; deeper ones are dropped,
:math:`W \ge 0`). The LP's bucket law is first moved into the polymatroid (shrinking violated sets;
the polytope is closed under lowering entries, and :math:`\Phi` is monotone, so a sub-law gives a
valid bound).

The gap is at most the bucket terms; it is wide below unexpanded children, and an expansion pass
(one batched forward pass of both models) closes it there. With everything explored the interval
is :math:`[T^*, T^*]`.

References
----------
Sun, Mendlovic, Leviathan, Aharoni, Ro, Beirami, Suresh, "Block Verification Accelerates
Speculative Decoding" (ICLR 2025): the W recursion. Fujishige, "Submodular Functions and
Optimization" (2005): polymatroids, their level-set separation and the extension of a point of the
polymatroid to its base.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from otspec._tolerances import (
    ROUNDING_PER_TERM,
    SIMPLEX_SUM_ATOL,
    TREE_INTERVAL_CUT_ROOM,
    TREE_INTERVAL_CUT_TOL,
    TREE_INTERVAL_CUTS_PER_ROUND,
    TREE_INTERVAL_MAX_ROUNDS,
)
from otspec._validation import as_int_in_range
from otspec.bounds import jit_policy
from otspec.bounds.tree_node import coverage, membership_violation
from otspec.errors import InvalidDistributionError, InvalidDraftsError, InvalidOptionError, ShapeMismatchError

__all__ = ["tree_interval", "TreeIntervalResult", "ExploredTree", "drafted_prefixes"]


@dataclass(frozen=True, eq=False)
class TreeIntervalResult:
    r"""A certified interval ``[lower, upper]`` containing the tree optimum :math:`T^*`.

    Attributes
    ----------
    lower : float
        :math:`\sum_{v \in E} W_\mu(v)` plus the first unexplored depth, for the realised bucket law
        (a lossless selection-then-block-verification value, so :math:`\le T^*`).
    upper : float
        The bucket LP's value bounded by weak duality in numpy (:math:`\ge T^*`).
    gap : float
        ``upper - lower``.
    k, gamma, V, top_k : int
        Drafts, draft length, vocabulary size, children kept per expanded node and model.
    levels : int
        Expansion passes done.
    n_nodes, n_expanded, n_buckets : int
        Explored nodes (root included), nodes with known rows, buckets of positive draft mass.
    bucket_law : ndarray
        The realised bucket law :math:`m` (one entry per explored node, its bucket), in the order of
        :attr:`nodes`.
    nodes : tuple of tuple of int
        The explored prefixes (root ``()`` first, every parent before its children).
    status : str
        ``"optimal"`` when the cutting planes converged (no bucket cut violated beyond
        :data:`~otspec._tolerances.TREE_INTERVAL_CUT_TOL`), ``"width_tolerance"`` when they stopped
        because further cuts could take at most
        :data:`~otspec._tolerances.TREE_INTERVAL_CUT_ROOM` of the width off the upper bound
        (``checks["cut_room"]``: the dual bound minus the LP's value at a feasible point, an upper
        limit on what they could still take off), ``"cut_limit"`` when the round cap was
        reached first, ``"solver_failed"`` when a HiGHS run did not end optimal (its solution is
        not read: the bounds come from the last optimal round, or from the columns' bounds and the
        drafts' own law); both bounds are valid in every case.
    checks : mapping
        ``lp_value`` (HiGHS' objective; NaN after a failed solve), ``membership`` (the lower bound's law's excess over the
        bucket polytope, rounding level), ``cut_violation``, ``rounds``, ``cuts``, ``cut_room`` (0 when the cuts converged, NaN for ``"cut_limit"`` and ``"solver_failed"``).
    solver_info : str
        HiGHS' last model status.
    """

    lower: float
    upper: float
    gap: float
    k: int
    gamma: int
    V: int
    top_k: int
    levels: int
    n_nodes: int
    n_expanded: int
    n_buckets: int
    bucket_law: np.ndarray
    nodes: tuple
    status: str
    checks: dict = field(default_factory=dict)
    solver_info: str = ""

    def contains(self, value: float, *, atol: float = 0.0) -> bool:
        """Whether ``lower - atol <= value <= upper + atol``.

        Parameters
        ----------
        value : float
            A candidate (e.g. an exact :math:`T^*`).
        atol : float
            Slack on both ends.

        Returns
        -------
        bool
        """
        return self.lower - atol <= value <= self.upper + atol

    def __repr__(self) -> str:
        return (
            f"TreeIntervalResult(lower={self.lower:.6g}, upper={self.upper:.6g}, gap={self.gap:.3g}, k={self.k}, "
            f"gamma={self.gamma}, V={self.V}, top_k={self.top_k}, levels={self.levels}, nodes={self.n_nodes}, status={self.status!r})"
        )

    def to_dict(self) -> dict:
        """JSON-ready summary (the bucket law and the nodes are left out).

        Returns
        -------
        dict
            The scalar fields as plain Python types.
        """
        keys = (
            "lower",
            "upper",
            "gap",
            "k",
            "gamma",
            "V",
            "top_k",
            "levels",
            "n_nodes",
            "n_expanded",
            "n_buckets",
            "status",
            "solver_info",
        )
        out = {key: getattr(self, key) for key in keys}
        out["checks"] = {key: float(val) for key, val in self.checks.items()}
        return out


def drafted_prefixes(drafts: np.ndarray) -> list[tuple]:
    """The distinct prefixes of depth ``0 .. gamma - 1`` of the drafted sequences, breadth first.

    Parameters
    ----------
    drafts : array_like of int, shape (k, gamma)
        The drafted token sequences.

    Returns
    -------
    list of tuple of int
        Root ``()`` first, then by depth and lexicographically.

    Examples
    --------
    >>> drafted_prefixes([[1, 2], [1, 0]])
    [(), (1,)]
    """
    X = np.asarray(drafts)
    out = {tuple(int(t) for t in row[:d]) for row in X for d in range(X.shape[1])}
    return sorted(out, key=lambda u: (len(u), u))


def _check_rows(rows: Any, n: int, V: int | None, name: str, kernels=None) -> np.ndarray:
    """Float64 ``(n, V)`` rows on the simplex, or a specific error (``kernels``: the entries'
    check and the row sums in one compiled pass; the error messages come from numpy)."""
    try:
        arr = np.asarray(rows, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InvalidDistributionError(
            f"{name} must be an array of probabilities (got {type(rows).__name__}: {exc}); pass float rows"
        ) from None
    if arr.ndim != 2 or arr.shape[0] != n or (V is not None and arr.shape[1] != V):
        want = f"({n}, {'V' if V is None else V})"
        raise ShapeMismatchError(f"{name} must have shape {want} (got {arr.shape}); one full next-token row per node")
    sums = None
    if kernels is not None and arr.flags.c_contiguous and arr.size:
        sums = np.empty(arr.shape[0])
        if not kernels.check_rows(arr, sums):
            sums = None  # numpy finds the entry for the message below
    if sums is None and (not np.all(np.isfinite(arr)) or np.any(arr < 0)):
        raise InvalidDistributionError(f"{name} must be finite and non-negative (got min {np.nanmin(arr):.3g}); pass softmax rows")
    err = np.abs((arr.sum(axis=1) if sums is None else sums) - 1.0)
    if err.size and err.max() > SIMPLEX_SUM_ATOL:
        i = int(np.argmax(err))
        raise InvalidDistributionError(
            f"{name} row {i} must sum to 1 within {SIMPLEX_SUM_ATOL:g} (got {arr[i].sum():.12g}); normalise it in float64 first"
        )
    return arr


class ExploredTree:
    r"""The explored set :math:`E`: nodes, their prefix masses, the rows of expanded nodes, the buckets.

    Parameters
    ----------
    k, gamma, top_k : int
        Drafts, draft length, children kept per expanded node under each model.
    kernels : module, optional
        :mod:`otspec.bounds.tree_interval_kernels`: the per-node passes compiled (the same
        quantities, bit for bit); None for the numpy reference.
    """

    def __init__(self, k: int, gamma: int, top_k: int, kernels=None):
        self.k, self.gamma, self.K = k, gamma, top_k
        self.kern = kernels
        self.V: int | None = None
        self.nodes: list[tuple] = [()]
        self.index = {(): 0}
        self.parent, self.depth = [-1], [0]
        self.mb, self.ms = [1.0], [1.0]
        self.pc, self.qc = [1.0], [1.0]
        self.rows: dict[int, tuple] = {}
        self.children: list[list] = [[]]

    def add_node(self, u: tuple, par: int, pc: float, qc: float) -> int:
        r"""Add the child ``u`` of node ``par`` with conditionals ``pc``, ``qc`` (no-op if present).

        Parameters
        ----------
        u : tuple of int
            The child's prefix (its parent's prefix plus one token).
        par : int
            Index of the parent node.
        pc, qc : float
            :math:`p(u_{\text{last}} \mid \text{parent})` and :math:`q(u_{\text{last}} \mid \text{parent})`.

        Returns
        -------
        int
            The node's index (the existing one if ``u`` was already explored).
        """
        if u in self.index:
            return self.index[u]
        i = len(self.nodes)
        self.nodes.append(u)
        self.index[u] = i
        self.parent.append(par)
        self.depth.append(len(u))
        self.pc.append(pc)
        self.qc.append(qc)
        self.mb.append(self.mb[par] * pc)
        self.ms.append(self.ms[par] * qc)
        self.children.append([])
        self.children[par].append(i)
        return i

    def expand(self, i: int, p_row: np.ndarray, q_row: np.ndarray, must: tuple = ()) -> None:
        r"""Record node ``i``'s rows and add its top-K children under p and q (and ``must``).

        Parameters
        ----------
        i : int
            Index of the node being expanded.
        p_row, q_row : ndarray, shape (V,)
            The node's full conditionals :math:`p(\cdot \mid u)`, :math:`q(\cdot \mid u)`.
        must : tuple of int, optional
            Tokens added as children whatever their rank (the drafted children).
        """
        self.rows[i] = (p_row, q_row)
        if self.depth[i] >= self.gamma:
            return
        K = min(self.K, p_row.shape[0])
        if self.kern is not None:
            best = np.empty(2 * K, dtype=np.int64)
            self.kern.top_k(p_row, q_row, K, best)
            top = set(best.tolist())
        else:
            top = set(np.argpartition(-p_row, K - 1)[:K].tolist()) | set(np.argpartition(-q_row, K - 1)[:K].tolist())
        top |= set(int(t) for t in must)
        u = self.nodes[i]
        for t in sorted(top):
            if p_row[t] > 0 or q_row[t] > 0:
                self.add_node(u + (int(t),), i, float(p_row[t]), float(q_row[t]))

    def frontier(self) -> list[int]:
        """Explored nodes above depth ``gamma`` whose rows are unknown.

        Returns
        -------
        list of int
            Their indices, in insertion order (what the next expansion pass asks rows for).
        """
        return [i for i in range(len(self.nodes)) if i not in self.rows and self.depth[i] < self.gamma]

    def arrays(self) -> dict:
        r"""Per node: bucket mass, :math:`\rho`, first-depth cap, levels below, subtree membership.

        Returns
        -------
        dict
            Arrays indexed by node: the bucket's draft mass, :math:`\rho_i`, the cap of the first
            unexplored depth, the number of levels below, and each node's subtree membership (the
            inputs of the bucket LP).
        """
        n = len(self.nodes)
        sb = np.array(self.ms, dtype=np.float64)
        rho = np.ones(n)
        cap1 = np.full(n, np.inf)
        fv: dict = {}
        res: dict = {}
        lev = self.gamma - np.array(self.depth, dtype=np.int64)
        for i, (p_row, q_row) in self.rows.items():
            if lev[i] <= 0:
                continue
            if self.kern is not None and i > 0:
                self._compiled_node(i, p_row, q_row, sb, rho, cap1, fv, res)
                continue
            rest = np.ones(p_row.shape[0], dtype=bool)
            rest[[self.nodes[c][-1] for c in self.children[i]]] = False
            pr, qr = p_row[rest], q_row[rest]
            res[i] = (pr, qr)
            sb[i] = self.ms[i] * float(qr.sum())
            rho[i] = float(pr.sum())
            if i == 0:  # the root's W is 1: its first unexplored depth adds at most F_root(1), a constant
                cap1[0] = float(np.minimum(pr, coverage(qr, self.k)).sum())
                continue
            # h(m) <= min(k m, 1): a cheaper, still valid, child cap (tail tokens have h(m) ~ k m anyway)
            hb = np.minimum(self.k * self.ms[i] * qr, 1.0)
            cap1[i] = float(hb.sum())
            fv[i] = _tangents(pr, hb, min(self.mb[i], _coverage_scalar(self.ms[i], self.k)) * _TANGENT_GRID)
        return {"sb": np.clip(sb, 0.0, 1.0), "rho": np.clip(rho, 0.0, 1.0), "cap1": cap1, "lev": np.maximum(lev, 0), "fv": fv, "res": res}

    def _compiled_node(self, i: int, p_row, q_row, sb, rho, cap1, fv, res) -> None:
        """:meth:`arrays` at one non-root expanded node in one compiled pass (the reference's
        quantities, bit for bit)."""
        skip = np.array(sorted(self.nodes[c][-1] for c in self.children[i]), dtype=np.int64)
        grid = np.sort(min(self.mb[i], _coverage_scalar(self.ms[i], self.k)) * _TANGENT_GRID)
        cap_h, cap_p = np.empty(grid.size + 1), np.empty(grid.size + 1)
        buf = self._scratch(4)
        r, qsum, c1, total = self.kern.rest_stats(p_row, q_row, skip, self.k * self.ms[i], grid, cap_h, cap_p, buf)
        res[i] = (p_row, q_row, skip, qsum)
        sb[i] = self.ms[i] * qsum
        rho[i] = r
        cap1[i] = c1
        ch, cp = np.cumsum(cap_h)[: grid.size], np.cumsum(cap_p)[: grid.size]
        fv[i] = [(total - float(a), float(b)) for a, b in zip(cp, ch, strict=True)]

    def _scratch(self, rows: int) -> np.ndarray:
        """A float64 ``(rows, V)`` scratch buffer for the compiled passes, reused across nodes."""
        buf = getattr(self, "_buf", None)
        if buf is None or buf.shape[0] < rows:
            buf = self._buf = np.empty((rows, self.V))
        return buf


def _coverage_scalar(m: float, k: int) -> float:
    """:math:`h(m) = 1 - (1 - m)^k` for one float (as :func:`~otspec.bounds.tree_node.coverage`,
    without numpy's per-call cost; it only places the tangent points, where any value is valid)."""
    m = min(max(m, 0.0), 1.0)
    return 1.0 if m == 1.0 else -math.expm1(k * math.log1p(-m))


#: Where F_v's tangents are taken, as fractions of the largest W(v): a few lines bound the concave
#: F_v from above (any tangent is valid; more lines only tighten between them).
_TANGENT_GRID = np.array([1.0, 0.7, 0.5, 0.35, 0.25, 0.15, 0.1, 0.05, 0.02, 0.005])


def _tangents(p: np.ndarray, hb: np.ndarray, grid: np.ndarray) -> list:
    r"""Tangent lines ``(a, b)`` of :math:`F(W) = \sum_c \min(W p_c, h_c)` at each ``W`` of ``grid``.

    At :math:`W`, the children with kink :math:`h_c / p_c \le W` are capped: :math:`a = \sum` of
    the others' :math:`p_c`, :math:`b = \sum` of the capped :math:`h_c`; :math:`F \le aW' + b` for every
    :math:`W'` (F is concave). One binning pass over the children, no sort.
    """
    keep = p > 0
    w = hb[keep] / p[keep]
    G = np.sort(grid)
    j = np.searchsorted(G, w, side="left")  # capped at G[i] iff i >= j
    cap_h = np.cumsum(np.bincount(j, weights=hb[keep], minlength=G.size + 1))[: G.size]
    cap_p = np.cumsum(np.bincount(j, weights=p[keep], minlength=G.size + 1))[: G.size]
    total = float(p[keep].sum())
    return [(total - float(a), float(b)) for a, b in zip(cap_p, cap_h, strict=True)]


class _BucketLP:
    """Columns: W (non-root nodes), m (buckets), z1 / zd (bucket terms); rows as in the module doc."""

    # long-function: the LP's columns, bounds and rows written out in one place (each block is one constraint family)
    def __init__(self, tree: ExploredTree, arr: dict):
        import scipy.sparse as sp

        n = len(tree.nodes)
        k = tree.k
        self.n, self.k = n, k
        sb, rho, cap1, lev = arr["sb"], arr["rho"], arr["cap1"], arr["lev"]
        self.sb = sb
        par = np.array(tree.parent, dtype=np.int64)
        pc = np.array(tree.pc)
        mb, ms = np.array(tree.mb), np.array(tree.ms)
        # column blocks: W[1..n-1] -> 0..n-2, m[0..n-1] -> n-1..2n-2, then z1 and zd for nodes with lev >= 1 / >= 2
        self.w0, self.m0 = 0, n - 1
        z1_nodes = np.flatnonzero((lev >= 1) & (sb > 0) & (rho > 0))
        zd_nodes = z1_nodes[lev[z1_nodes] >= 2]
        self.z1_nodes, self.zd_nodes = z1_nodes, zd_nodes
        self.z10 = 2 * n - 1
        self.zd0 = self.z10 + z1_nodes.size
        ncol = self.zd0 + zd_nodes.size
        self.ncol = ncol
        hms = coverage(ms, k)
        hsb = coverage(sb, k)
        upper = np.empty(ncol)
        upper[: n - 1] = np.minimum(mb[1:], hms[1:])
        upper[self.m0 : self.m0 + n] = hsb
        zcap = np.minimum(np.minimum(hsb[z1_nodes], cap1[z1_nodes]), rho[z1_nodes] * np.minimum(mb[z1_nodes], hms[z1_nodes]))
        upper[self.z10 : self.zd0] = zcap
        self.zcap, self.rho, self.lev = zcap, rho, lev
        upper[self.zd0 :] = zcap[lev[z1_nodes] >= 2]
        self.upper = np.maximum(upper, 0.0)
        cost = np.zeros(ncol)
        cost[: n - 1] = 1.0
        cost[self.z10 : self.zd0] = 1.0
        cost[self.zd0 :] = (lev[zd_nodes] - 1).astype(np.float64)
        self.cost = cost
        blocks: list = []  # (row ids, cols, vals) per constraint family; rows numbered in the order written below

        def rows_of(count: np.ndarray, first: int) -> np.ndarray:
            """Row ids of families written entry by entry: ``count[j]`` consecutive rows per item j."""
            return first + np.concatenate([[0], np.cumsum(count)[:-1]]).astype(np.int64)

        # (L) W(v) - p(v|par) W(par) <= 0 for depth >= 2 (depth 1: the column bound min(Mb, h(Ms)) <= p)
        deep = np.flatnonzero(par > 0)
        rid = np.arange(deep.size)
        blocks.append(
            (np.concatenate([rid, rid]), np.concatenate([deep - 1, par[deep] - 1]), np.concatenate([np.ones(deep.size), -pc[deep]]))
        )
        row = deep.size
        lo, up = [np.full(deep.size, -np.inf)], [np.zeros(deep.size)]
        # W(v) - sum of the buckets in v's subtree <= 0, and the subtree cut m(sub(v)) <= h(Ms(v))
        # (ancestor-or-self pairs (a, i), a >= 1: one walk up per depth for all nodes at once)
        anc, desc = [], []
        cur = np.arange(1, n)
        node = cur.copy()
        while cur.size:
            anc.append(cur)
            desc.append(node)
            keep = par[cur] > 0
            cur, node = par[cur][keep], node[keep]
        anc, desc = np.concatenate(anc), np.concatenate(desc)
        nsub = np.bincount(anc, minlength=n)
        has_cut = (nsub > 1) & (hms > 0)
        has_cut[0] = False
        wrow = rows_of(1 + has_cut[1:], row)  # row of W(i) - m(sub(i)) for i = 1..n-1; its cut row follows
        wrow_of = np.zeros(n, dtype=np.int64)
        wrow_of[1:] = wrow
        blocks.append(
            (
                np.concatenate([wrow, wrow_of[anc]]),
                np.concatenate([np.arange(n - 1), self.m0 + desc]),
                np.concatenate([np.ones(n - 1), -np.ones(anc.size)]),
            )
        )
        cutp = has_cut[anc]
        hms_safe = np.where(hms > 0, hms, 1.0)
        blocks.append((wrow_of[anc[cutp]] + 1, self.m0 + desc[cutp], 1.0 / hms_safe[anc[cutp]]))
        nb_rows = int(n - 1 + has_cut.sum())
        bup = np.zeros(nb_rows)
        bup[wrow[has_cut[1:]] + 1 - row] = 1.0
        lo.append(np.full(nb_rows, -np.inf))
        up.append(bup)
        row += nb_rows
        # z1(v) <= rho(v) W(v) (root: W = 1, in the column bound), z1(v) <= m(b(v)), zd(v) <= z1(v)
        nz = z1_nodes.size
        inner = z1_nodes > 0
        zrow = rows_of(1 + inner, row)  # the rho row (inner nodes) first, then the bucket row
        brow = zrow + inner
        zj = self.z10 + np.arange(nz)
        blocks.append(
            (
                np.concatenate([zrow[inner], zrow[inner]]),
                np.concatenate([zj[inner], z1_nodes[inner] - 1]),
                np.concatenate([np.ones(int(inner.sum())), -rho[z1_nodes[inner]]]),
            )
        )
        blocks.append((np.concatenate([brow, brow]), np.concatenate([zj, self.m0 + z1_nodes]), np.concatenate([np.ones(nz), -np.ones(nz)])))
        nzr = int(nz + inner.sum())
        lo.append(np.full(nzr, -np.inf))
        up.append(np.zeros(nzr))
        row += nzr
        nd = zd_nodes.size
        drow = row + np.arange(nd)
        pos = np.searchsorted(z1_nodes, zd_nodes)  # z1_nodes is sorted (flatnonzero)
        blocks.append(
            (
                np.concatenate([drow, drow]),
                np.concatenate([self.zd0 + np.arange(nd), self.z10 + pos]),
                np.concatenate([np.ones(nd), -np.ones(nd)]),
            )
        )
        lo.append(np.full(nd, -np.inf))
        up.append(np.zeros(nd))
        row += nd
        # z1(v) <= F_v(W(v)) through tangents of the concave F_v at a grid of W in (0, max W(v)]
        tj = [j for j, i in enumerate(z1_nodes.tolist()) if i > 0 and i in arr["fv"]]
        self.tangents = (np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0))  # (z1 position, slope, intercept)
        if tj:
            lines = [np.asarray(arr["fv"][int(z1_nodes[j])], dtype=np.float64).reshape(-1, 2) for j in tj]
            cnt = np.array([ln.shape[0] for ln in lines])
            ab = np.concatenate(lines)
            tj = np.repeat(np.array(tj), cnt)
            trow = row + np.arange(tj.size)
            blocks.append(
                (
                    np.concatenate([trow, trow]),
                    np.concatenate([self.z10 + tj, z1_nodes[tj] - 1]),
                    np.concatenate([np.ones(tj.size), -ab[:, 0]]),
                )
            )
            lo.append(np.full(tj.size, -np.inf))
            up.append(ab[:, 1].copy())
            row += tj.size
            self.tangents = (tj, ab[:, 0].copy(), ab[:, 1].copy())
        # the bucket law is a probability: sum m = 1
        blocks.append((np.full(n, row), self.m0 + np.arange(n), np.ones(n)))
        lo.append(np.ones(1))
        up.append(np.ones(1))
        row += 1
        r = np.concatenate([bl[0] for bl in blocks])
        c = np.concatenate([bl[1] for bl in blocks])
        v = np.concatenate([bl[2] for bl in blocks]).astype(np.float64)
        self.A = sp.csr_matrix((v, (r, c)), shape=(row, ncol))
        self.lo, self.up = np.concatenate(lo), np.concatenate(up)
        self.seen: set = set()
        # added rows, in chunks: columns, values, the owning added row of each entry, upper bounds
        self.cut_cols: list = []
        self.cut_vals: list = []
        self.cut_owner: list = []
        self.cut_up: list = []
        self.n_cut = 0
        self.blocks: list = []

    def solve(self):
        from otspec.bounds.highs import solve_colwise

        A = self.A.tocsc()
        return solve_colwise(
            cost=self.cost,
            row_lower=self.lo,
            row_upper=self.up,
            start=A.indptr,
            index=A.indices,
            value=A.data,
            col_upper=self.upper,
            options={"solver": "simplex"},
        )

    def cuts(self, x: np.ndarray) -> tuple[float, list]:
        """The largest bucket-polytope violation and up to TREE_INTERVAL_CUTS_PER_ROUND new level-set cuts."""
        m = np.clip(x[self.m0 : self.m0 + self.n], 0.0, None)
        viol, order, excess = membership_violation(m, self.sb, self.k)
        out = []
        if viol <= TREE_INTERVAL_CUT_TOL:
            return viol, out
        F = np.cumsum(self.sb[order])
        M = float(min(F[int(np.argmax(excess))], 1.0))
        lam = float(self.k * (1.0 - M) ** (self.k - 1))  # h'(M): the tangent block of the most violated set
        key = ("block", round(lam, 12))
        if key not in self.seen:
            self.seen.add(key)
            self.blocks.append((lam, float(coverage(M, self.k)) - lam * M))
        for j in np.argsort(-excess, kind="stable")[: 4 * TREE_INTERVAL_CUTS_PER_ROUND]:
            if excess[j] <= TREE_INTERVAL_CUT_TOL or len(out) >= TREE_INTERVAL_CUTS_PER_ROUND:
                break
            S = np.sort(order[: j + 1])
            key = S.tobytes()
            if key in self.seen:
                continue
            self.seen.add(key)
            out.append((S, float(coverage(F[j], self.k))))
        return viol, out

    def add_rows(self, h, count: np.ndarray, cols: np.ndarray, vals: np.ndarray, up: np.ndarray) -> None:
        """Append ``<=`` rows to HiGHS and to the row store in one call: ``count[j]`` entries of
        ``cols`` / ``vals`` (row after row) and upper bound ``up[j]`` per row."""
        import highspy

        cols = np.asarray(cols, dtype=np.int32)
        starts = np.concatenate([[0], np.cumsum(count)[:-1]]).astype(np.int32)
        self.cut_cols.append(cols)
        self.cut_vals.append(np.asarray(vals, dtype=np.float64))
        self.cut_owner.append(np.repeat(self.n_cut + np.arange(count.size), count))
        self.cut_up.append(np.asarray(up, dtype=np.float64))
        self.n_cut += count.size
        h.addRows(count.size, np.full(count.size, -highspy.kHighsInf), self.cut_up[-1], cols.size, starts, cols, self.cut_vals[-1])

    def add_cuts(self, h, cuts: list) -> None:
        """Level-set cuts m(S) <= h(Ms(S)), each scaled to right-hand side 1."""
        rhs = np.array([r for _, r in cuts])
        scale = np.where(rhs > 0, 1.0 / np.where(rhs > 0, rhs, 1.0), 1.0)
        count = np.array([S.size for S, _ in cuts])
        cols = self.m0 + np.concatenate([S for S, _ in cuts])
        self.add_rows(h, count, cols, np.repeat(scale, count), rhs * scale)

    def add_block(self, h, lam: float, c: float) -> None:
        r"""Tangent block at slope ``lam``: :math:`\sum_b (m_b - \lambda M_s(b))^+ \le c` through new columns
        :math:`t_b \in [0, h(M_s(b))]`, i.e. :math:`m(S) - \lambda M_s(S) \le c` for every set at once."""

        b = np.flatnonzero(self.sb > 0)
        first = self.ncol
        self.ncol += b.size
        self.cost = np.concatenate([self.cost, np.zeros(b.size)])
        ub = coverage(self.sb[b], self.k)
        self.upper = np.concatenate([self.upper, ub])
        h.addCols(
            b.size, np.zeros(b.size), np.zeros(b.size), ub, 0, np.zeros(b.size, dtype=np.int32), np.zeros(0, dtype=np.int32), np.zeros(0)
        )
        t = first + np.arange(b.size)
        # rows m_b - t_b <= lam Ms(b), one per bucket, then sum t <= c
        count = np.concatenate([np.full(b.size, 2), [b.size]])
        cols = np.concatenate([np.stack([self.m0 + b, t], axis=1).ravel(), t])
        vals = np.concatenate([np.tile([1.0, -1.0], b.size), np.ones(b.size)])
        self.add_rows(h, count, cols, vals, np.concatenate([lam * self.sb[b], [float(c)]]))

    def feasible_value(self, tree: ExploredTree, m: np.ndarray) -> tuple[float, float]:
        r"""The LP's objective at its best point with bucket law ``m`` (a point of the bucket
        polytope), and the explored part :math:`\sum_{v \in E} W(v)` of it.

        With ``m`` fixed the rows decouple: :math:`W(v) = \min(p(v \mid \text{par})\,W(\text{par}),
        m(\text{sub}(v)))` top-down, then each :math:`z_1(v)` is the least of its caps and
        :math:`z_d(v) = z_1(v)`. A feasible point: its value is at most the LP's optimum, so the dual
        bound minus it bounds what further cuts can still take off the upper bound."""
        n = self.n
        par = tree.parent
        sub = m.astype(np.float64).copy()
        for i in range(n - 1, 0, -1):  # breadth-first order: children after parents
            sub[par[i]] += sub[i]
        W = np.ones(n)
        for i in range(1, n):
            W[i] = min(W[par[i]] * tree.pc[i], sub[i])
        nodes = self.z1_nodes
        z = np.minimum(np.minimum(self.zcap, m[nodes]), np.where(nodes > 0, self.rho[nodes] * W[nodes], np.inf))
        tj, a, b = self.tangents
        if tj.size:
            np.minimum.at(z, tj, a * W[nodes[tj]] + b)
        z = np.maximum(z, 0.0)
        explored = float(W[1:].sum())
        deeper = (self.lev[nodes] - 1).astype(np.float64)
        return explored + float(z.sum()) + float((np.maximum(deeper, 0.0) * z).sum()), explored

    def _added(self) -> tuple:
        """The added rows' entries: (owning added row, column, value), concatenated."""
        if not self.n_cut:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int32), np.zeros(0)
        return np.concatenate(self.cut_owner), np.concatenate(self.cut_cols), np.concatenate(self.cut_vals)

    def matrix(self) -> tuple:
        """The whole constraint matrix (CSR) and the row bounds, added rows included."""
        import scipy.sparse as sp

        A = self.A
        if A.shape[1] < self.ncol:
            A = sp.hstack([A, sp.csr_matrix((A.shape[0], self.ncol - A.shape[1]))], format="csr")
        if not self.n_cut:
            return A, self.lo, self.up
        r, c, v = self._added()
        cut = sp.csr_matrix((v, (r, c)), shape=(self.n_cut, self.ncol))
        up = np.concatenate([self.up, *self.cut_up])
        lo = np.concatenate([self.lo, np.full(self.n_cut, -np.inf)])
        return sp.vstack([A, cut], format="csr"), lo, up

    def dual_bound(self, y: np.ndarray) -> float:
        r"""Weak duality: :math:`y^\top u_{\text{row}} + \sum_j u_j (c - A^\top y)_j^+`, every row ``<=`` (or ``=``).

        Multipliers of ``<=`` rows are clipped at 0; both sign conventions of the solver's duals are
        tried and the smaller bound kept (each is valid for any ``y``)."""
        # A^T y in two parts, the initial rows (CSR, padded to the added columns) and the added rows
        # (their column lists): the same product as the stacked matrix of :meth:`matrix`, unbuilt
        m0 = self.A.shape[0]
        up = np.concatenate([self.up, *self.cut_up])
        eq = np.zeros(up.size, dtype=bool)
        eq[:m0] = self.lo == self.up
        owner, cols, vals = self._added()
        best = np.inf
        for sign in (1.0, -1.0):
            yy = sign * np.asarray(y, dtype=np.float64)
            yy = np.where(eq, yy, np.maximum(yy, 0.0))
            aty = np.zeros(self.ncol)
            aty[: self.A.shape[1]] = self.A.T @ yy[:m0]
            if owner.size:
                aty += np.bincount(cols, weights=vals * yy[m0 + owner], minlength=self.ncol)
            reduced = self.cost - aty
            best = min(best, float(yy @ up + self.upper @ np.maximum(reduced, 0.0)))
        return best


def _realise(m: np.ndarray, sb: np.ndarray, k: int) -> tuple[np.ndarray, float]:
    """A sub-law of the bucket polytope below ``m`` (shrink violated level sets; fall back to the
    minimum with the greedy vertex of the ratio order), and its remaining excess."""
    x = np.where(sb > 0, np.clip(m, 0.0, None), 0.0)
    x = np.minimum(x, coverage(sb, k))
    tol = ROUNDING_PER_TERM * max(x.size, 1)
    for _ in range(64):
        viol, order, excess = membership_violation(x, sb, k)
        if viol <= tol:
            return x, viol
        j = int(np.argmax(excess))
        S = order[: j + 1]
        x[S] *= float(coverage(sb[S].sum(), k)) / float(x[S].sum())
    viol, order, _ = membership_violation(x, sb, k)
    F = np.cumsum(sb[order])
    g = np.diff(np.concatenate([[0.0], coverage(F, k)]))
    vertex = np.empty_like(x)
    vertex[order] = g
    x = np.minimum(x, vertex)
    return x, membership_violation(x, sb, k)[0]


def _lower(tree: ExploredTree, arr: dict, laws: list) -> list[float]:
    """For each bucket law: the sum of W over explored nodes plus the exactly known first unexplored
    depth (compiled: every law in one pass per expanded node)."""
    n = len(tree.nodes)
    par = tree.parent
    Ws, totals = [], []
    for x in laws:
        mu = x.copy()
        for i in range(n - 1, 0, -1):  # breadth-first order: children after parents
            mu[par[i]] += mu[i]
        W = np.zeros(n)
        W[0] = 1.0
        for i in range(1, n):
            W[i] = min(W[par[i]] * tree.pc[i], mu[i])
        Ws.append(W)
        totals.append(float(W[1:].sum()))
    for i, node in arr["res"].items():
        if len(node) == 4:  # a compiled node
            p_row, q_row, skip, q_rest = node
            last = len(laws) - 1  # at most two laws: the second pair repeats the first when alone
            out = tree.kern.min_sum(
                p_row, q_row, skip, Ws[0][i], laws[0][i], Ws[last][i], laws[last][i], q_rest if q_rest > 0 else 1.0, tree._scratch(2)
            )
            for j, x in enumerate(laws):
                if x[i] > 0 and q_rest > 0:
                    totals[j] += float(out[j])
            continue
        pr, qr = node
        q_rest = float(qr.sum())
        for j, x in enumerate(laws):
            if x[i] > 0 and q_rest > 0:
                totals[j] += float(np.minimum(Ws[j][i] * pr, x[i] * qr / q_rest).sum())
    return totals


def _solved(h) -> bool:
    """Whether HiGHS' last run left an optimal model with a valid primal and dual solution.

    A run that errors (e.g. a ``threads`` option that differs from the one the process's global
    scheduler started with) leaves status "Not Set" and a zero solution; it must not be read as one."""
    import highspy

    sol = h.getSolution()
    return h.getModelStatus() == highspy.HighsModelStatus.kOptimal and bool(sol.value_valid) and bool(sol.dual_valid)


# long-function: the cutting-plane loop, the certified bounds and the fall-backs of a failed solve in one place
def _solve(tree: ExploredTree) -> tuple:
    """Solve the bucket LP by cutting planes: (upper, lower, law, checks, info, status, z-terms per node).

    Only solutions of runs that HiGHS reports optimal are read. When a run fails, the last optimal
    round's solution is kept (the rows added since get multiplier 0, so its duals still bound the
    LP); when the first one fails, the upper bound is the dual point 0 (the columns' bounds) and the
    lower bound the drafts' own bucket law. The status is then ``"solver_failed"``."""
    arr = tree.arrays()
    lp = _BucketLP(tree, arr)
    h, _, info = lp.solve()
    ok = _solved(h)
    rounds, ncuts, viol, room = 1, 0, np.inf, 0.0
    x = y = None
    stopped = False
    while ok:
        sol = h.getSolution()
        x = np.asarray(sol.col_value, dtype=np.float64)
        y = np.asarray(sol.row_dual, dtype=np.float64)
        nb = len(lp.blocks)
        viol, new = lp.cuts(x)
        if not (new or len(lp.blocks) > nb) or rounds >= TREE_INTERVAL_MAX_ROUNDS:
            break
        # stop when further cuts could take at most a small share off the width: they cannot push
        # the dual bound below the LP's value at a feasible point (the realised law's best point)
        bound = lp.dual_bound(np.concatenate([y, np.zeros(lp.A.shape[0] + lp.n_cut - y.size)]))
        value, explored = lp.feasible_value(tree, _realise(x[lp.m0 : lp.m0 + lp.n], arr["sb"], tree.k)[0])
        room = bound - value
        if room <= TREE_INTERVAL_CUT_ROOM * (bound - explored):
            stopped = True
            break
        for lam, c in lp.blocks[nb:]:
            lp.add_block(h, lam, c)
        if new:
            lp.add_cuts(h, new)
        ncuts += len(new) + len(lp.blocks) - nb
        h.run()
        ok = _solved(h)
        info = h.modelStatusToString(h.getModelStatus())
        rounds += 1
    nrow = lp.A.shape[0] + lp.n_cut
    y = np.zeros(nrow) if y is None else np.concatenate([y, np.zeros(nrow - y.size)])
    nnz = lp.A.nnz + sum(c.size for c in lp.cut_cols) + lp.ncol + nrow
    upper = lp.dual_bound(y) + ROUNDING_PER_TERM * nnz * (tree.gamma + 1)
    nx = lp.z10 + lp.z1_nodes.size + lp.zd_nodes.size
    if x is None:  # no optimal run: the drafts' own law is a point of the bucket polytope
        candidates = [_realise(arr["sb"] / max(float(arr["sb"].sum()), 1.0), arr["sb"], tree.k)]
        x = np.zeros(nx)
    else:
        x = x[:nx]
        candidates = [_realise(x[lp.m0 : lp.m0 + lp.n], arr["sb"], tree.k)]
    if ok and lp.zd_nodes.size:  # a second law for the lower bound: the same LP without the unknown deeper depths
        h.changeColsCost(lp.zd_nodes.size, np.arange(lp.zd0, lp.zd0 + lp.zd_nodes.size, dtype=np.int32), np.zeros(lp.zd_nodes.size))
        h.run()
        if _solved(h):
            x2 = np.asarray(h.getSolution().col_value, dtype=np.float64)
            candidates.append(_realise(x2[lp.m0 : lp.m0 + lp.n], arr["sb"], tree.k))
    lowers = _lower(tree, arr, [c[0] for c in candidates])
    best = max(range(len(lowers)), key=lambda j: (lowers[j], -j))  # the first law unless the second is larger
    (law, member), lower = candidates[best], lowers[best]
    terms = np.zeros(lp.n)
    terms[lp.z1_nodes] += np.maximum(x[lp.z10 : lp.zd0], 0.0)
    terms[lp.zd_nodes] += np.maximum(x[lp.zd0 :], 0.0) * (arr["lev"][lp.zd_nodes] - 1)
    checks = {
        "lp_value": float(lp.cost[: x.size] @ x) if ok else float("nan"),
        "membership": float(member),
        "cut_violation": float(viol),
        "rounds": float(rounds),
        "cuts": float(ncuts),
        "cut_room": float(room),
    }
    if not ok:
        status = "solver_failed"
    elif viol <= TREE_INTERVAL_CUT_TOL:
        status = "optimal"
    else:
        status = "width_tolerance" if stopped else "cut_limit"
    if status in ("solver_failed", "cut_limit"):
        checks["cut_room"] = float("nan")  # not measured for the bound returned
    return upper, lower, law, checks, info, status, terms, int((arr["sb"] > 0).sum())


def _drafted_tree(drafts: Any, p_rows: Any, q_rows: Any, top_k: int) -> ExploredTree:
    """Validate the drafted round and build its explored tree (drafted nodes expanded)."""
    X = np.asarray(drafts)
    if X.ndim != 2 or X.shape[0] < 1 or X.shape[1] < 1 or not np.issubdtype(X.dtype, np.integer):
        raise InvalidDraftsError(
            f"drafts must be a (k, gamma) integer array of token ids (got shape {X.shape}, dtype {X.dtype}); pass one row per draft"
        )
    k, gamma = X.shape
    P = np.asarray(p_rows, dtype=np.float64)
    Q = np.asarray(q_rows, dtype=np.float64)
    if (
        P.ndim != 3
        or Q.ndim != 3
        or P.shape[0] != k
        or Q.shape[0] != k
        or Q.shape[1] != gamma
        or P.shape[1] not in (gamma, gamma + 1)
        or P.shape[2] != Q.shape[2]
    ):
        raise ShapeMismatchError(
            f"p_rows must have shape (k, gamma[+1], V) and q_rows (k, gamma, V) with k, gamma = {k}, {gamma} from drafts "
            f"(got {P.shape} and {Q.shape}); pass each draft's rows along its path"
        )
    V = Q.shape[2]
    if X.min() < 0 or X.max() >= V:
        raise InvalidDraftsError(f"drafts must be token ids in [0, {V}) (got range [{X.min()}, {X.max()}]); check the vocabulary")
    kern = jit_policy.kernels("tree_interval_kernels") if jit_policy.ready(V, "tree_interval_kernels") else None
    Pg = _check_rows(P[:, :gamma].reshape(-1, V), k * gamma, V, "p_rows", kern).reshape(k, gamma, V)
    Qg = _check_rows(Q.reshape(-1, V), k * gamma, V, "q_rows", kern).reshape(k, gamma, V)
    tree = ExploredTree(k, gamma, top_k, kern)
    tree.V = V
    for d in range(gamma):
        for t in range(k):
            u = tuple(int(a) for a in X[t, :d])
            i = tree.index[u]
            if i in tree.rows:
                continue
            must = tuple(int(X[s, d]) for s in range(k) if tuple(int(a) for a in X[s, :d]) == u)
            bad = [m for m in must if Qg[t, d, m] <= 0]
            if bad:
                raise InvalidDraftsError(
                    f"drafted token {bad[0]} after prefix {u} has draft probability 0 in q_rows; the drafts must come from the draft rows given"
                )
            tree.expand(i, Pg[t, d], Qg[t, d], must)
    return tree


# long-function: validation of the options and the callback, then the expansion loop, in one readable place
def tree_interval(
    drafts: Any,
    p_rows: Any,
    q_rows: Any,
    *,
    top_k: int = 8,
    levels: int = 0,
    expand: Callable | None = None,
    max_expand: int | None = None,
) -> TreeIntervalResult:
    r"""A certified interval ``[lower, upper]`` for the tree optimum :math:`T^*` at any vocabulary size.

    .. math::
        \sum_{v \in E} W_\mu(v) + (\text{first unexplored depth}) \;\le\; T^* \;\le\;
        \max_{m \in B_k(\text{buckets})} \sum_{v \in E} W(v)
        + \sum_{v \in E} (\gamma - |v|) \min\big(W(v)\rho(v),\ m(b(v))\big)

    (module docstring: :mod:`otspec.bounds.tree_interval`). :math:`T^*` is the optimum of ``k``
    i.i.d. drafted sequences of length :math:`\gamma` at the round's context; the drafted tree only
    decides which nodes are explored.

    Parameters
    ----------
    drafts : array_like of int, shape (k, gamma)
        The drafted sequences (i.i.d. from the draft model; repeats allowed).
    p_rows, q_rows : array_like, shape (k, gamma, V)
        ``p_rows[t, d] = p(. | drafts[t, :d])`` and likewise for ``q``: each draft's target and draft
        rows along its path (the layout of a batched scoring pass; ``p_rows`` may carry a last
        ``gamma + 1``-th row, which is ignored). Rows of a shared prefix are read from its first draft.
    top_k : int
        ``K``: children kept per expanded node under each model (default 8).
    levels : int
        Expansion passes (default 0: none; each needs ``expand``).
    expand : callable, optional
        ``expand(nodes) -> (p_rows, q_rows)``: for a list of prefixes (tuples of token ids), their
        target and draft rows, arrays of shape ``(len(nodes), V)``. Called once per level with every
        unexpanded explored node above depth ``gamma`` (or the ``max_expand`` whose bucket terms in
        the upper bound are largest).
    max_expand : int, optional
        Most nodes expanded per level (default: all).

    Returns
    -------
    TreeIntervalResult
        ``lower``, ``upper``, ``gap``, the sizes and the checks.

    Raises
    ------
    ShapeMismatchError
        If the arrays' shapes disagree, or ``expand`` returns rows of the wrong shape.
    InvalidDistributionError
        If a row is not a distribution (NaN, negative, sum off by more than
        :data:`~otspec._tolerances.SIMPLEX_SUM_ATOL`).
    InvalidDraftsError
        If a drafted token has zero draft probability at its parent, or an id is out of range.
    InvalidOptionError
        If ``levels > 0`` without ``expand``.
    NotAnIntegerError, InvalidDraftCountError
        If ``top_k``, ``levels`` or ``max_expand`` is not a valid integer.

    Examples
    --------
    >>> import numpy as np
    >>> from otspec import models, tree_optimum
    >>> p, q = np.array([0.6, 0.4]), np.array([0.3, 0.7])
    >>> X = np.array([[0, 1], [1, 1]])  # k = 2 drafts of length 2 (context-free models)
    >>> P, Q = np.broadcast_to(p, (2, 2, 2)), np.broadcast_to(q, (2, 2, 2))
    >>> r = tree_interval(X, P, Q, top_k=2)  # V = 2: every node explored, the interval closes
    >>> T = tree_optimum(models.context_free(p), models.context_free(q), 2, 2).value
    >>> r.contains(T, atol=1e-9) and r.gap < 1e-8
    True
    """
    top_k = as_int_in_range(top_k, "top_k")
    levels = as_int_in_range(levels, "levels", minimum=0)
    if max_expand is not None:
        max_expand = as_int_in_range(max_expand, "max_expand")
    if levels > 0 and expand is None:
        raise InvalidOptionError(f"levels = {levels} needs expand (a callable nodes -> (p_rows, q_rows)); pass expand or levels = 0")
    if expand is not None and not callable(expand):
        raise InvalidOptionError(f"expand must be callable (got {type(expand).__name__}); pass a function nodes -> (p_rows, q_rows)")
    t0 = time.perf_counter()
    tree = _drafted_tree(drafts, p_rows, q_rows, top_k)
    k, gamma, V = tree.k, tree.gamma, tree.V
    done = 0
    out = _solve(tree) if (levels == 0 or max_expand is not None) else None
    while done < levels:
        front = tree.frontier()
        if not front:
            break
        if max_expand is not None and len(front) > max_expand:
            terms = out[6]
            front = sorted(front, key=lambda i: -terms[i])[:max_expand]
        got = expand([tree.nodes[i] for i in front])
        if not isinstance(got, tuple) or len(got) != 2:
            raise ShapeMismatchError(f"expand must return a pair (p_rows, q_rows) (got {type(got).__name__}); return two (n, V) arrays")
        pr = _check_rows(got[0], len(front), V, "expand's p_rows", tree.kern)
        qr = _check_rows(got[1], len(front), V, "expand's q_rows", tree.kern)
        for j, i in enumerate(front):
            tree.expand(i, pr[j], qr[j])
        done += 1
        out = _solve(tree) if (done == levels or max_expand is not None) else None
    if out is None:  # the frontier emptied before the last level
        out = _solve(tree)
    upper, lower, law, checks, info, status, _, nb = out
    if tree.kern is None:  # the numpy reference's time counts towards switching (jit_policy)
        jit_policy.count_reference(V, time.perf_counter() - t0)
    law.setflags(write=False)
    return TreeIntervalResult(
        lower=float(lower),
        upper=float(upper),
        gap=float(upper - lower),
        k=int(k),
        gamma=int(gamma),
        V=int(V),
        top_k=int(top_k),
        levels=int(done),
        n_nodes=len(tree.nodes),
        n_expanded=len(tree.rows),
        n_buckets=nb,
        bucket_law=law,
        nodes=tuple(tree.nodes),
        status=status,
        checks=checks,
        solver_info=info,
    )
