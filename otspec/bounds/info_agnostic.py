r"""The information-agnostic LP: the best lossless verifier that may use *anything*, at small V.

Thomas & Pal (arXiv 2602.16961) show that block verification stays optimal against verifiers that
also read off-path probabilities, with an "information-agnostic" LP. Their LP's exact form was not
available to us; this module states the widest version of the question as one LP and solves it:
the verifier is *any* randomised map from the k drafted paths to an emitted block, so it may use
every conditional of both models (on or off the drafted paths) and the whole draft tuple.

Variables :math:`x(d, o) \ge 0` for each draft tuple :math:`d = (X^{(1)}, \dots, X^{(k)})`
(i.i.d. paths of length :math:`\gamma` from :math:`M_s`) and each emitted block
:math:`o = (z, y)`, z a prefix of one of the drafted paths (the accepted tokens, :math:`\tau = |z|`)
and y any token:

.. math::
    \max \sum_{d, o} |z_o|\, x(d, o) \quad\text{s.t.}\quad \sum_o x(d, o) = Q(d), \qquad
    S(uy) = M_b(y \mid u) \sum_{y'} S(uy') \ \ \forall u, |u| \le \gamma,\ \forall y,

with :math:`S(v) = \sum_{d, o:\ o \text{ starts with } v} x(d, o)`: the losslessness criterion
(MATH 0.1: whenever the block continues past u, its next token has the target conditional). For
k = 1 its optimum must equal block verification's :math:`\sum_i \sum_{x^i} W(x^i)` if the claim
holds; for k > 1 it is the tree optimum :math:`T^*` computed independently (here, one variable
per tuple and output, not per prefix). Size: :math:`V^{\gamma k}` tuples times their outputs, so
only tiny problems (``max_variables``).

References
----------
R. Thomas, A. Pal, "Greedy Multi-Path Block Verification for Faster Decoding in Speculative
Sampling", arXiv 2602.16961 (2026), abstract.
Sun et al., "Block Verification Accelerates Speculative Decoding", ICLR 2025 (the W recursion).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp
from scipy.optimize import linprog

from otspec._validation import as_int_in_range
from otspec.errors import ProblemTooLargeError
from otspec.models import as_model

__all__ = ["InfoAgnosticResult", "info_agnostic_optimum"]


@dataclass(frozen=True)
class InfoAgnosticResult:
    """Optimum of the information-agnostic LP.

    Attributes
    ----------
    value : float
        The largest :math:`E[\\tau]` of any lossless verifier of k drafted paths.
    variables, constraints : int
        LP size.
    status : str
        HiGHS' message (``"optimal"`` when solved).
    """

    value: float
    variables: int
    constraints: int
    status: str


def _paths(q_model, V: int, gamma: int):
    paths = list(itertools.product(range(V), repeat=gamma))
    w = np.array([np.prod([q_model(path[:i])[path[i]] for i in range(gamma)]) for path in paths])
    return paths, w


# long-function: one linear build (variables, equality rows, criterion rows) reads best in one place
def info_agnostic_optimum(p_model: Any, q_model: Any, k: int, gamma: int, *, max_variables: int = 200_000) -> InfoAgnosticResult:
    r"""Solve the information-agnostic LP (see the module docstring).

    Parameters
    ----------
    p_model, q_model : model
        Target :math:`M_b` and draft :math:`M_s` (:mod:`otspec.models`), same V.
    k : int
        Number of i.i.d. drafted paths (>= 1).
    gamma : int
        Path length (>= 1).
    max_variables : int, optional
        Refuse larger LPs.

    Returns
    -------
    InfoAgnosticResult

    Raises
    ------
    ProblemTooLargeError
        If the LP would have more than ``max_variables`` variables.
    InvalidDraftCountError
        If k or gamma is not a positive integer.

    Examples
    --------
    >>> from otspec import models
    >>> pm, qm = models.context_free([1/3, 2/3]), models.context_free([2/3, 1/3])
    >>> round(info_agnostic_optimum(pm, qm, 1, 2).value * 9, 9)  # Sun et al.'s toy: 11/9
    11.0
    """
    k = as_int_in_range(k, "k")
    gamma = as_int_in_range(gamma, "gamma")
    pm = as_model(p_model, name="p_model")
    qm = as_model(q_model, V=pm.V, name="q_model")
    V = pm.V
    paths, pw = _paths(qm, V, gamma)
    n_tuples = len(paths) ** k
    if n_tuples * (k * gamma + 1) * V > max_variables:
        raise ProblemTooLargeError(
            f"the information-agnostic LP for V = {V}, gamma = {gamma}, k = {k} has about {n_tuples * (k * gamma + 1) * V} "
            f"variables (limit max_variables = {max_variables}); use otspec.bounds.tree.tree_optimum, which needs one variable per prefix"
        )
    # criterion rows: one per (u, y), |u| <= gamma
    row_of = {}
    for i in range(gamma + 1):
        for u in itertools.product(range(V), repeat=i):
            for y in range(V):
                row_of[u + (y,)] = len(row_of)
    n_crit = len(row_of)
    rows, cols, vals, cost, beq = [], [], [], [], []
    col = 0
    for t, combo in enumerate(itertools.product(range(len(paths)), repeat=k)):
        Q = float(np.prod(pw[list(combo)]))
        beq.append(Q)
        zs = {paths[j][:i] for j in combo for i in range(gamma + 1)}
        for z in sorted(zs):
            for y in range(V):
                s = z + (y,)
                rows.append(n_crit + t)  # sum_o x(d, o) = Q(d)
                cols.append(col)
                vals.append(1.0)
                for i in range(len(s)):  # coefficient in row (s[:i], y'): [y' == s[i]] - p(y' | s[:i])
                    u = s[:i]
                    cond = pm(u)
                    for yy in range(V):
                        rows.append(row_of[u + (yy,)])
                        cols.append(col)
                        vals.append((1.0 if yy == s[i] else 0.0) - float(cond[yy]))
                cost.append(-float(len(z)))
                col += 1
    A = sp.csr_matrix((vals, (rows, cols)), shape=(n_crit + n_tuples, col))
    b = np.concatenate([np.zeros(n_crit), np.asarray(beq)])
    res = linprog(
        np.asarray(cost),
        A_eq=A,
        b_eq=b,
        bounds=(0, None),
        method="highs",
        options={"primal_feasibility_tolerance": 1e-10, "dual_feasibility_tolerance": 1e-10},
    )
    value = float(-res.fun) if res.status == 0 else float("nan")
    return InfoAgnosticResult(value=value, variables=col, constraints=A.shape[0], status="optimal" if res.status == 0 else res.message)
