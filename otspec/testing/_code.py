"""Python source for arrays and draft laws, so that a counterexample can be pasted and re-run."""

from __future__ import annotations

from fractions import Fraction

import numpy as np

__all__ = ["array_code", "law_code"]

#: Largest common denominator tried when writing a distribution as integer weights / d.
_MAX_DENOMINATOR = 10_000


def array_code(x: np.ndarray) -> str:
    """``np.array([1, 2, 1]) / 4`` when that reproduces ``x`` bit for bit, else a list of exact reprs.

    Examples
    --------
    >>> array_code(np.array([1, 2, 1]) / 4)
    'np.array([1, 2, 1]) / 4'
    >>> array_code(np.array([0.1, 0.9]))
    'np.array([1, 9]) / 10'
    """
    x = np.asarray(x, dtype=np.float64)
    fracs = [Fraction(float(v)).limit_denominator(_MAX_DENOMINATOR) for v in x]
    d = 1
    for f in fracs:
        d = d * f.denominator // np.gcd(d, f.denominator)
        if d > _MAX_DENOMINATOR:
            break
    if d <= _MAX_DENOMINATOR:
        ints = [int(f * d) for f in fracs]
        if np.array_equal(np.array(ints, dtype=np.float64) / d, x):
            return f"np.array({ints}) / {d}" if d != 1 else f"np.array({ints}, dtype=float)"
    return "np.array([" + ", ".join(repr(float(v)) for v in x) + "])"


def law_code(law) -> str:
    """Source that rebuilds ``law`` with the public constructors (``otspec.iid(...)`` etc.).

    Examples
    --------
    >>> import otspec
    >>> law_code(otspec.iid([0.25, 0.75], 2))
    'otspec.iid(np.array([1, 3]) / 4, 2)'
    """
    import otspec

    # the constructor as users spell it: otspec.<kind> where the top level exports it
    ctor = f"otspec.{law.kind}" if hasattr(otspec, law.kind) else f"otspec.laws.{law.kind}"
    if law.parameters == "q":
        return f"{ctor}({array_code(law.source_q)}, {law.k})"
    if law.parameters == "qs":
        return f"{ctor}([" + ", ".join(array_code(q) for q in law.qs) + "])"
    tuples, weights = law.enumerate()
    return f"{ctor}({np.asarray(tuples).tolist()}, {array_code(weights)}, vocab_size={law.V})"
