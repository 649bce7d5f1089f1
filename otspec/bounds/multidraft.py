r"""The front door of the optimal multi-draft acceptance :math:`\alpha^*(p, Q)` (Hu et al., ICLR 2025).

.. math:: \alpha^*(p, Q) = \max_{\pi \in \Pi(Q, p)} P_\pi(Y \in \{X_1..X_k\})
          = \min_{H \subseteq \Omega} \big[ P(H) + 1 - Q(H^k) \big]

(max-flow/min-cut on source -> draft tuple (cap Q) -> its tokens (cap inf) -> sink (cap p);
:doc:`math`, the min-cut dual). For i.i.d. and without-replacement drafts the minimum is attained on a prefix
of the tokens sorted by p/q (section 3.2), which gives O(V log V) closed forms.

Shaped like :func:`scipy.optimize.linprog`: :func:`optimal_acceptance` validates, picks a method,
checks its size (:mod:`otspec.bounds.sizing`), calls one back end -- the dual methods
:mod:`~otspec.bounds.prefix` and :mod:`~otspec.bounds.subsets` on the law, the tuple-level
:mod:`~otspec.bounds.lp`, :mod:`~otspec.bounds.cvx`, :mod:`~otspec.bounds.flow` and
:mod:`~otspec.bounds.maxflow` on the enumerated draft sets -- and hands the answer to the one
certifier, :func:`otspec.bounds.certificate.certify`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from otspec._validation import as_distribution, as_memory_cap
from otspec.bounds import cvx, flow, lp, maxflow, prefix, product, subsets
from otspec.bounds.certificate import certify
from otspec.bounds.result import AcceptanceResult
from otspec.bounds.sizing import check_acceptance, estimate_bytes, num_sets_bound
from otspec.bounds.subsets import SUBSETS_MAX_V
from otspec.errors import InvalidOptionError, NotADraftLawError, ProblemTooLargeError, UnsupportedMethodError
from otspec.laws import ALL as LAWS
from otspec.laws import DraftLaw

__all__ = ["optimal_acceptance", "METHODS", "SUBSETS_MAX_V", "AUTO_MAX_TUPLES"]

#: The methods of :func:`optimal_acceptance` (``"auto"`` picks one of the others).
METHODS = ("auto", "prefix", "subsets", "lp", "cvxpy", "flow", "maxflow", "product")

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


def _auto_method(law: DraftLaw, memory_cap: float | None) -> str:
    """``prefix`` where exact; the dense network simplex on small problems; above
    :data:`_MAXFLOW_FROM_ARCS` dense arcs ``maxflow`` when OR-Tools is installed; without it the
    dense simplex up to its limits, then ``lp`` up to :data:`AUTO_MAX_TUPLES` tuples, else a refusal
    whose advice offers only what would run within ``memory_cap``."""
    if law.prefix_exact:
        return "prefix"
    dense_arcs = num_sets_bound(law) * law.V
    if dense_arcs <= _MAXFLOW_FROM_ARCS:
        return "flow"
    cap = as_memory_cap(memory_cap)
    if maxflow.maxflow_available():
        return "product" if law.branch_and_bound and estimate_bytes("maxflow", law) > cap else "maxflow"
    if dense_arcs <= _FLOW_MAX_ARCS and law.num_tuples() <= AUTO_MAX_TUPLES:
        return "flow"
    if law.num_tuples() <= AUTO_MAX_TUPLES:
        return "lp"
    if law.branch_and_bound:
        return "product"
    fixes = []
    if estimate_bytes("maxflow", law) <= cap:
        fixes.append(f"install the maxflow extra to solve it in seconds ({maxflow.MAXFLOW_INSTALL})")
    fixes.append("use a smaller V or k")
    if estimate_bytes("lp", law) <= cap:
        fixes.append("pass method='lp' explicitly to run it anyway")
    raise ProblemTooLargeError(
        f"method='auto' on {law!r} has no closed form and would solve a transport problem over "
        f"{law.num_tuples():,} draft tuples x {law.V:,} tokens (above {AUTO_MAX_TUPLES:,} tuples: minutes or more "
        f"without the sparse max-flow); {', or '.join(fixes)}"
    )


def _kinds_where(capability: str) -> str:
    """The registered laws with a class-level ``capability``, as prose: ``"a, b and c"``."""
    kinds = [cls.kind for cls in LAWS if getattr(cls, capability)]
    return " and ".join(filter(None, [", ".join(kinds[:-1]), kinds[-1]]))


def _check_applies(method: str, law: DraftLaw) -> None:
    """Refuse a method that cannot solve ``law`` (before any sizing or enumeration work)."""
    if method == "prefix" and not law.prefix_exact:
        raise UnsupportedMethodError(
            f"method='prefix' is exact only for {_kinds_where('prefix_exact')} laws (got {law.kind}); use method='lp', 'flow' or 'subsets'"
        )
    if method == "subsets" and law.V > SUBSETS_MAX_V:
        raise UnsupportedMethodError(
            f"method='subsets' enumerates 2^V token sets and is limited to V <= {SUBSETS_MAX_V} (got V = {law.V}); "
            + ("use method='prefix' or 'lp'" if law.prefix_exact else "use method='flow' or 'lp'")
        )
    if method == "product" and not law.branch_and_bound:
        raise UnsupportedMethodError(
            f"method='product' is the branch-and-bound for independent drafters (otspec.product) (got a {law.kind} law); "
            + ("use method='prefix'" if law.prefix_exact else "use method='flow' or 'lp'")
        )
    if method == "maxflow":
        maxflow.require_ortools()  # the install hint before any sizing or enumeration work


# long-function: the public entry: its numpydoc docstring is most of its length
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
    method : {"auto", "prefix", "subsets", "lp", "cvxpy", "flow", "maxflow", "product"}
        ``"prefix"``: sort tokens by p/q and scan prefixes -- :math:`q(H)^k` for iid, the
        exponential-race integral with an error bound for without replacement, the closed form
        :math:`P(G) + \sum_{x \notin G} \min(p, \tilde q)` for greedy. ``"subsets"``: brute force
        over all :math:`2^V` sets (V <= 20), the oracle. ``"lp"``: HiGHS on the membership LP over
        enumerated draft sets, with the plan. ``"cvxpy"``: the same LP through cvxpy, with
        ``constraints``. ``"flow"``: exact transport by network simplex (POT), with the plan
        (dense: sets x tokens). ``"maxflow"``: the sparse max-flow source -> draft set -> its
        tokens -> sink with integer capacities :math:`\lfloor x 2^N \rfloor` on OR-Tools, with
        the plan (optional extra ``pip install "otspec[maxflow]"``; the flow is the lower bound,
        the float64 cut the upper bound, :mod:`otspec.bounds.maxflow`). ``"product"``: product
        laws only, at full vocabulary: a branch-and-bound over boxes of the drafters' cut masses
        with a two-sided certificate (the cut, and the closed boxes, re-checked;
        :mod:`otspec.bounds.product`); no coupling.
        ``"auto"``: ``prefix`` where it is exact, otherwise ``flow`` up to 1e6 dense (set x token)
        arcs, above that ``maxflow`` if OR-Tools is installed (for a product law: if its estimate
        fits ``memory_cap``); without it ``flow`` up to 2.5e7 dense arcs and 250 000 tuples, then
        ``lp`` up to 250 000 tuples; beyond those limits ``product`` for a product law, else a
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
    chosen = _auto_method(law, memory_cap) if method == "auto" else method
    _check_applies(chosen, law)
    check_acceptance(chosen, law, memory_cap)
    if chosen == "prefix":
        return certify(p, law, prefix.solve(p, law))
    if chosen == "subsets":
        return certify(p, law, subsets.solve(p, law, memory_cap))
    if chosen == "product":
        return certify(p, law, product.solve(p, law))
    sets, weights = law.enumerate_sets(memory_cap=memory_cap)
    if chosen == "cvxpy":
        return certify(p, law, cvx.solve(p, sets, weights, constraints))
    back_end = {"lp": lp, "flow": flow, "maxflow": maxflow}[chosen]
    return certify(p, law, back_end.solve(p, sets, weights))
