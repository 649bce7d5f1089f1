r"""Sample from the optimal transport plan of ``otspec.optimal_acceptance(p, law, method="lp")``.

Given drafts with set s, output token y of s with probability :math:`a_s(y)/Q(s)` (the plan's
accepted mass), otherwise draw from the plan's residual
:math:`r = (p - \sum_s a_s)_+ / (1-\alpha)`. This attains :math:`\alpha^*(p, Q)` on every
enumerable law.
A draft set whose probability :math:`Q(s)` is 0 in float64 (an underflowed product) carries no
mass; its row is defined as the residual :math:`r` (nothing accepted), so kernels never hold NaN.

Deviation from ``MembershipPlan.conditional``: the LP solution is feasible only up to HiGHS'
tolerance (1e-10), so before use we scale down, token by token, any column whose accepted mass
exceeds p(y) and, set by set, any row exceeding Q(s), and recompute the residual from the cleaned
plan. The output law is then p to rounding (losslessness is exact, not 1e-10-approximate); the
acceptance moves by at most the LP tolerance.
"""

from __future__ import annotations

import warnings

import numpy as np

from otspec._docs import fill_doc
from otspec.bounds import optimal_acceptance
from otspec.bounds.result import STATUS_SOLVER_FAILED, SolverFailedWarning
from otspec.laws import DraftLaw
from otspec.sampling import sample_categorical
from otspec.verifiers.base import Verifier
from otspec.verifiers.tuples import set_index

__all__ = ["OptimalPlanVerifier", "optimal_plan", "CleanPlan"]


class CleanPlan:
    """An exactly feasible copy of an LP plan: ``sets``, ``set_weights``, ``accept``, ``residual``,
    ``value`` (acceptance of the cleaned plan), ``lp_value``, ``status``.

    Columns whose accepted mass exceeds :math:`p(y)` and rows exceeding :math:`Q(s)` are scaled
    down (module docstring), then the residual is recomputed from the cleaned plan.

    Parameters
    ----------
    p : ndarray, shape (V,)
        Target distribution.
    plan : TransportPlan
        The LP's plan (``sets``, ``set_weights``, ``accept``).
    lp_value : float
        The LP's optimal value, kept for reference.
    status : str
        The LP result's status.
    """

    def __init__(self, p: np.ndarray, plan, lp_value: float, status: str):
        sets = np.asarray(plan.sets, dtype=np.int64)
        Qs = np.asarray(plan.set_weights, dtype=np.float64)
        acc = np.where(sets >= 0, np.maximum(np.asarray(plan.accept, dtype=np.float64), 0.0), 0.0)
        V = p.shape[0]
        ok = sets >= 0
        col = np.bincount(sets[ok], weights=acc[ok], minlength=V)
        scale = np.where(col > p, p / np.where(col > 0, col, 1.0), 1.0)
        acc = np.where(ok, acc * scale[np.maximum(sets, 0)], 0.0)
        row = acc.sum(axis=1)
        acc = np.where((row > Qs)[:, None], acc * (Qs / np.where(row > 0, row, 1.0))[:, None], acc)
        col = np.bincount(sets[ok], weights=acc[ok], minlength=V)
        left = np.maximum(p - col, 0.0)
        tot = left.sum()
        self.sets, self.set_weights, self.accept = sets, Qs, acc
        self.residual = left / tot if tot > 0 else np.array(p, copy=True)
        self.value = float(acc.sum())
        self.lp_value = float(lp_value)
        self.status = status


class OptimalPlanVerifier(Verifier):
    r"""Samples the LP-optimal coupling; acceptance equals :math:`\alpha^*(p, Q)` (any enumerable law).

    Examples
    --------
    >>> import otspec
    >>> from otspec.verifiers import optimal_plan
    >>> p, law = [0.5, 0.3, 0.2], otspec.iid([0.2, 0.3, 0.5], 2)
    >>> abs(optimal_plan.acceptance(p, law).value - otspec.optimal_acceptance(p, law).value) < 1e-9
    True
    """

    name = "optimal_plan"
    optimal = True
    rule = "sampling the optimal plan applies to every draft law small enough to enumerate"
    reference = "Hu et al. 2025 (OTM LP); otspec.optimal_acceptance(method='lp')"
    monte_carlo_ok = False

    def applies_to(self, law: DraftLaw) -> bool:
        return True

    @fill_doc
    def plan(self, p, law) -> CleanPlan:
        """The cleaned optimal plan for ``(p, law)`` (cached).

        Parameters
        ----------
        {p_enum_law_args}

        Returns
        -------
        CleanPlan
            The plan the verifier samples from; computed once per ``(law, p)`` (cached on the law).

        Warns
        -----
        SolverFailedWarning
            When the LP's solver did not end optimal (``status == "solver_failed"``): its solution
            is not read, the plan accepts nothing and every output is a fresh draw from ``p``
            (lossless, not the optimal coupling).

        Raises
        ------
        InvalidDistributionError, ShapeMismatchError
            If ``p`` is not a distribution over the law's vocabulary.
        ProblemTooLargeError
            If the LP over the law's draft sets exceeds the memory cap.
        """
        return self._plan_for(self._check(p, law), law)

    def _plan_for(self, p, law) -> CleanPlan:
        def build() -> CleanPlan:
            res = optimal_acceptance(p, law, method="lp")
            if res.plan is None:  # pragma: no cover - the LP method always returns a plan
                raise RuntimeError("optimal_acceptance(method='lp') returned no plan")
            if res.status == STATUS_SOLVER_FAILED:  # the verifier claims the optimum: say it does not have it
                warnings.warn(
                    f"optimal_plan's LP did not end optimal ({res.solver_info}); its solution is not read and the plan "
                    "accepts nothing: every output is a fresh draw from p (lossless, not optimal); check the HiGHS options of this process",
                    SolverFailedWarning,
                    stacklevel=4,
                )
            return CleanPlan(p, res.plan, res.value, res.status)

        return law.cached("optimal_plan.plan", p, build)

    def _prepare(self, p, law):
        self._plan_for(p, law)

    def _parts(self, p, law, tuples):
        cp = self._plan_for(p, law)
        s = set_index(cp.sets, tuples)
        # A set of probability 0 (its weight underflowed) carries no mass: its row is defined as
        # the residual law (accept nothing), never 0/0.
        Qs = cp.set_weights[s][:, None]
        return cp, s, np.divide(cp.accept[s], Qs, out=np.zeros(cp.accept[s].shape), where=Qs > 0)

    def _rows(self, p, law, tuples):
        cp, s, a = self._parts(p, law, tuples)
        n = tuples.shape[0]
        toks = cp.sets[s]
        ok = toks >= 0
        pi = np.zeros((n, law.V))
        rr = np.repeat(np.arange(n), toks.shape[1]).reshape(toks.shape)
        np.add.at(pi, (rr[ok], toks[ok]), a[ok])
        pi += np.maximum(1.0 - a.sum(axis=1), 0.0)[:, None] * cp.residual[None, :]
        return pi

    def _sample_rows(self, p, law, tuples, coin_rng, res_rng):
        cp, s, a = self._parts(p, law, tuples)
        n = tuples.shape[0]
        toks = cp.sets[s]
        ca = np.cumsum(a, axis=1)
        u = coin_rng.random(n)
        j = np.sum(ca <= u[:, None], axis=1)  # j == k: the residual branch
        keep = j < toks.shape[1]
        out = np.full(n, -1, dtype=np.int64)
        out[keep] = toks[np.flatnonzero(keep), j[keep]]
        rej = np.flatnonzero(~keep | (out < 0))
        out[rej] = sample_categorical(res_rng, cp.residual, rej.size)
        return out


optimal_plan = OptimalPlanVerifier()
