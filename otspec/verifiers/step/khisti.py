r"""Khisti et al.'s canonical two-step multi-draft scheme (ICLR 2025; :doc:`verifiers`, khisti).

Step 1 (importance-weighted selection): from the drafts :math:`\bar x` pick one of their distinct
tokens, y, with probability :math:`\beta_y(\bar x)` (:math:`\sum_{y \in \bar x} \beta_y(\bar x) = 1`).
This induces :math:`r_\beta(y) = \sum_{\bar x} Q(\bar x)\beta_y(\bar x)`.
Step 2: single-draft speculative sampling from :math:`r_\beta` to p: keep y w.p.
:math:`\min(1, p(y)/r_\beta(y))`, else draw from :math:`\mathrm{norm}((p - r_\beta)_+)`.

The weights maximise :math:`\sum_y \min(p(y), r_\beta(y))` -- a linear program (solved here with
HiGHS through ``scipy.optimize.linprog``) over the *sets* of distinct drafted tokens, since the
selection only needs to know which tokens were drafted. By the canonical decomposition theorem its
value is the optimum :math:`\alpha^*(p, Q)` for every draft law, so this verifier is optimal.
For two i.i.d. drafts the optimum has the closed form

.. math:: \alpha^*(K{=}2) = \min_{S \subseteq \Omega}\Big\{ \sum_{s \in S} p(s) + q(S^c)^2 + 2\,q(S)\,q(S^c) \Big\},

minimised over the prefixes of the tokens sorted by p/q (tokens with q = 0 last).

Deviation from the paper's practical scheme: Khisti et al. truncate the alphabet and solve a
pairwise LP over the top-s tokens (with a tournament for K > 2); we solve the exact LP over all
draft sets, so the verifier is only available on laws small enough to enumerate (the K = 2
closed-form acceptance is available at any V).
"""

from __future__ import annotations

import numpy as np

from otspec._tolerances import LP_FEASIBILITY_TOL, LP_OPTIMALITY_TOL
from otspec._validation import as_distribution, check_same_vocab
from otspec.bounds.result import STATUS_OPTIMAL, STATUS_SOLVER_FAILED
from otspec.laws import DraftLaw
from otspec.sampling import sample_categorical
from otspec.verifiers.base import Verifier
from otspec.verifiers.plan import accept_ratio, residual
from otspec.verifiers.tuples import set_index

__all__ = ["KhistiVerifier", "khisti", "khisti_k2_closed_form", "selection_weights", "SelectionWeights"]


def khisti_k2_closed_form(p, q) -> float:
    r""":math:`\min_S \{P(S) + q(S^c)^2 + 2q(S)q(S^c)\}` over p/q-sorted prefixes (K = 2 i.i.d.).

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
    """

    def __init__(self, sets, set_weights, beta, r, value, status):
        self.sets, self.set_weights, self.beta, self.r, self.value, self.status = sets, set_weights, beta, r, value, status

    def set_index(self, tuples: np.ndarray) -> np.ndarray:
        """Index of the set of each draft tuple ``(n, k)``."""
        return set_index(self.sets, tuples)


def selection_weights(p: np.ndarray, law: DraftLaw) -> SelectionWeights:
    r"""Solve :math:`\max_\beta \sum_y \min(p(y), r_\beta(y))` by LP over the draft sets of ``law``.

    Variables :math:`w_{s,y} = Q(s)\beta_y(s) \ge 0` for :math:`y \in s` and
    :math:`0 \le t_y \le p(y)`; constraints :math:`\sum_y w_{s,y} = Q(s)`,
    :math:`t_y \le \sum_{s \ni y} w_{s,y}`; maximise :math:`\sum_y t_y`.
    """
    import scipy.sparse as sp  # lazily: scipy.optimize alone is ~0.4 s of `import otspec`
    from scipy.optimize import linprog

    sets, Qs = law.enumerate_sets()
    S, k = sets.shape
    V = law.V
    valid = sets >= 0
    rows_s, cols_j = np.nonzero(valid)
    nw = rows_s.size
    tok = sets[rows_s, cols_j]
    c = np.concatenate([np.zeros(nw), -np.ones(V)])
    A_eq = sp.csr_matrix((np.ones(nw), (rows_s, np.arange(nw))), shape=(S, nw + V))
    A_ub = sp.hstack([sp.csr_matrix((-np.ones(nw), (tok, np.arange(nw))), shape=(V, nw)), sp.identity(V, format="csr")], format="csr")
    bounds = np.concatenate([np.stack([np.zeros(nw), np.full(nw, np.inf)], 1), np.stack([np.zeros(V), p], 1)])
    res = linprog(
        c,
        A_ub=A_ub,
        b_ub=np.zeros(V),
        A_eq=A_eq,
        b_eq=Qs,
        bounds=bounds,
        method="highs",
        options={"primal_feasibility_tolerance": LP_FEASIBILITY_TOL, "dual_feasibility_tolerance": LP_OPTIMALITY_TOL},
    )
    beta = np.zeros((S, k))
    if res.status == 0:
        w = np.maximum(res.x[:nw], 0.0)
        status = STATUS_OPTIMAL
    else:  # fall back to uniform selection so the (lossless) rule stays defined; status says why
        w = np.ones(nw)
        status = STATUS_SOLVER_FAILED
    beta[rows_s, cols_j] = w
    tot = beta.sum(axis=1)
    beta[tot > 0] /= tot[tot > 0, None]
    beta[tot <= 0] = valid[tot <= 0] / valid[tot <= 0].sum(axis=1, keepdims=True)
    # r from the cleaned weights, so that the two-step rule is lossless to rounding
    r = np.bincount(tok, weights=(Qs[:, None] * beta)[rows_s, cols_j], minlength=V)
    return SelectionWeights(sets, Qs, beta, r, float(np.minimum(p, r).sum()), status)


class KhistiVerifier(Verifier):
    r"""Canonical two-step scheme with LP-optimal selection weights (optimal for every law).

    Examples
    --------
    >>> import otspec
    >>> from otspec.verifiers import khisti
    >>> est = khisti.acceptance([0.5, 0.3, 0.2], otspec.iid([0.2, 0.3, 0.5], 2))
    >>> est.how, round(est.value, 9) == round(otspec.verifiers.step.khisti.khisti_k2_closed_form([0.5, 0.3, 0.2], [0.2, 0.3, 0.5]), 9)
    ('closed_form', True)
    """

    name = "khisti"
    rule = "the canonical scheme applies to every draft law small enough to enumerate"
    reference = "Khisti, Ebrahimi, Dbouk, Behboodi, Memisevic, Louizos, ICLR 2025"
    monte_carlo_ok = False

    def applies_to(self, law: DraftLaw) -> bool:
        return True

    def weights(self, p, law) -> SelectionWeights:
        """The (cached) optimal selection weights for ``(p, law)``."""
        p = self._check(p, law)
        return self._weights(p, law)

    def _weights(self, p, law) -> SelectionWeights:
        return law.cached("khisti.weights", p, lambda: selection_weights(p, law))

    def _prepare(self, p, law):
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
        toks, beta, a, res = self._parts(p, law, tuples)
        n = tuples.shape[0]
        pi = np.zeros((n, law.V))
        ok = toks >= 0
        rr = np.repeat(np.arange(n), toks.shape[1]).reshape(toks.shape)
        np.add.at(pi, (rr[ok], toks[ok]), (beta * a)[ok])
        pi += (1.0 - np.sum(beta * a, axis=1))[:, None] * res[None, :]
        return pi

    def _sample_rows(self, p, law, tuples, coin_rng, res_rng):
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
        if law.kind == "iid" and law.k == 2:
            return khisti_k2_closed_form(p, law.q), {"formula": "K = 2 closed form"}
        return None


khisti = KhistiVerifier()
