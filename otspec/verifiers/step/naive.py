r"""NaiveTree: single-draft speculative sampling on :math:`X_1` only, whose residual may land on
:math:`X_2..X_k` (Thomas et al. 2026 App. B; :doc:`verifiers`, nss and naive).

Lossless for every law (only :math:`X_1`'s marginal :math:`q_1` matters). A rejected :math:`X_1`
has :math:`p(X_1) < q_1(X_1)`, so the residual never lands on it; for independent drafts

.. math:: \alpha = \sum \min(p, q_1) + \sum_y (p-q_1)_+(y)\Big(1 - \prod_{j \ge 2}(1-q_j(y))\Big),

i.e. :math:`\sum\min(p,q) + \sum (p-q)_+(1-(1-q)^{k-1})` for i.i.d. drafts. For greedy drafts
(k >= 2) :math:`X_1` is the top token, and the rule reduces to :math:`p(G) + \sum_{y \notin G} p(y)\tilde q(y)`.
"""

from __future__ import annotations

import numpy as np

from otspec.laws import DraftLaw
from otspec.verifiers.base import Verifier
from otspec.verifiers.schedule import AcceptSchedule, accept_ratio, residual
from otspec.verifiers.tuples import distinct_mask

__all__ = ["NaiveVerifier", "naive"]


class NaiveVerifier(Verifier):
    r"""Single-draft rule on the first draft; the residual counts when it hits another draft.

    Examples
    --------
    >>> import otspec
    >>> from otspec.verifiers import naive
    >>> round(naive.acceptance([0.5, 0.5], otspec.iid([0.9, 0.1], 2)).value, 6)  # 0.6 + 0.4 * 0.1
    0.64
    """

    name = "naive"
    rule = "NaiveTree applies to every draft law"
    reference = "Thomas, Kitanovski, Goldblum, Pal 2026, App. B (NaiveTree)"

    def applies_to(self, law: DraftLaw) -> bool:
        return True

    def _schedule(self, p, law, tuples):
        q1 = law.first_draft_marginal()
        res, _ = residual(p, q1)
        return AcceptSchedule(tokens=tuples[:, :1], accept=accept_ratio(p[tuples[:, :1]], q1[tuples[:, :1]]), residual=res)

    def _tuple_acceptance(self, p, law, tuples):
        # O(k) per tuple: keep X_1 w.p. a, else the residual (which never hits a rejected X_1)
        # lands on one of the other distinct drafts
        sched = self._schedule(p, law, tuples)
        a = sched.accept[:, 0]
        keep = distinct_mask(tuples) & (tuples != tuples[:, :1])
        hit = np.sum(np.where(keep, sched.residual[tuples], 0.0), axis=1)
        return a + (1.0 - a) * hit

    def _closed_form(self, p, law):
        greedy = law.top_and_rest
        if greedy is not None and law.k >= 2:
            # X_1 is the top token g0 (deterministic): keep it w.p. p(g0); the residual is p off g0,
            # which hits G \ {g0} surely and the random draft w.p. q~(y): p(G) + sum_{y not in G} p q~.
            top, q_rest = greedy
            return float(p[top].sum() + p @ q_rest), {}
        if greedy is not None:
            return float(np.minimum(p, law.first_draft_marginal()).sum()), {}
        if law.independent_qs is None:
            return None
        qs = list(law.independent_qs)
        q1 = qs[0]
        if law.iid_q is not None:
            miss = (1.0 - q1) ** (law.k - 1)
        else:
            miss = np.prod([1.0 - qj for qj in qs[1:]], axis=0) if len(qs) > 1 else np.ones_like(p)
        return float(np.minimum(p, q1).sum() + np.maximum(p - q1, 0.0) @ (1.0 - miss)), {}


naive = NaiveVerifier()
