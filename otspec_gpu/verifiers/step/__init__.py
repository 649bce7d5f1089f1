"""Batched torch single-step verifiers, one module per rule, with the numpy core's names (twins of
:mod:`otspec.verifiers.step`). Each module defines the :class:`~otspec_gpu.verifiers.base.TorchVerifier`
named like the module, with its ``sample`` and ``conditional``; modules whose names start with an
underscore hold helpers shared by several rules.
"""

__all__ = [
    "approximate",
    "greedy_optimal",
    "khisti",
    "kseq",
    "naive",
    "nss",
    "optimal_iid",
    "rrs",
    "rrs_wor",
    "spechub",
    "token",
]
