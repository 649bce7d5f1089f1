"""otspec: exact optimal-transport mathematics of speculative-decoding verification."""

from otspec.bounds import AcceptanceResult, TransportPlan, optimal_acceptance, single_draft
from otspec.laws import explicit, greedy, iid, product, without_replacement
from otspec import models
from otspec import verifiers
from otspec.bounds.block import block_optimum

__all__ = [
    "iid",
    "without_replacement",
    "greedy",
    "product",
    "explicit",
    "optimal_acceptance",
    "single_draft",
    "AcceptanceResult",
    "TransportPlan",
    "models",
    "verifiers",
    "block_optimum",
]
__version__ = "0.1.0"
