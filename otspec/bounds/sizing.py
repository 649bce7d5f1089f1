"""Every memory check of :mod:`otspec.bounds`, in one place: estimates made before anything is
allocated, and the refusal (:class:`~otspec.errors.ProblemTooLargeError`, naming the size, the
estimate, the cap and a fix that applies to the problem at hand) when one exceeds ``memory_cap``
(default 4 GiB).

* :func:`check_acceptance` -- the methods of :func:`~otspec.bounds.multidraft.optimal_acceptance`
  (:func:`estimate_bytes` per method);
* :func:`check_path_lp` -- the block / tree LP of :mod:`otspec.bounds.block` (:func:`lp_size`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from otspec._validation import check_memory

__all__ = ["BYTES_PER_ARC", "LP_BYTES_PER_NONZERO", "check_acceptance", "check_path_lp", "estimate_bytes", "lp_size", "num_sets_bound"]

#: Rough peak bytes per LP column (HiGHS model + factorisation + our arrays), and for cvxpy.
_BYTES_PER_COLUMN = {"lp": 400, "cvxpy": 2500}

#: Peak bytes per network arc of ``method="maxflow"`` (OR-Tools' graph with its reverse arcs, our
#: int32/int64 arrays, the flows read back), added to the enumeration's own estimate. Measured: 1.37
#: GB whole-process peak at 1e7 LP columns (1.5e7 arcs, i.i.d. V = 3163, k = 2), ~91 B per arc
#: *including* the enumeration (:doc:`benchmarks`); the estimate (enumeration + 100 B/arc) is 2.9 GB
#: there.
BYTES_PER_ARC = 100

#: Bytes per nonzero of the block / tree LP (HiGHS model, presolve and factorisation, our copies).
LP_BYTES_PER_NONZERO = 120.0


def num_sets_bound(law) -> float:
    r"""Upper bound on the number of distinct draft sets of ``law``: at most its number of tuples,
    and at most :math:`\sum_{j=1}^{k} \binom{n}{j}` sets of at most k of its n possible tokens.

    Parameters
    ----------
    law : DraftLaw
        The draft law (``n`` is the support size of ``law.q`` when it has one, else ``V``).

    Returns
    -------
    float
        The bound (a float: it may exceed the int64 range).
    """
    M = float(law.num_tuples())
    q = getattr(law, "q", None)
    n = int(np.count_nonzero(q)) if q is not None else law.V
    subsets, term = 0.0, 1.0
    for j in range(1, law.k + 1):
        term = term * (n - j + 1) / j
        subsets += term
        if subsets >= M:
            return M
    return min(M, subsets)


def estimate_bytes(method: str, law) -> float:
    """Peak-memory estimate of a tuple-level solve, computed before anything is allocated.

    Parameters
    ----------
    method : {"lp", "cvxpy", "flow", "maxflow"}
        The tuple-level engine.
    law : DraftLaw
        The draft law (only ``num_tuples``, ``k``, ``V`` and ``q`` are read).

    Returns
    -------
    float
        Bytes: the enumeration plus the engine's model (per LP column, dense ``S x V`` transport, or
        sparse flow arcs).
    """
    M = float(law.num_tuples())
    enum = M * law.k * 24 * 3  # tuples, sorted copy, set grouping
    S = num_sets_bound(law)
    if method == "flow":
        return enum + 4 * 8 * S * law.V  # cost matrix, plan, POT internals (dense S x V)
    if method == "maxflow":
        return enum + BYTES_PER_ARC * (S * (law.k + 1) + law.V)  # source, middle and sink arcs
    return enum + _BYTES_PER_COLUMN[method] * M * law.k


def _fix(law) -> str:
    """A fix that applies to ``law``: the closed form where one is exact, the branch-and-bound for a
    product law, else the size (a product or explicit law has no closed form, so ``method='prefix'``
    is never offered for it)."""
    if law.prefix_exact:
        return "use method='prefix' (exact for this law, O(V log V)), a smaller V or k, or raise memory_cap"
    if law.branch_and_bound:
        return "use method='product' (branch-and-bound at full vocabulary, no plan), a smaller V or k, or raise memory_cap"
    return "use a smaller V or k, or raise memory_cap"


def check_acceptance(method: str, law, memory_cap: float | None) -> None:
    """Refuse, before any enumeration, a method of ``optimal_acceptance`` that would not fit.

    Parameters
    ----------
    method : str
        A resolved method (not ``"auto"``); ``"prefix"`` and ``"product"`` need no check.
    law : DraftLaw
        The draft law.
    memory_cap : float or None
        Bytes (``None``: 4 GiB).

    Raises
    ------
    ProblemTooLargeError
        If the method's estimate exceeds the cap.
    """
    if method in ("prefix", "product"):  # O(V log V) / O(k V) memory
        return
    if method == "subsets":
        V = law.V
        check_memory(8.0 * 6 * 2**V, memory_cap, f"method='subsets' with V = {V}", "use a smaller V")
        if law.cut_function_enumerates:  # the zeta transform enumerates the law's sets first
            check_memory(estimate_bytes("lp", law), memory_cap, f"enumerating {law!r}", "use a smaller V or k")
        return
    closed = "" if law.prefix_exact else f"; a {law.kind} law has no closed form"
    what = f"method={method!r} on {law!r} ({law.num_tuples():,} draft tuples{closed})"
    check_memory(estimate_bytes(method, law), memory_cap, what, _fix(law))


def lp_size(V: int, gamma: int, nodes_per_depth: Sequence[float], n_outcomes: float) -> tuple[int, int, int]:
    """(columns, rows, nonzeros) of the path/tree LP with ``nodes_per_depth[t]`` emitted-prefix nodes
    per drafted outcome at depth ``t`` (summed over outcomes).

    Parameters
    ----------
    V : int
        Vocabulary size.
    gamma : int
        Draft block length.
    nodes_per_depth : sequence of float
        ``gamma + 1`` node counts, summed over outcomes (one column per node and next token).
    n_outcomes : float
        Number of drafted outcomes (one draft-marginal row each).

    Returns
    -------
    cols, rows, nnz : int
        The LP's size: columns, rows (outcomes plus the :math:`V^{\\gamma+1}` target rows) and
        nonzeros, for the size checks before anything is built.

    Examples
    --------
    >>> lp_size(2, 1, [1, 2], 4)
    (6, 8, 14)
    """
    cols = sum(int(n) * V for n in nodes_per_depth)
    nnz = sum(int(n) * V * (1 + V ** (gamma - t)) for t, n in enumerate(nodes_per_depth))
    rows = int(n_outcomes) + V ** (gamma + 1)
    return cols, rows, nnz


def check_path_lp(V: int, gamma: int, nodes: Sequence[Sequence[np.ndarray]], n_out: int, memory_cap: float | None, what: str) -> None:
    """Refuse a block / tree LP that would not fit, before building it.

    Parameters
    ----------
    V, gamma : int
        Vocabulary size and block length.
    nodes : sequence of sequences of ndarray
        ``nodes[o][t]``: the emitted-prefix nodes of outcome ``o`` at depth ``t``.
    n_out : int
        Number of drafted outcomes.
    memory_cap : float or None
        Bytes (``None``: 4 GiB).
    what : str
        The problem's name for the message.

    Raises
    ------
    ProblemTooLargeError
        If the LP's estimate exceeds the cap.
    """
    per_depth = [sum(len(nodes[o][t]) for o in range(n_out)) for t in range(gamma + 1)]
    cols, rows, nnz = lp_size(V, gamma, per_depth, n_out)
    check_memory(
        LP_BYTES_PER_NONZERO * nnz + 8.0 * V ** (gamma + 1) * (gamma + 2),
        memory_cap,
        f"{what} ({cols:,} columns, {rows:,} rows, {nnz:,} nonzeros)",
        "use method='closed_form', or a smaller V, gamma or k",
    )
