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

When it runs (:func:`ready`, :data:`ENGINE` ``"auto"``): from :data:`COMPILED_FROM_V` tokens
on, with numba importable (a core dependency), once the reference has spent
:data:`SWITCH_AFTER_S` seconds of this process on such problems. numba's start-up in a fresh
process (its import, the initialisation of its compiler target, loading the cached kernels)
measured 1.5-4.5 s on the project's 2-core machine, about what a hundred compiled solves at
V = 262 144 save; switching once the reference has spent as much as the start-up costs (the
ski-rental rule) never costs a process more than twice the better choice, and a one-shot command
such as ``otspec bound`` never pays it. ``ENGINE = "compiled"`` (``"numpy"``) forces one path.
"""

from __future__ import annotations

import numpy as np

from otspec.bounds.certificate import CutAnswer

__all__ = ["COMPILED_FROM_V", "ENGINE", "SWITCH_AFTER_S", "available", "count_reference", "kernels", "ready", "solve"]

#: Below this many tokens the reference runs (it takes under a millisecond there).
COMPILED_FROM_V = 4096

#: ``"auto"`` (module docstring), ``"compiled"`` (whenever numba imports) or ``"numpy"`` (the
#: reference always); the answers are the same bits either way.
ENGINE = "auto"

#: ``"auto"`` switches to the compiled path once reference solves of at least
#: :data:`COMPILED_FROM_V` tokens have taken this many seconds in the process (numba's start-up).
SWITCH_AFTER_S = 2.0

#: Relative density inversions tolerated in the Lorenz test (the reference's constant).
_ORDER_EPS = 1e-12

_STATE = {"kernels": None, "tried": False, "reference_s": 0.0}


def available() -> bool:
    """Whether the compiled kernels import (numba installed).

    Returns
    -------
    bool
        True when :mod:`otspec.bounds.iid_kernels` imports.
    """
    if not _STATE["tried"]:
        _STATE["tried"] = True
        try:
            from otspec.bounds import iid_kernels
        except ImportError:  # numba missing: the reference (same complexity) runs
            iid_kernels = None
        _STATE["kernels"] = iid_kernels
    return _STATE["kernels"] is not None


def kernels():
    """The compiled kernels module (:mod:`otspec.bounds.iid_kernels`), or None without numba.

    Returns
    -------
    module or None
        The kernels.
    """
    return _STATE["kernels"] if available() else None


def ready(V: int) -> bool:
    """Whether :func:`~otspec.bounds.prefix.solve` takes the compiled path for V tokens
    (:data:`ENGINE`; module docstring).

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
    if ENGINE == "numpy" or V < COMPILED_FROM_V:
        return False
    if ENGINE == "auto" and _STATE["reference_s"] < SWITCH_AFTER_S:
        return False
    return available()


def count_reference(V: int, seconds: float) -> None:
    """Add a reference solve's time to the ``"auto"`` rule's account (problems of at least
    :data:`COMPILED_FROM_V` tokens only).

    Parameters
    ----------
    V : int
        Vocabulary size of the solve.
    seconds : float
        Its time.
    """
    if V >= COMPILED_FROM_V:
        _STATE["reference_s"] += seconds


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
    >>> a = solve(np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.3, 0.5]), 2, np.array([2, 1, 0]), 1e-15)
    >>> a is None or round(a.value, 12) == 0.86
    True
    """
    if not available() or not q.min() > 0:
        return None
    kern = _STATE["kernels"]
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
