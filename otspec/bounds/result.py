"""Result types of the bound solvers: an optimal value with its certificate, and a transport plan.

Every result that solved a transport problem carries its optimal coupling as a
:class:`TransportPlan`: a :class:`MembershipPlan` for the single-step optimum
(:attr:`AcceptanceResult.plan`), a :class:`BlockPlan` for the block and tree LPs
(:attr:`otspec.BlockOptimumResult.plan`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from otspec.errors import InvalidDraftsError

__all__ = [
    "AcceptanceResult",
    "TransportPlan",
    "MembershipPlan",
    "BlockPlan",
    "STATUS_OPTIMAL",
    "STATUS_CONSTRAINED",
    "STATUS_CHECK_FAILED",
    "STATUS_SOLVER_FAILED",
    "SolverFailedWarning",
]

#: The value is the optimum and every plain-numpy re-check passed.
STATUS_OPTIMAL = "optimal"
#: cvxpy with extra user constraints: the value is the optimum *of the constrained problem*.
STATUS_CONSTRAINED = "optimal_constrained"
#: A re-check (marginals, objective, cut value, gap) exceeded its tolerance: do not trust the value.
STATUS_CHECK_FAILED = "check_failed"
#: The solver itself did not report an optimal solution.
STATUS_SOLVER_FAILED = "solver_failed"


class SolverFailedWarning(UserWarning):
    """A verifier built on an LP (``khisti``'s selection weights, ``optimal_plan``'s transport plan)
    whose solve did not end optimal. Its solution is not read: the verifier runs a lossless fall-back
    rule instead, whose acceptance it reports exactly but which is not the optimal one."""


@dataclass(frozen=True, eq=False)
class TransportPlan:
    r"""An optimal coupling of a draft law and the verifier's output, as found by a bound solver.

    The common base of the plans a result carries: :class:`MembershipPlan` (single step, draft
    sets to output tokens) and :class:`BlockPlan` (block / tree LP, drafted outcomes to emitted
    blocks). ``value`` is the objective the plan attains: the acceptance :math:`P(Y \in \bar X)`
    for a membership plan, :math:`E[\tau]` for a block plan.

    Attributes
    ----------
    value : float
        The objective attained by the plan.
    """

    value: float


@dataclass(frozen=True, eq=False)
class MembershipPlan(TransportPlan):
    r"""An optimal coupling of the draft law and the target, in membership form.

    Draft tuples that share the same set of distinct tokens are treated alike, so the plan is stored
    per draft *set*: ``sets[s]`` lists the distinct tokens of set ``s`` (``-1`` padded) and
    ``set_weights[s]`` its probability. ``accept[s, j]`` is the joint probability of drafting set
    ``s`` and outputting its token ``sets[s, j]``. The remaining mass of every set is sent to the
    common ``residual`` law, so the conditional output law given drafts :math:`\bar x` with set s is

    .. math:: \pi(y \mid \bar x) = \frac{a_s(y) + (Q(s) - \sum_{y'} a_s(y'))\, r(y)}{Q(s)},
              \qquad r = \frac{p - \sum_s a_s}{1 - \alpha}.

    ``value`` is :math:`\alpha = \sum_{s, y} a_s(y)`.

    Attributes
    ----------
    sets : ndarray of int64, shape (S, k)
        Distinct tokens of each draft set, ``-1`` padded.
    set_weights : ndarray, shape (S,)
        :math:`Q(s)`, probability of drafting set ``s``.
    accept : ndarray, shape (S, k)
        :math:`a_s(y)` for ``y = sets[s, j]`` (0 at padding).
    residual : ndarray, shape (V,)
        The residual law :math:`r`.
    value : float
        The acceptance :math:`\alpha` of the plan.
    """

    sets: np.ndarray
    set_weights: np.ndarray
    accept: np.ndarray
    residual: np.ndarray
    value: float

    @property
    def V(self) -> int:
        """Vocabulary size."""
        return int(self.residual.shape[0])

    def _set_index(self) -> dict:
        index = getattr(self, "_index_cache", None)
        if index is None:
            index = {tuple(sorted(int(x) for x in row if x >= 0)): s for s, row in enumerate(self.sets)}
            object.__setattr__(self, "_index_cache", index)
        return index

    def conditional(self, drafts: Any) -> np.ndarray:
        """The output law :math:`\\pi(\\cdot \\mid \\text{drafts})`, shape ``(V,)``.

        A draft set whose probability :math:`Q(s)` is 0 in float64 (e.g. it underflowed) carries no
        mass, so any row keeps the plan lossless; its row is defined as the residual law :math:`r`
        (never ``0/0``).

        Parameters
        ----------
        drafts : array_like of int, shape (k,)
            One draft tuple (only its set of distinct tokens matters).

        Returns
        -------
        ndarray, shape (V,)
            :math:`\\pi(\\cdot \\mid \\bar x)` of the class formula; sums to 1.

        Raises
        ------
        InvalidDraftsError
            If the tuple's set is not one of the plan's sets (probability 0 under the law).
        """
        key = tuple(sorted(set(int(x) for x in np.asarray(drafts).reshape(-1))))
        s = self._set_index().get(key)
        if s is None:
            raise InvalidDraftsError(f"drafts {list(key)} form a set the plan never sees (probability 0); pass drafts from the plan's law")
        if not self.set_weights[s] > 0:
            return np.array(self.residual, dtype=np.float64, copy=True)
        out = self.residual * (self.set_weights[s] - self.accept[s].sum())
        row = self.sets[s]
        ok = row >= 0
        np.add.at(out, row[ok], self.accept[s][ok])
        return out / self.set_weights[s]

    def kernel(self, tuples: np.ndarray) -> np.ndarray:
        """Conditional output laws for many draft tuples, shape ``(M, V)`` (small problems).

        Parameters
        ----------
        tuples : array_like of int, shape (M, k)
            Draft tuples.

        Returns
        -------
        ndarray, shape (M, V)
            Row ``m`` is :meth:`conditional` of ``tuples[m]``.
        """
        return np.stack([self.conditional(t) for t in np.asarray(tuples)])

    def accepted_per_token(self) -> np.ndarray:
        """:math:`\\sum_s a_s(y)`: joint probability that y is output *and* was drafted.

        Returns
        -------
        ndarray, shape (V,)
            Accepted mass per token; it sums to ``value`` and is at most ``p`` entrywise.
        """
        out = np.zeros(self.V)
        ok = self.sets >= 0
        np.add.at(out, self.sets[ok], self.accept[ok])
        return out


@dataclass(frozen=True, eq=False)
class BlockPlan(TransportPlan):
    r"""An optimal coupling of the block / tree LP: drafted outcome to emitted block.

    Column ``j`` is the joint probability ``mass[j]`` :math:`= \pi(o, t, n, y)` of drafting
    outcome ``o = outcome[j]`` (a draft path, or a draft tree) and emitting the block made of the
    accepted prefix of length ``t = tau[j]`` -- node ``n = node[j]``, the index of that prefix among
    the :math:`V^t` prefixes of length t in lexicographic order -- followed by the token
    ``y = y[j]``. Columns whose emitted block has target probability 0 are not built (they are 0 in
    every feasible plan). The row sums are the draft law, :math:`\sum_j [o_j = o]\, \pi_j = Q(o)`
    (``outcome_weights``), up to the solver's tolerance, and ``value`` is
    :math:`E[\tau] = \sum_j t_j \pi_j` (:doc:`block`, the block optimum).

    Attributes
    ----------
    value : float
        :math:`E[\tau]` of the plan.
    outcome_weights : ndarray, shape (n_outcomes,)
        :math:`Q(o)` of every drafted outcome (the LP's draft-marginal right-hand side).
    mass : ndarray, shape (n_columns,)
        :math:`\pi` per column, as solved (an entry may be negative at rounding level; the result's
        ``checks["negative_mass"]`` bounds it).
    outcome, tau, node, y : ndarray of int64, shape (n_columns,)
        The labels of every column.
    """

    outcome_weights: np.ndarray
    mass: np.ndarray
    outcome: np.ndarray
    tau: np.ndarray
    node: np.ndarray
    y: np.ndarray

    def __post_init__(self) -> None:
        for name in ("outcome_weights", "mass", "outcome", "tau", "node", "y"):
            getattr(self, name).setflags(write=False)

    def conditional(self, outcome: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The law of the emitted block given drafted outcome ``outcome``.

        Parameters
        ----------
        outcome : int
            Index of the drafted outcome, in ``[0, n_outcomes)``.

        Returns
        -------
        tau, node, y : ndarray of int64
            Labels of the outcome's columns: accepted length, prefix node, next token.
        probability : ndarray
            ``mass / Q(outcome)`` per column (all zeros when :math:`Q(o)` is 0).

        Raises
        ------
        InvalidDraftsError
            If ``outcome`` is not a valid index.
        """
        o = int(outcome)
        if not 0 <= o < self.outcome_weights.shape[0]:
            raise InvalidDraftsError(
                f"outcome must be an index in [0, {self.outcome_weights.shape[0]}) (got {outcome!r}); pass the index of a drafted outcome"
            )
        cols = np.flatnonzero(self.outcome == o)
        w = float(self.outcome_weights[o])
        prob = self.mass[cols] / w if w > 0 else np.zeros(cols.size)
        return self.tau[cols], self.node[cols], self.y[cols], prob


@dataclass(frozen=True, eq=False)
class AcceptanceResult:
    r"""The optimal acceptance :math:`\alpha^*(p, Q)` and its certificate.

    Attributes
    ----------
    value : float
        The optimum :math:`\max_\pi P_\pi(Y \in \bar X)`.
    cut : ndarray of int
        Token ids of the dual set :math:`H` attaining :math:`P(H) + 1 - Q(H^k)` (sorted).
    method : str
        The method that produced ``value`` (``"auto"`` is resolved to the one used).
    status : str
        ``"optimal"``; ``"optimal_constrained"`` (cvxpy with user constraints); ``"check_failed"``
        or ``"solver_failed"`` when the value must not be trusted.
    gap : float or None
        The certified duality gap: the cut's value (upper bound, re-computed in numpy from the law)
        minus :attr:`lower_bound`. Tuple-level methods: the plan's value; ``prefix``: the acceptance
        :math:`\sum_y \min(p, r^*)` of the closed-form selection law :math:`r^*`, after checking
        that it lies in the base polytope (the Lorenz test for i.i.d. drafts; enumeration of every
        token set for without replacement where that fits), or the explicit plan of the greedy
        closed form; ``product``: the branch-and-bound's closed leaves, re-checked. ``None`` when
        there is no lower bound (``subsets``, a dual-only method; without-replacement laws too
        large to check :math:`r^*`'s membership): :attr:`gap_reason` says why. The same meaning as
        :attr:`otspec.BlockOptimumResult.gap`.
    error_bound : float
        Bound on :math:`|\text{value} - \alpha^*|` from numerics: rounding for closed forms, the
        quadrature bound for without-replacement, solver tolerances plus gap for LPs.
    plan : MembershipPlan or None
        The coupling (a :class:`TransportPlan`), when an LP/transport problem was solved.
    law : str
        ``repr`` of the draft law.
    checks : mapping
        The residual of every re-check performed (name -> float).
    solver_info : str
        The solver's own status message (LP, flow and cvxpy methods; empty for closed forms).
    lower_bound : float or None
        The certified lower bound on :math:`\alpha^*` behind :attr:`gap` (``None``: dual only).
    gap_reason : str
        Why :attr:`gap` is ``None`` (empty when there is a gap).
    certificate : object or None
        The method's own certificate: for ``method="product"`` the
        :class:`~otspec.bounds.product.ProductCertificate` (its tree of boxes, re-checked).
    """

    value: float
    cut: np.ndarray
    method: str
    status: str
    gap: float | None
    error_bound: float
    plan: MembershipPlan | None = None
    law: str = ""
    checks: Mapping[str, float] = field(default_factory=dict)
    solver_info: str = ""
    lower_bound: float | None = None
    gap_reason: str = ""
    certificate: Any = None

    @property
    def ok(self) -> bool:
        """True when the value can be trusted (status optimal or optimal_constrained)."""
        return self.status in (STATUS_OPTIMAL, STATUS_CONSTRAINED)

    def __repr__(self) -> str:
        cut = self.cut.tolist() if self.cut.size <= 8 else f"[{self.cut.size} tokens]"
        plan = "yes" if self.plan is not None else "no"
        gap = "None" if self.gap is None else f"{self.gap:.2e}"
        return (
            f"AcceptanceResult(value={self.value:.12g}, method={self.method!r}, status={self.status!r}, "
            f"gap={gap}, error_bound={self.error_bound:.2e}, cut={cut}, plan={plan}, law={self.law!r})"
        )

    def _repr_html_(self) -> str:
        """The result as an HTML table (Jupyter shows it in place of the ``repr``)."""
        from otspec._display import fields_table

        cut = self.cut.tolist() if self.cut.size <= 8 else f"{self.cut.size} tokens"
        gap = f"{self.gap:.2e}" if self.gap is not None else f"none ({self.gap_reason})" if self.gap_reason else None
        lower = None if self.lower_bound is None else f"{self.lower_bound:.12g}"
        fields = [("value", f"{self.value:.12g}"), ("method", self.method), ("status", self.status), ("gap", gap)]
        fields += [("error bound", f"{self.error_bound:.2e}"), ("lower bound", lower), ("cut", cut)]
        fields += [("plan", self.plan is not None), ("law", self.law)]
        return fields_table("AcceptanceResult", fields)

    def to_dict(self) -> dict:
        """JSON-ready summary (the plan is left out).

        Returns
        -------
        dict
            ``value``, ``cut_size``, ``cut`` (``None`` above 64 tokens), ``method``, ``status``,
            ``gap`` (``None`` without a lower bound), ``gap_reason``, ``lower_bound``,
            ``error_bound``, ``law``, ``checks`` and ``solver_info``, as plain Python types.
        """
        return {
            "value": float(self.value),
            "cut_size": int(self.cut.size),
            "cut": [int(x) for x in self.cut] if self.cut.size <= 64 else None,
            "method": self.method,
            "status": self.status,
            "gap": None if self.gap is None else float(self.gap),
            "gap_reason": self.gap_reason,
            "lower_bound": None if self.lower_bound is None else float(self.lower_bound),
            "error_bound": float(self.error_bound),
            "law": self.law,
            "checks": {k: float(v) for k, v in self.checks.items()},
            "solver_info": self.solver_info,
        }
