r"""Verifiers: rules mapping drafted tokens to output tokens, each with an exact kernel.

Single-step verifiers (:mod:`otspec.verifiers.step`, one module per rule) map k drafted tokens to
one output token. Every one has ``name``, ``lossless``, ``applies_to(law)``, ``kernel(p, law)``
(the exact conditional output law per draft tuple), ``acceptance(p, law)``
(:math:`P(Y \in \bar X)`: closed form, exact kernel or Monte Carlo -- the result says which),
``sample(p, law, drafts, *, rng)`` and a vectorised ``sample_batch``. :data:`ALL` holds one
instance of each, :func:`by_name` finds one; :func:`otspec.report.compare` tabulates them against
the optimum :math:`\alpha^*(p, Q)`.

Multi-token verifiers over context-dependent models are modules of functions:
:mod:`~otspec.verifiers.token_chain` (token verification), :mod:`~otspec.verifiers.block` (block
verification), :mod:`~otspec.verifiers.tree` (draft trees) and the engines' chain rules
:mod:`~otspec.verifiers.exact_match_chain` and :mod:`~otspec.verifiers.typical_chain` (lossy; the
decoded stream's law and TV in :mod:`~otspec.verifiers.stream`). Per-node kernel functions:
:func:`~otspec.verifiers.step.kseq.kseq_conditional`, :func:`~otspec.verifiers.step.rrs.rrs_conditional`,
:func:`~otspec.verifiers.step.rrs_wor.rrs_wor_conditional`.

Layout: :mod:`~otspec.verifiers.base` (the :class:`Verifier` base class),
:mod:`~otspec.verifiers.kernel` (result types), :mod:`~otspec.verifiers.schedule` (the sequential
accept/reject schedule and its sampler), :mod:`~otspec.verifiers.tuples` (draft-tuple index helpers).
"""

from __future__ import annotations

from otspec.errors import UnsupportedMethodError
from otspec.verifiers import (  # noqa: F401  (otspec.verifiers.block, ... after `import otspec`)
    block,
    exact_match_chain,
    hsd,
    step,
    stream,
    token_chain,
    traversal,
    tree,
    typical_chain,
)
from otspec.verifiers.base import Verifier
from otspec.verifiers.step.approximate import approximate
from otspec.verifiers.step.exact_match import exact_match
from otspec.verifiers.step.fuzzy import fuzzy
from otspec.verifiers.step.global_resolution import global_resolution
from otspec.verifiers.step.gls import gls
from otspec.verifiers.step.greedy_optimal import greedy_optimal
from otspec.verifiers.step.gumbel_coupling import gumbel
from otspec.verifiers.step.khisti import khisti
from otspec.verifiers.step.kseq import kseq
from otspec.verifiers.step.lossy_optimal import lossy_optimal
from otspec.verifiers.step.naive import naive
from otspec.verifiers.step.nss import nss
from otspec.verifiers.step.one_hot import one_hot
from otspec.verifiers.step.optimal_iid import optimal_iid
from otspec.verifiers.step.optimal_plan import optimal_plan
from otspec.verifiers.step.optimal_wor import optimal_wor
from otspec.verifiers.step.rrs import rrs
from otspec.verifiers.step.rrs_wor import rrs_wor
from otspec.verifiers.step.spechub import spechub
from otspec.verifiers.step.token import token
from otspec.verifiers.step.typical import typical
from otspec.verifiers.step.wor_iid import wor_iid

# What a user imports: the base class to write a verifier, one instance per rule, the table and the
# lookup. Result types, per-node kernels and helpers are imported from their modules
# (otspec.verifiers.kernel, otspec.verifiers.step.<rule>); the comparison table is otspec.report.compare.
__all__ = [
    "Verifier",
    "ALL",
    "by_name",
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
    "optimal_wor",
    "wor_iid",
    "approximate",
    "exact_match",
    "one_hot",
    "typical",
    "fuzzy",
    "lossy_optimal",
    "gumbel",
    "gls",
    "global_resolution",
]

#: Every single-step verifier, in table order (multi-step chain/tree verifiers live elsewhere).
ALL: tuple[Verifier, ...] = (
    token,
    kseq,
    rrs,
    rrs_wor,
    greedy_optimal,
    spechub,
    khisti,
    nss,
    naive,
    optimal_plan,
    optimal_iid,
    optimal_wor,
    wor_iid,
    approximate,
    exact_match,
    one_hot,
    typical,
    fuzzy,
    lossy_optimal,
    gumbel,
    gls,
    global_resolution,
)


def by_name(name: str) -> Verifier:
    """The verifier of :data:`ALL` called ``name``.

    Parameters
    ----------
    name : str
        A verifier's ``name`` (``"kseq"``, ``"rrs"``, ...).

    Returns
    -------
    Verifier

    Raises
    ------
    UnsupportedMethodError
        If no verifier has that name.

    Examples
    --------
    >>> by_name("kseq").name
    'kseq'
    """
    for v in ALL:
        if v.name == name:
            return v
    raise UnsupportedMethodError(f"unknown verifier {name!r}; pick one of {[v.name for v in ALL]}")
