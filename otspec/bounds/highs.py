"""One way to build and run a HiGHS LP: column-wise arrays in, a configured solver out.

The membership LP (:mod:`otspec.bounds.lp`), the block / tree LP (:mod:`otspec.bounds.block`) and
khisti's selection LP (:mod:`otspec.verifiers.step.khisti`) go through :func:`solve_colwise` (and read the solved model back with
:func:`basic_masks` and :func:`model_status_code`), so the tolerances
(:data:`~otspec._tolerances.LP_FEASIBILITY_TOL`, :data:`~otspec._tolerances.LP_OPTIMALITY_TOL`)
and the model set-up live in one place. ``highspy`` is imported lazily.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from otspec._tolerances import LP_FEASIBILITY_TOL, LP_OPTIMALITY_TOL

__all__ = ["solve_colwise", "new_highs", "basic_masks", "model_status_code"]


def new_highs():
    """A silent ``highspy.Highs`` instance.

    highspy 1.16 prints a two-line banner on stdout when the first instance of a process is built,
    before any option can be set; that would corrupt ``otspec ... --json`` output. File descriptor 1
    is pointed at ``os.devnull`` while the instance is built, then ``output_flag`` is turned off.

    Returns
    -------
    highspy.Highs
        An empty model with logging off (tolerances are set by :func:`solve_colwise`).
    """
    import os
    import sys

    import highspy

    sys.stdout.flush()
    saved, devnull = os.dup(1), os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        h = highspy.Highs()
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)
    h.setOptionValue("output_flag", False)
    return h


def solve_colwise(
    *,
    cost: np.ndarray,
    row_lower: np.ndarray,
    row_upper: np.ndarray,
    start: np.ndarray,
    index: np.ndarray,
    value: np.ndarray,
    maximize: bool = True,
    col_upper: np.ndarray | None = None,
    options: dict[str, Any] | None = None,
) -> tuple[Any, bool, str]:
    r"""Solve :math:`\max\ (\text{or } \min)\ c^\top x` s.t. ``row_lower <= A x <= row_upper``,
    :math:`0 \le x \le` ``col_upper``.

    Parameters
    ----------
    cost : ndarray, shape (n,)
        Objective coefficients.
    row_lower, row_upper : ndarray, shape (m,)
        Row bounds (``-inf`` / ``inf`` allowed).
    start, index, value : ndarray
        :math:`A` in compressed sparse column form (``start`` has ``n + 1`` entries).
    maximize : bool
        Maximise (default) or minimise.
    col_upper : ndarray, shape (n,), optional
        Upper bounds of the columns (default: none).
    options : dict, optional
        Extra HiGHS options (e.g. ``{"solver": "ipm"}``), set after the shared tolerances.

    Returns
    -------
    (highs, ok, info)
        The ``highspy.Highs`` object after ``run()`` (for the solution, basis and info), whether
        HiGHS reports an optimal model, and its model-status message.
    """
    import highspy

    n = int(cost.shape[0])
    lp = highspy.HighsLp()
    lp.num_col_ = n
    lp.num_row_ = int(row_lower.shape[0])
    lp.col_cost_ = cost
    lp.col_lower_ = np.zeros(n)
    lp.col_upper_ = np.full(n, highspy.kHighsInf) if col_upper is None else np.asarray(col_upper, dtype=np.float64)
    lp.row_lower_ = row_lower
    lp.row_upper_ = row_upper
    lp.sense_ = highspy.ObjSense.kMaximize if maximize else highspy.ObjSense.kMinimize
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = np.asarray(start, dtype=np.int32)
    lp.a_matrix_.index_ = np.asarray(index, dtype=np.int32)
    lp.a_matrix_.value_ = value
    h = new_highs()
    h.setOptionValue("primal_feasibility_tolerance", LP_FEASIBILITY_TOL)
    h.setOptionValue("dual_feasibility_tolerance", LP_FEASIBILITY_TOL)
    h.setOptionValue("ipm_optimality_tolerance", LP_OPTIMALITY_TOL)
    for key, val in (options or {}).items():
        h.setOptionValue(key, val)
    h.passModel(lp)
    h.run()
    status = h.getModelStatus()
    return h, status == highspy.HighsModelStatus.kOptimal, h.modelStatusToString(status)


def basic_masks(highs) -> tuple[np.ndarray, np.ndarray]:
    """Which columns and which rows are basic in the final basis of a solved ``highs``.

    Parameters
    ----------
    highs : highspy.Highs
        A model after ``run()`` (as returned by :func:`solve_colwise`).

    Returns
    -------
    (cols, rows) : tuple of ndarray of bool
        ``cols[j]`` is True when column j is basic; ``rows[i]`` when row i's slack is basic.
    """
    import highspy

    basis = highs.getBasis()
    basic = highspy.HighsBasisStatus.kBasic
    cols = np.array([st == basic for st in basis.col_status], dtype=bool)
    rows = np.array([st == basic for st in basis.row_status], dtype=bool)
    return cols, rows


def model_status_code(highs) -> float:
    """HiGHS' model status of ``highs`` as a number (for a result's ``checks``; -1.0 when the
    status has no numeric value).

    Parameters
    ----------
    highs : highspy.Highs
        A model after ``run()``.

    Returns
    -------
    float
        The ``HighsModelStatus`` enum value (e.g. 7.0 for optimal in highspy 1.x), or -1.0.
    """
    status = highs.getModelStatus()
    return float(status.value) if hasattr(status, "value") else -1.0
