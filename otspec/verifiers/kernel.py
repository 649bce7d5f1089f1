r"""Result types of the single-step verifiers: the exact kernel and the acceptance estimate."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from otspec._tolerances import MC_CONFIDENCE_Z
from otspec.verifiers.tuples import membership_mask

__all__ = ["VerifierKernel", "AcceptanceEstimate"]


@dataclass(frozen=True, eq=False)
class VerifierKernel:
    r"""The exact transport plan of a verifier on an enumerable draft law.

    Attributes
    ----------
    tuples : ndarray of int64, shape (M, k)
        Every ordered draft tuple of positive probability.
    weights : ndarray, shape (M,)
        :math:`Q(\bar x_m)`.
    pi : ndarray, shape (M, V)
        ``pi[m]`` is the output law :math:`\pi(\cdot \mid \bar x_m)` (a distribution).
    verifier : str
        Name of the verifier that produced it.

    Examples
    --------
    >>> import numpy as np, otspec
    >>> from otspec.verifiers import rrs
    >>> K = rrs.kernel(np.array([0.5, 0.5]), otspec.iid([0.75, 0.25], 1))
    >>> K.output_law().round(12).tolist(), round(K.acceptance(), 12)
    ([0.5, 0.5], 0.75)
    """

    tuples: np.ndarray
    weights: np.ndarray
    pi: np.ndarray
    verifier: str = ""

    @property
    def V(self) -> int:
        """Vocabulary size (columns of ``pi``)."""
        return int(self.pi.shape[1])

    def output_law(self) -> np.ndarray:
        r""":math:`\sum_m Q(\bar x_m)\, \pi(\cdot \mid \bar x_m)`, shape ``(V,)`` (equals p for a lossless verifier).

        Returns
        -------
        ndarray, shape (V,)
            The law of the verifier's output token when drafts follow the law.
        """
        return self.weights @ self.pi

    def per_tuple_acceptance(self) -> np.ndarray:
        r""":math:`\sum_{y \in \mathrm{set}(\bar x_m)} \pi(y \mid \bar x_m)` for every tuple, shape ``(M,)``.

        Returns
        -------
        ndarray, shape (M,)
            Probability that the output is one of the drafts, given tuple ``m``.
        """
        return np.sum(np.where(membership_mask(self.tuples, self.V), self.pi, 0.0), axis=1)

    def acceptance(self) -> float:
        r"""Membership acceptance :math:`\sum_m Q(\bar x_m) \sum_{y \in \bar x_m} \pi(y \mid \bar x_m)`.

        Returns
        -------
        float
            :math:`P(Y \in \{X_1..X_k\})`, exact, in ``[0, 1]``.
        """
        return float(self.weights @ self.per_tuple_acceptance())


@dataclass(frozen=True, eq=False)
class AcceptanceEstimate:
    r"""Acceptance probability :math:`P(Y \in \{X_1..X_k\})` of a verifier, and how it was obtained.

    Attributes
    ----------
    value : float
        The acceptance (exact for ``how`` in ``{"closed_form", "kernel"}``, an estimate otherwise).
    how : str
        ``"closed_form"`` (a formula, any V), ``"kernel"`` (exact enumeration of the draft law) or
        ``"monte_carlo"`` (mean of the exact conditional acceptance over sampled draft tuples).
    ci_low, ci_high : float
        99% confidence interval for Monte Carlo; equal to ``value`` for exact answers.
    n_samples : int
        Number of sampled draft tuples (0 for exact answers).
    extras : mapping
        Verifier-specific quantities (e.g. K-SEQ's ``rho_star`` and ``phase1``).
    """

    value: float
    how: str
    ci_low: float
    ci_high: float
    n_samples: int = 0
    extras: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_samples(cls, values: np.ndarray, estimator: str) -> AcceptanceEstimate:
        """The Monte Carlo estimate from per-sample unbiased values: their mean and the 99% normal
        interval (clipped to ``[0, 1]``).

        Parameters
        ----------
        values : ndarray, shape (n,)
            Unbiased estimates of the acceptance, one per sample (``n >= 2``).
        estimator : str
            What each value is, for ``extras["estimator"]``.

        Returns
        -------
        AcceptanceEstimate
            ``how="monte_carlo"``, ``n_samples = n``.
        """
        n = values.size
        mean = float(values.mean())
        half = MC_CONFIDENCE_Z * float(values.std(ddof=1)) / math.sqrt(n)
        return cls(mean, "monte_carlo", max(0.0, mean - half), min(1.0, mean + half), n, {"confidence": 0.99, "estimator": estimator})

    @property
    def exact(self) -> bool:
        """True for a closed form or a kernel (no sampling error), False for Monte Carlo."""
        return self.how in ("closed_form", "kernel")

    def __repr__(self) -> str:
        ci = "" if self.exact else f", ci=[{self.ci_low:.6g}, {self.ci_high:.6g}], n={self.n_samples}"
        return f"AcceptanceEstimate(value={self.value:.12g}, how={self.how!r}{ci})"
