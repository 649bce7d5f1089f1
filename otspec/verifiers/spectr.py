r"""SpecTr's K-SEQ draft selection (Sun et al., NeurIPS 2023, Algorithm 2; MATH.md section 2.2).

With i.i.d. drafts :math:`X_1..X_k \sim q` and the division factor :math:`\rho^*`:

.. math::
    \text{for } i = 1..k:\ \text{return } X_i \text{ w.p. } \min\big(1, \tfrac{p(X_i)}{\rho^* q(X_i)}\big);
    \qquad \text{else } Y \sim \mathrm{norm}\big((p - \gamma \min(p/\rho^*, q))_+\big).

Public kernel function for per-node use (e.g. SpecTr over a draft tree):
:func:`kseq_conditional` ``(p, q, drafts) -> (M, V)``, with ``k`` taken from ``drafts.shape[1]``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from otspec._validation import as_distribution, as_supported_drafts, check_same_vocab
from otspec.laws import DraftLaw
from otspec.verifiers._common import (
    KSeqDetails,
    SequentialPlan,
    Verifier,
    _one_minus_pow,
    accept_ratio,
    kseq_beta,
    kseq_details,
    memo,
    plan_rows,
    residual,
)

__all__ = ["KSeqVerifier", "kseq", "kseq_conditional", "kseq_plan", "details"]


def kseq_plan(p: np.ndarray, q: np.ndarray, tuples: np.ndarray, rho: float | None = None) -> tuple[SequentialPlan, KSeqDetails]:
    """The K-SEQ sequential plan for draft tuples ``(n, k)`` (validated inputs)."""
    k = tuples.shape[1]
    det = kseq_details(p, q, k)
    if rho is None:
        rho, gamma = det.rho_star, det.gamma
    else:  # an explicit division factor (valid iff rho >= rho*); used to build broken controls in tests
        rho = float(rho)
        beta = kseq_beta(p, q, rho)
        gamma = _one_minus_pow(beta, k) / beta if beta > 0 else 0.0
    res, _ = residual(p, gamma * np.minimum(p / rho, q))
    return SequentialPlan(tokens=tuples, accept=accept_ratio(p[tuples], rho * q[tuples]), residual=res), det


def kseq_conditional(p: Any, q: Any, drafts: Any) -> np.ndarray:
    r"""Exact K-SEQ output law :math:`\pi(\cdot \mid \bar x)` for each draft tuple.

    Parameters
    ----------
    p, q : array_like, shape (V,)
        Target and draft distributions.
    drafts : array_like of int, shape (M, k) or (k,)
        Draft tuples; ``k`` (the number of i.i.d. drafts) is ``drafts.shape[-1]``.

    Returns
    -------
    ndarray, shape (M, V)

    Examples
    --------
    >>> import numpy as np
    >>> pi = kseq_conditional([0.5, 0.5], [0.9, 0.1], [[0, 0], [0, 1]])
    >>> pi.shape, bool(np.allclose(pi.sum(axis=1), 1))
    ((2, 2), True)
    """
    p = as_distribution(p, "p")
    q = as_distribution(q, "q")
    check_same_vocab(p, q)
    t = as_supported_drafts(drafts, q)
    plan, _ = kseq_plan(p, q, t)
    return plan_rows(plan, p.shape[0])


def details(p: Any, q: Any, k: int) -> KSeqDetails:
    r"""K-SEQ's :math:`\rho^*`, phase-1 and membership acceptance for ``k`` i.i.d. drafts from ``q``.

    Examples
    --------
    >>> d = details([0.25, 0.75], [0.75, 0.25], 2)
    >>> 1.0 <= d.rho_star <= 2.0, d.phase1 <= d.membership
    (True, True)
    """
    from otspec._validation import as_draft_count

    p = as_distribution(p, "p")
    q = as_distribution(q, "q")
    check_same_vocab(p, q)
    return kseq_details(p, q, as_draft_count(k, "k"))


class KSeqVerifier(Verifier):
    r"""SpecTr K-SEQ with the optimal division factor :math:`\rho^*` (bisection on
    :math:`1-(1-\beta(\rho))^k = \rho\beta(\rho)`).

    Acceptance (closed form, any V): phase-1 :math:`1-(1-\beta(\rho^*))^k` and the membership value
    of :func:`otspec.verifiers._common.kseq_details`; phase-1 is at least
    :math:`(1-(1-1/k)^k)\,\alpha^*_{WR}`.

    References
    ----------
    Sun, Suresh, Ro, Beirami, Jain, Yu, "SpecTr: Fast Speculative Decoding via Optimal Transport",
    NeurIPS 2023, Algorithm 2.

    Examples
    --------
    >>> import otspec
    >>> from otspec.verifiers import kseq
    >>> est = kseq.acceptance([0.5, 0.3, 0.2], otspec.iid([0.2, 0.3, 0.5], 2))
    >>> est.how, 1 <= est.extras["rho_star"] <= 2
    ('closed_form', True)
    """

    name = "kseq"
    rule = "K-SEQ needs i.i.d. drafts (otspec.iid)"
    fix = "build the law with otspec.iid(q, k)"
    reference = "SpecTr (Sun et al. 2023), Algorithm 2"

    def applies_to(self, law: DraftLaw) -> bool:
        return law.kind == "iid"

    def details(self, p: Any, q: Any, k: int) -> KSeqDetails:
        """See :func:`otspec.verifiers.spectr.details`."""
        return details(p, q, k)

    def _plan(self, p, law, tuples):
        q = law.q

        def build():
            det = kseq_details(p, q, law.k)
            res, _ = residual(p, det.gamma * np.minimum(p / det.rho_star, q))
            return det.rho_star, res

        rho, res = memo("kseq.static", law, p, build)
        return SequentialPlan(tokens=tuples, accept=accept_ratio(p[tuples], rho * q[tuples]), residual=res)

    def _closed_form(self, p, law):
        d = kseq_details(p, law.q, law.k)
        return d.membership, {"rho_star": d.rho_star, "beta": d.beta, "phase1": d.phase1, "gamma": d.gamma}


kseq = KSeqVerifier()
