r"""Gumbel-max list sampling, GLS (Rowan, Phan, Khisti 2025): K drafts coupled to the target by
shared exponentials, without communication.

Copy :math:`k = 1..K` owns exponentials :math:`E_{k,j} \sim \mathrm{Exp}(1)` and drafts
:math:`X_k = \arg\min_j E_{k,j}/q_k(j)` (i.i.d. drafts, or different drafters :math:`q_k`);
the verifier outputs the token of :math:`\arg\min_{k,j} E_{k,j}/p(j)`. Since
:math:`\min_k E_{k,j}/p(j) \sim \mathrm{Exp}(K p(j))` independently over j, the output is
:math:`\sim p` (lossless), and given the shared randomness it ignores the drafters (drafter
invariance). The exact joint law of (drafts, output) is :func:`~otspec.verifiers.step.gumbel_coupling.race_joint`
(a finite sum of exponential integrals), so the kernel and the acceptance are exact at small V, K.

**List-matching lower bound.** The output matches at least when the *winning* copy drafted the
winning token; conditioning on :math:`E_{k,i}` as in the one-copy lemma,

.. math:: P(Y \in \{X_1..X_K\}) \;\ge\; \sum_k \sum_i
          \frac{p(i)\, q_k(i)}{\sum_j \max\big(p(i) q_k(j),\, p(j) q_k(i)\big) + (K-1)\, q_k(i)},

(:func:`gls_own_copy_bound`), equal to the Gumbel-max match probability at K = 1. This is the
quantity the paper's list matching lemma bounds; we derived it from the algorithm (the lemma's
exact statement was not recovered), and the tests check it exactly against the kernel.

References
----------
Rowan, Phan, Khisti, "List-level distribution coupling with applications to speculative decoding
and lossy compression" (Gumbel-max list sampling), arXiv 2506.05632 (2025).
Daliri, Musco, Suresh, arXiv 2408.07978 (2024): the K = 1 case.
"""

from __future__ import annotations

import numpy as np

from otspec._validation import as_distribution, check_same_vocab
from otspec.errors import ProblemTooLargeError
from otspec.laws import DraftLaw
from otspec.verifiers.base import Verifier
from otspec.verifiers.step.gumbel_coupling import conditional_rows, race_joint, race_sample

__all__ = ["GLSVerifier", "gls", "gls_own_copy_bound"]


def gls_own_copy_bound(p, qs) -> float:
    r""":math:`P(\text{the winning copy drafted the output})`, a lower bound on GLS acceptance.

    .. math:: \sum_k \sum_i \frac{p(i) q_k(i)}{\sum_j \max(p(i) q_k(j), p(j) q_k(i)) + (K-1) q_k(i)}

    Parameters
    ----------
    p : array_like, shape (V,)
        Target distribution.
    qs : sequence of array_like, shape (V,)
        The K copies' draft distributions.

    Returns
    -------
    float

    Raises
    ------
    InvalidDistributionError, ShapeMismatchError
        If ``p`` or a draft distribution is not a distribution, or their vocabularies differ.

    Examples
    --------
    >>> gls_own_copy_bound([0.5, 0.5], [[0.5, 0.5]])  # K = 1, p == q
    1.0
    """
    p = as_distribution(p, "p")
    K = len(qs)
    total = 0.0
    for i, q in enumerate(qs):
        q = as_distribution(q, f"qs[{i}]")
        check_same_vocab(p, q)
        both = (p > 0) & (q > 0)
        pi, qi = p[both], q[both]
        den = np.maximum(pi[:, None] * q[None, :], p[None, :] * qi[:, None]).sum(axis=1) + (K - 1) * qi
        total += float(np.sum(pi * qi / den))
    return total


class GLSVerifier(Verifier):
    r"""GLS: K >= 2 independent drafts (i.i.d. or different drafters) and shared exponentials.

    Lossless; the kernel is the exact conditional law of the race's output given the drafts
    (small V and K: :data:`~otspec.verifiers.step.gumbel_coupling.RACE_KERNEL_MAX_WORK`); k = 1 is
    :data:`~otspec.verifiers.gumbel`.

    Examples
    --------
    >>> import otspec
    >>> from otspec.verifiers import gls
    >>> round(gls.acceptance([0.5, 0.5], otspec.iid([0.5, 0.5], 2)).value, 12)
    1.0
    """

    name = "gls"
    rule = "GLS needs k >= 2 independent drafts (otspec.iid or otspec.product)"
    fix = "use gumbel for k = 1, or draw the drafts independently (otspec.iid / otspec.product)"
    reference = "Rowan, Phan, Khisti 2025 (arXiv 2506.05632)"
    # the exact conditional acceptance of one tuple costs as much as its kernel row
    monte_carlo_ok = False

    def applies_to(self, law: DraftLaw) -> bool:
        return law.k >= 2 and law.independent_qs is not None

    def _rows(self, p, law, tuples):
        qs = [np.asarray(q, dtype=np.float64) for q in law.independent_qs]
        return conditional_rows(race_joint(p, qs, tuples), p, qs, tuples)

    def _sample_rows(self, p, law, tuples, coin_rng, res_rng):
        return race_sample(p, law.independent_qs, tuples, coin_rng, res_rng)

    def _tuple_acceptance(self, p, law, tuples):
        # exact: only the outputs among the drafts are needed, P(Y in x | x) = J(x, x) / Q(x)
        qs = [np.asarray(q, dtype=np.float64) for q in law.independent_qs]
        J = race_joint(p, qs, tuples, drafted_only=True)
        return np.minimum(J.sum(axis=1) / np.prod([qs[k][tuples[:, k]] for k in range(law.k)], axis=0), 1.0)

    def _closed_form(self, p, law):
        # the exact finite sum over every draft tuple (drafted outputs only: K of V columns), where
        # that is affordable; otherwise None (then the kernel or, too large, unavailable)
        qs = [np.asarray(q, dtype=np.float64) for q in law.independent_qs]
        try:
            tuples, weights = law.enumerate()
            J = race_joint(p, qs, tuples, drafted_only=True)
        except ProblemTooLargeError:
            return None
        return float(J.sum()), {"by": "exact sum over the draft tuples of the race's drafted outputs"}


gls = GLSVerifier()
