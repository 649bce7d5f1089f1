r"""Reports that put verifiers next to the optimum: :func:`compare` and its row type.

This module sits above :mod:`otspec.bounds` and :mod:`otspec.verifiers` (it needs both); neither
imports it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from otspec.bounds import optimal_acceptance
from otspec.errors import ProblemTooLargeError
from otspec.verifiers import ALL

__all__ = ["ComparisonRow", "compare"]


@dataclass(frozen=True)
class ComparisonRow:
    """One verifier's acceptance next to the optimum (a row of :func:`compare`).

    ``how`` is ``"closed_form"``, ``"kernel"``, ``"monte_carlo"`` or ``"unavailable"`` (the law is
    too large for a verifier that needs enumeration; numbers are NaN then).
    ``shortfall = optimum - acceptance`` (how far the verifier is from the optimum; not a
    duality gap); ``percent_of_optimum = 100 * acceptance / optimum``.
    """

    name: str
    acceptance: float
    how: str
    ci_low: float
    ci_high: float
    optimum: float
    shortfall: float
    percent_of_optimum: float
    lossless: bool = True


def compare(
    p: Any, law: Any, *, optimum: float | None = None, n_samples: int = 2000, rng: Any = None
) -> list[ComparisonRow]:
    r"""Acceptance of every verifier in :data:`ALL` that applies to ``law``, against the optimum.

    ``optimum`` defaults to ``otspec.optimal_acceptance(p, law).value``. Each verifier's
    ``acceptance(p, law)`` is used (closed form, else exact kernel, else Monte Carlo with
    ``n_samples`` draft tuples and ``rng``, default ``numpy.random.default_rng(0)``); verifiers
    that need an enumerable law get a row with ``how="unavailable"`` and NaN values on large laws.

    Examples
    --------
    >>> import otspec
    >>> rows = compare([0.5, 0.3, 0.2], otspec.iid([0.2, 0.3, 0.5], 2))
    >>> [r.name for r in rows][:3]
    ['kseq', 'rrs', 'khisti']
    >>> all(r.shortfall > -1e-9 for r in rows)
    True
    """
    if optimum is None:
        optimum = float(optimal_acceptance(p, law).value)
    optimum = float(optimum)
    rows = []
    for v in ALL:
        if not v.applies_to(law):
            continue
        try:
            est = v.acceptance(p, law, n_samples=n_samples, rng=rng)
        except ProblemTooLargeError:
            nan = math.nan
            rows.append(ComparisonRow(v.name, nan, "unavailable", nan, nan, optimum, nan, nan, v.lossless))
            continue
        pct = 100.0 * est.value / optimum if optimum > 0 else math.nan
        rows.append(ComparisonRow(v.name, est.value, est.how, est.ci_low, est.ci_high, optimum, optimum - est.value, pct, v.lossless))
    return rows
