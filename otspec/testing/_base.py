"""The otspec internals that :mod:`otspec.testing` builds on, imported in this one place.

When otspec's core moves these names (the verifier base class, its kernel type, the input-error
classes), only this module changes.
"""

from __future__ import annotations

from otspec.errors import InvalidDistributionError, InvalidDraftsError, OtspecInputError, UnsupportedMethodError
from otspec.verifiers import AcceptanceEstimate, Verifier, VerifierKernel

__all__ = [
    "AcceptanceEstimate",
    "InvalidDistributionError",
    "InvalidDraftsError",
    "OtspecInputError",
    "UnsupportedMethodError",
    "Verifier",
    "VerifierKernel",
]
