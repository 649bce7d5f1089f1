r"""Typical acceptance (Medusa, Cai et al. 2024, §3.3.1; vLLM's ``TypicalAcceptanceSampler``): lossy.

A drafted token :math:`x` is accepted when the target gives it more than an entropy-dependent
threshold,

.. math:: p(x) > \tau(p) = \min\big(\epsilon,\ \alpha\, e^{-H(p)}\big), \qquad H(p) = -\sum_y p(y)\log p(y),

with vLLM's defaults :math:`\epsilon` = ``posterior_threshold`` = 0.09 and :math:`\alpha` =
``posterior_alpha`` = 0.3. With :math:`k` drafts the output is the passing draft of largest
:math:`p` (Medusa's tie-break by likelihood; the first in draft order among equal :math:`p`). When
no draft passes, the rule **rejects** and emits a token from the target:

* ``on_reject="sample"`` (the default, as Medusa's decoding loop does): :math:`Y \sim p`;
* ``on_reject="argmax"`` (vLLM's recovered token): :math:`Y = \arg\max p` (lowest id among ties).

For one draft :math:`X \sim q` with pass set :math:`A = \{x : p(x) > \tau(p)\}` the exact output law is

.. math:: P(y) = q(y)\,1\{y \in A\} + \big(1 - q(A)\big)\, r(y),
          \qquad r = p \ \text{(sample) or}\ \delta_{\arg\max p}\ \text{(argmax)},

so :math:`d_{TV}(P, p)` and :math:`\mathrm{KL}(P \,\|\, p)` are exact at any V, and the membership
acceptance is :math:`q(A) + \sum_{x \notin A} q(x)\, r(x)`. With several drafts the kernel is exact
by enumeration.

Deviations: Medusa and vLLM compute :math:`H` as :math:`-\sum p \log(p + 10^{-5})`; we use the exact
entropy (:math:`0 \log 0 = 0`), so :math:`\tau` differs by at most a factor :math:`e^{10^{-5}/\min p}`
on tokens of tiny mass. Medusa's decoding loop also applies temperature to :math:`p` before the test:
pass the tempered :math:`p`.
"""

from __future__ import annotations

import math

import numpy as np

from otspec.errors import InvalidOptionError
from otspec.laws import DraftLaw
from otspec.sampling import sample_categorical_rows
from otspec.verifiers.lossy import LossyVerifier, as_option_in_range
from otspec.verifiers.tuples import membership_mask

__all__ = ["TypicalVerifier", "typical", "typical_threshold", "POSTERIOR_THRESHOLD", "POSTERIOR_ALPHA"]

#: vLLM's default ``posterior_threshold`` (the hard threshold epsilon).
POSTERIOR_THRESHOLD = 0.09
#: vLLM's default ``posterior_alpha`` (the entropy-scaled threshold's factor).
POSTERIOR_ALPHA = 0.3


def typical_threshold(p: np.ndarray, posterior_threshold: float = POSTERIOR_THRESHOLD, posterior_alpha: float = POSTERIOR_ALPHA) -> float:
    r"""The threshold :math:`\tau(p) = \min(\epsilon, \alpha\, e^{-H(p)})` (exact entropy, nats).

    Parameters
    ----------
    p : ndarray, shape (V,)
        Target distribution (validated).
    posterior_threshold, posterior_alpha : float
        :math:`\epsilon` and :math:`\alpha`.

    Returns
    -------
    float

    Examples
    --------
    >>> round(typical_threshold(np.array([0.5, 0.5])), 6)   # min(0.09, 0.3 * 0.5)
    0.09
    """
    on = p > 0.0
    h = float(-np.sum(p[on] * np.log(p[on])))
    return float(min(posterior_threshold, posterior_alpha * math.exp(-h)))


class TypicalVerifier(LossyVerifier):
    r"""Medusa's typical acceptance (lossy; any draft law).

    Parameters
    ----------
    posterior_threshold : float, default 0.09
        :math:`\epsilon \ge 0`, vLLM's default.
    posterior_alpha : float, default 0.3
        :math:`\alpha \ge 0`, vLLM's default.
    on_reject : {"sample", "argmax"}
        What is emitted when no draft passes: a draw from p (Medusa) or argmax p (vLLM).
    name : str
        Name shown in tables.

    Raises
    ------
    InvalidOptionError
        If a threshold is negative or not finite, or ``on_reject`` is unknown.

    Examples
    --------
    >>> import otspec
    >>> from otspec.verifiers import typical
    >>> p, law = [0.6, 0.3, 0.1], otspec.iid([0.2, 0.2, 0.6], 1)   # tau = 0.09: token 2 passes
    >>> typical.acceptance(p, law).value          # q(A) + sum_{x not in A} q(x) p(x) = 1.0
    1.0
    >>> round(typical.tv_to_target(p, law), 12)   # P = q here
    0.5
    """

    rule = "typical acceptance applies to every draft law"
    reference = "Medusa (Cai et al. 2024) §3.3.1; vLLM TypicalAcceptanceSampler (posterior_threshold 0.09, posterior_alpha 0.3)"

    def __init__(
        self,
        posterior_threshold: float = POSTERIOR_THRESHOLD,
        posterior_alpha: float = POSTERIOR_ALPHA,
        *,
        on_reject: str = "sample",
        name: str = "typical",
    ):
        self.posterior_threshold = as_option_in_range(posterior_threshold, "posterior_threshold", 0.0, 1.0, why="a probability threshold")
        self.posterior_alpha = as_option_in_range(posterior_alpha, "posterior_alpha", 0.0, math.inf, why="a factor on exp(-H(p))")
        if on_reject not in ("sample", "argmax"):
            raise InvalidOptionError(f"on_reject must be 'sample' or 'argmax' (got {on_reject!r}); pick one of those")
        self.on_reject = on_reject
        self.name = str(name)

    def applies_to(self, law: DraftLaw) -> bool:
        return True

    def _reject_law(self, p: np.ndarray) -> np.ndarray:
        if self.on_reject == "sample":
            return p
        r = np.zeros_like(p)
        r[int(np.argmax(p))] = 1.0
        return r

    def _chosen(self, p: np.ndarray, tuples: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per tuple: whether a draft passes, and the passing draft of largest p (first among ties)."""
        tau = typical_threshold(p, self.posterior_threshold, self.posterior_alpha)
        px = p[tuples]  # [n, k]
        score = np.where(px > tau, px, -1.0)
        j = np.argmax(score, axis=1)  # first maximum: draft order breaks ties
        passed = score[np.arange(tuples.shape[0]), j] >= 0.0
        return passed, tuples[np.arange(tuples.shape[0]), j]

    def _rows(self, p, law, tuples):
        passed, tok = self._chosen(p, tuples)
        pi = np.where(passed[:, None], 0.0, self._reject_law(p)[None, :])
        rows = np.flatnonzero(passed)
        pi[rows, tok[rows]] = 1.0
        return pi

    def _sample_rows(self, p, law, tuples, coin_rng, res_rng):
        passed, tok = self._chosen(p, tuples)
        if self.on_reject == "argmax":
            return np.where(passed, tok, int(np.argmax(p)))
        out = tok.copy()
        rej = np.flatnonzero(~passed)
        if rej.size:
            out[rej] = sample_categorical_rows(res_rng, np.broadcast_to(p, (rej.size, p.size)))
        return out

    def _tuple_acceptance(self, p, law, tuples):
        passed, _ = self._chosen(p, tuples)
        r = self._reject_law(p)
        on_reject = np.sum(np.where(membership_mask(tuples, law.V), r[None, :], 0.0), axis=1)
        return np.where(passed, 1.0, on_reject)

    def _closed_form(self, p, law):
        if law.k != 1:
            return None
        q = law.first_draft_marginal()
        tau = typical_threshold(p, self.posterior_threshold, self.posterior_alpha)
        a = p > tau
        value = float(q @ np.where(a, 1.0, self._reject_law(p)))
        P = self._output_law(p, law)
        return value, {"tv_to_target": float(0.5 * np.abs(P - p).sum()), "threshold": tau}

    def _output_law(self, p, law):
        if law.k != 1:
            return None
        q = law.first_draft_marginal()
        a = p > typical_threshold(p, self.posterior_threshold, self.posterior_alpha)
        return np.where(a, q, 0.0) + float(q @ ~a) * self._reject_law(p)

    def __repr__(self) -> str:
        return (
            f"<verifier {self.name!r} (lossy; posterior_threshold={self.posterior_threshold:g}, "
            f"posterior_alpha={self.posterior_alpha:g}, on_reject={self.on_reject!r})>"
        )


#: The registry's instance: vLLM's defaults, rejection emits a draw from p.
typical = TypicalVerifier()
