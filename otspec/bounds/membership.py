r"""The membership transport problem that every tuple-level back end of
:func:`~otspec.bounds.multidraft.optimal_acceptance` solves.

The problem (:doc:`math`, the relaxed LP, relaxed form): with draft sets :math:`s` of probability
:math:`Q(s)` and variables :math:`w(s, y) \ge 0` for :math:`y \in s`,

.. math:: \max \sum_{s, y} w(s, y) \quad \text{s.t.} \quad
          \sum_{y \in s} w(s, y) \le Q(s), \qquad \sum_{s \ni y} w(s, y) \le p(y).

Any feasible :math:`w` extends to a full coupling by sending every set's leftover mass to one
common residual law, so its optimum is :math:`\alpha^*`. Every back end takes the enumerated sets
(``-1`` padded rows) and their weights, and returns a :class:`PlanAnswer` for
:func:`otspec.bounds.certificate.certify`:

* :mod:`otspec.bounds.lp` -- HiGHS on the LP (interior point and crossover);
* :mod:`otspec.bounds.cvx` -- the same LP through cvxpy, with user constraints on a
  :class:`MembershipLP`;
* :mod:`otspec.bounds.flow` -- exact dense transport by POT's network simplex;
* :mod:`otspec.bounds.maxflow` -- the sparse integer max-flow on OR-Tools (optional extra).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["MembershipLP", "PlanAnswer", "membership_pairs"]


def membership_pairs(sets: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Flatten draft sets into LP columns: ``(pair_set, pair_token, pair_slot)``.

    Parameters
    ----------
    sets : ndarray of int, shape (S, k)
        Draft sets, ``-1`` padded.

    Returns
    -------
    pair_set, pair_token, pair_slot : ndarray of int64, shape (n,)
        For each LP column (one per set member), its set, its token and its position in the row.
    """
    valid = sets >= 0
    pair_set, pair_slot = np.nonzero(valid)
    return pair_set.astype(np.int64), sets[pair_set, pair_slot].astype(np.int64), pair_slot.astype(np.int64)


@dataclass(frozen=True, eq=False)
class PlanAnswer:
    """A tuple-level back end's raw answer, before :func:`~otspec.bounds.certificate.certify`.

    Attributes
    ----------
    method : str
        The back end (``"lp"``, ``"cvxpy"``, ``"flow"``, ``"maxflow"``).
    sets : ndarray of int64, shape (S, k)
        The draft sets, ``-1`` padded.
    weights : ndarray, shape (S,)
        :math:`Q(s)`.
    w : ndarray, shape (n,)
        The solver's :math:`w(s, y)` per :func:`membership_pairs` column (zeros on failure).
    token_duals : ndarray, shape (V,)
        Token scores whose threshold cuts the certificate scans (duals, potentials, or the min
        cut's indicator).
    ok : bool
        Whether the solver reported an optimal answer.
    info : str
        The solver's message.
    constrained : bool
        Solved with user constraints (``method="cvxpy"``): the cut bound does not apply.
    constraint_violation : float
        Largest violation of the user's constraints at the returned point.
    """

    method: str
    sets: np.ndarray
    weights: np.ndarray
    w: np.ndarray
    token_duals: np.ndarray
    ok: bool
    info: str
    constrained: bool = False
    constraint_violation: float = 0.0


@dataclass(frozen=True, eq=False)
class MembershipLP:
    """What a user constraint sees in ``optimal_acceptance(..., method="cvxpy", constraints=f)``.

    ``w`` is the cvxpy variable (one entry per pair ``(set, token in set)``); ``pair_set`` and
    ``pair_token`` say which pair each entry is; ``sets``/``set_weights`` the draft sets.

    Examples of ``f(lp)``: ``[lp.accepted(7) == 0]`` forbids accepting token 7;
    ``[lp.residual_probability <= 0.2]`` caps the probability of a residual draw.

    Attributes
    ----------
    w : cvxpy.Variable
        Shape ``(n,)``, non-negative: :math:`w(s, y)` per pair.
    pair_set, pair_token : ndarray of int64, shape (n,)
        The set and the token of each entry of ``w``.
    sets : ndarray of int64, shape (S, k)
        The draft sets, ``-1`` padded.
    set_weights : ndarray, shape (S,)
        :math:`Q(s)`.
    p : ndarray, shape (V,)
        The target.
    """

    w: Any
    pair_set: np.ndarray
    pair_token: np.ndarray
    sets: np.ndarray
    set_weights: np.ndarray
    p: np.ndarray

    def accepted(self, token: int):
        """cvxpy expression: probability that ``token`` is output and was drafted.

        Parameters
        ----------
        token : int
            Token id.

        Returns
        -------
        cvxpy.Expression
            :math:`\\sum_{s \\ni y} w(s, y)` (the constant 0 when no set holds the token).
        """
        import cvxpy as cp

        idx = np.flatnonzero(self.pair_token == int(token))
        return cp.sum(self.w[idx]) if idx.size else cp.Constant(0.0)

    @property
    def acceptance(self):
        """cvxpy expression: the acceptance probability :math:`\\sum w`."""
        import cvxpy as cp

        return cp.sum(self.w)

    @property
    def residual_probability(self):
        """cvxpy expression: probability that the output is drawn from the residual."""
        return 1.0 - self.acceptance
