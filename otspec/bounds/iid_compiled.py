r"""The i.i.d. optimum with its certificate, compiled: the same answer as the numpy reference
(:func:`otspec.bounds.prefix.iid_reference`), bit for bit, in a few fused passes.

The reference sorts the tokens by :math:`p/q` with an argsort and then makes some twenty O(V)
numpy passes over the sorted arrays (the prefix scan, the closed-form selection law :math:`r^*`,
its Lorenz membership test, the cut). Here (kernels in :mod:`otspec.bounds.iid_kernels`):

1. the order is the reference's (:func:`~otspec.bounds.prefix.ratio_sort`: one sort of packed
   64-bit words, the same permutation as :func:`~otspec.laws.ratio_order`);
2. one compiled pass gathers p and q in that order and runs the sorted-prefix dual;
3. two passes over the suffix give the cap's constant, one over every token builds :math:`r^*`
   and runs its Lorenz test (the full membership check of the reference); numpy adds up the
   acceptance and lists the cut.

Every operation is the reference's, in its order, without fast-math; where the reference would
leave its O(V) path (a zero in q, a constant that overflows, an order that is not a density order
of :math:`r^*`) :func:`solve` returns None and the caller runs the reference.

When it runs: :mod:`otspec.bounds.jit_policy` (from 4 096 tokens on, once the numpy references
have spent numba's start-up time in the process, or always with ``jit_policy.ENGINE =
"compiled"``).
"""

from __future__ import annotations

import numpy as np

from otspec.bounds import jit_policy
from otspec.bounds.certificate import CutAnswer

__all__ = ["available", "kernels", "ready", "solve"]

#: Relative density inversions tolerated in the Lorenz test (the reference's constant).
_ORDER_EPS = 1e-12


def available() -> bool:
    """Whether the compiled kernels import (numba installed).

    Returns
    -------
    bool
        True when :mod:`otspec.bounds.iid_kernels` imports.
    """
    return jit_policy.kernels("iid_kernels") is not None


def kernels():
    """The compiled kernels module (:mod:`otspec.bounds.iid_kernels`), or None without numba.

    Returns
    -------
    module or None
        The kernels.
    """
    return jit_policy.kernels("iid_kernels")


def ready(V: int) -> bool:
    """Whether :func:`~otspec.bounds.prefix.solve` takes the compiled path for V tokens
    (:func:`otspec.bounds.jit_policy.ready`).

    Parameters
    ----------
    V : int
        Vocabulary size.

    Returns
    -------
    bool
        True to run :func:`solve`.

    Examples
    --------
    >>> ready(10)  # small problems always run the reference
    False
    """
    return jit_policy.ready(V, "iid_kernels")


# long-function: the pipeline of the module docstring, step by step with its reference's arithmetic
def solve(p: np.ndarray, q: np.ndarray, k: int, order: np.ndarray, error_bound: float) -> CutAnswer | None:
    r"""The i.i.d. optimum :math:`1 + \min_i [P(H_i) - q(H_i)^k]` over the p/q prefixes, its cut
    and the certificate's lower bound, as :func:`otspec.bounds.prefix.iid_reference`.

    Parameters
    ----------
    p, q : ndarray, shape (V,)
        Target and draft distributions (validated).
    k : int
        Number of i.i.d. drafts.
    order : ndarray of int64, shape (V,)
        The tokens in ascending p/q, ties by id (:func:`~otspec.bounds.prefix.ratio_sort`).
    error_bound : float
        The value's rounding bound (:func:`~otspec.bounds.prefix.iid_error_bound`).

    Returns
    -------
    CutAnswer or None
        The reference's answer, bit for bit; None where numba is missing or the reference
        would leave its O(V) path (module docstring): then run the reference.

    Examples
    --------
    >>> import numpy as np
    >>> p, q = np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.0, 0.8])
    >>> solve(p, q, 2, np.array([2, 0, 1]), 1e-15) is None  # a zero in q: the reference's case
    True
    """
    if not available() or not q.min() > 0:
        return None
    kern = kernels()
    V = p.size
    ps, qs = np.empty(V), np.empty(V)
    n_ck = V // kern.CHECKPOINT + 1
    ckp, ckq = np.empty(n_ck), np.empty(n_ck)
    j, f_j, p_j, q_j = kern.scan(p, q, order, k, ps, qs, ckp, ckq)
    if f_j < 0.0:  # the reference's value: np.power at the minimiser
        n = j + 1
        value = 1.0 + float(p_j - np.power(np.minimum(np.array([q_j]), 1.0), k)[0])
        g = float(np.power(min(float(q_j), 1.0), k))
    else:
        n, value, g = 0, 1.0, 0.0
    r, qgt, s = np.empty(V), np.empty(V), np.empty(V)
    lower_cut, violation, ok = kern.primal(ps, qs, ckp, ckq, n, g, k, _ORDER_EPS, r, qgt, s)
    if not ok:
        return None
    lower = lower_cut + float(r[n:].sum())  # numpy's (pairwise) sum, as the reference
    in_cut = np.zeros(V, dtype=bool)
    in_cut[order[:n]] = True
    cut = np.flatnonzero(in_cut)
    checks = {"selection_law_membership": violation}
    return CutAnswer("prefix", value, cut, error_bound, checks, lower=lower, lower_reason="")
