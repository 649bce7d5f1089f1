"""What a failed verifier check raises, and the number formats its messages share."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["TOP_CONTRIBUTORS", "VerifierAssertionError", "fmt_number", "tuple_text"]

#: How many draft tuples (or paths) a failure message lists.
TOP_CONTRIBUTORS = 3


class VerifierAssertionError(AssertionError):
    """A verifier failed a property. ``details`` holds the numbers the message reports.

    Parameters
    ----------
    message : str
        What failed, with the numbers and the draft tuples responsible.
    details : dict, optional
        Machine-readable facts (``"property"``, the expected and actual values, ``"tuples"``...).
    """

    def __init__(self, message: str, details: dict | None = None):
        super().__init__(message)
        self.details = dict(details or {})


VerifierAssertionError.__module__ = "otspec.testing"  # its public home (tracebacks and docs name it there)


def fmt_number(x: float) -> str:
    """Six significant digits (the precision of every number in a failure message)."""
    return f"{x:.6g}"


def tuple_text(t: Any) -> str:
    """A draft tuple as ``(1, 0, 2)``."""
    return "(" + ", ".join(str(int(v)) for v in np.atleast_1d(t)) + ")"
