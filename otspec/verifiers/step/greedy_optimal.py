r"""The verifier that attains the optimum of Hu et al.'s greedy draft law (:doc:`math`, greedy drafts).

Drafts are the top-(k-1) tokens G of q plus :math:`X \sim \tilde q = q 1_{G^c}/q(G^c)`. Accept
:math:`X` with probability :math:`\min(1, p(X)/\tilde q(X))`; otherwise draw
:math:`Y \propto p_{rem}`, with :math:`p_{rem} = p` on G and :math:`(p-\tilde q)_+` off G. Then

.. math:: \alpha = P(G) + \sum_{x \notin G} \min(p(x), \tilde q(x)) = \alpha^*_{greedy}.

The residual never hits the rejected X, and every residual draw on G counts as accepted.
"""

from __future__ import annotations

import numpy as np

from otspec.laws import DraftLaw
from otspec.verifiers.base import Verifier
from otspec.verifiers.schedule import AcceptSchedule, accept_ratio

__all__ = ["GreedyOptimalVerifier", "greedy_optimal", "greedy_closed_form"]


def greedy_closed_form(p: np.ndarray, law: DraftLaw) -> float:
    r""":math:`\alpha^*_{greedy} = P(G) + \sum_{x \notin G} \min(p(x), \tilde q(x))` (:doc:`math`, greedy drafts).

    Parameters
    ----------
    p : ndarray, shape (V,)
        Target distribution.
    law : GreedyLaw
        Greedy drafts: ``law.top`` is G, ``law.q_rest`` is :math:`\tilde q`.

    Returns
    -------
    float
        The optimal acceptance (:meth:`GreedyLaw.optimum <otspec.laws.GreedyLaw.optimum>`, clipped to 1
        against rounding), attained by :data:`greedy_optimal`.
    """
    return min(law.closed_form_optimum(p), 1.0)


class GreedyOptimalVerifier(Verifier):
    r"""Optimal verifier for greedy drafts (Hu et al., ICLR 2025).

    Examples
    --------
    >>> import otspec
    >>> from otspec.verifiers import greedy_optimal
    >>> greedy_optimal.acceptance([0.2, 0.5, 0.3], otspec.greedy([0.5, 0.3, 0.2], 2)).value  # 0.5 + 0.2 + 0.3
    1.0
    """

    name = "greedy_optimal"
    rule = "the greedy-optimal verifier needs greedy drafts (otspec.greedy)"
    fix = "build the law with otspec.greedy(q, k)"
    reference = "Hu et al., 'Towards Optimal Multi-draft Speculative Decoding', ICLR 2025"

    def applies_to(self, law: DraftLaw) -> bool:
        return law.top_and_rest is not None

    def _schedule(self, p, law, tuples):
        top, qt = law.top_and_rest

        def build():
            prem = np.maximum(p - qt, 0.0)
            prem[top] = p[top]
            tot = prem.sum()
            return prem / tot if tot > 0 else np.array(p, copy=True)

        res = law.cached("greedy_optimal.residual", p, build)
        last = tuples[:, -1:]
        return AcceptSchedule(tokens=last, accept=accept_ratio(p[last], qt[last]), residual=res)

    def _closed_form(self, p, law):
        return greedy_closed_form(p, law), {}


greedy_optimal = GreedyOptimalVerifier()
