r"""Khisti et al.'s canonical two-step multi-draft scheme (ICLR 2025; :doc:`verifiers`, khisti).

Step 1 (importance-weighted selection): from the drafts :math:`\bar x` pick one drafted token, y,
with probability :math:`\beta_y(\bar x)` (:math:`\sum_{y \in \bar x} \beta_y(\bar x) = 1`).
This induces :math:`r_\beta(y) = \sum_{\bar x} Q(\bar x)\beta_y(\bar x)`.
Step 2: single-draft speculative sampling from :math:`r_\beta` to p: keep y w.p.
:math:`\min(1, p(y)/r_\beta(y))`, else draw from :math:`\mathrm{norm}((p - r_\beta)_+)`.
Acceptance :math:`\sum_y \min(p(y), r_\beta(y))`; by the canonical decomposition theorem its
maximum over the selections is the optimum :math:`\alpha^*(p, Q)` for every draft law.

The optimal selection is not unique, so the verifier fixes a *canonical* one:

* **i.i.d. drafts** (``otspec.iid(q, k)``, or ``otspec.product`` of identical drafters): the
  closed-form optimal selection law :math:`r^*` and the threshold-tree selection rule of
  :mod:`otspec.verifiers.step.optimal_iid` (tokens grouped into super-tokens sorted by density
  :math:`r^*/q`, a level :math:`s \sim U(0,1)`, the block of the first drafted super-token, a
  uniform draft of that block). The kernel is then exactly ``optimal_iid``'s, available at any V
  with ``acceptance`` = :math:`\alpha^* = 1 + \min_H [p(H) - q(H)^k]` in closed form. For two
  drafts y, y' in super-tokens :math:`a < b` the selection is explicit: y' (the draft of lower
  density) is selected with probability :math:`\tfrac12 \min_{a \le i < b} \kappa_i` (one
  range-minimum of the thresholds of the boundaries between them), y otherwise; two drafts in the
  same super-token are selected with probability 1/2 each.
* **every other law** (without replacement, explicit, products of different drafters): the weights
  solve the linear program :math:`\max_\beta \sum_y \min(p(y), r_\beta(y))` over the *sets* of
  distinct drafted tokens (HiGHS' dual simplex through the shared :func:`otspec.bounds.highs.solve_colwise`), so the kernel and the
  sampler need a law small enough to enumerate.

For two i.i.d. drafts the optimum also has the closed form

.. math:: \alpha^*(K{=}2) = \min_{S \subseteq \Omega}\Big\{ \sum_{s \in S} p(s) + q(S^c)^2 + 2\,q(S)\,q(S^c) \Big\},

minimised over the prefixes of the tokens sorted by p/q (tokens with q = 0 last)
(:func:`khisti_k2_closed_form`, an independent check of the general formula).

Deviation from the paper's practical scheme: Khisti et al. truncate the alphabet and solve a
pairwise LP over the top-s tokens (with a tournament for K > 2); we use the exact optimal
selection (closed form for i.i.d. drafts, the exact LP otherwise).
"""

from __future__ import annotations

import warnings

import numpy as np

from otspec._docs import fill_doc
from otspec._validation import as_distribution, check_same_vocab
from otspec.bounds.highs import solve_colwise
from otspec.bounds.result import STATUS_OPTIMAL, STATUS_SOLVER_FAILED, SolverFailedWarning
from otspec.laws import DraftLaw
from otspec.sampling import sample_categorical, spawn_streams
from otspec.verifiers.base import Verifier
from otspec.verifiers.schedule import accept_ratio, residual
from otspec.verifiers.step.optimal_iid import optimal_iid
from otspec.verifiers.tuples import set_index

__all__ = ["KhistiVerifier", "khisti", "khisti_k2_closed_form", "selection_weights", "SelectionWeights"]


@fill_doc
def khisti_k2_closed_form(p, q) -> float:
    r""":math:`\min_S \{P(S) + q(S^c)^2 + 2q(S)q(S^c)\}` over p/q-sorted prefixes (K = 2 i.i.d.).

    Parameters
    ----------
    p, q : array_like, shape (V,)
        Target and draft distributions.

    Returns
    -------
    float
        :math:`\alpha^*` for two i.i.d. drafts from ``q`` (an independent check of the general dual).

    Raises
    ------
    {pq_raises}

    Examples
    --------
    >>> khisti_k2_closed_form([0.5, 0.5], [1.0, 0.0])
    0.5
    """
    p = as_distribution(p, "p")
    q = as_distribution(q, "q")
    check_same_vocab(p, q)
    pos = q > 0
    ratio = np.full(p.shape, np.inf)
    with np.errstate(over="ignore"):  # a denormal q overflows the ratio to +inf: the right order key
        ratio[pos] = p[pos] / q[pos]
    # tie order is irrelevant: the minimum over prefixes is attained at the boundary of a tied block
    order = np.argsort(ratio)
    P = np.concatenate([[0.0], np.cumsum(p[order])])
    qS = np.minimum(np.concatenate([[0.0], np.cumsum(q[order])]), 1.0)
    qc = np.maximum(1.0 - qS, 0.0)
    return float(np.min(P + qc**2 + 2.0 * qS * qc))


class SelectionWeights:
    """Optimal selection weights on the draft sets of one (p, law) pair.

    ``sets`` ``(S, k)`` (distinct tokens, ``-1`` padded), ``set_weights`` ``(S,)``, ``beta``
    ``(S, k)`` (rows sum to 1 over the valid entries), ``r`` the induced law, ``value`` =
    :math:`\\sum\\min(p, r)`, ``status``.

    Parameters
    ----------
    sets : ndarray of int64, shape (S, k)
        Draft sets, ``-1`` padded.
    set_weights : ndarray, shape (S,)
        :math:`Q(s)`.
    beta : ndarray, shape (S, k)
        Selection probability :math:`\\beta_y(s)` of each member (0 at padding).
    r : ndarray, shape (V,)
        The induced selection law :math:`r_\\beta(y) = \\sum_s Q(s) \\beta_y(s)`.
    value : float
        The acceptance :math:`\\sum_y \\min(p(y), r_\\beta(y))`.
    status : str
        ``"optimal"``, or ``"solver_failed"`` when the LP failed and uniform selection was used.
    """

    def __init__(self, sets, set_weights, beta, r, value, status):
        self.sets, self.set_weights, self.beta, self.r, self.value, self.status = sets, set_weights, beta, r, value, status

    def set_index(self, tuples: np.ndarray) -> np.ndarray:
        """Index of the set of each draft tuple ``(n, k)``.

        Parameters
        ----------
        tuples : ndarray of int, shape (n, k)
            Draft tuples.

        Returns
        -------
        ndarray of int64, shape (n,)
            Row of :attr:`sets` holding each tuple's distinct tokens.

        Raises
        ------
        InvalidDraftsError
            If a tuple's set is not among :attr:`sets`.
        """
        return set_index(self.sets, tuples)


def _warn_solver_failed(info: str) -> None:
    """The verifier claims optimality: a silent fall-back would pass a sub-optimal acceptance off as its own."""
    warnings.warn(
        f"khisti's selection LP did not end optimal (HiGHS: {info}); its solution is not read and the rule falls back "
        "to uniform selection (lossless, not optimal); check the HiGHS options of this process",
        SolverFailedWarning,
        stacklevel=3,
    )


def selection_weights(p: np.ndarray, law: DraftLaw) -> SelectionWeights:
    r"""Solve :math:`\max_\beta \sum_y \min(p(y), r_\beta(y))` by LP over the draft sets of ``law``.

    Variables :math:`w_{s,y} = Q(s)\beta_y(s) \ge 0` for :math:`y \in s` and
    :math:`0 \le t_y \le p(y)`; constraints :math:`\sum_y w_{s,y} = Q(s)`,
    :math:`t_y \le \sum_{s \ni y} w_{s,y}`; maximise :math:`\sum_y t_y`.

    Parameters
    ----------
    p : ndarray, shape (V,)
        Target distribution.
    law : DraftLaw
        An enumerable draft law.

    Returns
    -------
    SelectionWeights
        The optimal :math:`\beta` per draft set, its induced law :math:`r_\beta` and the value
        :math:`\alpha^*`; if HiGHS fails, uniform selection with ``status="solver_failed"``.

    Warns
    -----
    SolverFailedWarning
        When the HiGHS run does not end optimal (model status other than "Optimal", e.g. a run
        that returned an error without solving). Its solution is not read: the rule falls back to
        uniform selection, which stays lossless but is not the optimal selection, so
        :class:`KhistiVerifier`'s acceptance is then that of uniform selection.

    Raises
    ------
    ProblemTooLargeError
        If enumerating the law's sets exceeds the memory cap.
    """
    sets, Qs = law.enumerate_sets()
    S, k = sets.shape
    V = law.V
    valid = sets >= 0
    rows_s, cols_j = np.nonzero(valid)
    nw = rows_s.size
    tok = sets[rows_s, cols_j]
    # Columns: w (one per set member), then t (one per token, 0 <= t_y <= p(y)); rows: the V token
    # rows t_y - sum_{s ni y} w_{s,y} <= 0, then the S set rows sum_y w_{s,y} = Q(s). Column j of w
    # has -1 in its token row and +1 in its set row; column y of t has +1 in token row y.
    start = np.concatenate([np.arange(0, 2 * nw, 2), 2 * nw + np.arange(V + 1)]).astype(np.int32)
    index = np.empty(2 * nw + V, dtype=np.int32)
    index[0 : 2 * nw : 2] = tok
    index[1 : 2 * nw : 2] = V + rows_s
    index[2 * nw :] = np.arange(V)
    value = np.concatenate([np.tile([-1.0, 1.0], nw), np.ones(V)])
    h, ok, info = solve_colwise(
        cost=np.concatenate([np.zeros(nw), -np.ones(V)]),
        row_lower=np.concatenate([np.full(V, -np.inf), Qs]),
        row_upper=np.concatenate([np.zeros(V), Qs]),
        start=start,
        index=index,
        value=value,
        maximize=False,
        col_upper=np.concatenate([np.full(nw, np.inf), p]),
        options={"simplex_strategy": 1},  # dual simplex
    )
    beta = np.zeros((S, k))
    if ok:
        w = np.maximum(np.asarray(h.getSolution().col_value, dtype=np.float64)[:nw], 0.0)
        status = STATUS_OPTIMAL
    else:  # fall back to uniform selection so the (lossless) rule stays defined; status says why
        w = np.ones(nw)
        status = STATUS_SOLVER_FAILED
        _warn_solver_failed(info)
    beta[rows_s, cols_j] = w
    tot = beta.sum(axis=1)
    beta[tot > 0] /= tot[tot > 0, None]
    beta[tot <= 0] = valid[tot <= 0] / valid[tot <= 0].sum(axis=1, keepdims=True)
    # r from the cleaned weights, so that the two-step rule is lossless to rounding
    r = np.bincount(tok, weights=(Qs[:, None] * beta)[rows_s, cols_j], minlength=V)
    return SelectionWeights(sets, Qs, beta, r, float(np.minimum(p, r).sum()), status)


class KhistiVerifier(Verifier):
    r"""Canonical two-step scheme with an optimal selection (optimal for every law).

    i.i.d. laws (and products of identical drafters) use the closed-form optimal selection of
    :mod:`~otspec.verifiers.step.optimal_iid` at any V; every other law uses LP-optimal weights
    over the draft sets (enumerable laws only).

    Examples
    --------
    >>> import otspec
    >>> from otspec.verifiers import khisti
    >>> est = khisti.acceptance([0.5, 0.3, 0.2], otspec.iid([0.2, 0.3, 0.5], 2))
    >>> from otspec.verifiers.step.khisti import khisti_k2_closed_form
    >>> est.how, round(est.value, 9) == round(khisti_k2_closed_form([0.5, 0.3, 0.2], [0.2, 0.3, 0.5]), 9)
    ('closed_form', True)
    """

    name = "khisti"
    optimal = True
    rule = "the canonical scheme applies to every draft law (at any V for i.i.d. drafts; other laws must be small enough to enumerate)"
    reference = "Khisti, Ebrahimi, Dbouk, Behboodi, Memisevic, Louizos, ICLR 2025"
    monte_carlo_ok = False

    def applies_to(self, law: DraftLaw) -> bool:
        return True

    @staticmethod
    def _canonical(law: DraftLaw) -> bool:
        """True when the closed-form optimal selection of ``optimal_iid`` applies (i.i.d. drafts)."""
        return optimal_iid.applies_to(law)

    @staticmethod
    def _iid_state(p, law):
        return optimal_iid.state(p, law)

    @fill_doc
    def weights(self, p, law) -> SelectionWeights:
        """The (cached) optimal selection weights for ``(p, law)``, per draft *set*.

        For i.i.d. laws the canonical rule selects per draft *tuple* (a token drafted twice counts
        twice); the weights returned are its selection law averaged over the tuples of each set
        (same induced r, same acceptance). Other laws: the LP weights the rule uses.

        Parameters
        ----------
        {p_enum_law_args}

        Returns
        -------
        SelectionWeights
            Selection weights per draft set, the induced law and the acceptance.

        Raises
        ------
        {p_law_raises}
        ProblemTooLargeError
            If the law is too large to enumerate.
        """
        p = self._check(p, law)
        if self._canonical(law):
            return law.cached("khisti.canonical_weights", p, lambda: self._canonical_weights(p, law))
        return self._weights(p, law)

    def _canonical_weights(self, p, law) -> SelectionWeights:
        tuples, W = law.enumerate()
        beta_t = self._iid_state(p, law).selection_rows(tuples)
        sets, Qs = law.enumerate_sets()
        idx = set_index(sets, tuples)
        agg = np.zeros((sets.shape[0], law.V))
        np.add.at(agg, idx, W[:, None] * beta_t)
        valid = sets >= 0
        beta = np.where(valid, np.take_along_axis(agg, np.maximum(sets, 0), axis=1), 0.0)
        beta /= beta.sum(axis=1, keepdims=True)
        r = np.zeros(law.V)
        np.add.at(r, sets[valid], (Qs[:, None] * beta)[valid])
        return SelectionWeights(sets, Qs, beta, r, float(np.minimum(p, r).sum()), STATUS_OPTIMAL)

    def _weights(self, p, law) -> SelectionWeights:
        return law.cached("khisti.weights", p, lambda: selection_weights(p, law))

    def _prepare(self, p, law):
        if self._canonical(law):
            self._iid_state(p, law)
        else:
            self._weights(p, law)

    def _parts(self, p, law, tuples):
        sw = self._weights(p, law)
        s = sw.set_index(tuples)
        toks = sw.sets[s]  # (n, k), -1 padded
        beta = sw.beta[s]
        a = np.where(toks >= 0, accept_ratio(p[np.maximum(toks, 0)], sw.r[np.maximum(toks, 0)]), 0.0)
        res, _ = residual(p, sw.r)
        return toks, beta, a, res

    def _rows(self, p, law, tuples):
        if self._canonical(law):
            st = self._iid_state(p, law)
            acc = st.selection_rows(tuples) * st.accept[None, :]
            cdf = st.residual_cdf
            res = np.diff(cdf, prepend=0.0) / cdf[-1] if cdf[-1] > 0 else p
            return acc + (1.0 - acc.sum(axis=1))[:, None] * res[None, :]
        toks, beta, a, res = self._parts(p, law, tuples)
        n = tuples.shape[0]
        pi = np.zeros((n, law.V))
        ok = toks >= 0
        rr = np.repeat(np.arange(n), toks.shape[1]).reshape(toks.shape)
        np.add.at(pi, (rr[ok], toks[ok]), (beta * a)[ok])
        pi += (1.0 - np.sum(beta * a, axis=1))[:, None] * res[None, :]
        return pi

    def _sample_rows(self, p, law, tuples, coin_rng, res_rng):
        if self._canonical(law):
            # level, within-block choice and accept coin: three streams spawned from the coin
            # stream; the residual draw keeps its own stream
            return self._iid_state(p, law).sample_rows(tuples, [*spawn_streams(coin_rng, 3), res_rng])
        toks, beta, a, res = self._parts(p, law, tuples)
        n = tuples.shape[0]
        cb = np.cumsum(beta, axis=1)
        j = np.sum(cb <= (coin_rng.random(n) * cb[:, -1])[:, None], axis=1)
        last = toks.shape[1] - 1 - np.argmax((beta > 0)[:, ::-1], axis=1)  # never step onto padding
        j = np.minimum(j, last)
        sel = toks[np.arange(n), j]
        keep = coin_rng.random(n) < a[np.arange(n), j]
        out = np.where(keep, sel, -1)
        rej = np.flatnonzero(~keep)
        out[rej] = sample_categorical(res_rng, res, rej.size)
        return out.astype(np.int64)

    def _closed_form(self, p, law):
        if self._canonical(law):
            value = optimal_iid.acceptance(p, law, method="closed_form").value
            return value, {"formula": "1 + p(H*) - q(H*)^k (canonical selection: the optimal i.i.d. rule)"}
        return None


khisti = KhistiVerifier()
