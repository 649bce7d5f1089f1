r"""The optimal multi-draft acceptance :math:`\alpha^*(p, Q)` (Hu et al., ICLR 2025).

.. math:: \alpha^*(p, Q) = \max_{\pi \in \Pi(Q, p)} P_\pi(Y \in \{X_1..X_k\})
          = \min_{H \subseteq \Omega} \big[ P(H) + 1 - Q(H^k) \big]

(max-flow/min-cut on source -> draft tuple (cap Q) -> its tokens (cap inf) -> sink (cap p);
:doc:`math`, the min-cut dual). For i.i.d. and without-replacement drafts the minimum is attained on a prefix
of the tokens sorted by p/q (section 3.2), which gives O(V log V) closed forms.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from otspec import _race
from otspec._tolerances import CERTIFICATE_ATOL, ERROR_BOUND_MAX, ROUNDING_PER_TERM
from otspec._validation import as_distribution, as_memory_cap, check_memory
from otspec.bounds.cuts import cut_value
from otspec.bounds.lp import estimate_bytes, num_sets_bound, solve_tuple_level
from otspec.bounds.result import STATUS_CHECK_FAILED, STATUS_OPTIMAL, AcceptanceResult
from otspec.errors import InvalidOptionError, NotADraftLawError, ProblemTooLargeError, UnsupportedMethodError
from otspec.laws import DraftLaw

__all__ = ["optimal_acceptance", "METHODS", "SUBSETS_MAX_V"]

METHODS = ("auto", "prefix", "subsets", "lp", "cvxpy", "flow", "maxflow")

#: Brute force over 2^V subsets is the oracle for tiny vocabularies only.
SUBSETS_MAX_V = 20

#: ``auto`` uses the dense network simplex up to this many (draft set x token) arcs, HiGHS above.
_FLOW_MAX_ARCS = 25_000_000

#: ``auto`` uses the sparse max-flow (when OR-Tools is installed) above this many dense arcs: at
#: 1e5 LP columns (i.i.d. V = 316, k = 2; 1.6e7 dense arcs) it took 0.27 s against 38 s for the
#: dense network simplex and 11 s for HiGHS (:doc:`benchmarks`); below it the dense simplex is
#: already fast and avoids importing OR-Tools (~0.3 s).
_MAXFLOW_FROM_ARCS = 1_000_000

#: Without the ``maxflow`` extra, ``auto`` refuses, before starting, tuple-level problems (laws
#: without a closed form: product, explicit) with more draft tuples than this. Measured on the
#: 2-core project machine for a two-drafter product law with the dense/LP methods: ~10-20 s at
#: V = 300-400 (90 000-160 000 tuples), 40 s at V = 700 (490 000), over 10 minutes at V = 2000
#: (4e6). With OR-Tools installed ``auto`` uses ``maxflow`` above the dense limits instead (seconds
#: at 1e7 arcs, see :doc:`benchmarks`). An explicit method='lp' / 'flow' still runs.
AUTO_MAX_TUPLES = 250_000


def _power(x: np.ndarray, k: int) -> np.ndarray:
    """``x ** k`` for an integer ``k >= 1`` by repeated squaring, overwriting ``x`` (a few ulps from
    ``np.power``, ~40x faster; used only to *locate* a minimum)."""
    acc = None
    while True:
        if k & 1:
            if k == 1:
                return x if acc is None else np.multiply(acc, x, out=acc)
            acc = x.copy() if acc is None else np.multiply(acc, x, out=acc)
        k >>= 1
        np.multiply(x, x, out=x)


def _iid_prefix(p: np.ndarray, q: np.ndarray, k: int) -> tuple[float, np.ndarray, float]:
    r"""The i.i.d. optimum :math:`1 + \min_i [P(H_i) - q(H_i)^k]` over the prefixes :math:`H_i` of the
    tokens sorted by :math:`p/q` (:doc:`math`, the sorted-prefix dual); returns ``(value, cut,
    error_bound)``.

    The hot path of ``method="prefix"`` for i.i.d. drafts (issue 12: within 2x of one argsort plus
    one cumsum). The order is :func:`~otspec.laws.ratio_order`'s exactly (numpy's default argsort,
    then only the runs of tied keys re-sorted by token id), so the prefix sums, the minimiser and
    the cut are the same as through the generic :meth:`~otspec.laws.IIDLaw.prefix_prob_all_in`
    path; what is saved is the key's masked copies, the permutation check, the concatenations and
    ``np.power``: the powers :math:`q(H_i)^k` are formed by repeated squaring (a few ulps) to
    *locate* the minimum, and the value there is recomputed with ``np.power``, the arithmetic of
    the generic path.
    """
    V = p.size
    # Few, reused buffers: on a loaded machine fresh pages cost more than the arithmetic.
    a, b = np.empty(V), np.empty(V)
    if q.min() > 0:
        with np.errstate(over="ignore"):  # a denormal q overflows p/q to +inf: the right key
            key = np.divide(p, q, out=a)
    else:
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            key = np.where(q > 0, p / np.where(q > 0, q, 1.0), np.where(p > 0, np.inf, 0.0))
    order = np.argsort(key)
    ks = np.take(key, order, out=b)
    tie = np.equal(ks[1:], ks[:-1])
    if tie.any():  # stable_argsort's tie rule: runs of equal keys re-sorted by token id
        involved = np.zeros(V, dtype=bool)
        involved[1:] |= tie
        involved[:-1] |= tie
        pos = np.flatnonzero(involved)
        sub = order[pos]
        order[pos] = sub[np.lexsort((sub, ks[pos]))]
    del key, ks, tie
    cp = np.cumsum(np.take(p, order, out=a), out=a)  # P(H_i), i = 1..V
    cq = np.cumsum(np.take(q, order, out=b), out=b)
    f = _power(np.minimum(cq, 1.0), k)
    np.subtract(cp, f, out=f)  # P(H_i) - Q(H_i^k); the empty prefix has 0
    j = int(np.argmin(f))
    if f[j] < 0.0:
        i = j + 1
        value = 1.0 + float(cp[j] - np.power(np.minimum(cq[j : j + 1], 1.0), k)[0])
    else:
        i, value = 0, 1.0
    in_cut = np.zeros(V, dtype=bool)
    in_cut[order[:i]] = True
    err = ROUNDING_PER_TERM * V * k + ROUNDING_PER_TERM * V  # Q's and P's prefix sums
    return value, np.flatnonzero(in_cut), err


def _solve_prefix(p: np.ndarray, law: DraftLaw) -> AcceptanceResult:
    if law.kind == "iid":
        value, cut, err = _iid_prefix(p, law.q, law.k)
        return _cut_certified_result(p, law, value, cut, "prefix", err, {})
    order = law.prefix_cut_order(p)
    if order is None:
        raise UnsupportedMethodError(
            f"method='prefix' is exact only for iid, without_replacement and greedy laws (got {law.kind}); "
            "use method='lp', 'flow' or 'subsets'"
        )
    if law.kind == "without_replacement":
        # Integrates only the prefixes that cheap rigorous bounds cannot exclude; its error bound
        # already covers the rounding of P's prefix sums (accumulated in extended precision).
        res = _race.wor_dual_minimum(p[order], law.q[order], law.k)
        i, value, err = int(res.index), float(res.value), float(res.error_bound)
    else:
        P = np.concatenate([[0.0], np.cumsum(p[order])])
        Qv, err = law.prefix_prob_all_in(order)
        f = P - Qv
        i = int(np.argmin(f))
        value = 1.0 + float(f[i])
        err += ROUNDING_PER_TERM * law.V  # P's prefix sums
    in_cut = np.zeros(law.V, dtype=bool)
    in_cut[order[:i]] = True
    cut = np.flatnonzero(in_cut)
    checks: dict[str, float] = {}
    if law.kind == "greedy":
        checks["closed_form_minus_value"] = law.optimum(p) - value
    return _cut_certified_result(p, law, value, cut, "prefix", float(err), checks)


def _cut_certified_result(p, law, value, cut, method, err, checks) -> AcceptanceResult:
    """Result of a dual (cut) method, after the independent re-check: the value of the returned cut
    recomputed from the law's own ``prob_all_in`` must equal ``value`` (plus any extra checks)."""
    checks = {"cut_value_minus_value": cut_value(p, law, cut) - value, **checks}
    tol = CERTIFICATE_ATOL + 2 * err
    status = STATUS_OPTIMAL if all(abs(v) <= tol for v in checks.values()) else STATUS_CHECK_FAILED
    if not err <= ERROR_BOUND_MAX:  # a check within 2 * err could not fail: the value is not certified
        status = STATUS_CHECK_FAILED
        checks["error_bound_above_max"] = float(err)
    return AcceptanceResult(
        value=min(value, 1.0),
        cut=cut,
        method=method,
        status=status,
        gap=0.0,
        error_bound=err,
        plan=None,
        law=repr(law),
        checks=checks,
    )


def _subset_sums(x: np.ndarray) -> np.ndarray:
    """``out[mask] = sum of x over the bits of mask`` for all 2^V masks (bit b = token b)."""
    out = np.zeros(1)
    for b in range(x.size):
        out = np.concatenate([out, out + x[b]])
    return out


def _solve_subsets(p: np.ndarray, law: DraftLaw, memory_cap: float | None) -> AcceptanceResult:
    V = law.V
    if V > SUBSETS_MAX_V:
        raise UnsupportedMethodError(
            f"method='subsets' enumerates 2^V token sets and is limited to V <= {SUBSETS_MAX_V} (got V = {V}); use method='prefix' or 'lp'"
        )
    check_memory(8.0 * 6 * 2**V, memory_cap, f"method='subsets' with V = {V}", "use a smaller V")
    P = _subset_sums(p)
    if law.kind == "iid":
        Qall = _subset_sums(law.q) ** law.k
    else:
        check_memory(estimate_bytes("lp", law), memory_cap, f"enumerating {law!r}", "use a smaller V or k")
        sets, weights = law.enumerate_sets(memory_cap=memory_cap)
        bits = np.where(sets >= 0, np.left_shift(1, np.maximum(sets, 0)), 0).sum(axis=1)
        f = np.bincount(bits, weights=weights, minlength=2**V)
        # Sum over subsets (zeta transform): f[H] <- sum of f[m] over m subset of H.
        for b in range(V):
            g = f.reshape(-1, 2, 2**b)
            g[:, 1, :] += g[:, 0, :]
        Qall = f
    vals = P + 1.0 - Qall
    m = int(np.argmin(vals))
    value = float(vals[m])
    cut = np.flatnonzero([(m >> b) & 1 for b in range(V)]).astype(np.int64)
    return _cut_certified_result(p, law, value, cut, "subsets", ROUNDING_PER_TERM * max(V, law.num_tuples()), {})


def _auto_method(law: DraftLaw) -> str:
    """``prefix`` where exact; the dense network simplex on small problems; above
    :data:`_MAXFLOW_FROM_ARCS` dense arcs ``maxflow`` when OR-Tools is installed; without it the
    dense simplex up to its limits, then ``lp`` up to :data:`AUTO_MAX_TUPLES` tuples, else a refusal."""
    if type(law).prefix_cut_order is not DraftLaw.prefix_cut_order:  # the sorted-prefix dual is exact
        return "prefix"
    dense_arcs = num_sets_bound(law) * law.V
    if dense_arcs <= _MAXFLOW_FROM_ARCS:
        return "flow"
    from otspec.bounds.maxflow import MAXFLOW_INSTALL, maxflow_available

    if maxflow_available():
        return "maxflow"
    if dense_arcs <= _FLOW_MAX_ARCS and law.num_tuples() <= AUTO_MAX_TUPLES:
        return "flow"
    if law.num_tuples() <= AUTO_MAX_TUPLES:
        return "lp"
    raise ProblemTooLargeError(
        f"method='auto' on {law!r} has no closed form and would solve a transport problem over "
        f"{law.num_tuples():,} draft tuples x {law.V:,} tokens (above {AUTO_MAX_TUPLES:,} tuples: minutes or more "
        "without the sparse max-flow); install the maxflow extra to solve it in seconds "
        f"({MAXFLOW_INSTALL}), or use a smaller V or k, or pass method='lp' explicitly to run it anyway"
    )


def optimal_acceptance(
    p: Any,
    law: DraftLaw,
    *,
    method: str = "auto",
    memory_cap: float | None = None,
    constraints: Callable | None = None,
) -> AcceptanceResult:
    r"""Exact optimal acceptance of k drafts with joint law ``law`` against target ``p``.

    .. math:: \alpha^*(p, Q) = \max_{\pi \in \Pi(Q, p)} P_\pi(Y \in \bar X)
              = 1 + \min_{H \subseteq \Omega} \big[ P(H) - Q(H^k) \big].

    Parameters
    ----------
    p : array_like, shape (V,)
        Target distribution (float64, non-negative, sums to 1 within 1e-9; never renormalised).
    law : DraftLaw
        From :func:`otspec.iid`, :func:`otspec.without_replacement`, :func:`otspec.greedy`,
        :func:`otspec.product` or :func:`otspec.explicit`, over the same vocabulary.
    method : {"auto", "prefix", "subsets", "lp", "cvxpy", "flow", "maxflow"}
        ``"prefix"``: sort tokens by p/q and scan prefixes -- :math:`q(H)^k` for iid, the
        exponential-race integral with an error bound for without replacement, the closed form
        :math:`P(G) + \sum_{x \notin G} \min(p, \tilde q)` for greedy. ``"subsets"``: brute force
        over all :math:`2^V` sets (V <= 20), the oracle. ``"lp"``: HiGHS on the membership LP over
        enumerated draft sets, with the plan. ``"cvxpy"``: the same LP through cvxpy, with
        ``constraints``. ``"flow"``: exact transport by network simplex (POT), with the plan
        (dense: sets x tokens). ``"maxflow"``: the sparse max-flow source -> draft set -> its
        tokens -> sink with integer capacities :math:`\lfloor x 2^N \rfloor` on OR-Tools, with
        the plan (optional extra ``pip install "otspec[maxflow]"``; the flow is the lower bound,
        the float64 cut the upper bound, :mod:`otspec.bounds.maxflow`).
        ``"auto"``: ``prefix`` where it is exact, otherwise ``flow`` up to 1e6 dense (set x token)
        arcs, above that ``maxflow`` if OR-Tools is installed; without it ``flow`` up to 2.5e7 dense
        arcs and 250 000 tuples, then ``lp`` up to 250 000 tuples, else a
        :class:`~otspec.errors.ProblemTooLargeError` naming the extra.
    memory_cap : float, optional
        Bytes; tuple-level methods estimate their peak memory first and refuse above it
        (default 4 GiB).
    constraints : callable, optional
        ``method="cvxpy"`` only: ``f(lp: MembershipLP) -> list of cvxpy constraints``; the result
        then has status ``"optimal_constrained"`` and is the optimum of the constrained problem.

    Returns
    -------
    AcceptanceResult
        ``value``, ``cut`` (the dual set H), ``method`` (resolved), ``status``, ``gap``,
        ``error_bound``, ``plan`` (tuple-level methods), ``checks``.

    Raises
    ------
    UnsupportedMethodError
        If ``method`` is unknown or not exact for ``law`` (e.g. ``"prefix"`` for a product law), or
        ``constraints`` is given without ``method="cvxpy"``.
    NotADraftLawError
        If ``law`` is not a draft law.
    InvalidOptionError
        If ``constraints`` is not callable, or ``memory_cap`` is not a positive number.
    InvalidDistributionError, ShapeMismatchError
        If ``p`` is not a distribution over the law's vocabulary.
    ProblemTooLargeError
        If the chosen (or every automatic) method would exceed ``memory_cap`` or its size limits.

    Notes
    -----
    Every answer is re-checked in numpy before it is returned: the cut's value
    :math:`P(H) + 1 - Q(H^k)` is recomputed from the law, plans are made exactly feasible and their
    objective recomputed, and LP answers are compared with the best threshold cut of their duals
    (primal-dual gap). A failed check sets ``status="check_failed"``; it never passes silently.

    References
    ----------
    Hu et al., "Towards Optimal Multi-draft Speculative Decoding", ICLR 2025 (the dual / subset
    selection formula); Sun et al., "SpecTr", NeurIPS 2023 (the OTM-k problem).

    Examples
    --------
    >>> import otspec
    >>> p, q = [0.5, 0.3, 0.2], [0.2, 0.3, 0.5]
    >>> round(otspec.optimal_acceptance(p, otspec.iid(q, 1)).value, 12)  # 1 - TV
    0.7
    >>> r = otspec.optimal_acceptance(p, otspec.iid(q, 2), method="lp")
    >>> r.status, round(r.value, 9)
    ('optimal', 0.86)
    """
    if method not in METHODS:
        raise UnsupportedMethodError(f"method must be one of {', '.join(METHODS)} (got {method!r}); pick one of those")
    if not isinstance(law, DraftLaw):
        raise NotADraftLawError(
            f"law must be a draft law such as otspec.iid(q, k) (got {type(law).__name__}); build one with the law constructors"
        )
    p = as_distribution(p, "p")
    law.check_compatible(p)
    as_memory_cap(memory_cap)
    if constraints is not None and not callable(constraints):
        raise InvalidOptionError(
            f"constraints must be a callable f(lp) -> list of cvxpy constraints (got {type(constraints).__name__}); pass a function"
        )
    if constraints is not None and method not in ("cvxpy",):
        raise UnsupportedMethodError(f"constraints are only supported with method='cvxpy' (got method={method!r}); pass method='cvxpy'")
    chosen = _auto_method(law) if method == "auto" else method
    if chosen == "prefix":
        return _solve_prefix(p, law)
    if chosen == "subsets":
        return _solve_subsets(p, law, memory_cap)
    return solve_tuple_level(p, law, chosen, memory_cap, constraints)
