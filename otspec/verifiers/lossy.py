r"""What a lossy single-step rule costs: its output law, its distance to the target, its efficiency.

A lossy rule outputs :math:`Y \sim P \ne p`. Its cost per position is :math:`d_{TV}(P, p)` (and
:math:`\mathrm{KL}(P \,\|\, p)`); its gain is the acceptance above the lossless optimum
:math:`\alpha^*(p, Q)`. The exact frontier (:doc:`engine_rules`, :func:`otspec.bounds.lossy.lossy_frontier`)
says no rule with :math:`d_{TV}(P, p) \le t` accepts more than :math:`\min(1, \alpha^* + t)`, so the
**efficiency**

.. math:: \eta = \frac{a - \alpha^*(p, Q)}{d_{TV}(P, p)} \le 1

measures how much acceptance a rule buys per unit of distortion: 1 on the frontier (the
``lossy_optimal`` rule), below 1 for a dominated rule, negative when the rule distorts the output and
still accepts less than the lossless optimum.

:class:`LossyVerifier` is the base class of the lossy rules of :mod:`otspec.verifiers.step`: it adds
:meth:`~LossyVerifier.output_law`, :meth:`~LossyVerifier.tv_to_target` and
:meth:`~LossyVerifier.kl_to_target` (closed form where the rule has one, else from the exact kernel).
:func:`efficiency` works on any verifier (lossy or not); :func:`exact_tv_or_none` is the distance where it
costs no more than the acceptance (the TV columns of ``otspec bound --verifiers`` and ``otspec corpus``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from otspec._docs import fill_doc
from otspec._tolerances import FLOAT64_ATOL, KERNEL_AUTO_MAX_ENTRIES
from otspec.bounds.multidraft import optimal_acceptance
from otspec.errors import InvalidOptionError, ProblemTooLargeError, UnsupportedMethodError
from otspec.laws import DraftLaw
from otspec.verifiers.base import Verifier

__all__ = ["LossyVerifier", "efficiency", "exact_tv_or_none", "tv_distance", "kl_divergence", "as_option_in_range"]


def as_option_in_range(x: Any, name: str, low: float, high: float, *, why: str = "") -> float:
    """``x`` as a finite float in ``[low, high]``, or :class:`~otspec.errors.InvalidOptionError`.

    Parameters
    ----------
    x : float
        The value given.
    name : str
        The option's name, for the message.
    low, high : float
        The closed interval allowed (``high`` may be ``inf``: any finite value above ``low``).
    why : str
        What the option means, for the message.

    Returns
    -------
    float

    Raises
    ------
    InvalidOptionError
        If ``x`` is not a finite real number in ``[low, high]``.

    Examples
    --------
    >>> as_option_in_range(0.1, "eps", 0.0, 1.0)
    0.1
    """
    try:
        v = float(x)
    except (TypeError, ValueError):
        v = math.nan
    if not math.isfinite(v) or not (low <= v <= high) or isinstance(x, bool):
        raise InvalidOptionError(
            f"{name} must be a number in [{low:g}, {high:g}] (got {x!r}){'; ' + why if why else ''}; pass a value in that range"
        )
    return v


def tv_distance(a: np.ndarray, b: np.ndarray) -> float:
    r""":math:`d_{TV}(a, b) = \tfrac12 \sum_y |a(y) - b(y)|`.

    Parameters
    ----------
    a, b : ndarray, shape (V,)
        Two distributions.

    Returns
    -------
    float

    Examples
    --------
    >>> tv_distance(np.array([0.5, 0.5]), np.array([1.0, 0.0]))
    0.5
    """
    return float(0.5 * np.abs(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)).sum())


def kl_divergence(a: np.ndarray, b: np.ndarray) -> float:
    r""":math:`\mathrm{KL}(a \,\|\, b) = \sum_y a(y) \log(a(y)/b(y))` in nats (``inf`` when ``a`` puts
    mass where ``b`` has none; :math:`0 \log 0 = 0`).

    Parameters
    ----------
    a, b : ndarray, shape (V,)
        Two distributions.

    Returns
    -------
    float

    Examples
    --------
    >>> round(kl_divergence(np.array([0.5, 0.5]), np.array([0.25, 0.75])), 6)
    0.143841
    """
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    on = a > 0.0
    if np.any(b[on] <= 0.0):
        return math.inf
    return float(max(0.0, np.sum(a[on] * np.log(a[on] / b[on]))))


class LossyVerifier(Verifier):
    r"""Base class of the lossy single-step rules: the contract of :class:`~otspec.verifiers.base.Verifier`
    plus the exact output law and its distance to the target.

    Subclasses may override ``_output_law(p, law)`` with a closed form (any V); the default sums the
    exact kernel, :math:`P = \sum_{\bar x} Q(\bar x)\, \pi(\cdot \mid \bar x)`.
    """

    lossless = False

    def _output_law(self, p: np.ndarray, law: DraftLaw) -> np.ndarray | None:
        return None

    @fill_doc
    def output_law(self, p: Any, law: DraftLaw) -> np.ndarray:
        r"""The exact law :math:`P` of the output token when the drafts follow ``law``.

        Parameters
        ----------
        {p_law_args}

        Returns
        -------
        ndarray, shape (V,)
            :math:`P(y) = \sum_{\bar x} Q(\bar x)\, \pi(y \mid \bar x)` (closed form when the rule
            has one, else from :meth:`kernel`).

        Raises
        ------
        {p_law_raises}
        UnsupportedMethodError
            If the rule does not apply to ``law``.
        ProblemTooLargeError
            If there is no closed form and the law is too large to enumerate.
        """
        p = self._check(p, law)
        self._prepare(p, law)
        out = self._output_law(p, law)
        if out is None:
            out = self.kernel(p, law).output_law()
        return np.asarray(out, dtype=np.float64)

    @fill_doc
    def tv_to_target(self, p: Any, law: DraftLaw) -> float:
        r""":math:`d_{TV}(P, p)`, the total-variation distance of the output law to the target (exact).

        Parameters
        ----------
        {p_law_args}

        Returns
        -------
        float

        Raises
        ------
        {p_law_raises}
        UnsupportedMethodError
            If the rule does not apply to ``law``.
        """
        return tv_distance(self.output_law(p, law), self._check(p, law))

    @fill_doc
    def kl_to_target(self, p: Any, law: DraftLaw) -> float:
        r""":math:`\mathrm{KL}(P \,\|\, p)` in nats (``inf`` when the output can be a token p never emits).

        Parameters
        ----------
        {p_law_args}

        Returns
        -------
        float

        Raises
        ------
        {p_law_raises}
        UnsupportedMethodError
            If the rule does not apply to ``law``.
        """
        return kl_divergence(self.output_law(p, law), self._check(p, law))


@fill_doc
def efficiency(verifier: Verifier, p: Any, law: DraftLaw) -> float:
    r"""Acceptance bought per unit of distortion, :math:`(a - \alpha^*(p, Q)) / d_{TV}(P, p)`.

    At most 1 for every rule (MATH §16: :math:`a \le \alpha^*(P, Q) \le \alpha^*(p, Q) + d_{TV}(P, p)`);
    exactly 1 for ``lossy_optimal`` below saturation. ``nan`` when the rule is lossless on this
    instance (:math:`d_{TV} \le` :data:`~otspec._tolerances.FLOAT64_ATOL`: nothing bought, nothing paid).

    Parameters
    ----------
    verifier : Verifier
        Any single-step verifier (its exact output law comes from ``output_law`` when it has one,
        else from its kernel).
    {p_law_args}

    Returns
    -------
    float
        The efficiency, ``<= 1``, or ``nan``.

    Raises
    ------
    {p_law_raises}
    UnsupportedMethodError
        If the verifier does not apply to ``law``.

    Examples
    --------
    >>> import otspec
    >>> from otspec.verifiers.step.fuzzy import FuzzyVerifier
    >>> p, law = [0.5, 0.5], otspec.iid([0.6, 0.4], 1)      # JS(p, q) ~ 0.005 <= 0.1: accept all
    >>> round(efficiency(FuzzyVerifier(threshold=0.1), p, law), 12)   # (1 - 0.9) / 0.1
    1.0
    """
    p = verifier.check_inputs(p, law)
    P = verifier.output_law(p, law) if hasattr(verifier, "output_law") else verifier.kernel(p, law).output_law()
    tv = tv_distance(P, p)
    if tv <= FLOAT64_ATOL:  # lossless up to rounding: a ratio of rounding errors means nothing
        return math.nan
    a = verifier.acceptance(p, law).value
    return float((a - optimal_acceptance(p, law).value) / tv)


def exact_tv_or_none(verifier: Verifier, p: Any, law: DraftLaw) -> float | None:
    r""":math:`d_{TV}(P, p)` of a verifier's output law when it is exact and cheap, else ``None``.

    Cheap means: the rule has a closed-form output law (``LossyVerifier._output_law``, any V), or
    its kernel has at most :data:`~otspec._tolerances.KERNEL_AUTO_MAX_ENTRIES` entries
    (:math:`|\text{tuples}| \cdot V`, the largest kernel ``acceptance`` builds itself). Larger
    instances without a closed form would enumerate a kernel no other column needs: ``None``.

    Parameters
    ----------
    verifier : Verifier
        Any single-step verifier (lossless ones give 0 up to rounding).
    p : array_like, shape (V,)
        Target distribution.
    law : DraftLaw
        The draft law.

    Returns
    -------
    float or None
        The exact TV distance, or ``None`` when it is not computable within that size.

    Raises
    ------
    OtspecInputError
        If ``p`` or ``law`` is invalid (:meth:`~otspec.verifiers.base.Verifier.check_inputs`).
    UnsupportedMethodError
        If the verifier does not apply to ``law``.

    Examples
    --------
    >>> import otspec
    >>> from otspec.verifiers import typical
    >>> exact_tv_or_none(typical, [0.6, 0.3, 0.1], otspec.iid([0.2, 0.2, 0.6], 1))   # P = q
    0.5
    """
    p = verifier.check_inputs(p, law)
    try:
        if law.num_tuples() * law.V > KERNEL_AUTO_MAX_ENTRIES:
            if not isinstance(verifier, LossyVerifier):
                return None
            verifier._prepare(p, law)
            out = verifier._output_law(p, law)
            return None if out is None else tv_distance(out, p)
        if isinstance(verifier, LossyVerifier):
            return verifier.tv_to_target(p, law)
        return tv_distance(verifier.kernel(p, law).output_law(), p)
    except (ProblemTooLargeError, UnsupportedMethodError):  # no exact kernel for this instance
        return None
