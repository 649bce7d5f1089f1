r"""A fuzzy rule (in the spirit of Fuzzy Speculative Decoding, Holsman et al. 2025): lossy.

Per position, compare the target and the draft distribution by a divergence :math:`D(p, q)`. When
:math:`D(p, q) \le T` (the distributions are "close enough") the drafted token is accepted without
a test; otherwise the lossless single-draft rule runs (keep :math:`X` with probability
:math:`\min(1, p(X)/q(X))`, else draw from :math:`\mathrm{norm}((p - q)_+)`). The divergence is the
Jensen-Shannon divergence in nats (default; bounded by :math:`\log 2`, symmetric, finite when the
supports differ) or the total-variation distance (``divergence="tv"``):

.. math:: \mathrm{JS}(p, q) = \tfrac12 \mathrm{KL}(p \,\|\, m) + \tfrac12 \mathrm{KL}(q \,\|\, m),
          \quad m = \tfrac12 (p + q).

The rule is all-or-nothing per position, so its exact output law is :math:`P = q` when
:math:`D(p, q) \le T` and :math:`P = p` otherwise; hence

.. math:: d_{TV}(P, p) = d_{TV}(p, q)\,1\{D \le T\}, \qquad a = 1\{D \le T\} + (1 - d_{TV}(p, q))\,1\{D > T\},

and its efficiency is exactly 1 where it fires (it trades :math:`d_{TV}(p, q)` of distortion for the
same amount of acceptance: on the frontier for one draft, at one point of it). ``T = 0`` gives the
lossless rule. One draft (:math:`k = 1`); :math:`q` is the law's draft marginal.

Deviation from the paper: FSD thresholds a divergence of the *token-level* rule inside its own
decoding loop with its own calibration; this is the single-position rule with the threshold as a
parameter (the default :math:`T = 0.1` nats is an illustration, not a published setting).
"""

from __future__ import annotations

import numpy as np

from otspec.errors import InvalidOptionError
from otspec.laws import DraftLaw
from otspec.verifiers.lossy import LossyVerifier, as_option_in_range, kl_divergence
from otspec.verifiers.schedule import AcceptSchedule, accept_ratio, residual

__all__ = ["FuzzyVerifier", "fuzzy", "js_divergence", "DIVERGENCES"]

#: The divergences a fuzzy rule can threshold.
DIVERGENCES = ("js", "tv")


def js_divergence(p: np.ndarray, q: np.ndarray) -> float:
    r"""Jensen-Shannon divergence in nats, :math:`\in [0, \log 2]`.

    Parameters
    ----------
    p, q : ndarray, shape (V,)
        Two distributions.

    Returns
    -------
    float

    Examples
    --------
    >>> round(js_divergence(np.array([1.0, 0.0]), np.array([0.0, 1.0])), 6)   # log 2: disjoint supports
    0.693147
    """
    m = 0.5 * (p + q)
    return 0.5 * kl_divergence(p, m) + 0.5 * kl_divergence(q, m)


class FuzzyVerifier(LossyVerifier):
    r"""Accept the draft outright when :math:`D(p, q) \le T`, else run speculative sampling (k = 1).

    Parameters
    ----------
    threshold : float, default 0.1
        :math:`T \ge 0` (nats for JS, a probability for TV).
    divergence : {"js", "tv"}
        The divergence :math:`D`.
    name : str
        Name shown in tables.

    Raises
    ------
    InvalidOptionError
        If ``threshold`` is negative or not finite, or ``divergence`` is unknown.

    Examples
    --------
    >>> import otspec
    >>> from otspec.verifiers import fuzzy
    >>> law = otspec.iid([0.6, 0.4], 1)
    >>> fuzzy.acceptance([0.5, 0.5], law).value, round(fuzzy.tv_to_target([0.5, 0.5], law), 12)
    (1.0, 0.1)
    """

    rule = "the fuzzy rule handles exactly one draft (k = 1)"
    fix = "use a law with k = 1"
    reference = "Fuzzy Speculative Decoding (Holsman et al. 2025); MATH §16 for its efficiency"

    def __init__(self, threshold: float = 0.1, *, divergence: str = "js", name: str = "fuzzy"):
        if divergence not in DIVERGENCES:
            raise InvalidOptionError(f"divergence must be one of {list(DIVERGENCES)} (got {divergence!r}); pick one of those")
        high = float(np.log(2.0)) if divergence == "js" else 1.0
        self.threshold = as_option_in_range(threshold, "threshold", 0.0, high, why=f"a {divergence.upper()} divergence")
        self.divergence = divergence
        self.name = str(name)

    def applies_to(self, law: DraftLaw) -> bool:
        return law.k == 1

    def fires(self, p: np.ndarray, q: np.ndarray) -> bool:
        """Whether the rule accepts outright at this position (:math:`D(p, q) \\le T`).

        Parameters
        ----------
        p, q : ndarray, shape (V,)
            Target and draft distributions (validated).

        Returns
        -------
        bool
        """
        d = js_divergence(p, q) if self.divergence == "js" else float(0.5 * np.abs(p - q).sum())
        return d <= self.threshold

    def _schedule(self, p, law, tuples):
        q = law.first_draft_marginal()
        x = tuples[:, :1]
        res, _ = residual(p, q)
        acc = np.ones(x.shape, dtype=np.float64) if self.fires(p, q) else accept_ratio(p[x], q[x])
        return AcceptSchedule(tokens=x, accept=acc, residual=res)

    def _closed_form(self, p, law):
        q = law.first_draft_marginal()
        tv = float(0.5 * np.abs(p - q).sum())
        fire = self.fires(p, q)
        return (1.0 if fire else 1.0 - tv), {"tv_to_target": tv if fire else 0.0, "fires": fire}

    def _output_law(self, p, law):
        q = law.first_draft_marginal()
        return q.copy() if self.fires(p, q) else p.copy()

    def __repr__(self) -> str:
        return f"<verifier {self.name!r} (lossy; {self.divergence} <= {self.threshold:g})>"


#: The registry's instance: JS divergence, threshold 0.1 nats.
fuzzy = FuzzyVerifier()
