r"""A lossy verifier's declared TV budget: its output law within :math:`\varepsilon` of the target, and
its acceptance on or below the lossy frontier :math:`\min(1, \alpha^*(p, Q) + \varepsilon)`.

A lossy rule (typical acceptance, fuzzy rules, the frontier rule ``lossy_optimal``) is useful when
what it costs is known: :math:`d_{TV}(\text{output law}, p) \le \varepsilon` per step. Two facts are
checked against that declaration:

* **budget** -- exact from the kernel, :math:`d_{TV}\bigl(\sum_{\bar x} Q(\bar x)\pi(\cdot \mid \bar x),
  p\bigr) \le \varepsilon` (up to ``atol``); for a rule known only by its sampler, the output-law
  test of :mod:`otspec.testing.power` with the threshold shifted by :math:`\varepsilon` (false alarm
  and power stated);
* **frontier** -- a rule whose output is within :math:`\varepsilon` of :math:`p` cannot accept more
  than :math:`\min(1, \alpha^* + \varepsilon)` (:doc:`engine_rules`, the lossy frontier): an
  acceptance above it means the acceptance or the kernel is wrong.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from otspec._tolerances import EXACT_ATOL
from otspec.laws import DraftLaw
from otspec.testing._findings import VerifierAssertionError, fmt_number
from otspec.testing.adapters import step_verifier
from otspec.testing.forms import SamplerVerifier
from otspec.testing.optimum import reference_optimum
from otspec.testing.power import OutputLawCheck, assert_output_law, tv_budget_value

__all__ = ["assert_within_tv_budget", "budget_finding", "frontier_finding"]


def budget_finding(
    name: str, kernel: Any, p: np.ndarray, law: DraftLaw, eps: float, *, atol: float = EXACT_ATOL
) -> VerifierAssertionError | None:
    """The error :func:`assert_within_tv_budget` raises for an exact kernel over its budget, or ``None``.

    Parameters
    ----------
    name : str
        The verifier's name, for the message.
    kernel : Kernel
        Its exact kernel on ``(p, law)``.
    p : ndarray, shape (V,)
        The target.
    law : DraftLaw
        The draft law.
    eps : float
        The declared TV budget.
    atol : float
        Rounding allowance.

    Returns
    -------
    VerifierAssertionError or None
        The finding, naming the token of largest deviation.
    """
    out = np.asarray(kernel.output_law(), dtype=np.float64)
    tv = 0.5 * float(np.abs(out - p).sum())
    if tv <= eps + atol:
        return None
    y = int(np.argmax(np.abs(out - p)))
    return VerifierAssertionError(
        f"{name!r} declares TV <= {eps:g} but its exact output law on {law!r} is at TV {fmt_number(tv)} from p; "
        f"token {y}: output probability {fmt_number(out[y])} vs p[{y}] = {fmt_number(p[y])}",
        {"property": "tv_budget", "tv": tv, "budget": eps, "token": y},
    )


def frontier_finding(
    name: str, acceptance: Any, optimum: float, law: DraftLaw, eps: float, *, atol: float = EXACT_ATOL
) -> VerifierAssertionError | None:
    r"""The error for an acceptance above the lossy frontier :math:`\min(1, \alpha^* + \varepsilon)`, or ``None``.

    Parameters
    ----------
    name : str
        The verifier's name.
    acceptance : AcceptanceEstimate
        Its acceptance (exact, or Monte Carlo with a 99% interval: its lower end is compared).
    optimum : float
        :math:`\alpha^*(p, Q)`.
    law : DraftLaw
        The draft law.
    eps : float
        The declared TV budget.
    atol : float
        Rounding allowance.

    Returns
    -------
    VerifierAssertionError or None
        The finding.
    """
    frontier = min(1.0, optimum + eps)
    low = getattr(acceptance, "ci_low", None)
    value = float(acceptance.value if low is None else low)
    if value <= frontier + atol:
        return None
    return VerifierAssertionError(
        f"{name!r} accepts {fmt_number(float(acceptance.value))} on {law!r}, above the lossy frontier min(1, alpha* + eps) = "
        f"{fmt_number(frontier)} (alpha* = {fmt_number(optimum)}, eps = {eps:g}): no rule within TV {eps:g} of p accepts more",
        {"property": "frontier", "acceptance": float(acceptance.value), "frontier": frontier},
    )


def assert_within_tv_budget(
    verifier: Any,
    p: Any,
    law: DraftLaw,
    tv_budget: float,
    *,
    atol: float = EXACT_ATOL,
    delta: float = 0.01,
    alpha: float = 1e-3,
    beta: float = 1e-3,
    rng: np.random.Generator | None = None,
) -> OutputLawCheck:
    r"""Assert that a lossy verifier keeps its declared TV budget on ``(p, law)`` and its acceptance
    stays on or below the frontier :math:`\min(1, \alpha^* + \varepsilon)`.

    Exact for a verifier with a kernel; for a sampler, the output-law test with the threshold shifted
    by the budget (:func:`otspec.testing.power.assert_output_law`: false alarm :math:`\le \alpha`, a
    TV :math:`\ge \varepsilon + \delta` caught with probability :math:`\ge 1 - \beta`), and no
    frontier check (its acceptance is an estimate).

    Parameters
    ----------
    verifier : any form accepted by :func:`otspec.testing.as_verifier`
    p : array_like, shape (V,)
        Target distribution.
    law : DraftLaw
        Law of the drafts.
    tv_budget : float
        The declared :math:`\varepsilon \in [0, 1)`.
    atol : float
        Rounding allowance of the exact checks.
    delta, alpha, beta : float
        Power of the sampled test (see :func:`~otspec.testing.power.assert_output_law`).
    rng : numpy.random.Generator, optional
        Generator of the sampled test.

    Returns
    -------
    OutputLawCheck
        What was measured and the power statement.

    Raises
    ------
    VerifierAssertionError
        If the output law is farther than the budget from ``p``, or the acceptance is above the frontier.
    InvalidOptionError
        If ``tv_budget`` is not in ``[0, 1)``.

    Examples
    --------
    >>> import otspec
    >>> from otspec.verifiers import lossy_optimal
    >>> law = otspec.iid([0.6, 0.3, 0.1], 1)
    >>> assert_within_tv_budget(lossy_optimal, [0.2, 0.3, 0.5], law, 0.05).tv <= 0.05 + 1e-12
    True
    """
    eps = tv_budget_value(tv_budget)
    v, p = step_verifier(verifier, p, law)
    if isinstance(v, SamplerVerifier):
        return assert_output_law(v, p, law, delta=delta, alpha=alpha, beta=beta, method="sampling", rng=rng, tv_budget=eps)
    err = budget_finding(v.name, v.kernel(p, law), p, law, eps, atol=atol)
    if err is None:
        err = frontier_finding(v.name, v.acceptance(p, law), reference_optimum(p, law), law, eps, atol=atol)
    if err is not None:
        raise err
    return assert_output_law(v, p, law, method="exact", tv_budget=eps)
