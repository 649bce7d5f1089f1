"""Optimal acceptance: values with certificates (single draft, multi-draft, block)."""

from otspec.bounds.multidraft import METHODS, optimal_acceptance
from otspec.bounds.result import AcceptanceResult, TransportPlan
from otspec.bounds.single import single_draft

__all__ = ["optimal_acceptance", "single_draft", "AcceptanceResult", "TransportPlan", "METHODS"]
