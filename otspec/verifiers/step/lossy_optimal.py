r"""The lossy rule on the exact frontier (MATH §16): acceptance :math:`\min(1, \alpha^* + \varepsilon)`
at total-variation cost at most :math:`\varepsilon`, for any draft law.

Run an optimal lossless plan (``optimal_iid`` for i.i.d. drafts at any V, else ``optimal_plan``,
the LP's plan, on enumerable laws). On its rejection event -- probability :math:`1 - \alpha^*` --
output the first draft :math:`X_1` instead of the residual token with probability

.. math:: \lambda = \min\Big(1, \frac{\varepsilon}{1 - \alpha^*}\Big)

(an independent coin). Acceptance rises by exactly :math:`\lambda (1 - \alpha^*)`, to
:math:`\min(1, \alpha^* + \varepsilon)`, and the output law moves by at most that mass:

.. math:: \pi_\varepsilon(\cdot \mid \bar x) = \pi(\cdot \mid \bar x)\big|_{\bar x}
          + (1 - \lambda)\, \pi(\cdot \mid \bar x)\big|_{\Omega \setminus \bar x}
          + \lambda\, r(\bar x)\, \delta_{x_1},
          \qquad d_{TV}(P_\varepsilon, p) \le \lambda (1 - \alpha^*) \le \varepsilon,

where :math:`r(\bar x) = \pi(\Omega \setminus \bar x \mid \bar x)` is the plan's rejection
probability for that tuple. No rule whose output is within :math:`\varepsilon` of p in TV accepts
more (:func:`otspec.bounds.lossy.lossy_frontier`), so its efficiency is 1 whenever the TV budget is
spent in full (it can be spent less: moved mass may land where the plan already under-covers).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from otspec.laws import DraftLaw
from otspec.sampling import spawn_streams
from otspec.verifiers.lossy import LossyVerifier, as_option_in_range
from otspec.verifiers.step.optimal_iid import optimal_iid
from otspec.verifiers.step.optimal_plan import optimal_plan
from otspec.verifiers.tuples import membership_mask

__all__ = ["LossyOptimalVerifier", "lossy_optimal"]


class LossyOptimalVerifier(LossyVerifier):
    r"""The frontier rule: an optimal plan whose rejections become :math:`X_1` with probability :math:`\lambda`.

    Parameters
    ----------
    eps : float, default 0.05
        The total-variation budget :math:`\varepsilon \in [0, 1]` (0: the lossless optimal plan).
    name : str
        Name shown in tables.

    Raises
    ------
    InvalidOptionError
        If ``eps`` is not a number in ``[0, 1]``.

    Examples
    --------
    >>> import otspec
    >>> from otspec.verifiers.step.lossy_optimal import LossyOptimalVerifier
    >>> p, law = [0.5, 0.5], otspec.iid([0.9, 0.1], 1)          # alpha* = 1 - TV = 0.6
    >>> round(LossyOptimalVerifier(0.1).acceptance(p, law).value, 12)
    0.7
    >>> round(LossyOptimalVerifier(0.1).tv_to_target(p, law), 12)
    0.1
    """

    rule = "the lossy optimal rule applies to every draft law (i.i.d. at any V; others when small enough to enumerate)"
    reference = "MATH §16 (the exact TV frontier); docs: engine_rules"

    def __init__(self, eps: float = 0.05, *, name: str = "lossy_optimal"):
        self.eps = as_option_in_range(eps, "eps", 0.0, 1.0, why="a total-variation budget")
        self.name = str(name)

    def applies_to(self, law: DraftLaw) -> bool:
        return True

    @staticmethod
    def base(law: DraftLaw):
        """The optimal lossless plan run underneath: ``optimal_iid`` where it applies, else ``optimal_plan``.

        Parameters
        ----------
        law : DraftLaw

        Returns
        -------
        Verifier
        """
        return optimal_iid if optimal_iid.applies_to(law) else optimal_plan

    def _alpha_base(self, p: np.ndarray, law: DraftLaw) -> float:
        b = self.base(law)
        return law.cached(f"lossy_optimal.alpha.{b.name}", p, lambda: b.acceptance(p, law).value)

    def _lam(self, p: np.ndarray, law: DraftLaw) -> float:
        miss = 1.0 - self._alpha_base(p, law)
        return 0.0 if miss <= 0.0 else min(1.0, self.eps / miss)

    def _check(self, p: Any, law: Any) -> np.ndarray:
        p = super()._check(p, law)
        if self.base(law) is optimal_iid:
            optimal_iid.check_inputs(p, law)
        return p

    def _prepare(self, p, law):
        self.base(law)._prepare(p, law)
        self._alpha_base(p, law)

    def _rows(self, p, law, tuples):
        pi = self.base(law)._rows(p, law, tuples)
        member = membership_mask(tuples, law.V)
        rej = np.sum(np.where(member, 0.0, pi), axis=1)
        lam = self._lam(p, law)
        out = np.where(member, pi, (1.0 - lam) * pi)
        out[np.arange(tuples.shape[0]), tuples[:, 0]] += lam * rej
        return out

    def sample_batch(self, p: Any, law: DraftLaw, drafts: Any, *, rng: np.random.Generator) -> np.ndarray:
        """One output per row of ``drafts`` ``(N, k)``: the base plan's sampler on one child stream of
        ``rng``, the swap coins on another (``sample(d) == sample_batch([d])[0]``).

        Parameters
        ----------
        p : array_like, shape (V,)
            Target distribution.
        law : DraftLaw
            The law the drafts were drawn from.
        drafts : array_like of int, shape (N, k) or (k,)
            Draft tuples.
        rng : numpy.random.Generator
            The caller's generator.

        Returns
        -------
        ndarray of int64, shape (N,)
        """
        p = self._check(p, law)
        d = law.validate_draft_batch(drafts)
        base_rng, coin_rng = spawn_streams(rng, 2)
        y = self.base(law).sample_batch(p, law, d, rng=base_rng)
        hit = np.any(d == y[:, None], axis=1)
        swap = ~hit & (coin_rng.random(d.shape[0]) < self._lam(p, law))  # an independent coin per row
        return np.where(swap, d[:, 0], y).astype(np.int64)

    def sample(self, p: Any, law: DraftLaw, drafts: Any, *, rng: np.random.Generator) -> int:
        """One output token for one draft tuple (:meth:`sample_batch` on one row).

        Parameters
        ----------
        p : array_like, shape (V,)
            Target distribution.
        law : DraftLaw
            The law the drafts were drawn from.
        drafts : array_like of int, shape (k,)
            One draft tuple.
        rng : numpy.random.Generator
            The caller's generator.

        Returns
        -------
        int
        """
        self._check(p, law)
        return int(self.sample_batch(p, law, law.validate_drafts(drafts)[None, :], rng=rng)[0])

    def _closed_form(self, p, law):
        a = self._alpha_base(p, law)
        lam = self._lam(p, law)
        return a + lam * (1.0 - a), {"alpha_star": a, "tv_budget": self.eps}

    def __repr__(self) -> str:
        return f"<verifier {self.name!r} (lossy; TV budget eps={self.eps:g})>"


#: The registry's instance: TV budget 0.05.
lossy_optimal = LossyOptimalVerifier(0.05)
