"""otspec: exact optimal-transport mathematics of speculative-decoding verification.

Draft laws (:func:`iid`, :func:`without_replacement`, :func:`greedy`, :func:`product`,
:func:`explicit`), the optimal acceptance with certificates (:func:`optimal_acceptance`,
:func:`single_draft`, :func:`block_optimum`, :func:`tree_optimum`), the verifiers
(:mod:`otspec.verifiers`), context-dependent models (:mod:`otspec.models`) and draft trees
(:mod:`otspec.trees`), verifier-vs-optimum tables (:mod:`otspec.report`), the exceptions
(:mod:`otspec.errors`) and seeded synthetic pairs (:mod:`otspec.synthetic`). The core never imports
torch.

Layers (each imports only those below it): ``errors``, ``_tolerances``, ``_validation``,
``sampling`` -> ``laws``, ``models``, ``trees`` -> ``bounds`` -> ``verifiers`` -> ``report`` ->
``cli``.
"""

from otspec import errors, models, report, synthetic, trees, verifiers
from otspec.bounds import (
    AcceptanceResult,
    BlockOptimumResult,
    BlockPlan,
    MembershipPlan,
    TransportPlan,
    block_optimum,
    joint_coupling_bound,
    optimal_acceptance,
    single_draft,
    tree_optimum,
)
from otspec.bounds.tree_interval import TreeIntervalResult, tree_interval
from otspec.laws import explicit, greedy, iid, product, without_replacement

__all__ = [
    "iid",
    "without_replacement",
    "greedy",
    "product",
    "explicit",
    "optimal_acceptance",
    "single_draft",
    "block_optimum",
    "joint_coupling_bound",
    "tree_optimum",
    "tree_interval",
    "TreeIntervalResult",
    "AcceptanceResult",
    "BlockOptimumResult",
    "TransportPlan",
    "MembershipPlan",
    "BlockPlan",
    "models",
    "trees",
    "verifiers",
    "report",
    "errors",
    "synthetic",
]
__version__ = "0.1.0"
