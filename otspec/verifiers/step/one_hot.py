r"""One-hot treatment of a deterministic draft (vLLM's rule for argmax drafts; EAGLE top-1 / top-k).

An argmax (greedy) drafter proposes :math:`x = \arg\max q` with certainty, so its draft law is the
point mass :math:`\delta_x`, not :math:`q`. Speculative sampling against that point mass accepts
:math:`x` with probability :math:`\min(1, p(x)/1) = p(x)` and otherwise draws from the residual
:math:`\mathrm{norm}((p - \delta_x)_+)`, which is :math:`p` restricted to :math:`y \ne x`:

.. math:: \pi(y \mid x) = p(x)\,1\{y = x\} + (1 - p(x))\,\frac{p(y)\,1\{y \ne x\}}{1 - p(x)} = p(y).

For a tuple of :math:`k` tokens with distinct set :math:`S = \{s_1, \dots, s_m\}` (EAGLE's top-k
with :math:`q = 1`) the rounds continue: accept :math:`s_j` with probability
:math:`p(s_j) / (1 - p(s_1) - \dots - p(s_{j-1}))`, else draw from :math:`p` restricted to
:math:`\Omega \setminus S`. Given *any* drafted tuple the output is exactly :math:`p`, so the rule
is lossless for every draft law, and its acceptance is :math:`\mathbb{E}_Q[p(S)]`:

* on a deterministic draft (:func:`is_deterministic`) it is :math:`p(S)` (:math:`p(\arg\max q)` for
  one argmax draft), the optimum :math:`\alpha^*(p, \delta_S) = p(S)` for that law (MATH §16: a
  lossless rule outputs a draft with probability at most :math:`p(S)`);
* on sampled drafts it is :math:`\sum_y p(y) q(y)` for one draft, the same law and acceptance as
  ``exact_match`` (one coin on :math:`p(x)` instead of a draw compared with :math:`x`) and far
  below the speculative-sampling optimum :math:`1 - d_{TV}(p, q)`.

Using the draft model's :math:`q` in the ratio :math:`\min(1, p/q)` for an argmax draft is the
pitfall this rule avoids: the drafted token was not sampled from :math:`q`, and that ratio with the
residual :math:`\mathrm{norm}((p - q)_+)` loses losslessness.
"""

from __future__ import annotations

import numpy as np

from otspec.laws import DraftLaw
from otspec.verifiers.base import Verifier
from otspec.verifiers.schedule import AcceptSchedule, accept_ratio, residual_rows
from otspec.verifiers.tuples import distinct_mask, membership_mask

__all__ = ["OneHotVerifier", "one_hot", "is_deterministic"]


def is_deterministic(law: DraftLaw) -> bool:
    """Whether ``law`` proposes one fixed tuple with certainty (asks the law for its tuple count).

    Parameters
    ----------
    law : DraftLaw
        Any draft law.

    Returns
    -------
    bool
        True when the law has exactly one draft tuple of positive probability.

    Examples
    --------
    >>> import otspec
    >>> is_deterministic(otspec.iid([0.0, 1.0, 0.0], 1)), is_deterministic(otspec.iid([0.5, 0.5], 1))
    (True, False)
    """
    return law.num_tuples() == 1


class OneHotVerifier(Verifier):
    r"""Speculative sampling against the point mass of the drafted tokens (argmax / top-k drafts;
    lossless for every law, optimal on deterministic ones).

    Examples
    --------
    >>> import otspec
    >>> from otspec.verifiers import one_hot
    >>> law = otspec.explicit([[1]], [1.0], vocab_size=3)      # the argmax draft x = 1
    >>> one_hot.acceptance([0.2, 0.5, 0.3], law).value          # p(x)
    0.5
    """

    name = "one_hot"
    rule = "the one-hot rule applies to every draft law (it is optimal on deterministic drafts)"
    reference = "vLLM's one-hot treatment of argmax drafts; EAGLE top-k with q = 1; MATH §16"

    def applies_to(self, law: DraftLaw) -> bool:
        return True

    def _schedule(self, p, law, tuples):
        first = distinct_mask(tuples)  # a repeated token gets acceptance 0 (its mass is already offered)
        mass = np.where(first, p[tuples], 0.0)
        before = np.cumsum(mass, axis=1) - mass  # p of the distinct tokens offered before round j
        accept = np.where(first, accept_ratio(mass, np.maximum(1.0 - before, 0.0)), 0.0)
        rest = np.where(membership_mask(tuples, law.V), 0.0, p[None, :])  # p off each drafted set
        residual, _ = residual_rows(rest, np.zeros_like(rest))
        # a row whose drafted set carries all of p never reaches its residual (residual_rows keeps 0 there)
        residual = np.where(residual.sum(axis=1, keepdims=True) > 0.0, residual, p[None, :])
        return AcceptSchedule(tokens=tuples, accept=accept, residual=residual)

    def _tuple_acceptance(self, p, law, tuples):
        return np.sum(np.where(distinct_mask(tuples), p[tuples], 0.0), axis=1)

    def _closed_form(self, p, law):
        hit = law.inclusion_probabilities()  # P(y among the drafts)
        if hit is not None:
            return float(p @ hit), {"deterministic": False}
        if is_deterministic(law):
            tuples, _ = law.enumerate()
            return float(self._tuple_acceptance(p, law, tuples)[0]), {"deterministic": True}
        return None


one_hot = OneHotVerifier()
