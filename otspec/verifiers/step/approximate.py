r"""A lossy verifier in the spirit of SPRINTER (Zhong, Teku, Tandon 2025; :doc:`verifiers`, approximate).

One draft :math:`X \sim q`. A cheap predicate passes it with probability :math:`a(X)` and a passed
token is kept without consulting the target; a flagged token goes through the exact rule
(keep w.p. :math:`\min(1, p/q)`, else draw from :math:`\mathrm{norm}((p-q)_+)`). The output law is

.. math:: P(x) = q(x)a(x) + q(x)(1-a(x))\min\big(1, \tfrac{p(x)}{q(x)}\big) + R\,\mathrm{norm}((p-q)_+)(x),
          \qquad R = \sum_y (1-a(y))(q(y)-p(y))_+,

and its distance to the target is exactly

.. math:: d_{TV}(P, p) = \sum_x a(x)\,(q(x)-p(x))_+ .

The predicate ``a = 1{p >= q}`` (the label SPRINTER's classifier is trained on) gives TV 0.

Deviation from SPRINTER: the paper chains up to 20 passed tokens and checks only the last one with
the target; this is the single-token analysis of :doc:`verifiers`, approximate (one draft, k = 1), which is what a
single-step verifier can express.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from otspec._docs import fill_doc
from otspec.errors import InvalidDistributionError, ShapeMismatchError
from otspec.laws import DraftLaw
from otspec.verifiers.base import Verifier
from otspec.verifiers.schedule import AcceptSchedule, accept_ratio, residual

__all__ = ["ApproximateVerifier", "approximate", "exact_rule_predicate"]


def exact_rule_predicate(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """The pass probability ``a = 1{p >= q}``: pass exactly the tokens the exact rule always keeps.

    With it the approximate rule is lossless (:math:`d_{TV}(P, p) = \\sum_x a(x)(q(x)-p(x))_+ = 0`).

    Parameters
    ----------
    p, q : ndarray, shape (V,)
        Target and draft distributions.

    Returns
    -------
    ndarray, shape (V,)
        1.0 where ``p >= q``, else 0.0.

    Examples
    --------
    >>> exact_rule_predicate(np.array([0.5, 0.5]), np.array([0.25, 0.75])).tolist()
    [1.0, 0.0]
    """
    return (p >= q).astype(np.float64)


class ApproximateVerifier(Verifier):
    r"""Lossy single-draft verifier: tokens passed by a predicate are kept unchecked.

    Parameters
    ----------
    pass_prob : array_like of shape (V,), callable, or None
        :math:`a(x) \in [0, 1]`, the probability that the predicate passes drafted token x. A
        callable is called as ``pass_prob(p, q)`` and must return a ``(V,)`` array. ``None`` means
        :func:`exact_rule_predicate` (TV 0).
    name : str
        Name shown in tables.

    Raises
    ------
    ShapeMismatchError
        If an array ``pass_prob`` is not one-dimensional.
    InvalidDistributionError
        If an entry of ``pass_prob`` is outside ``[0, 1]`` or not finite.

    Examples
    --------
    >>> import otspec
    >>> from otspec.verifiers.step.approximate import ApproximateVerifier
    >>> v = ApproximateVerifier([1.0, 1.0])        # pass everything: output law = q
    >>> round(v.tv_to_target([0.5, 0.5], otspec.iid([0.75, 0.25], 1)), 12)
    0.25
    """

    lossless = False
    rule = "the approximate verifier handles exactly one draft (k = 1)"
    fix = "use a law with k = 1"
    reference = "SPRINTER (Zhong, Teku, Tandon 2025), single-token analysis in docs/verifiers.rst"

    def __init__(self, pass_prob: Any = None, *, name: str = "approximate"):
        if pass_prob is not None and not callable(pass_prob):
            arr = np.array(pass_prob, dtype=np.float64)
            self._check_pass(arr, None)
            arr.setflags(write=False)
            pass_prob = arr
        self.pass_prob = pass_prob
        self.name = str(name)

    @staticmethod
    def _check_pass(a: np.ndarray, V: int | None) -> None:
        if a.ndim != 1 or (V is not None and a.shape[0] != V):
            raise ShapeMismatchError(
                f"pass_prob must have shape ({V if V is not None else 'V'},) (got {a.shape}); give one pass probability per token"
            )
        if not np.all(np.isfinite(a)) or np.any(a < 0) or np.any(a > 1):
            bad = int(np.flatnonzero(~(np.isfinite(a) & (a >= 0) & (a <= 1)))[0])
            raise InvalidDistributionError(f"pass_prob must lie in [0, 1] (got {a[bad]} at index {bad}); pass probabilities, not logits")

    def applies_to(self, law: DraftLaw) -> bool:
        return law.k == 1

    def pass_probabilities(self, p: np.ndarray, q: np.ndarray) -> np.ndarray:
        """The ``(V,)`` array :math:`a` for target p and draft q (validated).

        Parameters
        ----------
        p, q : ndarray, shape (V,)
            Target and (first-draft) draft distributions.

        Returns
        -------
        ndarray, shape (V,)
            Pass probabilities in ``[0, 1]`` (:func:`exact_rule_predicate` when ``pass_prob`` is None).

        Raises
        ------
        ShapeMismatchError, InvalidDistributionError
            If a callable ``pass_prob`` returns the wrong shape or values outside ``[0, 1]``.
        """
        if self.pass_prob is None:
            return exact_rule_predicate(p, q)
        a = np.asarray(self.pass_prob(p, q) if callable(self.pass_prob) else self.pass_prob, dtype=np.float64)
        self._check_pass(a, p.shape[0])
        return a

    def _schedule(self, p, law, tuples):
        q = law.first_draft_marginal()
        a = self.pass_probabilities(p, q)
        x = tuples[:, :1]
        res, _ = residual(p, q)
        # round 1: the predicate's coin; round 2: the exact rule's coin, on the same token
        return AcceptSchedule(
            tokens=np.concatenate([x, x], axis=1), accept=np.concatenate([a[x], accept_ratio(p[x], q[x])], axis=1), residual=res
        )

    def _closed_form(self, p, law):
        q = law.first_draft_marginal()
        a = self.pass_probabilities(p, q)
        value = float(q @ (a + (1.0 - a) * accept_ratio(p, q)))
        return value, {"tv_to_target": float(a @ np.maximum(q - p, 0.0))}

    @fill_doc
    def output_law(self, p: Any, law: DraftLaw) -> np.ndarray:
        r"""The exact output law :math:`P` (closed form, any V).

        .. math:: P(x) = q(x)a(x) + q(x)(1-a(x))\min\big(1, \tfrac{p(x)}{q(x)}\big) + R\,\mathrm{norm}((p-q)_+)(x).

        Parameters
        ----------
        p : array_like, shape (V,)
            Target distribution.
        law : DraftLaw
            A law with ``k = 1``.

        Returns
        -------
        ndarray, shape (V,)
            The law of the output token (equal to ``p`` only when :meth:`tv_to_target` is 0).

        Raises
        ------
        {k1_raises}
        """
        p = self._check(p, law)
        q = law.first_draft_marginal()
        a = self.pass_probabilities(p, q)
        res, _ = residual(p, q)
        R = float((1.0 - a) @ np.maximum(q - p, 0.0))
        return q * a + q * (1.0 - a) * accept_ratio(p, q) + R * res

    @fill_doc
    def tv_to_target(self, p: Any, law: DraftLaw) -> float:
        r""":math:`d_{TV}(P, p) = \sum_x a(x)(q(x)-p(x))_+` (exact, :doc:`verifiers`, approximate).

        Parameters
        ----------
        p : array_like, shape (V,)
            Target distribution.
        law : DraftLaw
            A law with ``k = 1``.

        Returns
        -------
        float
            The total-variation distance between the output law and the target.

        Raises
        ------
        {k1_raises}
        """
        p = self._check(p, law)
        q = law.first_draft_marginal()
        return float(self.pass_probabilities(p, q) @ np.maximum(q - p, 0.0))


#: The registry's default instance: the exact-rule predicate a = 1{p >= q} (TV 0).
approximate = ApproximateVerifier(None, name="approximate")
