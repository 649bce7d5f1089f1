r"""NSS: ignore the drafts and sample :math:`Y \sim p` (Miao et al.; :doc:`verifiers`, nss and naive).

Trivially lossless; acceptance is :math:`\sum_y p(y)\, P(y \in \bar X)`:
:math:`\sum_y p(y)(1-(1-q(y))^k)` for i.i.d. drafts, :math:`\sum_y p(y)(1-\prod_j(1-q_j(y)))` for a
product law, :math:`p(G) + \sum_{y \notin G} p(y)\tilde q(y)` for greedy drafts.
"""

from __future__ import annotations

import numpy as np

from otspec.laws import DraftLaw
from otspec.verifiers.base import Verifier
from otspec.verifiers.schedule import AcceptSchedule
from otspec.verifiers.tuples import distinct_mask

__all__ = ["NSSVerifier", "nss"]


class NSSVerifier(Verifier):
    r"""Baseline that ignores the drafts and outputs :math:`Y \sim p` (any law).

    Examples
    --------
    >>> import otspec
    >>> from otspec.verifiers import nss
    >>> nss.acceptance([0.5, 0.5], otspec.iid([1.0, 0.0], 3)).value
    0.5
    """

    name = "nss"
    rule = "NSS applies to every draft law"
    reference = "Miao et al. (SpecInfer) naive sampling; Thomas et al. 2026 App. B"

    def applies_to(self, law: DraftLaw) -> bool:
        return True

    def _schedule(self, p, law, tuples):
        return AcceptSchedule(tokens=tuples[:, :0], accept=np.zeros((tuples.shape[0], 0)), residual=p)

    def _tuple_acceptance(self, p, law, tuples):
        # O(k) per tuple: the probability of the drafted set under p
        return np.sum(np.where(distinct_mask(tuples), p[tuples], 0.0), axis=1)

    def _closed_form(self, p, law):
        hit = law.inclusion_probabilities()  # P(y among the drafts), the law's closed form
        if hit is None:
            return None
        return float(p @ hit), {}


nss = NSSVerifier()
