r"""Single-draft speculative sampling (Leviathan et al. 2023; Chen et al. 2023): the maximal coupling.

Draw :math:`X \sim q`, return it with probability :math:`\min(1, p(X)/q(X))`, otherwise draw
:math:`Y \sim \mathrm{norm}((p-q)_+)`. Acceptance :math:`\sum_x \min(p, q) = 1 - d_{TV}(p, q)`, the
optimum for one draft (:doc:`math`, single-draft facts).
"""

from __future__ import annotations

import numpy as np

from otspec.laws import DraftLaw
from otspec.verifiers.base import Verifier
from otspec.verifiers.schedule import AcceptSchedule, accept_ratio, residual

__all__ = ["TokenVerifier", "token"]


class TokenVerifier(Verifier):
    r"""Single-draft speculative sampling (k = 1; any law, its draft marginal is q).

    Examples
    --------
    >>> import otspec
    >>> from otspec.verifiers import token
    >>> token.acceptance([0.5, 0.5], otspec.iid([0.75, 0.25], 1)).value
    0.75
    """

    name = "token"
    rule = "single-draft speculative sampling needs exactly k = 1 draft"
    fix = "use a multi-draft verifier (kseq, rrs, rrs_wor, greedy_optimal, khisti, ...) or a law with k = 1"
    reference = "Leviathan, Kalman, Matias 2023; Chen et al. 2023"

    def applies_to(self, law: DraftLaw) -> bool:
        return law.k == 1

    def _schedule(self, p, law, tuples):
        q = law.first_draft_marginal()
        res, _ = residual(p, q)
        return AcceptSchedule(tokens=tuples[:, :1], accept=accept_ratio(p[tuples[:, :1]], q[tuples[:, :1]]), residual=res)

    def _closed_form(self, p, law):
        return float(np.minimum(p, law.first_draft_marginal()).sum()), {}


token = TokenVerifier()
