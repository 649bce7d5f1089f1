r"""Back end ``method="product"``: the optimum for independent heterogeneous drafters at full vocabulary.

For k independent drafts :math:`X_i \sim q_i` (:func:`otspec.product`),
:math:`\alpha^* = 1 + \min_H h(H)` with :math:`h(H) = p(H) - \prod_i Q_i(H)`, :math:`Q_i = q_i(H)`
(:doc:`math`, heterogeneous drafters). The minimum is found by a branch-and-bound over boxes
:math:`[l, u] \subset \mathbb{R}^k` of the vector :math:`Q(H) = (Q_1(H), \dots, Q_k(H))`:

* **contraction** (single-token exchange; the gains of :math:`\prod Q` are monotone in Q): for a
  minimiser H with :math:`Q(H) \in [l, u]`, a token with :math:`p_y < \Delta^+_y(l) =
  \prod(l + q_y) - \prod l` is in H, a token with :math:`p_y > \Delta^-_y(u) = \prod u - \prod(u -
  q_y)` or some :math:`q_{iy} > u_i` is not; the forced tokens F and the still possible ones U give
  :math:`l \leftarrow \max(l, q(F))`, :math:`u \leftarrow \min(u, q(U))`; repeated to a fixed point
  (an empty box holds no minimiser);
* **bound**: on the box, :math:`\prod Q \le c + a \cdot Q` for the telescoping (McCormick) planes
  :math:`a_i = \prod_{j < i} u_j \prod_{j > i} l_j` (and the ones from u, in both coordinate
  orders), so :math:`h(H) \ge p(F) - c - a \cdot q(F) + \sum_{y \in U \setminus F} \min(0, p_y -
  a \cdot q_y)`, an O(V) separable bound;
* **leaves**: at most :data:`LEAF_SIZE` undecided tokens are enumerated exhaustively; otherwise the
  box is bisected on its widest coordinate.

The upper bound is the best cut found (each node tries the bound's own minimisers and a few
half-space steps :math:`H = \{p_y < w \cdot q_y\}`, :math:`w = \nabla \prod Q(H)`); the lower bound
is the minimum over the closed leaves. The result carries a :class:`ProductCertificate`: the tree
of boxes, re-checked by :func:`recheck`, which re-derives every node from its cell alone over the
replayed tree (contraction, bound or enumeration: O(V) per node) and returns the certified
lower bound. Every rounding step is on the safe side (relative margins on the gains and the sums,
an absolute bound on each leaf's sum).

The exact *primal* coupling at this scale is open (:doc:`math`): the certificate is the cut (upper)
and the closed leaves (lower).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

import numpy as np

from otspec._tolerances import ROUNDING_PER_TERM
from otspec.bounds.certificate import CutAnswer
from otspec.bounds.subsets import subset_sums

__all__ = ["LEAF_SIZE", "MAX_BOXES", "BoxNode", "ProductCertificate", "branch_and_bound", "recheck", "solve"]

#: Undecided tokens enumerated exhaustively at a leaf (2^14 subsets).
LEAF_SIZE = 14

#: Boxes processed before the search gives up (the certificate then has a real gap).
MAX_BOXES = 20_000

#: Relative margin on a gain test (the gains are sums of non-negative products of k + 1 factors).
_GAIN_MARGIN = 16 * 2.0**-53

#: Relative slack on the sums q(F), q(U) that move a box's faces.
_SUM_SLACK = 1e-12

#: Contraction stops early once a pass decides fewer than 1/this of the tokens it looked at
#: (while more than :data:`_SLOW_CONTRACTION_MIN` are undecided).
_SLOW_CONTRACTION = 64
_SLOW_CONTRACTION_MIN = 4096

#: A node closes when its certified lower bound is within this of the best cut (absolute).
_CLOSE_TOL = 1e-13

#: Boxes narrower than this on every axis are enumerated up to :data:`_DEEP_LEAF_SIZE` tokens.
_TINY_BOX = 1e-13
_DEEP_LEAF_SIZE = 20


@dataclass(frozen=True, eq=False)
class BoxNode:
    """One box of the search tree.

    Attributes
    ----------
    lo, hi : ndarray, shape (k,)
        The cell: the node speaks for the minimisers H with :math:`lo \\le Q(H) \\le hi`.
    kind : str
        ``"split"`` (its contracted box is bisected into ``children``), ``"empty"`` (no minimiser),
        ``"bound"`` (closed by the separable bound) or ``"leaf"`` (closed by enumeration).
    lower : float
        The node's lower bound on h (``inf`` when empty, ``nan`` for a split).
    axis : int
        Split coordinate (``-1`` unless split).
    at : float
        Split value (``nan`` unless split).
    children : tuple of int
        Indices of the two children in :attr:`ProductCertificate.nodes` (split nodes only).
    """

    lo: np.ndarray
    hi: np.ndarray
    kind: str
    lower: float
    axis: int = -1
    at: float = math.nan
    children: tuple = ()


@dataclass(frozen=True, eq=False)
class ProductCertificate:
    r"""The two-sided certificate of ``method="product"``.

    Attributes
    ----------
    nodes : tuple of BoxNode
        The search tree; ``nodes[0]`` is the root cell :math:`[0, \infty)^k`.
    upper : float
        :math:`\min h` over the cuts found (the value is ``1 + upper``).
    lower : float
        The search's lower bound on :math:`\min_H h(H)` (the minimum over the closed leaves).
    n_boxes : int
        Number of boxes processed.
    """

    nodes: tuple
    upper: float
    lower: float
    n_boxes: int


def _gains(lo: np.ndarray, hi: np.ndarray, QR: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    r""":math:`\Delta^+(lo)` and :math:`\Delta^-(hi)` per token, as sums of non-negative terms (no
    cancellation): :math:`\prod(l + q) - \prod l = \sum_i q_i \prod_{j<i}(l_j + q_j) \prod_{j>i} l_j`."""
    k = lo.size
    up = np.zeros(QR.shape[1])
    dn = np.zeros(QR.shape[1])
    left_up = np.ones(QR.shape[1])
    left_dn = np.ones(QR.shape[1])
    for i in range(k):
        right_lo = float(np.prod(lo[i + 1 :]))
        right_hi = float(np.prod(hi[i + 1 :]))
        up += QR[i] * left_up * right_lo
        dn += QR[i] * left_dn * right_hi
        left_up = left_up * (lo[i] + QR[i])
        left_dn = left_dn * np.maximum(hi[i] - QR[i], 0.0)
    return up, dn


@dataclass
class _State:
    """A node's working set: forced tokens (their sums and ids), undecided tokens (restricted arrays)."""

    pF: float
    qF: np.ndarray
    F: list
    idx: np.ndarray
    pR: np.ndarray
    QR: np.ndarray

    def copy(self) -> _State:
        return _State(self.pF, self.qF.copy(), list(self.F), self.idx, self.pR, self.QR)


def _contract(st: _State, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """Contract the box to a fixed point, moving tokens out of ``st``'s undecided set; ``None`` when
    the box holds no minimiser."""
    lo, hi = lo.copy(), hi.copy()
    while True:
        np.maximum(lo, st.qF * (1.0 - _SUM_SLACK), out=lo)
        np.minimum(hi, (st.qF + st.QR.sum(axis=1)) * (1.0 + _SUM_SLACK), out=hi)
        if np.any(lo > hi):
            return None
        if st.pR.size == 0:
            return lo, hi
        up, dn = _gains(lo, hi, st.QR)
        force = st.pR < up * (1.0 - _GAIN_MARGIN)
        out = (st.pR > dn * (1.0 + _GAIN_MARGIN)) | np.any(hi[:, None] < st.QR, axis=0)
        if np.any(force & out):
            return None
        decided = int(np.count_nonzero(force | out))
        if decided == 0:
            return lo, hi
        if force.any():
            st.pF += float(st.pR[force].sum())
            st.qF = st.qF + st.QR[:, force].sum(axis=1)
            st.F.append(st.idx[force])
        keep = ~(force | out)
        st.idx, st.pR, st.QR = st.idx[keep], st.pR[keep], st.QR[:, keep]
        if decided * _SLOW_CONTRACTION < keep.size and st.pR.size > _SLOW_CONTRACTION_MIN:
            # the fixed point's tail decides a few tokens per O(n) pass: stop (sound at every
            # step) and let the bound or a bisection do the rest; the faces still take q(F), q(U)
            np.maximum(lo, st.qF * (1.0 - _SUM_SLACK), out=lo)
            np.minimum(hi, (st.qF + st.QR.sum(axis=1)) * (1.0 + _SUM_SLACK), out=hi)
            return (lo, hi) if not np.any(lo > hi) else None


def _planes(lo: np.ndarray, hi: np.ndarray) -> list:
    """Linear over-estimators ``(a, c)`` of prod Q on the box: prod Q <= c + a.Q (telescoping from
    lo and from hi, both coordinate orders)."""
    k = lo.size
    out = []
    for order in ([*range(k)], [*range(k)][::-1]) if k > 1 else ([0],):
        a = np.empty(k)
        b = np.empty(k)
        for pos, i in enumerate(order):
            before, after = order[:pos], order[pos + 1 :]
            a[i] = np.prod(hi[before]) * np.prod(lo[after])
            b[i] = np.prod(lo[before]) * np.prod(hi[after])
        out.append((a, float(np.prod(lo) - a @ lo)))
        out.append((b, float(np.prod(hi) - b @ hi)))
    return out


def _lin(a: np.ndarray, QR: np.ndarray) -> np.ndarray:
    """``a @ QR`` for a short ``a``, as k elementwise passes (a BLAS matrix-vector product spins
    its threads on a loaded machine: 20x slower here)."""
    out = a[0] * QR[0]
    for i in range(1, a.size):
        out += a[i] * QR[i]
    return out


def _h(st: _State, take: np.ndarray) -> float:
    """h of F plus the undecided tokens flagged by ``take`` (a candidate's value only steers the
    search; the reported cut's value is recomputed from the law)."""
    t = take.astype(np.float64)
    return st.pF + float((st.pR * t).sum()) - float(np.prod(st.qF + (st.QR * t).sum(axis=1)))


def _bound(st: _State, lo: np.ndarray, hi: np.ndarray, V: int) -> tuple[float, list]:
    """The best separable lower bound on h over the box (minus its rounding bound) and the bound's
    own minimisers (candidate cuts, as masks over the undecided tokens)."""
    best, cands = -math.inf, []
    err = ROUNDING_PER_TERM * (4 * V + 64 * (lo.size + 2))
    for a, c in _planes(lo, hi):
        red = st.pR - _lin(a, st.QR)
        take = red < 0
        lb = st.pF - c - float(a @ st.qF) + float(red[take].sum()) - err
        best = max(best, lb)
        cands.append(take)
    return best, cands


def _improve(st: _State, take: np.ndarray, steps: int = 3) -> tuple[float, np.ndarray]:
    """A few half-space steps H <- {p < grad prod Q(H) . q} inside the node; the best h met."""
    best_h, best = _h(st, take), take
    k = st.qF.size
    for _ in range(steps):
        Q = st.qF + (st.QR * take.astype(np.float64)).sum(axis=1)
        w = np.array([np.prod(np.delete(Q, i)) for i in range(k)]) if k > 1 else np.ones(1)
        nxt = st.pR < _lin(w, st.QR)
        if np.array_equal(nxt, take):
            break
        take = nxt
        h = _h(st, take)
        if h < best_h:
            best_h, best = h, take
    return best_h, best


def _enumerate(st: _State, V: int) -> tuple[float, float, np.ndarray]:
    """Exhaustive leaf: (lower bound, best h, its mask over the undecided tokens)."""
    n = st.pR.size
    P = subset_sums(st.pR)
    prod = np.ones(P.size)
    for i in range(st.qF.size):
        prod *= st.qF[i] + subset_sums(st.QR[i])
    h = st.pF + P - prod
    m = int(np.argmin(h))
    take = np.array([(m >> b) & 1 for b in range(n)], dtype=bool)
    return float(h[m]) - ROUNDING_PER_TERM * (4 * V + 64 * (st.qF.size + 2)), float(h[m]), take


def _root_state(p: np.ndarray, Q: np.ndarray) -> _State:
    """All tokens undecided except those no drafter can draft (never in a useful cut: they change h
    by p_y >= 0; tokens with p = 0 and no draft mass change nothing)."""
    live = np.flatnonzero(Q.max(axis=0) > 0)
    return _State(0.0, np.zeros(Q.shape[0]), [], live, p[live], Q[:, live])


def _leaf_limit(lo: np.ndarray, hi: np.ndarray, leaf_size: int) -> int:
    return max(leaf_size, _DEEP_LEAF_SIZE) if np.all(hi - lo <= _TINY_BOX) else leaf_size


def branch_and_bound(p: np.ndarray, qs, *, leaf_size: int = LEAF_SIZE, max_boxes: int = MAX_BOXES):
    r"""Minimise :math:`h(H) = p(H) - \prod_i q_i(H)` by branch-and-bound over boxes of Q-values.

    Parameters
    ----------
    p : ndarray, shape (V,)
        Target distribution.
    qs : sequence of ndarray, each shape (V,)
        The drafters' distributions.
    leaf_size : int
        Undecided tokens enumerated exhaustively at a leaf (tests lower it to force branching).
    max_boxes : int
        Boxes processed before giving up (the lower bound then covers the open boxes by their
        separable bound).

    Returns
    -------
    cut : ndarray of int64
        The best cut found (sorted ids).
    certificate : ProductCertificate
        The tree of boxes, the best h (upper) and the search's lower bound.
    """
    p = np.asarray(p, dtype=np.float64)
    Q = np.stack([np.asarray(q, dtype=np.float64) for q in qs])
    k, V = Q.shape
    nodes: list = []
    best_h, best_cut = 0.0, np.zeros(0, dtype=np.int64)  # the empty cut: h = 0
    root = _root_state(p, Q)
    heap = [(-math.inf, 0, np.zeros(k), np.full(k, math.inf), root, None)]
    nodes.append(None)
    counter, lowers = 1, []
    n_boxes = 0
    while heap:
        parent_lb, nid, lo, hi, st, _ = heapq.heappop(heap)
        st = st.copy()
        n_boxes += 1
        box = _contract(st, lo, hi)
        if box is None:
            nodes[nid] = BoxNode(lo, hi, "empty", math.inf)
            continue
        clo, chi = box
        lb, cands = _bound(st, clo, chi, V)
        take = min(cands, key=lambda t: _h(st, t))  # the best of the bound's minimisers, improved
        h, take = _improve(st, take)
        if h < best_h:
            best_h, best_cut = h, np.sort(np.concatenate([*st.F, st.idx[take]]).astype(np.int64))
        if lb >= best_h - _CLOSE_TOL or n_boxes >= max_boxes:
            nodes[nid] = BoxNode(lo, hi, "bound", lb)
            lowers.append(lb)
            continue
        if st.pR.size <= _leaf_limit(clo, chi, leaf_size):
            leaf_lb, h, take = _enumerate(st, V)
            if h < best_h:
                best_h, best_cut = h, np.sort(np.concatenate([*st.F, st.idx[take]]).astype(np.int64))
            nodes[nid] = BoxNode(lo, hi, "leaf", leaf_lb)
            lowers.append(leaf_lb)
            continue
        axis = int(np.argmax(chi - clo))
        at = 0.5 * (clo[axis] + chi[axis])
        kids = []
        for side in (0, 1):
            c_lo, c_hi = clo.copy(), chi.copy()
            if side == 0:
                c_hi[axis] = at
            else:
                c_lo[axis] = at
            kids.append(counter)
            nodes.append(None)
            heapq.heappush(heap, (lb, counter, c_lo, c_hi, st, None))
            counter += 1
        nodes[nid] = BoxNode(lo, hi, "split", math.nan, axis, at, tuple(kids))
    lower = min([best_h, *lowers])
    cert = ProductCertificate(tuple(nodes), float(best_h), float(lower), n_boxes)
    return best_cut, cert


def recheck(p: np.ndarray, qs, certificate: ProductCertificate, *, leaf_size: int = LEAF_SIZE) -> float:
    r"""Re-derive the certificate's lower bound on :math:`\min_H h(H)` from the tree of boxes alone.

    The tree is replayed from the root cell with this function's own arithmetic: every node is
    contracted to a fixed point from its cell (starting from the tokens its parent's replay left
    undecided: a child's cell lies inside the parent's contracted box, where the parent's decisions
    hold), then closed by the separable bound or the enumeration of its undecided tokens, or its
    contracted box is bisected at the stored axis and value. Nothing the search computed is
    trusted except the tree's shape. O(V) per node.

    Parameters
    ----------
    p : ndarray, shape (V,)
        Target distribution.
    qs : sequence of ndarray
        The drafters' distributions.
    certificate : ProductCertificate
        From :func:`branch_and_bound`.
    leaf_size : int
        Largest number of undecided tokens enumerated at a closed leaf (more: the separable bound).

    Returns
    -------
    float
        A lower bound on :math:`\min_H h(H)`, the minimum over the re-derived closed leaves
        (``-inf`` if the tree does not cover the root cell).
    """
    p = np.asarray(p, dtype=np.float64)
    Q = np.stack([np.asarray(q, dtype=np.float64) for q in qs])
    k, V = Q.shape
    nodes = certificate.nodes
    lower = math.inf
    stack = [(0, np.zeros(k), np.full(k, math.inf), _root_state(p, Q))]
    while stack:
        nid, lo, hi, st = stack.pop()
        node = nodes[nid]
        st = st.copy()
        box = _contract(st, lo, hi)
        if box is None:
            continue
        clo, chi = box
        if node.kind == "split":
            at = min(max(node.at, clo[node.axis]), chi[node.axis])
            left_hi, right_lo = chi.copy(), clo.copy()
            left_hi[node.axis] = at
            right_lo[node.axis] = at
            stack.append((node.children[0], clo, left_hi, st))
            stack.append((node.children[1], right_lo, chi, st))
            continue
        if node.kind == "empty":  # the search found it empty; here it is not: bound it instead
            node_lb = _bound(st, clo, chi, V)[0]
        elif st.pR.size <= _leaf_limit(clo, chi, leaf_size):
            node_lb = _enumerate(st, V)[0]
        else:
            node_lb = _bound(st, clo, chi, V)[0]
        lower = min(lower, node_lb)
    return lower


def solve(p: np.ndarray, law) -> CutAnswer:
    """Branch-and-bound for a product law, with its certificate and the certificate's re-check.

    Parameters
    ----------
    p : ndarray, shape (V,)
        Target distribution (validated).
    law : ProductLaw
        Independent drafters ``law.qs``.

    Returns
    -------
    CutAnswer
        The best cut's value ``1 + upper``, the cut, the re-checked lower bound ``1 + lower`` and
        the certificate; checks ``bnb_lower_minus_recheck`` (the search's claim minus the
        re-derived bound, at most rounding) and ``boxes``.
    """
    cut, cert = branch_and_bound(p, law.qs)
    lower = recheck(p, law.qs, cert)
    err = ROUNDING_PER_TERM * (law.V * law.k + law.V)
    checks = {"bnb_lower_minus_recheck": max(0.0, cert.lower - lower) if math.isfinite(lower) else math.inf}
    return CutAnswer(
        "product",
        1.0 + cert.upper,
        cut,
        err,
        checks,
        lower=min(1.0 + lower, 1.0),
        certificate=cert,
    )
