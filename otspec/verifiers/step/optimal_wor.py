r"""The optimal verifier for k drafts sampled without replacement (registered as ``optimal_wor``).

A two-level Luce rule (``docs/optimal_wor.rst`` has the proofs):

1. **Optimal selection law** (:mod:`~otspec.verifiers.step._wor_selection`). The optimal cut
   :math:`H^*` is a prefix in :math:`p/q` order (Lemma Q); with :math:`A = \Omega \setminus H^*`,
   :math:`r^* = \min(p, cq)` on A and :math:`\max(p, c'q)` on :math:`H^*` lies in the base polytope
   of :math:`f(S) = P(D \cap S \ne \emptyset)` and accepts :math:`\alpha^*_{WOR}`.
2. **The rule.** If a draft lies in A, select y among the drafts in A with probability
   :math:`b_y / b(D \cap A)`; otherwise select among all drafts with probability
   :math:`b_y / b(D)`. Weights b with selection law :math:`r^*` exist (matrix-scaling theorem) and
   minimise a convex function; they are found by Anderson-accelerated Sinkhorn
   (:mod:`~otspec.verifiers.step._luce_weights`, plus a Newton polish on enumerable laws).
3. **Accept step.** Single-draft speculative sampling from the rule's law :math:`r_b` to p: keep y
   with :math:`\min(1, p(y)/\tilde r(y))`, else draw from :math:`\mathrm{norm}((p - \tilde r)_+)`,
   where :math:`\tilde r` is the law oracle's value of :math:`r_b`
   (:mod:`~otspec.verifiers.step._luce_law`): exact on enumerable laws, else a double integral
   whose L1 error estimate is reported. The output law is p up to :math:`2\|r_b - \tilde r\|_1`
   (exactly p when :math:`\tilde r = r_b`), and the acceptance is :math:`\sum \min(p, r_b)`,
   certified against :math:`\alpha^*_{WOR}`: :meth:`OptimalWORVerifier.state` reports the gap.
   The closed-form acceptance is :math:`\sum_y \tilde r(y) \min(1, p(y)/\tilde r(y))`: exact on
   enumerable laws, else within the oracle's ``law_error`` (in the result's extras) of the true
   :math:`\sum_y r_b(y) \min(1, p(y)/\tilde r(y))`. At scale it needs the weight fit (seconds):
   ``acceptance(method="auto")`` fits and returns it, while ``method="closed_form"`` on a large
   pair not yet prepared raises, like verifiers without a closed form (so callers that ask for
   closed forms per decoding step never pay the fit).

Degenerate ties (a tight set of :math:`r^*` other than the empty set, A and the vocabulary) would
need nested Luce levels along a chain of tight sets; this implementation uses the documented
fallback instead: the weights are the best the iteration reaches (some run towards 0 or infinity),
the rule stays lossless (the accept step uses the law of the weights actually used), and the
shortfall :math:`\alpha^*_{WOR} - \sum\min(p, r_b) \le \|r_b - r^*\|_1` is reported as the gap.

Sharp rows (p or q nearly one-hot): the oracle evaluates floored weights (``WEIGHT_FLOOR`` of
:mod:`~otspec.verifiers.step._luce_law`) and the rule uses the same ones; a fit at scale that ends
above :data:`RETRY_RESIDUAL` is run again with the plain MM step and the better one is kept. The
reported gap is that of the law actually used in every case.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from otspec._docs import fill_doc
from otspec.laws import DraftLaw
from otspec.verifiers.base import Verifier
from otspec.verifiers.schedule import AcceptSchedule, accept_ratio, residual
from otspec.verifiers.step._luce_law import LuceLaw, floor_weights, luce_law_exact, luce_law_quadrature, luce_selection_rows
from otspec.verifiers.step._luce_weights import fit_luce_weights, fit_luce_weights_sets
from otspec.verifiers.step._wor_selection import wor_selection

__all__ = ["OptimalWORState", "OptimalWORVerifier", "optimal_wor"]

#: Enumerate the draft sets (exact law, Newton polish) when there are at most this many.
EXACT_MAX_SETS = 20_000
#: ... and at most this many tokens with q > 0 (Newton assembles a dense Hessian).
EXACT_MAX_SUPPORT = 400
#: At scale the fit runs on the coarse oracle (step ``h_fit``, bias ~1e-5 to 1e-4) until this
#: residual, then on the accept step's oracle (step ``h``) until ``tol``.
COARSE_TOL = 1e-4
#: ... or until its best residual has not halved in this many evaluations (the coarse oracle's
#: bias, ~6e-4 at k = 8, can lie above COARSE_TOL).
COARSE_PATIENCE = 2
#: The second phase stops when its best residual has not halved in this many evaluations (its floor).
FINE_PATIENCE = 4
#: The fit's step at scale is the full Jacobi Newton step (damping 1; the enumerated path keeps the
#: half step): on the quadrature oracle it needs about half the evaluations of the half step.
FIT_DAMPING = 1.0
#: A fit at scale that ends above this residual is run again with the plain (monotone MM) step
#: from the same start, and the better of the two is kept: on sharp rows (one token holding almost
#: all of q) the Jacobi step, scaled by up to 1e3, overshoots from the start and stalls far from r*.
RETRY_RESIDUAL = 1e-6


@dataclass(frozen=True, eq=False)
class OptimalWORState:
    """Everything the verifier computes for one (p, law) pair.

    Attributes
    ----------
    r_star : ndarray, shape (V,)
        The optimal selection law :math:`r^*`.
    in_A : ndarray of bool, shape (V,)
        The upper level A (complement of the optimal prefix cut).
    b : ndarray, shape (V,)
        The Luce weights.
    law : LuceLaw
        The oracle's selection law :math:`\\tilde r` of the rule with weights ``b`` (used by the
        accept step) and its error.
    alpha_star : float
        :math:`\\alpha^*_{WOR}` (prefix scan, error ``alpha_error``).
    alpha_error : float
        Error bound of ``alpha_star`` (the race integral's).
    acceptance : float
        :math:`\\sum_y \\min(p, \\tilde r)`, the verifier's acceptance up to ``law.error``.
    gap : float
        ``alpha_star - acceptance``: the certified shortfall is at most
        ``gap + law.error + alpha_error``.
    fit_residual : float
        :math:`\\|\\tilde r - r^*\\|_1` after the weight fit.
    fit_iterations : int
        Oracle evaluations (and Newton steps) of the fit.
    """

    r_star: np.ndarray
    in_A: np.ndarray
    b: np.ndarray
    law: LuceLaw
    alpha_star: float
    alpha_error: float
    acceptance: float
    gap: float
    fit_residual: float
    fit_iterations: int


class OptimalWORVerifier(Verifier):
    r"""The optimal verifier for drafts sampled without replacement: a two-level Luce rule.

    Parameters
    ----------
    h : float
        Step of the final law evaluation's trapezoidal rules (0.25: L1 error ~1e-15 on the tested
        cases; see :func:`~otspec.verifiers.step._luce_law.luce_law_quadrature`).
    h_fit : float
        Step of the first phase of the fit (0.5: about half the cost of h = 0.25, biased by
        ~1e-7 to ~1e-4); the second phase uses ``h``, and its law at the best weights is the
        accept step's.
    tol : float
        Target :math:`\|r_b - r^*\|_1` of the weight fit at scale (enumerable laws: 1e-13).
    max_iter : int
        Most oracle evaluations of the fit at scale (both phases together; one more evaluation
        at step ``h`` gives the law of the accept step).
    exact_max_sets : int
        Enumerate the draft sets (exact law, Newton polish) when there are at most this many (and
        at most :data:`EXACT_MAX_SUPPORT` tokens with q > 0); 0 forces the quadrature oracle.

    Examples
    --------
    >>> import numpy as np, otspec
    >>> from otspec.verifiers import optimal_wor
    >>> p, q = np.array([0.1, 0.2, 0.3, 0.4]), np.array([0.4, 0.3, 0.2, 0.1])
    >>> law = otspec.without_replacement(q, 2)
    >>> a = optimal_wor.acceptance(p, law).value
    >>> bool(abs(a - otspec.optimal_acceptance(p, law).value) < 1e-9)
    True
    """

    name = "optimal_wor"
    rule = "the two-level Luce rule is built for drafts sampled without replacement (otspec.without_replacement)"
    fix = "use optimal_iid for i.i.d. drafts, greedy_optimal for greedy drafts, or optimal_plan on small laws"
    reference = "otspec: the exact optimal verifier for drafts without replacement (docs/optimal_wor.rst)"

    def __init__(
        self, *, h: float = 0.25, h_fit: float = 0.5, tol: float = 1e-9, max_iter: int = 40, exact_max_sets: int = EXACT_MAX_SETS
    ) -> None:
        self.exact_max_sets = int(exact_max_sets)
        self.h = float(h)
        self.h_fit = float(h_fit)
        self.tol = float(tol)
        self.max_iter = int(max_iter)
        self._cache: tuple | None = None

    def applies_to(self, law: DraftLaw) -> bool:
        return law.without_replacement_q is not None

    # -- the state for one (p, law) -------------------------------------------------------------
    def _solve(self, p: np.ndarray, law: DraftLaw) -> OptimalWORState:
        q, k = np.asarray(law.q, dtype=np.float64), law.k
        sel = wor_selection(p, q, k)
        if k == 1:  # the rule selects the only draft: r_b = q exactly, for any b
            b = np.where(q > 0, 1.0, 0.0)
            lw = LuceLaw(r=q.copy(), error=0.0, method="exact")
            res, its = float(np.abs(q - sel.r).sum()), 0
        elif self._enumerable(law):
            sets, weights = law.enumerate_sets()
            b, res, its = fit_luce_weights_sets(sel.r, sets, weights, sel.in_A, tol=1e-13)
            lw = luce_law_exact(sets, weights, b, sel.in_A)
        else:
            b, lw, its = self._fit_at_scale(sel, q, k, precondition=True)
            res = float(np.abs(lw.r - sel.r).sum())
            if res > RETRY_RESIDUAL:
                # the Jacobi step overshot (sharp rows): the plain monotone step from the start
                b2, lw2, its2 = self._fit_at_scale(sel, q, k, precondition=False)
                its += its2
                res2 = float(np.abs(lw2.r - sel.r).sum())
                if res2 < res:
                    b, lw, res = b2, lw2, res2
        acc = float(np.minimum(p, lw.r).sum())
        return OptimalWORState(
            r_star=sel.r,
            in_A=sel.in_A,
            b=b,
            law=lw,
            alpha_star=sel.alpha,
            alpha_error=sel.error_bound,
            acceptance=acc,
            gap=sel.alpha - acc,
            fit_residual=res,
            fit_iterations=its,
        )

    def _fit_at_scale(self, sel, q: np.ndarray, k: int, *, precondition: bool) -> tuple[np.ndarray, LuceLaw, int]:
        """The weights, their law at step ``h`` and the oracle evaluations of the fit at scale."""
        # the fit runs first on the coarse oracle (step h_fit: fewer nodes, its bias below the
        # first phase's target), then on the accept step's own oracle (step h), whose law at
        # the best weights is the accept step's law: no further evaluation
        # start from the densities r*/q (bounded between the two pool constants c' and c)
        b = np.where(q > 0, sel.r / np.where(q > 0, q, 1.0), 0.0)
        # the oracle's law is that of the floored weights (each level's maximum 1, the rest at
        # least WEIGHT_FLOOR; weights the fit's step sent to 1e-318 or to 0 made the s-range
        # infinite): the rule uses the same floored weights, so its law is the oracle's
        active = (sel.r > 0) & (q > 0)
        its, res, lw = 0, np.inf, None
        for h_phase, tol_phase, patience in (
            (self.h_fit, max(self.tol, COARSE_TOL), COARSE_PATIENCE),
            (self.h, self.tol, FINE_PATIENCE),
        ):
            if its >= self.max_iter or res <= self.tol:
                break
            fit = fit_luce_weights(
                sel.r,
                q,
                sel.in_A,
                lambda bb, hh=h_phase: luce_law_quadrature(q, floor_weights(bb, sel.in_A, active), sel.in_A, k, h=hh),
                tol=tol_phase,
                max_iter=self.max_iter - its,
                b0=b,
                patience=patience,
                precondition=precondition,
                damping=FIT_DAMPING,
            )
            b, its, res = floor_weights(fit.b, sel.in_A, active), its + fit.iterations, fit.residual
            lw = fit.law if h_phase == self.h else None
        if lw is None:
            lw = luce_law_quadrature(q, b, sel.in_A, k, h=self.h)
            its += 1
        return b, lw, its

    @staticmethod
    def _key(p: np.ndarray, law: DraftLaw) -> tuple:
        return (p.tobytes(), np.asarray(law.q).tobytes(), law.k)

    def _cached(self, p: np.ndarray, law: DraftLaw) -> bool:
        return self._cache is not None and self._cache[0] == self._key(p, law)

    def _prepare(self, p: np.ndarray, law: DraftLaw) -> None:
        if not self._cached(p, law):
            self._cache = (self._key(p, law), self._solve(p, law))

    @fill_doc
    def state(self, p, law: DraftLaw) -> OptimalWORState:
        """The selection law, weights, oracle law and certified gap for ``(p, law)``.

        Parameters
        ----------
        {p_wor_law_args}

        Returns
        -------
        OptimalWORState
            Cached per (p, law): later calls on the same pair reuse it.

        Raises
        ------
        {wor_law_raises}
        """
        p = self._check(p, law)
        self._prepare(p, law)
        return self._cache[1]

    @fill_doc
    def acceptance(self, p, law, *, method: str = "auto", n_samples: int = 2000, rng=None):
        r"""Membership acceptance; ``method="auto"`` on a large law fits the weights first and returns
        the closed form :math:`\sum_y \tilde r(y)\min(1, p(y)/\tilde r(y))` (within the oracle's
        ``law_error`` of the exact value; extras carry ``alpha_star``, ``gap``, ``law_error``).

        ``method="closed_form"`` on a large pair not yet prepared raises instead (it would need the
        weight fit, seconds per pair); every other case is :meth:`Verifier.acceptance`.

        Parameters
        ----------
        {p_wor_law_args}
        {acceptance_method_args}

        Returns
        -------
        AcceptanceEstimate
            The value, ``how`` it was obtained, its interval and extras.

        Raises
        ------
        UnsupportedMethodError
            If ``method`` is unknown, ``"closed_form"`` is asked of an unprepared large pair, or the
            law is not a without-replacement law.
        NotADraftLawError
            If ``law`` is not a draft law.
        InvalidDistributionError, ShapeMismatchError
            If ``p`` is not a distribution over the law's vocabulary.
        """
        if method == "auto" and isinstance(law, DraftLaw) and self.applies_to(law) and not self._enumerable(law):
            self._prepare(self._check(p, law), law)
        return super().acceptance(p, law, method=method, n_samples=n_samples, rng=rng)

    #: Why :meth:`certified_bracket` stands in for the acceptance when no fit is asked for.
    bracket_reason = "the acceptance needs its Luce weight fit: seconds of CPU at V ~ 50 000, about 20 s at V = 262 144, k = 8"

    @fill_doc
    def certified_bracket(self, p, law: DraftLaw) -> tuple[float, float] | None:
        r"""A certified interval for the acceptance that needs no weight fit, or None when the
        acceptance itself is cheap (an enumerable law, or a pair already prepared).

        At scale the acceptance :math:`\sum_y r_b(y)\min(1, p(y)/\tilde r(y))` needs the Luce
        weight fit (about 2.5 s of CPU per pair at V = 49 152, k = 4, about 20 s at V = 262 144,
        k = 8). Without it, what is
        certified is the upper end: no lossless verifier of drafts without replacement accepts
        more than :math:`\alpha^*_{WOR}` (the prefix scan, O(V log V)), so the interval is
        :math:`[0, \alpha^*_{WOR} + \epsilon]` with :math:`\epsilon` the scan's error bound. The
        fit (:meth:`state`) certifies the lower end: acceptance
        :math:`\ge \alpha^*_{WOR} - \mathrm{gap} - \mathrm{law\_error} - \mathrm{alpha\_error}`.
        ``otspec bound --verifiers`` prints this interval unless ``--fit-wor`` is given.

        Parameters
        ----------
        {p_wor_law_args}

        Returns
        -------
        tuple of float, or None
            ``(low, high)`` with ``low <= acceptance <= high``; None if :meth:`acceptance` is cheap.

        Raises
        ------
        {wor_law_raises}
        """
        p = self._check(p, law)
        if self._enumerable(law) or self._cached(p, law):
            return None
        sel = wor_selection(p, np.asarray(law.q, dtype=np.float64), law.k)
        return 0.0, min(1.0, float(sel.alpha + sel.error_bound))

    # -- the rule ---------------------------------------------------------------------------------
    def _schedule(self, p, law, tuples) -> AcceptSchedule:
        st = self._cache[1]
        r = st.law.r
        sel = luce_selection_rows(tuples, st.b, st.in_A)
        mass = sel * accept_ratio(p[tuples], r[tuples])  # P(select x_j and keep it)
        before = np.concatenate([np.zeros((tuples.shape[0], 1)), np.cumsum(mass, axis=1)[:, :-1]], axis=1)
        left = 1.0 - before
        with np.errstate(divide="ignore", invalid="ignore"):
            acc = np.clip(np.where(left > 0, mass / np.where(left > 0, left, 1.0), 1.0), 0.0, 1.0)
        res, _ = residual(p, r)
        return AcceptSchedule(tokens=tuples, accept=acc, residual=res)

    def _tuple_acceptance(self, p, law, tuples) -> np.ndarray:
        st = self._cache[1]
        sel = luce_selection_rows(tuples, st.b, st.in_A)
        return np.sum(sel * accept_ratio(p[tuples], st.law.r[tuples]), axis=1)

    def _enumerable(self, law: DraftLaw) -> bool:
        n_supp = int(np.count_nonzero(law.q))
        return law.k == 1 or (math.comb(n_supp, law.k) <= self.exact_max_sets and n_supp <= EXACT_MAX_SUPPORT)

    def _closed_form(self, p, law):
        if not self.applies_to(law):
            return None
        if not self._enumerable(law) and not self._cached(p, law):
            # at scale the value needs the weight fit (seconds): only once state() or a sampler
            # has prepared this (p, law); acceptance() otherwise falls back to Monte Carlo
            return None
        self._prepare(p, law)
        st = self._cache[1]
        value = float(np.sum(st.law.r * accept_ratio(p, st.law.r)))
        return value, {
            "alpha_star": st.alpha_star,
            "gap": st.alpha_star - value,
            "fit_residual": st.fit_residual,
            "law_error": st.law.error,
            "law_method": st.law.method,
        }


optimal_wor = OptimalWORVerifier()
