r"""Recursive rejection sampling without replacement (Recursive Speculative Decoding, Jeon et al.
2024; :doc:`verifiers`, rrs_wor).

Drafts come by successive sampling proportional to q. After each rejection the target becomes the
residual against the *current* draft law, and the rejected token is removed from the draft law:

.. math::
    q_1 = q,\ p_0 = p;\quad \text{return } X_j \text{ w.p. } \min\big(1, \tfrac{p_{j-1}(X_j)}{q_j(X_j)}\big),\
    p_j = \mathrm{norm}\big((p_{j-1} - q_j)_+\big),\ q_{j+1} = \mathrm{norm}\big(q_j 1_{\ne X_j}\big);
    \quad \text{else } Y \sim p_k.

No closed form is known: acceptance is exact from the kernel on small laws, Monte Carlo otherwise.

Public kernel function for per-node use: :func:`rrs_wor_conditional` ``(p, q, drafts) -> (M, V)``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from otspec._validation import as_distribution, as_supported_drafts, check_same_vocab
from otspec.laws import DraftLaw
from otspec.verifiers.base import Verifier
from otspec.verifiers.plan import SequentialPlan, accept_ratio, plan_rows, residual_rows

__all__ = ["RRSWorVerifier", "rrs_wor", "rrs_wor_conditional", "rrs_wor_plan"]


def rrs_wor_plan(p: np.ndarray, q: np.ndarray, tuples: np.ndarray) -> SequentialPlan:
    """RSD plan for draft tuples ``(n, k)`` of distinct tokens (per-row residuals, ``(n, V)``)."""
    n, k = tuples.shape
    r = np.arange(n)
    P = np.broadcast_to(p, (n, p.shape[0])).copy()
    Q = np.broadcast_to(q, (n, q.shape[0])).copy()
    acc = np.empty((n, k))
    for j in range(k):
        x = tuples[:, j]
        num, den = P[r, x], Q[r, x]
        acc[:, j] = accept_ratio(num, den)
        P, _ = residual_rows(P, Q)
        if j + 1 < k:
            Q[r, x] = 0.0
            tot = Q.sum(axis=1)
            Q /= np.where(tot > 0, tot, 1.0)[:, None]
    return SequentialPlan(tokens=tuples, accept=acc, residual=P)


def rrs_wor_conditional(p: Any, q: Any, drafts: Any) -> np.ndarray:
    r"""Exact RSD output law :math:`\pi(\cdot \mid \bar x)` for each tuple of distinct drafts.

    Examples
    --------
    >>> pi = rrs_wor_conditional([0.5, 0.5, 0.0], [0.5, 0.25, 0.25], [[0, 2]])
    >>> pi.round(6).tolist()
    [[1.0, 0.0, 0.0]]
    """
    p = as_distribution(p, "p")
    q = as_distribution(q, "q")
    check_same_vocab(p, q)
    t = as_supported_drafts(drafts, q, distinct=True)
    return plan_rows(rrs_wor_plan(p, q, t), p.shape[0])


class RRSWorVerifier(Verifier):
    r"""Recursive rejection sampling without replacement (RSD), the draft law updated after each
    rejection. Acceptance: exact from the kernel (small laws) or Monte Carlo.

    References
    ----------
    Jeon, Gagrani, Goel, Park, Lee, Lott, "Recursive Speculative Decoding", arXiv 2402.14160.

    Examples
    --------
    >>> import otspec
    >>> from otspec.verifiers import rrs_wor
    >>> est = rrs_wor.acceptance([0.5, 0.3, 0.2], otspec.without_replacement([0.2, 0.3, 0.5], 2))
    >>> est.how
    'kernel'
    """

    name = "rrs_wor"
    rule = "RRS without replacement needs successive-sampling drafts (otspec.without_replacement)"
    fix = "use otspec.verifiers.rrs for i.i.d./product drafts, or build the law with otspec.without_replacement"
    reference = "RSD (Jeon et al. 2024)"

    def applies_to(self, law: DraftLaw) -> bool:
        return law.kind == "without_replacement"

    def _plan(self, p, law, tuples):
        return rrs_wor_plan(p, law.q, tuples)


rrs_wor = RRSWorVerifier()
