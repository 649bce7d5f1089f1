r"""Plots a user wants in a notebook: acceptance vs k, gaps to the optimum, calibration.

Every function draws on a matplotlib ``Axes`` (a new pyplot figure when ``ax`` is ``None``) and
returns that ``Axes``; nothing is shown or saved. matplotlib is an optional dependency (the
``plots`` extra, ``pip install "otspec[plots]"``) imported only when a plotting function is called,
so ``import otspec.plot`` is free and works without it. The numeric helpers
(:func:`calibration_bins`, :func:`kseq_guarantee`) need only numpy. Scripts that run headless should
select the Agg backend first (``matplotlib.use("Agg")`` or ``MPLBACKEND=Agg``); the functions never
call ``plt.show()``.

Reference lines
---------------
SpecTr's K-SEQ accepts at least :math:`(1 - (1 - 1/k)^k)\,\alpha^*(p, q^{\otimes k}) \ge
(1 - 1/e)\,\alpha^*` (see :doc:`verifiers`); :func:`acceptance_vs_k` draws
:math:`(1 - 1/e)\,\alpha^*` under the optimum so that a verifier's curve can be read against the
guarantee.

Examples
--------
>>> import numpy as np
>>> from otspec.plot import calibration_bins
>>> b = calibration_bins([0.2, 0.2, 0.8, 0.8], [0, 1, 1, 1], n_bins=2)
>>> b.mean_expected.tolist(), b.mean_realized.tolist(), b.count.tolist()
([0.2, 0.8], [0.5, 1.0], [2, 2])
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from otspec._docs import fill_doc
from otspec._optional import require
from otspec.errors import OtspecInputError, ShapeMismatchError

__all__ = [
    "PLOTS_INSTALL",
    "ONE_MINUS_INV_E",
    "kseq_guarantee",
    "CalibrationBins",
    "calibration_bins",
    "acceptance_vs_k",
    "acceptance_vs_tv",
    "verifier_gaps",
    "calibration",
]

#: How to install the optional plotting dependency.
PLOTS_INSTALL = 'pip install "otspec[plots]"  (matplotlib)'

#: :math:`1 - 1/e`, SpecTr's multiplicative guarantee for K-SEQ as :math:`k \to \infty`.
ONE_MINUS_INV_E = 1.0 - math.exp(-1.0)

#: Two-sided normal quantiles for the confidence levels :func:`calibration_bins` accepts.
_Z = {0.9: 1.6448536269514722, 0.95: 1.959963984540054, 0.99: 2.5758293035489004}


def _pyplot():
    """Import matplotlib.pyplot lazily, with an install hint when it is missing."""
    return require("matplotlib.pyplot", "plots", needed_by="otspec.plot")


def _axes(ax: Any, figsize: tuple[float, float] = (6.0, 4.0)) -> Any:
    if ax is not None:
        return ax
    plt = _pyplot()
    _, new = plt.subplots(figsize=figsize, layout="constrained")
    return new


def _vector(x: Any, name: str, n: int | None = None) -> np.ndarray:
    a = np.asarray(x, dtype=np.float64)
    if a.ndim != 1:
        raise ShapeMismatchError(f"{name} must be one-dimensional (got shape {a.shape}); pass one value per point")
    if n is not None and a.shape[0] != n:
        raise ShapeMismatchError(f"{name} must have {n} values, one per point (got {a.shape[0]}); align it with the x values")
    return a


def kseq_guarantee(k: Any) -> np.ndarray:
    r"""SpecTr's multiplicative factor :math:`1 - (1 - 1/k)^k` (decreasing to :math:`1 - 1/e`).

    K-SEQ's phase-1 acceptance is at least this factor times :math:`\alpha^*(p, q^{\otimes k})`.

    Parameters
    ----------
    k : array_like
        Draft counts, each ``>= 1`` (need not be integers).

    Returns
    -------
    ndarray
        :math:`1 - (1 - 1/k)^k` elementwise, same shape as ``k``.

    Raises
    ------
    OtspecInputError
        If some ``k`` is below 1 or not finite.

    Examples
    --------
    >>> kseq_guarantee([1, 2]).tolist()
    [1.0, 0.75]
    """
    k = np.asarray(k, dtype=np.float64)
    if np.any(~np.isfinite(k)) or np.any(k < 1):
        raise OtspecInputError(f"k must be >= 1 (got {k.tolist()!r}); pass draft counts")
    return 1.0 - (1.0 - 1.0 / k) ** k


# ------------------------------------------------------------------------------------------------
# Calibration (numpy only)


@dataclass(frozen=True, eq=False)
class CalibrationBins:
    r"""Realized outcomes against their exact expectations, binned by the expectation.

    Attributes
    ----------
    edges : ndarray, shape (B + 1,)
        Bin edges on the expected value (quantile edges by default).
    count : ndarray of int, shape (B,)
        Observations per bin (empty bins are dropped, so B may be below ``n_bins``).
    mean_expected, mean_realized : ndarray, shape (B,)
        Bin means of the exact expectation and of the realized outcome.
    ci_low, ci_high : ndarray, shape (B,)
        Confidence interval of the realized bin mean: Wilson score interval when every outcome is
        0 or 1, otherwise the normal interval :math:`\bar y \pm z\, s/\sqrt{n}` (NaN for n = 1).
    z_overall : float
        Standardised total of the differences :math:`d = y - E[y]` over all N observations, about
        N(0, 1) when the expectations are right (independent steps): for 0/1 outcomes the exact
        Bernoulli variance :math:`\sum_i \sum d_i / \sqrt{\sum_i E[y_i](1 - E[y_i])}` (valid even when
        every outcome is 1), otherwise :math:`\bar d / (s_d/\sqrt{N})` with the sample deviation.
    confidence : float
        Level of the intervals.
    binary : bool
        Whether the outcomes were all 0/1 (Wilson intervals).
    """

    edges: np.ndarray
    count: np.ndarray
    mean_expected: np.ndarray
    mean_realized: np.ndarray
    ci_low: np.ndarray
    ci_high: np.ndarray
    z_overall: float
    confidence: float
    binary: bool

    def __repr__(self) -> str:
        return f"CalibrationBins(bins={self.count.size}, N={int(self.count.sum())}, z_overall={self.z_overall:.3g}, binary={self.binary})"

    def _repr_html_(self) -> str:
        """The bins as an HTML table (Jupyter shows it in place of the ``repr``)."""
        from otspec._display import html_table

        level = f"{100 * self.confidence:g}%"
        header = ("bin", "count", "mean expected", "mean realized", f"{level} low", f"{level} high")
        cols = (self.mean_expected, self.mean_realized, self.ci_low, self.ci_high)
        rows = [
            (f"[{self.edges[b]:.4g}, {self.edges[b + 1]:.4g}]", int(self.count[b]), *(f"{c[b]:.4g}" for c in cols))
            for b in range(self.count.size)
        ]
        caption = f"CalibrationBins: N = {int(self.count.sum())}, z_overall = {self.z_overall:.3g}"
        return html_table(header, rows, caption=caption)


def _wilson(successes: float, n: int, z: float) -> tuple[float, float]:
    phat = successes / n
    denom = 1.0 + z * z / n
    centre = (phat + z * z / (2 * n)) / denom
    half = z * math.sqrt(phat * (1 - phat) / n + z * z / (4 * n * n)) / denom
    # the Wilson interval contains phat; rounding can put an end a few ulps inside it at phat = 0 or 1
    return min(phat, max(0.0, centre - half)), max(phat, min(1.0, centre + half))


# long-function: a long numpydoc docstring with the binning's math; the code is short
def calibration_bins(
    expected: Any, realized: Any, *, n_bins: int = 10, strategy: str = "quantile", confidence: float = 0.95
) -> CalibrationBins:
    r"""Bin realized outcomes by their exact expectation and put a confidence interval on each bin.

    For a lossless, correctly implemented verifier the realized acceptance of a step is a draw with
    mean equal to the step's exact acceptance, so the bin means lie on the diagonal within their
    intervals; a biased sampler sits off it.

    Parameters
    ----------
    expected : array_like, shape (N,)
        The exact expectation of each observation (e.g. a step's exact acceptance, or
        :math:`E[\tau \mid \text{path}]`).
    realized : array_like, shape (N,)
        The realized outcome (0/1 acceptance, or a count such as :math:`\tau`).
    n_bins : int
        Number of bins (at most N).
    strategy : {"quantile", "uniform"}
        Quantile edges (equal counts; robust when the expectations cluster) or equal widths.
    confidence : {0.9, 0.95, 0.99}
        Level of the per-bin intervals.

    Returns
    -------
    CalibrationBins
        Bin edges, counts, means and intervals, and the overall z statistic.

    Raises
    ------
    ShapeMismatchError
        If ``expected`` and ``realized`` are not one-dimensional of the same length.
    OtspecInputError
        If there is no observation, a value is not finite, ``n_bins`` is not in ``[1, N]``, or
        ``strategy`` / ``confidence`` is not one of the listed values.

    Examples
    --------
    >>> b = calibration_bins([0.1, 0.1, 0.9, 0.9], [0, 0, 1, 1], n_bins=2)
    >>> b.binary, b.mean_realized.tolist()
    (True, [0.0, 1.0])
    """
    e = _vector(expected, "expected")
    y = _vector(realized, "realized", e.shape[0])
    N = e.shape[0]
    if N == 0:
        raise OtspecInputError("expected is empty; pass at least one observation")
    if not (np.all(np.isfinite(e)) and np.all(np.isfinite(y))):
        raise OtspecInputError("expected and realized must be finite (got NaN or inf); drop those observations")
    n_bins = int(n_bins)
    if not 1 <= n_bins <= N:
        raise OtspecInputError(f"n_bins must be between 1 and the number of observations {N} (got {n_bins}); pass fewer bins")
    if strategy not in ("quantile", "uniform"):
        raise OtspecInputError(f"strategy must be 'quantile' or 'uniform' (got {strategy!r}); pick one of those")
    if confidence not in _Z:
        raise OtspecInputError(f"confidence must be one of {sorted(_Z)} (got {confidence!r}); pick one of those")
    z = _Z[confidence]
    if strategy == "quantile":
        edges = np.quantile(e, np.linspace(0.0, 1.0, n_bins + 1))
    else:
        edges = np.linspace(e.min(), e.max(), n_bins + 1)
    edges = np.unique(edges)
    if edges.size == 1:
        edges = np.array([edges[0], edges[0]])
    idx = np.clip(np.searchsorted(edges, e, side="right") - 1, 0, edges.size - 2)
    binary = bool(np.all((y == 0) | (y == 1)))
    rows = []
    for b in range(edges.size - 1):
        m = idx == b
        n = int(m.sum())
        if n == 0:
            continue
        ybar = float(y[m].mean())
        if binary:
            lo, hi = _wilson(float(y[m].sum()), n, z)
        elif n > 1:
            half = z * float(y[m].std(ddof=1)) / math.sqrt(n)
            lo, hi = ybar - half, ybar + half
        else:
            lo = hi = math.nan
        rows.append((n, float(e[m].mean()), ybar, lo, hi))
    arr = np.array(rows, dtype=np.float64)
    d = y - e
    if binary and np.all((e >= 0) & (e <= 1)):
        var = float(np.sum(e * (1.0 - e)))  # exact variance of the total under the hypothesis
        total = float(d.sum())
    else:
        var = float(d.var(ddof=1)) * N if N > 1 else 0.0
        total = float(d.sum())
    z_all = total / math.sqrt(var) if var > 0 else (0.0 if abs(total) < 1e-12 else math.copysign(math.inf, total))
    return CalibrationBins(
        edges=edges,
        count=arr[:, 0].astype(np.int64),
        mean_expected=arr[:, 1],
        mean_realized=arr[:, 2],
        ci_low=arr[:, 3],
        ci_high=arr[:, 4],
        z_overall=z_all,
        confidence=float(confidence),
        binary=binary,
    )


# ------------------------------------------------------------------------------------------------
# Plots


# long-function: one figure drawn in order (axes, series, labels); the docstring carries the math
@fill_doc
def acceptance_vs_k(
    ks: Sequence[int],
    curves: Mapping[str, Any],
    *,
    optimum: Any = None,
    ci: Mapping[str, tuple[Any, Any]] | None = None,
    e_line: str | None = "auto",
    ax: Any = None,
    title: str | None = None,
    ylabel: str = r"acceptance $P(Y \in \bar X)$",
) -> Any:
    r"""Acceptance against the number of drafts k, one curve per verifier, with the optimum.

    Parameters
    ----------
    ks : sequence of int, length n
        Draft counts (x axis).
    curves : mapping name -> array_like of length n
        Each verifier's acceptance at every k (NaN where it does not apply).
    optimum : array_like of length n, or mapping name -> array_like, optional
        The optimum :math:`\alpha^*` (one curve per draft law if a mapping), drawn as thick lines.
    ci : mapping name -> (low, high), optional
        Confidence bands for entries of ``curves`` that are estimates.
    e_line : str or None
        Which optimum to scale by :math:`1 - 1/e` for the dashed guarantee line: a key of
        ``optimum`` (``"auto"``: the first one), or ``None`` for no line.
    {plot_axes_args}

    Returns
    -------
    matplotlib.axes.Axes
        The axes drawn on.

    Raises
    ------
    ShapeMismatchError
        If a curve, optimum or band does not have one value per ``k``.
    OtspecInputError
        If ``e_line`` is not a key of ``optimum``.
    """
    ks_arr = _vector(ks, "ks")
    n = ks_arr.shape[0]
    ax = _axes(ax)
    opt: dict[str, np.ndarray] = {}
    if optimum is not None:
        if isinstance(optimum, Mapping):
            opt = {str(name): _vector(v, f"optimum[{name!r}]", n) for name, v in optimum.items()}
        else:
            opt = {"optimum": _vector(optimum, "optimum", n)}
    for i, (name, vals) in enumerate(opt.items()):
        ax.plot(
            ks_arr,
            vals,
            color="black",
            lw=2.2,
            ls=("-", "-.", ":")[i % 3],
            marker="s",
            ms=4,
            label=rf"$\alpha^*$ {name}" if name != "optimum" else r"optimum $\alpha^*$",
            zorder=3,
        )
    if e_line is not None and opt:
        key = next(iter(opt)) if e_line == "auto" else e_line
        if key not in opt:
            raise OtspecInputError(f"e_line must be a key of optimum {sorted(opt)} or None (got {e_line!r}); pick one of those")
        ax.plot(
            ks_arr,
            ONE_MINUS_INV_E * opt[key],
            color="0.45",
            lw=1.2,
            ls="--",
            label=rf"$(1-1/e)\,\alpha^*$ {key if key != 'optimum' else ''}".rstrip(),
        )
    for name, vals in curves.items():
        y = _vector(vals, f"curves[{name!r}]", n)
        (line,) = ax.plot(ks_arr, y, marker="o", ms=4, lw=1.4, label=str(name))
        if ci is not None and name in ci:
            lo, hi = ci[name]
            ax.fill_between(
                ks_arr, _vector(lo, f"ci[{name!r}] low", n), _vector(hi, f"ci[{name!r}] high", n), color=line.get_color(), alpha=0.2, lw=0
            )
    ax.set_xlabel("number of drafts k")
    ax.set_ylabel(ylabel)
    ax.set_xticks(ks_arr)
    ax.grid(True, alpha=0.3)
    if title:
        ax.set_title(title)
    ax.legend(fontsize="small", loc="lower right")
    return ax


def acceptance_vs_tv(
    tv: Any,
    curves: Mapping[str, Any],
    *,
    ax: Any = None,
    title: str | None = None,
    single_draft_line: bool = True,
) -> Any:
    r"""Acceptance against the total variation :math:`d_{TV}(p, q)`, one curve per series.

    Parameters
    ----------
    tv : array_like, shape (n,)
        :math:`d_{TV}(p, q)` of each point (x axis; points are drawn sorted by it).
    curves : mapping name -> array_like of length n
        Acceptance of each series at every point.
    ax : matplotlib Axes, optional
        Where to draw (a new figure if omitted).
    title : str, optional
        Axes title.
    single_draft_line : bool
        Add :math:`1 - d_{TV}`, the optimum of a single draft, for reference.

    Returns
    -------
    matplotlib.axes.Axes
        The axes drawn on.

    Raises
    ------
    ShapeMismatchError
        If ``tv`` is not one-dimensional or a curve does not have one value per point.
    """
    t = _vector(tv, "tv")
    n = t.shape[0]
    order = np.argsort(t)
    ax = _axes(ax)
    if single_draft_line:
        grid = np.linspace(0.0, max(float(t.max()), 1e-12), 50)
        ax.plot(grid, 1.0 - grid, color="black", lw=1.0, ls=":", label=r"$1 - d_{TV}$ (k = 1 optimum)")
    for name, vals in curves.items():
        y = _vector(vals, f"curves[{name!r}]", n)
        ax.plot(t[order], y[order], marker="o", ms=3, lw=1.3, label=str(name))
    ax.set_xlabel(r"$d_{TV}(p, q)$")
    ax.set_ylabel("acceptance")
    ax.grid(True, alpha=0.3)
    if title:
        ax.set_title(title)
    ax.legend(fontsize="small", loc="lower left")
    return ax


@fill_doc
def verifier_gaps(
    gaps: Mapping[str, Any],
    *,
    groups: Sequence[Any] | None = None,
    ci: Mapping[str, tuple[Any, Any]] | None = None,
    ax: Any = None,
    title: str | None = None,
    ylabel: str = r"gap to the optimum $\alpha^* - \alpha$",
) -> Any:
    r"""Grouped bars of each verifier's gap to the optimum (e.g. one group per k).

    Parameters
    ----------
    gaps : mapping name -> scalar or array_like of length G
        Mean gap :math:`\alpha^* - \alpha_{\text{verifier}}` per group (NaN bars are skipped).
    groups : sequence of length G, optional
        Group labels (default: a single unnamed group).
    ci : mapping name -> (low, high), optional
        Interval for the gap of each entry (drawn as error bars).
    {plot_axes_args}

    Returns
    -------
    matplotlib.axes.Axes
        The axes drawn on.

    Raises
    ------
    OtspecInputError
        If ``gaps`` is empty.
    ShapeMismatchError
        If an entry of ``gaps`` or ``ci`` does not have one value per group.
    """
    G = 1 if groups is None else len(groups)
    names = list(gaps)
    if not names:
        raise OtspecInputError("gaps is empty; pass at least one verifier's gaps")
    vals = {name: np.atleast_1d(_vector(np.atleast_1d(gaps[name]), f"gaps[{name!r}]", G)) for name in names}
    ax = _axes(ax)
    width = 0.8 / len(names)
    x = np.arange(G, dtype=np.float64)
    for i, name in enumerate(names):
        pos = x - 0.4 + width * (i + 0.5)
        yerr = None
        if ci is not None and name in ci:
            lo = np.atleast_1d(_vector(np.atleast_1d(ci[name][0]), f"ci[{name!r}] low", G))
            hi = np.atleast_1d(_vector(np.atleast_1d(ci[name][1]), f"ci[{name!r}] high", G))
            yerr = np.vstack([np.clip(vals[name] - lo, 0, None), np.clip(hi - vals[name], 0, None)])
        ax.bar(pos, np.nan_to_num(vals[name], nan=0.0), width=width, label=str(name), yerr=yerr, capsize=2)
    ax.axhline(0.0, color="black", lw=0.8)
    ax.set_xticks(x)
    ax.set_xticklabels([""] if groups is None else [str(g) for g in groups])
    ax.set_ylabel(ylabel)
    ax.grid(True, axis="y", alpha=0.3)
    if title:
        ax.set_title(title)
    ax.legend(fontsize="small")
    return ax


# long-function: one figure drawn in order (axes, series, labels); the docstring carries the math
def calibration(
    expected: Any,
    realized: Any,
    *,
    n_bins: int = 10,
    strategy: str = "quantile",
    confidence: float = 0.95,
    label: str | None = None,
    ax: Any = None,
    title: str | None = None,
    xlabel: str = "exact expected acceptance",
    ylabel: str = "realized acceptance (bin mean)",
) -> Any:
    r"""Calibration plot: realized bin means with confidence intervals against the exact expectation.

    A lossless, correctly implemented verifier's points lie on the diagonal within their intervals;
    a biased one (e.g. a reused accept coin, a draft distribution other than the one sampled) sits
    off it. Binning is :func:`calibration_bins`; call again with the same ``ax`` and another
    ``label`` to overlay several verifiers.

    Parameters
    ----------
    expected : array_like, shape (N,)
        The exact expectation of each observation.
    realized : array_like, shape (N,)
        The realized outcome of each observation.
    n_bins : int
        Number of bins (at most N).
    strategy : {"quantile", "uniform"}
        Bin edges (see :func:`calibration_bins`).
    confidence : {0.9, 0.95, 0.99}
        Level of the error bars.
    label : str, optional
        Legend label of this series (the overall z and N are appended).
    ax : matplotlib Axes, optional
        Where to draw (a new figure if omitted).
    title : str, optional
        Axes title.
    xlabel, ylabel : str
        Axis labels.

    Returns
    -------
    matplotlib.axes.Axes
        The axes drawn on.

    Raises
    ------
    ShapeMismatchError, OtspecInputError
        As :func:`calibration_bins`.
    """
    b = calibration_bins(expected, realized, n_bins=n_bins, strategy=strategy, confidence=confidence)
    ax = _axes(ax, figsize=(5.0, 5.0))
    lo = min(float(b.edges[0]), float(np.nanmin(b.ci_low)) if np.any(np.isfinite(b.ci_low)) else float(b.edges[0]))
    hi = max(float(b.edges[-1]), float(np.nanmax(b.ci_high)) if np.any(np.isfinite(b.ci_high)) else float(b.edges[-1]))
    diags = [line for line in ax.get_lines() if getattr(line, "_otspec_diagonal", False)]
    if diags:  # one diagonal per Axes, stretched to cover every series drawn on it
        x = diags[0].get_xdata()
        lo, hi = min(lo, float(x[0])), max(hi, float(x[-1]))
        diags[0].set_data([lo, hi], [lo, hi])
    else:
        (diag,) = ax.plot([lo, hi], [lo, hi], color="black", lw=0.8, ls="--", label="exact = realized")
        diag._otspec_diagonal = True
    yerr = np.clip(np.vstack([b.mean_realized - b.ci_low, b.ci_high - b.mean_realized]), 0.0, None)  # matplotlib refuses < 0
    text = f"{label} " if label else ""
    ax.errorbar(
        b.mean_expected,
        b.mean_realized,
        yerr=np.nan_to_num(yerr),
        fmt="o",
        ms=4,
        capsize=3,
        label=f"{text}(z = {b.z_overall:+.2f}, N = {int(b.count.sum())})",
    )
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    if title:
        ax.set_title(title)
    ax.legend(fontsize="small", loc="upper left")
    return ax
