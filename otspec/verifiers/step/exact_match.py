r"""Strict exact match (engines' "strict" rule; mlx-lm, vLLM's newer runner, several MTP stacks).

Draw :math:`Y \sim p` with fresh randomness and accept the draft iff :math:`Y` equals it; with
:math:`k` drafts, accept iff :math:`Y` is among them. The output is always :math:`Y \sim p`, so the
rule is lossless for every draft law, and its acceptance is

.. math:: a = \sum_y p(y)\, P(y \in \{X_1, \dots, X_k\}) = \mathbb{E}_Q\big[p(\{X_1, \dots, X_k\})\big],
          \qquad a = \sum_y p(y) q(y) \text{ for one draft},

which is :math:`\sum_y p(y)^2` when :math:`q = p`, far below the optimum 1 of speculative sampling:
the collapse users see at temperature :math:`> 0` (:doc:`engine_rules`). On a *deterministic* draft
set :math:`S` (EAGLE's top-k with :math:`q = 1`) the same rule accepts :math:`p(S)`, the most any
lossless rule can (MATH §16).

As a single-step kernel the rule coincides with ``nss`` (ignore the drafts and sample p); it is its
own rule because that is what engines run and name, in chains too: position by position, draw
:math:`Y_i \sim p(\cdot \mid x^{i-1})`, continue while :math:`Y_i = x_i`, emit the first mismatch.
"""

from __future__ import annotations

from otspec.verifiers.step.nss import NSSVerifier

__all__ = ["ExactMatchVerifier", "exact_match"]


class ExactMatchVerifier(NSSVerifier):
    r"""Strict exact match: :math:`Y \sim p`, accepted iff it is one of the drafts (any law).

    The single-step rule is ``nss``'s (same kernel, acceptance and sampler, inherited), under the
    name engines give it; a law with one deterministic tuple and no inclusion closed form gets
    :math:`p(S)` of that tuple's set.

    Examples
    --------
    >>> import otspec
    >>> from otspec.verifiers import exact_match
    >>> exact_match.acceptance([0.5, 0.5], otspec.iid([0.5, 0.5], 1)).value   # sum p^2 when q = p
    0.5
    """

    name = "exact_match"
    rule = "strict exact match applies to every draft law"
    reference = "engines' strict rule (vLLM, mlx-lm); MATH §16 for its optimality on deterministic drafts"

    def _closed_form(self, p, law):
        closed = super()._closed_form(p, law)
        if closed is None and law.num_tuples() == 1:
            tuples, _ = law.enumerate()  # one deterministic tuple: p of its set
            return float(self._tuple_acceptance(p, law, tuples)[0]), {}
        return closed


exact_match = ExactMatchVerifier()
