r"""Single-step verifiers: rules mapping k drafted tokens to one output token.

Every verifier has ``name``, ``lossless``, ``applies_to(law)``, ``kernel(p, law)`` (the exact
conditional output law per draft tuple), ``acceptance(p, law)`` (:math:`P(Y \in \bar X)`: closed
form, exact kernel or Monte Carlo -- the result says which), ``sample(p, law, drafts, *, rng)``
and a vectorised ``sample_batch``. :data:`ALL` holds one instance of each single-step verifier;
:func:`compare` tabulates them against the optimum :math:`\alpha^*(p, Q)`.

Per-node kernel functions (for tree verifiers): :func:`kseq_conditional`,
:func:`rrs_conditional`, :func:`rrs_wor_conditional`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from otspec._validation import ProblemTooLargeError
from otspec.verifiers._common import AcceptanceEstimate, KSeqDetails, Verifier, VerifierKernel
from otspec.verifiers.canonical import khisti, khisti_k2_closed_form
from otspec.verifiers.hu_greedy import greedy_optimal
from otspec.verifiers.hub import spechub
from otspec.verifiers.ignore_drafts import nss
from otspec.verifiers.naive_tree import naive
from otspec.verifiers.plan_sampler import optimal_plan
from otspec.verifiers.optimal import optimal_iid
from otspec.verifiers.rsd import rrs_wor, rrs_wor_conditional
from otspec.verifiers.single_draft import token
from otspec.verifiers.specinfer import rrs, rrs_conditional
from otspec.verifiers.spectr import kseq, kseq_conditional
from otspec.verifiers.sprinter import ApproximateVerifier, approximate, exact_rule_predicate

# Multi-token verifiers over context-dependent models (modules with kernel / expected_accepted /
# sample functions): token verification, block verification, and draft trees.
from otspec.verifiers import block, token_chain, tree  # noqa: E402  (after the single-step ones)

__all__ = [
    "Verifier",
    "VerifierKernel",
    "AcceptanceEstimate",
    "KSeqDetails",
    "ComparisonRow",
    "ApproximateVerifier",
    "token",
    "kseq",
    "rrs",
    "rrs_wor",
    "greedy_optimal",
    "spechub",
    "khisti",
    "nss",
    "naive",
    "optimal_plan",
    "optimal_iid",
    "approximate",
    "kseq_conditional",
    "rrs_conditional",
    "rrs_wor_conditional",
    "khisti_k2_closed_form",
    "exact_rule_predicate",
    "ALL",
    "by_name",
    "compare",
    "token_chain",
    "block",
    "tree",
]

#: Every single-step verifier, in table order (multi-step chain/tree verifiers live elsewhere).
ALL: tuple[Verifier, ...] = (token, kseq, rrs, rrs_wor, greedy_optimal, spechub, khisti, nss, naive, optimal_plan, optimal_iid, approximate)


def by_name(name: str) -> Verifier:
    """The verifier of :data:`ALL` called ``name``.

    Examples
    --------
    >>> by_name("kseq").name
    'kseq'
    """
    for v in ALL:
        if v.name == name:
            return v
    from otspec._validation import UnsupportedMethodError

    raise UnsupportedMethodError(f"unknown verifier {name!r}; pick one of {[v.name for v in ALL]}")


@dataclass(frozen=True)
class ComparisonRow:
    """One verifier's acceptance next to the optimum (a row of :func:`compare`).

    ``how`` is ``"closed_form"``, ``"kernel"``, ``"monte_carlo"`` or ``"unavailable"`` (the law is
    too large for a verifier that needs enumeration; numbers are NaN then).
    ``gap = optimum - acceptance``; ``percent_of_optimum = 100 * acceptance / optimum``.
    """

    name: str
    acceptance: float
    how: str
    ci_low: float
    ci_high: float
    optimum: float
    gap: float
    percent_of_optimum: float
    lossless: bool = True
    #: why the numbers are NaN (``how == "unavailable"``), else empty
    reason: str = ""


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
    >>> all(r.gap > -1e-9 for r in rows)
    True
    """
    if optimum is None:
        import otspec

        optimum = float(otspec.optimal_acceptance(p, law).value)
    optimum = float(optimum)
    rows = []
    for v in ALL:
        if not v.applies_to(law):
            continue
        try:
            est = v.acceptance(p, law, n_samples=n_samples, rng=rng)
        except ProblemTooLargeError as exc:
            nan = math.nan
            rows.append(ComparisonRow(v.name, nan, "unavailable", nan, nan, optimum, nan, nan, v.lossless, str(exc)))
            continue
        pct = 100.0 * est.value / optimum if optimum > 0 else math.nan
        rows.append(ComparisonRow(v.name, est.value, est.how, est.ci_low, est.ci_high, optimum, optimum - est.value, pct, v.lossless))
    return rows
