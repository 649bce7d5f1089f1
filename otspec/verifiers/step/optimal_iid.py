r"""The optimal verifier for k i.i.d. drafts at any vocabulary size (registered as ``optimal_iid``).

It attains :math:`\alpha^*(p, q^{\otimes k}) = 1 + \min_H [p(H) - q(H)^k]` exactly, with a
selection law in closed form and a draw in :math:`O(k + \log V)` after an
:math:`O(V (\log V + k))` preparation. The mathematics (and the proofs) are in the documentation page
``docs/optimal_verifier.rst``; in brief:

1. **Two-step form.** A selection rule picks one drafted token, with law :math:`r`; single-draft
   speculative sampling from :math:`r` to :math:`p` (keep y w.p. :math:`\min(1, p(y)/r(y))`,
   else draw from :math:`\mathrm{norm}((p-r)_+)`) is lossless and accepts with
   :math:`\sum_y \min(p(y), r(y))`.
2. **Selection law.** With :math:`\Phi(t) = 1-(1-t)^k`, the achievable laws are those with
   :math:`r(S) \le \Phi(q(S))` for every S. With :math:`H^*` the optimal cut (a prefix in p/q
   order) and A its complement, :math:`r^* = \min(p, c\,q)` on A and :math:`\max(p, c'q)` on
   :math:`H^*` (:func:`selection_law`) is achievable and accepts with :math:`\alpha^*`.
3. **Sampling r\*.** Tokens are grouped into super-tokens of equal density :math:`r^*/q`, sorted
   by density; a random level :math:`s \sim U(0,1)` activates the cuts whose threshold
   :math:`\kappa_i \le s`; the block of the first drafted super-token is found with a range-minimum
   table, and a uniformly chosen draft of that block is the selected token. The thresholds come
   from the *threshold tree*, the upper convex hull of the points
   :math:`(t_i, \Phi(t_i), L(t_i))`, built by removing points in order of their local ratio
   (:func:`threshold_tree`; compiled with numba when the extra ``otspec[fast]`` is installed,
   bit-identical to the pure-Python builder, see :data:`TREE_METHODS`).

Laws covered: ``otspec.iid(q, k)`` and ``otspec.product([q, ..., q])`` with identical drafters.
Refused (with the reason): product laws with different drafters, without replacement, greedy and
explicit laws -- there :math:`P(\text{some draft in } S)` is not a function of one measure of S,
so the closed form and the threshold construction do not apply.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from otspec._docs import fill_doc
from otspec.errors import UnsupportedMethodError
from otspec.laws import DraftLaw
from otspec.sampling import spawn_streams
from otspec.verifiers.base import Verifier
from otspec.verifiers.step._iid_bridge import BridgeGeometry, bridge_geometry
from otspec.verifiers.step._iid_bridge import block_end as bridge_block_end
from otspec.verifiers.step._iid_selection import Selection, check_pqk, selection_law, solve_selection
from otspec.verifiers.step._iid_tree import TREE_METHODS, Geometry, ThresholdTree, build_tree, geometry, resolve_method, threshold_tree
from otspec.verifiers.tuples import membership_mask

__all__ = [
    "BRIDGE_DRAWS",
    "DRAW_METHODS",
    "TREE_METHODS",
    "OptimalIIDState",
    "OptimalIIDVerifier",
    "ThresholdTree",
    "optimal_iid",
    "prepare",
    "selection_law",
    "threshold_tree",
]


# ------------------------------------------------------------------------------------------------
# Prepared state: everything a draw needs

#: How a draw finds the block of the first drafted super-token. ``"bridge"``: one hull edge per
#: draw, :math:`O(m)` with no per-pair build (see ``otspec.verifiers.step._iid_bridge``);
#: ``"tree"``: the threshold tree, built once per (p, q) (:math:`O(m \log m)`, 0.1-0.8 s at
#: V = 262 144), then :math:`O(\log m)` per draw; ``"auto"`` (the default): bridges for the first
#: :data:`BRIDGE_DRAWS` draws on a prepared pair (decoding makes one), the tree after that or once
#: it is built. Both give the same block for the same level (the tests check it), so the choice
#: changes the cost, not the outputs.
DRAW_METHODS = ("auto", "bridge", "tree")
#: Draws on one prepared pair made with bridges before ``draw="auto"`` builds the tree.
BRIDGE_DRAWS = 64


def _sparse_table(kappa: np.ndarray) -> list[np.ndarray]:
    """``tab[b][i] = min(kappa[i : i + 2**b])``."""
    tab = [kappa]
    span = 1
    while 2 * span <= kappa.size:
        prev = tab[-1]
        tab.append(np.minimum(prev[:-span], prev[span:]))
        span *= 2
    return tab


@dataclass(frozen=True, eq=False)
class OptimalIIDState:
    r"""Everything one draw of the optimal i.i.d. verifier needs, built once per (p, q, k).

    Attributes
    ----------
    p, r : ndarray, shape (V,)
        Target and optimal selection law :math:`r^*`.
    k : int
    alpha : float
        :math:`\alpha^* = \sum_y \min(p, r^*)`.
    super_token : ndarray of int64, shape (V,)
        1-based super-token of each token (0: q = 0, never drafted).
    accept : ndarray, shape (V,)
        :math:`\min(1, p/r^*)` (1 where :math:`r^* = 0`; never used there).
    residual_cdf : ndarray, shape (V,)
        Cumulative :math:`(p - r^*)_+` (unnormalised).
    geometry : object
        The super-token geometry (boundaries, cumulative masses, the integrand :math:`\Phi`);
        read by :meth:`integrated_selection_law`.
    tree_method : str
        Threshold-tree builder (:data:`TREE_METHODS`); the tree is built on first use.
    draw : str
        How draws find their block (:data:`DRAW_METHODS`).
    tree : ThresholdTree
        The threshold tree (built on first access).
    table : list of ndarray
        Range-minimum table over the thresholds :math:`\kappa` (built with the tree).
    """

    p: np.ndarray
    r: np.ndarray
    k: int
    alpha: float
    super_token: np.ndarray
    geometry: Geometry
    tree_method: str = "auto"
    draw: str = "auto"
    _counts: dict = field(default_factory=lambda: {"bridge_draws": 0}, repr=False)

    @cached_property
    def accept(self) -> np.ndarray:
        """:math:`\\min(1, p/r^*)` (1 where :math:`r^* = 0`; never used there); built on first use."""
        p, r = self.p, self.r
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            return np.where(r > 0, np.minimum(1.0, p / np.where(r > 0, r, 1.0)), 1.0)

    def _accept_at(self, y: np.ndarray) -> np.ndarray:
        """``accept[y]`` without building the whole array (same formula, same values)."""
        if "accept" in self.__dict__ or y.size * 8 > self.p.size:
            return self.accept[y]
        p, r = self.p[y], self.r[y]
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            return np.where(r > 0, np.minimum(1.0, p / np.where(r > 0, r, 1.0)), 1.0)

    @cached_property
    def residual_cdf(self) -> np.ndarray:
        """Cumulative :math:`(p - r^*)_+` (unnormalised); built on first use."""
        return np.cumsum(np.maximum(self.p - self.r, 0.0))

    @cached_property
    def _last_residual(self) -> int:
        pos_res = np.flatnonzero(np.maximum(self.p - self.r, 0.0) > 0)
        return int(pos_res[-1]) if pos_res.size else int(np.flatnonzero(self.p > 0)[-1])

    @cached_property
    def tree(self) -> ThresholdTree:
        """The threshold tree (built once, on first access)."""
        return build_tree(self.geometry, self.tree_method)

    @cached_property
    def table(self) -> list:
        """Range-minimum table over the tree's thresholds."""
        return _sparse_table(self.tree.kappa)

    @cached_property
    def bridge_geometry(self) -> BridgeGeometry:
        """Compensated suffix sums the bridge draws read (:math:`O(m)`, built on first use)."""
        return bridge_geometry(self.geometry.w, self.geometry.rho, self.k)

    @property
    def tree_built(self) -> bool:
        """Whether the threshold tree has been built."""
        return "tree" in self.__dict__

    def _use_bridge(self, n: int) -> bool:
        if self.draw != "auto":
            return self.draw == "bridge"
        if self.tree_built or self.k == 1:
            return False
        if self._counts["bridge_draws"] + n > BRIDGE_DRAWS:
            return False
        self._counts["bridge_draws"] += n
        return True

    # -- selection -----------------------------------------------------------------------------
    def block_end(self, first: np.ndarray, s: np.ndarray, *, method: str = "tree") -> np.ndarray:
        r"""Right end of the block holding super-token ``first`` at level ``s``: the smallest
        boundary :math:`i \ge` ``first`` with :math:`\kappa_i \le s` (binary lifting on the
        range-minimum table, :math:`O(\log m)`), or the right end of the hull edge over
        ``first`` at level :math:`G = 1 - s` (``method="bridge"``, :math:`O(m)` per entry, no tree).

        Parameters
        ----------
        first : ndarray of int
            Super-token indices (1-based), any shape.
        s : ndarray
            Levels in ``[0, 1)``, broadcastable with ``first``.
        method : {"tree", "bridge"}
            How the block is found (same block up to rounding).

        Returns
        -------
        ndarray of int64
            The block's right boundary for each entry.
        """
        if method == "bridge":
            first = np.asarray(first, dtype=np.int64)
            s = np.broadcast_to(np.asarray(s, dtype=np.float64), first.shape)
            return bridge_block_end(self.bridge_geometry, first.ravel(), s.ravel()).reshape(first.shape)
        pos = np.asarray(first, dtype=np.int64).copy()
        m = self.geometry.m
        for b in range(len(self.table) - 1, -1, -1):
            span = 1 << b
            ok = pos + span <= m
            if not ok.any():
                continue
            tb = self.table[b]
            cand = np.where(ok, pos, 0)
            skip = ok & (tb[cand] > s)
            pos = np.where(skip, pos + span, pos)
        return pos

    def select(self, drafts: np.ndarray, s: np.ndarray, u: np.ndarray, *, method: str = "tree") -> np.ndarray:
        """Selected token per row of ``drafts`` ``(n, k)`` at levels ``s`` with choice uniforms ``u``.

        The block of the row's first (lowest) super-token at level ``s`` is found, and one of the
        drafts inside it is chosen uniformly with ``u``.

        Parameters
        ----------
        drafts : ndarray of int64, shape (n, k)
            Validated draft tuples.
        s : ndarray, shape (n,)
            Levels :math:`s \\sim U[0, 1)`.
        u : ndarray, shape (n,)
            Uniforms for the choice within the block.
        method : {"tree", "bridge"}
            How the block is found (see :meth:`block_end`).

        Returns
        -------
        ndarray of int64, shape (n,)
            The selected draft of each row.
        """
        st = self.super_token[drafts]  # (n, k)
        end = self.block_end(st.min(axis=1), s, method=method)
        elig = st <= end[:, None]
        cnt = elig.sum(axis=1)
        rank = np.minimum((u * cnt).astype(np.int64), cnt - 1)
        col = np.argmax(np.cumsum(elig, axis=1) > rank[:, None], axis=1)
        return drafts[np.arange(drafts.shape[0]), col]

    def selection_rows(self, tuples: np.ndarray) -> np.ndarray:
        r"""Exact selection law :math:`\beta(\cdot \mid \bar x)` per draft tuple, ``(n, V)``,
        integrated over the level s (the layout is constant between sorted thresholds).

        Parameters
        ----------
        tuples : ndarray of int64, shape (n, k)
            Draft tuples.

        Returns
        -------
        ndarray, shape (n, V)
            Row ``m``: probability that each token is the selected draft; sums to 1 and is 0 off
            the tuple.
        """
        n, k = tuples.shape
        V = self.p.shape[0]
        kap = self.tree.kappa[1:-1]
        brk = np.unique(np.clip(np.concatenate([[0.0, 1.0], kap]), 0.0, 1.0))
        st = self.super_token[tuples]
        first = st.min(axis=1)
        beta = np.zeros((n, V))
        rows = np.repeat(np.arange(n), k)
        for lo, hi in itertools.pairwise(brk):
            if hi <= lo:
                continue
            end = self.block_end(first, np.full(n, 0.5 * (lo + hi)))
            elig = st <= end[:, None]
            wgt = (hi - lo) * elig / elig.sum(axis=1, keepdims=True)
            np.add.at(beta, (rows, tuples.ravel()), wgt.ravel())
        return beta

    def integrated_selection_law(self) -> np.ndarray:
        r"""Selection law of the sampler integrated over s, from the tree alone (no enumeration):
        block ``(a, b]`` is a layout block for a level interval of length
        :math:`\min(G_a, G_b) - G_{split}` and sends :math:`\Phi(t_b) - \Phi(t_a)` spread in
        proportion to q. Shape ``(V,)``; equals :math:`r^*` when the thresholds are right.

        Returns
        -------
        ndarray, shape (V,)
            The induced selection law (a check of the tree against :attr:`r`).
        """
        geo, tr = self.geometry, self.tree
        m = geo.m
        phi = geo.phi()
        G = tr.G
        diff = np.zeros(m + 2)
        # internal nodes: block (left, right) split at i
        i = tr.order
        if i.size:
            a, b = tr.left[i], tr.right[i]
            dur = np.minimum(G[a], G[b]) - G[i]
            dT = geo.T[b] - geo.T[a]  # 0 only for blocks whose q-mass is below float64 resolution near t = 1
            dens = np.divide(dur * (phi[b] - phi[a]), dT, out=np.zeros_like(dT), where=dT > 0)
            np.add.at(diff, a + 1, dens)
            np.add.at(diff, b + 1, -dens)
        # leaves: super-token j = (j-1, j] for the levels above both its boundaries
        j = np.arange(1, m + 1)
        dur = np.minimum(G[j - 1], G[j])
        diff[1 : m + 1] += dur * (phi[j] - phi[j - 1]) / geo.w
        diff[2 : m + 2] -= dur * (phi[j] - phi[j - 1]) / geo.w
        d = np.cumsum(diff)[1 : m + 1]  # density of each super-token
        out = np.zeros(self.p.shape[0])
        tok = np.flatnonzero(self.super_token)
        qn = self._q_norm
        out[tok] = d[self.super_token[tok] - 1] * qn[tok]
        return out

    @property
    def _q_norm(self) -> np.ndarray:
        return self._q / self._q.sum()

    # -- sampling ------------------------------------------------------------------------------
    def sample_rows(self, drafts: np.ndarray, streams: list) -> np.ndarray:
        """One output per row of validated ``drafts`` ``(n, k)``; ``streams`` = [level, choice,
        coin, residual] generators (independent). The block is found by bridges or by the tree as
        :attr:`draw` says (same outputs).

        Parameters
        ----------
        drafts : ndarray of int64, shape (n, k)
            Validated draft tuples.
        streams : list of numpy.random.Generator
            Four independent streams: level, choice, accept coin, residual draw.

        Returns
        -------
        ndarray of int64, shape (n,)
            The selected draft if its coin accepts (:math:`\\min(1, p/r^*)`), else a residual
            draw from :math:`\\mathrm{norm}((p - r^*)_+)`.
        """
        n = drafts.shape[0]
        s = streams[0].random(n)
        u = streams[1].random(n)
        y = self.select(drafts, s, u, method="bridge" if self._use_bridge(n) else "tree")
        keep = streams[2].random(n) < self._accept_at(y)
        rej = np.flatnonzero(~keep)
        if rej.size:
            cdf = self.residual_cdf
            x = np.searchsorted(cdf, streams[3].random(rej.size) * cdf[-1], side="right")
            y = y.copy()
            y[rej] = np.minimum(x, self._last_residual)
        return y.astype(np.int64)

    def sample(self, drafts: Any, *, rng: np.random.Generator) -> int:
        """One output token for one draft tuple (streams spawned from ``rng``).

        Parameters
        ----------
        drafts : array_like of int, shape (k,)
            One draft tuple (not validated: use the verifier's ``sample`` for user input).
        rng : numpy.random.Generator
            The caller's generator; four child streams are spawned from it.

        Returns
        -------
        int
            The output token.
        """
        d = np.asarray(drafts, dtype=np.int64).reshape(1, -1)
        return int(self.sample_rows(d, spawn_streams(rng, 4))[0])

    def sample_batch(self, drafts: Any, *, rng: np.random.Generator) -> np.ndarray:
        """One output token per row of ``drafts`` ``(n, k)``.

        Parameters
        ----------
        drafts : array_like of int, shape (n, k)
            Draft tuples (not validated).
        rng : numpy.random.Generator
            The caller's generator; four child streams are spawned from it.

        Returns
        -------
        ndarray of int64, shape (n,)
            One output token per row.
        """
        return self.sample_rows(np.asarray(drafts, dtype=np.int64), spawn_streams(rng, 4))


def _build_state(
    p: np.ndarray, q: np.ndarray, k: int, method: str = "auto", sel: Selection | None = None, draw: str = "auto"
) -> OptimalIIDState:
    if draw not in DRAW_METHODS:
        raise UnsupportedMethodError(f"draw must be one of {DRAW_METHODS} (got {draw!r}); pick one of those")
    resolve_method(method)  # refuse an unknown or unavailable builder now, not at the first draw
    sel = solve_selection(p, q, k) if sel is None else sel
    geo, st = geometry(sel, q, k)
    state = OptimalIIDState(p=p, r=sel.r, k=k, alpha=sel.alpha, super_token=st, geometry=geo, tree_method=method, draw=draw)
    if draw == "tree":
        state.tree  # noqa: B018 (build it now: the caller asked for the tree)
    object.__setattr__(state, "_q", q)
    return state


@fill_doc
def prepare(p: Any, q: Any, k: Any, *, method: str = "auto", draw: str = "auto") -> OptimalIIDState:
    r"""Build the sampler state for (p, q, k) once: :math:`r^*`, super-tokens, accept ratios and
    residual CDF; the threshold tree and its range-minimum table are built on first use.

    Parameters
    ----------
    {pqk_args}
    method : str
        Threshold-tree builder (see :func:`threshold_tree`).
    draw : {"auto", "bridge", "tree"}
        How draws find their block (:data:`DRAW_METHODS`): ``"tree"`` builds the tree now,
        ``"bridge"`` never needs it, ``"auto"`` uses bridges for the first :data:`BRIDGE_DRAWS`
        draws and the tree after.

    Returns
    -------
    OptimalIIDState
        Everything a draw needs; ``alpha`` is :math:`\alpha^*`.

    Raises
    ------
    {pq_raises}
    {k_raises}
    UnsupportedMethodError
        If ``method`` or ``draw`` is unknown, or the builder needs numba and it is missing.

    Examples
    --------
    >>> st = prepare([0.5, 0.3, 0.2], [0.2, 0.3, 0.5], 2)
    >>> round(st.alpha, 12)  # 1 + min_H [p(H) - q(H)^2], at H = {1, 2}: 1 + 0.5 - 0.8**2
    0.86
    >>> st.sample([2, 0], rng=np.random.default_rng(0)) in (0, 1, 2)
    True
    """
    p, q, k = check_pqk(p, q, k)
    return _build_state(p, q, k, method, draw=draw)


# ------------------------------------------------------------------------------------------------
# The verifier


def _iid_source(law: DraftLaw) -> tuple[np.ndarray | None, str]:
    """``(q, "")`` when the law is k i.i.d. drafts from q, else ``(None, reason)``."""
    if law.iid_q is not None:
        return law.iid_q, ""
    qs = law.independent_qs
    if qs is not None:
        q0 = qs[0]
        if all(np.array_equal(q0, qj) for qj in qs[1:]):
            return q0, ""
        return None, (
            "the drafters of this product law differ, so P(some draft in S) = 1 - prod_j (1 - q_j(S)) is not a function of one "
            "measure of S and the closed-form selection law does not apply"
        )
    if law.without_replacement_q is not None:
        return None, (
            "without replacement, P(some draft in S) is not a function of q(S) alone, so the closed-form selection law and the "
            "threshold construction fail (an exact method at scale is open)"
        )
    return None, f"it is built for k i.i.d. drafts and the {law.kind} law is not of that form"


class OptimalIIDVerifier(Verifier):
    r"""The optimal verifier for i.i.d. drafts at any V: acceptance :math:`\alpha^*` exactly.

    Examples
    --------
    >>> import otspec
    >>> from otspec.verifiers import optimal_iid
    >>> p, law = [0.5, 0.3, 0.2], otspec.iid([0.2, 0.3, 0.5], 2)
    >>> est = optimal_iid.acceptance(p, law)
    >>> est.how, round(est.value, 12) == round(otspec.optimal_acceptance(p, law).value, 12)
    ('closed_form', True)
    """

    name = "optimal_iid"
    optimal = True
    rule = "the optimal i.i.d. verifier needs k i.i.d. drafts (otspec.iid, or otspec.product with identical drafters)"
    fix = "build the law with otspec.iid(q, k), or use khisti / optimal_plan on small laws"
    reference = "two-step form of Khisti et al. (ICLR 2025) with the closed-form optimal selection law (docs: optimal_verifier)"

    def applies_to(self, law: DraftLaw) -> bool:
        return _iid_source(law)[0] is not None

    def _check(self, p, law):
        if isinstance(law, DraftLaw):
            q, why = _iid_source(law)
            if q is None:
                raise UnsupportedMethodError(f"verifier {self.name!r} does not apply to the draft law {law!r}: {why}; {self.fix}")
        return super()._check(p, law)

    @fill_doc
    def state(self, p: Any, law: DraftLaw) -> OptimalIIDState:
        """The prepared state for ``(p, law)`` (memoised per law object and target).

        Parameters
        ----------
        p : array_like, shape (V,)
            Target distribution.
        law : DraftLaw
            i.i.d. drafts (or a product of identical drafters).

        Returns
        -------
        OptimalIIDState
            The state :func:`prepare` builds, cached on the law.

        Raises
        ------
        UnsupportedMethodError
            If the law is not i.i.d.
        {p_law_raises}
        """
        p = self._check(p, law)
        return self._state(p, law)

    def _state(self, p: np.ndarray, law: DraftLaw) -> OptimalIIDState:
        q = _iid_source(law)[0]
        return law.cached("optimal_iid.state", p, lambda: _build_state(p, q, law.k, sel=self._selection(p, law)))

    def _selection(self, p: np.ndarray, law: DraftLaw) -> Selection:
        q = _iid_source(law)[0]
        return law.cached("optimal_iid.selection", p, lambda: solve_selection(p, q, law.k))

    def _prepare(self, p, law):
        self._state(p, law)

    def _rows(self, p, law, tuples):
        stt = self._state(p, law)
        beta = stt.selection_rows(tuples)
        acc = beta * stt.accept[None, :]
        cdf = stt.residual_cdf
        res = np.diff(np.concatenate([[0.0], cdf]))
        res = res / cdf[-1] if cdf[-1] > 0 else p
        return acc + (1.0 - acc.sum(axis=1))[:, None] * res[None, :]

    def _tuple_acceptance(self, p, law, tuples):
        pi = self._rows(p, law, tuples)
        return np.sum(np.where(membership_mask(tuples, law.V), pi, 0.0), axis=1)

    def _closed_form(self, p, law):
        # O(V log V): needs r* only, not the threshold tree
        return self._selection(p, law).alpha, {"formula": "1 + p(H*) - q(H*)^k"}

    def sample(self, p: Any, law: DraftLaw, drafts: Any, *, rng: np.random.Generator) -> int:
        """One output token for one draft tuple. Four independent child streams are spawned from
        ``rng``: the level s, the within-block choice, the accept coin and the residual draw."""
        p = self._check(p, law)
        d = law.validate_drafts(drafts)
        streams = spawn_streams(rng, 4)
        return int(self._state(p, law).sample_rows(d[None, :], streams)[0])

    def sample_batch(self, p: Any, law: DraftLaw, drafts: Any, *, rng: np.random.Generator) -> np.ndarray:
        """One output token per row of ``drafts`` ``(N, k)``, with the streams of :meth:`sample`
        (``sample(d) == sample_batch([d])[0]`` for the same generator state)."""
        p = self._check(p, law)
        d = law.validate_draft_batch(drafts)
        streams = spawn_streams(rng, 4)
        return self._state(p, law).sample_rows(d, streams)


optimal_iid = OptimalIIDVerifier()
