r"""Acceptance against the optimal transport bound: no lossless verifier exceeds
:math:`\alpha^*(p, Q)` of :func:`otspec.optimal_acceptance`."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from otspec._tolerances import EXACT_ATOL
from otspec.laws import DraftLaw
from otspec.testing._docs import fill_doc
from otspec.testing._findings import VerifierAssertionError, fmt_number
from otspec.testing.adapters import as_verifier, step_verifier

__all__ = ["LP_FALLBACK_TUPLES", "AcceptanceRatio", "acceptance_ratio", "assert_within_optimum", "reference_optimum"]

#: Largest number of draft tuples for which :func:`reference_optimum` re-solves an uncertified
#: answer as an LP over the tuples (a fraction of a second at this size).
LP_FALLBACK_TUPLES = 10_000


@dataclass(frozen=True)
class AcceptanceRatio:
    r"""A verifier's acceptance next to the optimum :math:`\alpha^*(p, Q)`.

    ``ratio = acceptance / optimum`` (1 when both are 0), ``gap = optimum - acceptance``; ``how``
    says how the acceptance was obtained (``"closed_form"``, ``"kernel"`` or ``"monte_carlo"``,
    in which case ``ci_low``/``ci_high`` bound it at 99%). ``float(result)`` is the ratio.

    Attributes
    ----------
    acceptance : float
        The verifier's acceptance :math:`\alpha` (or :math:`E[\tau]` for chain verifiers).
    optimum : float
        :math:`\alpha^*(p, Q)` (or the block optimum).
    ratio : float
        ``acceptance / optimum``.
    gap : float
        ``optimum - acceptance``.
    how : str
        How ``acceptance`` was obtained.
    ci_low, ci_high : float
        99% interval of a Monte Carlo acceptance (equal to ``acceptance`` when exact).
    """

    acceptance: float
    optimum: float
    ratio: float
    gap: float
    how: str
    ci_low: float
    ci_high: float

    def __float__(self) -> float:
        return float(self.ratio)


def reference_optimum(p: np.ndarray, law: DraftLaw) -> float:
    r"""The optimum :math:`\alpha^*(p, Q)` the assertions compare with.

    Brute force over the :math:`2^V` cuts (``method="subsets"``) for product and explicit laws
    with ``V <= 12`` (exact, no solver needed); :func:`otspec.optimal_acceptance` with
    ``method="auto"`` otherwise. An answer whose certificate check failed (``status`` not
    ``"optimal"``, e.g. probabilities near 1e-308 where the closed form loses its digits) is
    replaced by the HiGHS LP over the tuples (``method="lp"``) when that one is certified.

    Parameters
    ----------
    p : ndarray, shape (V,)
        Target distribution (validated).
    law : DraftLaw
        The draft law.

    Returns
    -------
    float
        The optimal acceptance.
    """
    import otspec

    # brute force over the 2^V cuts is exact and cheap at the sizes tests use, and needs no solver
    method = "subsets" if not law.prefix_exact and law.V <= 12 else "auto"
    result = otspec.optimal_acceptance(p, law, method=method)
    if result.status != "optimal" and law.num_tuples() <= LP_FALLBACK_TUPLES:
        lp = otspec.optimal_acceptance(p, law, method="lp")
        if lp.status == "optimal":
            return float(lp.value)
    return float(result.value)


@fill_doc
def acceptance_ratio(
    verifier: Any, p: Any, law: DraftLaw, *, n_samples: int = 20_000, rng: np.random.Generator | None = None, optimum: float | None = None
) -> AcceptanceRatio:
    r"""The verifier's acceptance :math:`\alpha` divided by the optimum :math:`\alpha^*(p, Q)`.

    The acceptance is ``verifier.acceptance(p, law)`` (exact when the verifier has a closed form
    or a kernel; Monte Carlo with ``n_samples`` and ``rng`` for a sampler), the optimum
    :func:`otspec.optimal_acceptance` (brute force over the :math:`2^V` cuts for product and
    explicit laws with V <= 12), or ``optimum`` when the caller has it from another method.

    Parameters
    ----------
    {step_args}
    {acceptance_args}

    Returns
    -------
    AcceptanceRatio
        Acceptance, optimum, ratio, gap and how the acceptance was obtained.

    Raises
    ------
    UnsupportedMethodError
        If ``verifier`` is a chain verifier.

    Examples
    --------
    >>> import otspec
    >>> from otspec.verifiers import rrs
    >>> r = acceptance_ratio(rrs, [0.5, 0.5], otspec.iid([0.9, 0.1], 2))
    >>> round(r.acceptance, 6), round(r.optimum, 6), round(r.ratio, 4)
    (0.64, 0.69, 0.9275)
    """
    v, p = step_verifier(verifier, p, law)
    est = v.acceptance(p, law, n_samples=n_samples, rng=np.random.default_rng(0) if rng is None else rng)
    return ratio_from(est, reference_optimum(p, law) if optimum is None else float(optimum))


@fill_doc
def assert_within_optimum(
    verifier: Any,
    p: Any,
    law: DraftLaw,
    *,
    atol: float = EXACT_ATOL,
    at_least: float | None = None,
    n_samples: int = 20_000,
    rng: np.random.Generator | None = None,
    optimum: float | None = None,
) -> AcceptanceRatio:
    r"""Assert :math:`\alpha \le \alpha^*(p, Q)` (no lossless verifier beats the optimum), and
    optionally :math:`\alpha \ge \text{at\_least} \cdot \alpha^*`.

    Exact acceptances are compared with ``atol`` slack; a Monte Carlo acceptance fails only when
    its whole 99% interval is on the wrong side. ``at_least=1`` asserts that the verifier attains
    the optimum; ``at_least=1 - 1/e`` is the guarantee of SpecTr's K-SEQ for i.i.d. drafts.
    ``optimum`` replaces the computed optimum (e.g. one obtained from an independent LP).

    Parameters
    ----------
    {step_args}
    atol : float
        Slack on exact comparisons.
    at_least : float, optional
        Lower bound on ``acceptance / optimum`` to assert as well.
    {acceptance_args}

    Returns
    -------
    AcceptanceRatio
        The comparison that passed.

    Raises
    ------
    VerifierAssertionError
        If the acceptance exceeds the optimum, or falls below ``at_least`` times it.

    Examples
    --------
    >>> import otspec
    >>> from otspec.verifiers import khisti
    >>> round(assert_within_optimum(khisti, [0.5, 0.5], otspec.iid([0.9, 0.1], 2), at_least=1.0).ratio, 9)
    1.0
    """
    r = acceptance_ratio(verifier, p, law, n_samples=n_samples, rng=rng, optimum=optimum)
    finding = optimum_finding(as_verifier(verifier).name, r, law, atol=atol, at_least=at_least)
    if finding is not None:
        raise finding
    return r


def ratio_from(est: Any, optimum: float) -> AcceptanceRatio:
    """An :class:`AcceptanceRatio` from an acceptance estimate and the optimum."""
    ratio = est.value / optimum if optimum > 0 else (1.0 if est.value <= 0 else math.inf)
    return AcceptanceRatio(
        float(est.value), float(optimum), float(ratio), float(optimum) - float(est.value), est.how, float(est.ci_low), float(est.ci_high)
    )


def optimum_finding(
    name: str, r: AcceptanceRatio, law: Any, *, atol: float = EXACT_ATOL, at_least: float | None = None
) -> VerifierAssertionError | None:
    """The error :func:`assert_within_optimum` raises for ``r``, or ``None``."""
    low, high = (r.ci_low, r.ci_high) if r.how == "monte_carlo" else (r.acceptance, r.acceptance)
    if low > r.optimum + atol:
        return VerifierAssertionError(
            f"verifier {name!r} accepts {fmt_number(r.acceptance)} ({r.how}) on {law!r}, above the optimum {fmt_number(r.optimum)} that no lossless "
            f"verifier can exceed: it is lossy (or its acceptance is wrong)",
            {"property": "optimum", "acceptance": r.acceptance, "optimum": r.optimum},
        )
    if at_least is not None and high < at_least * r.optimum - atol:
        return VerifierAssertionError(
            f"verifier {name!r} accepts {fmt_number(r.acceptance)} ({r.how}) on {law!r}, below {at_least:g} x the optimum {fmt_number(r.optimum)} "
            f"(ratio {r.ratio:.6g})",
            {"property": "ratio", "acceptance": r.acceptance, "optimum": r.optimum, "ratio": r.ratio},
        )
    return None
