"""Optimal acceptance: values with certificates (single draft, multi-draft, block, tree)."""

from otspec.bounds.block import BlockOptimumResult, block_optimum, joint_coupling_bound
from otspec.bounds.multidraft import METHODS, optimal_acceptance
from otspec.bounds.result import AcceptanceResult, BlockPlan, MembershipPlan, TransportPlan
from otspec.bounds.single import single_draft
from otspec.bounds.tree import tree_optimum

__all__ = [
    "optimal_acceptance",
    "single_draft",
    "AcceptanceResult",
    "TransportPlan",
    "MembershipPlan",
    "BlockPlan",
    "METHODS",
    "block_optimum",
    "joint_coupling_bound",
    "BlockOptimumResult",
    "tree_optimum",
]
