r"""Cluster bootstrap intervals for dataset-level means, differences and ratios.

Positions of one document (or one prompt's decoding rounds) are correlated: an easy document makes
every one of its positions easy. An interval that treats positions as independent is then far too
narrow. These functions resample whole **clusters** (documents, prompts) with
:func:`scipy.stats.bootstrap`, so the interval reflects the variation between clusters.

Every estimate is a ratio of cluster totals: with cluster :math:`c` holding values
:math:`y_{c,1..n_c}`,

.. math:: \hat\mu = \frac{\sum_c \sum_i y_{c,i}}{\sum_c n_c},

the mean over all positions (each position weighs the same). A resample draws clusters with
replacement and recomputes the statistic from its totals; for :func:`clustered_ratio` the numerator
and the denominator come from the same resampled clusters, so the interval carries the
denominator's variance and their covariance.

Notes
-----
Bootstrap intervals cover less than their nominal level when the clusters are few, and less again
when their sizes are very unequal. In the simulation ``experiments/stats_coverage.py`` (300 data
sets per cell; :doc:`corpus` has the table) the 95% BCa interval of a mean covered 90-93% at 10-20
equal clusters and 93-96% from 40, but 85-92% at 10-40 clusters of lognormal sizes and still 89-93%
at 80-160. Below :data:`MIN_CLUSTERS` clusters every interval warns (:class:`FewClustersWarning`).

Examples
--------
>>> import numpy as np
>>> from otspec.stats import clustered_mean
>>> rng = np.random.default_rng(0)
>>> docs = np.repeat(np.arange(20), 10)
>>> y = rng.normal(0.7, 0.05, 20)[docs] + rng.normal(0, 0.01, 200)
>>> est = clustered_mean(y, docs, seed=0)
>>> est.low < est.value < est.high, est.n, est.n_clusters
(True, 200, 20)
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from otspec._docs import fill_doc
from otspec.errors import InvalidOptionError, ShapeMismatchError

__all__ = [
    "BootstrapInterval",
    "cluster_totals",
    "clustered_mean",
    "clustered_difference",
    "clustered_ratio",
    "clustered_relative_change",
    "holm",
    "benjamini_hochberg",
    "DEFAULT_RESAMPLES",
    "MIN_CLUSTERS",
    "FewClustersWarning",
]

#: Bootstrap resamples per interval: the Monte Carlo error of a 95% percentile end at 2000
#: resamples is about 0.5% of the interval's width.
DEFAULT_RESAMPLES = 2000

#: Below this many clusters an interval warns (:class:`FewClustersWarning`): its coverage falls
#: short of the nominal level (``experiments/stats_coverage.py`` measures it against the number of
#: clusters; :doc:`corpus` states the figures).
MIN_CLUSTERS = 40


class FewClustersWarning(UserWarning):
    """A bootstrap interval from fewer than :data:`MIN_CLUSTERS` clusters: it covers less than its
    nominal level (see :data:`MIN_CLUSTERS`); read it as approximate, or collect more documents.
    Not raised when every cluster gives the same estimate (the interval is then the value, with no
    resampling)."""


def _warn_few_clusters(C: int) -> None:
    if 2 <= C < MIN_CLUSTERS:
        warnings.warn(
            f"a cluster bootstrap interval from {C} clusters (fewer than {MIN_CLUSTERS}) covers less than its nominal level "
            "(see 'How many clusters' in the corpus docs); read it as approximate or use more clusters",
            FewClustersWarning,
            stacklevel=4,
        )


@dataclass(frozen=True)
class BootstrapInterval:
    """A point estimate with its cluster bootstrap interval.

    Attributes
    ----------
    value : float
        The estimate on the full data.
    low, high : float
        The interval's ends; ``nan`` when fewer than two clusters make an interval meaningless.
        Equal to ``value`` when every cluster gives the same estimate.
    confidence : float
        Confidence level (e.g. 0.95).
    n : int
        Positions (values) used.
    n_clusters : int
        Clusters (documents) they fall in.
    method : str
        The bootstrap method (``"BCa"``, ``"percentile"`` or ``"basic"``).
    distribution : numpy.ndarray or None
        The statistic on every resample (``None`` when no resampling was needed); it gives
        :meth:`pvalue`.
    """

    value: float
    low: float
    high: float
    confidence: float
    n: int
    n_clusters: int
    method: str
    distribution: np.ndarray | None = field(default=None, repr=False, compare=False)

    def pvalue(self, reference: float) -> float:
        r"""Two-sided bootstrap p-value of the hypothesis "the estimand equals ``reference``".

        The test that inverts the percentile interval: with :math:`B` resamples :math:`\theta^*_b`,

        .. math:: p = \min\Bigl(1,\ 2 \min\bigl(\tfrac{1 + \#\{\theta^*_b \le r\}}{B + 1},
                  \tfrac{1 + \#\{\theta^*_b \ge r\}}{B + 1}\bigr)\Bigr),

        so ``reference`` lies outside the :math:`1 - a` percentile interval roughly when
        :math:`p < a`. Feed these to :func:`holm` when several references are compared.

        Parameters
        ----------
        reference : float
            The value tested (e.g. a paper's number).

        Returns
        -------
        float
            The p-value in (0, 1]; ``nan`` without a bootstrap distribution (fewer than two
            clusters), and 1.0 or :math:`2/(B+1)` style extremes when every cluster agrees.

        Examples
        --------
        >>> import numpy as np
        >>> r = clustered_mean(np.arange(40.0), np.arange(40), n_resamples=999)
        >>> r.pvalue(19.5) > 0.5, r.pvalue(40.0) < 0.01
        (True, True)
        """
        if self.distribution is None:
            if math.isnan(self.low):
                return math.nan
            return 1.0 if reference == self.value else 0.0
        d = self.distribution[np.isfinite(self.distribution)]
        B = d.size
        lo = (1 + np.count_nonzero(d <= reference)) / (B + 1)
        hi = (1 + np.count_nonzero(d >= reference)) / (B + 1)
        return float(min(1.0, 2 * min(lo, hi)))

    def as_dict(self) -> dict[str, Any]:
        """The fields as a plain dict (JSON-ready).

        Returns
        -------
        dict
            ``value``, ``low``, ``high``, ``confidence``, ``n``, ``n_clusters``, ``method``.
        """
        return dict(
            value=self.value,
            low=self.low,
            high=self.high,
            confidence=self.confidence,
            n=self.n,
            n_clusters=self.n_clusters,
            method=self.method,
        )


def cluster_totals(values: Any, clusters: Any) -> tuple[np.ndarray, np.ndarray]:
    """Per-cluster sums and counts of ``values`` (clusters in order of first appearance).

    Parameters
    ----------
    values : array_like, shape (n,) or (m, n)
        Finite values, one per position (a 2-D array gives several quantities on the same
        positions: one row each).
    clusters : array_like, shape (n,)
        Cluster label of each position (any hashable numpy dtype: ints, strings).

    Returns
    -------
    sums : ndarray, shape (C,) or (m, C)
        Sum of the values of each cluster.
    counts : ndarray, shape (C,)
        Positions in each cluster.

    Raises
    ------
    ShapeMismatchError
        If the shapes do not match or there are no values.
    InvalidOptionError
        If a value is NaN or infinite.

    Examples
    --------
    >>> s, c = cluster_totals([1.0, 2.0, 3.0], ["a", "b", "a"])
    >>> s.tolist(), c.tolist()
    ([4.0, 2.0], [2, 1])
    """
    y = np.asarray(values, dtype=np.float64)
    g = np.asarray(clusters)
    if y.ndim not in (1, 2) or g.ndim != 1 or y.shape[-1] != g.shape[0] or g.shape[0] == 0:
        raise ShapeMismatchError(
            f"values must have shape (n,) or (m, n) and clusters shape (n,) with n >= 1 (got {y.shape} and {g.shape}); "
            "pass one cluster label per value"
        )
    if not np.all(np.isfinite(y)):
        raise InvalidOptionError("values must be finite (got NaN or infinity); drop undefined positions before the bootstrap")
    _, first, inv = np.unique(g, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")  # clusters in order of first appearance
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    idx = rank[inv.reshape(-1)]
    C = order.size
    counts = np.bincount(idx, minlength=C)
    if y.ndim == 1:
        sums = np.bincount(idx, weights=y, minlength=C)
    else:
        sums = np.stack([np.bincount(idx, weights=row, minlength=C) for row in y])
    return sums, counts


def _check_options(confidence: float, n_resamples: int, method: str) -> None:
    if not (0.0 < float(confidence) < 1.0):
        raise InvalidOptionError(f"confidence must lie in (0, 1) (got {confidence!r}); pass e.g. 0.95")
    if int(n_resamples) != n_resamples or n_resamples < 100:
        raise InvalidOptionError(f"n_resamples must be an integer >= 100 (got {n_resamples!r}); pass e.g. {DEFAULT_RESAMPLES}")
    if method not in ("BCa", "percentile", "basic"):
        raise InvalidOptionError(f"method must be 'BCa', 'percentile' or 'basic' (got {method!r}); pick one of those")


def _scipy_interval(
    data: tuple,
    statistic: Callable,
    paired: bool,
    value: float,
    n: int,
    C: int,
    confidence: float,
    n_resamples: int,
    method: str,
    seed: Any,
) -> BootstrapInterval:
    """The interval of :func:`scipy.stats.bootstrap` around ``value`` (options already checked)."""
    from scipy.stats import bootstrap

    res = bootstrap(
        data,
        statistic,
        paired=paired,
        vectorized=True,
        confidence_level=float(confidence),
        n_resamples=int(n_resamples),
        method=method,
        rng=np.random.default_rng(seed),
    )
    ci = res.confidence_interval
    return BootstrapInterval(value, float(ci.low), float(ci.high), float(confidence), n, C, method, np.asarray(res.bootstrap_distribution))


def _bootstrap(
    data: tuple[np.ndarray, ...], statistic: Callable, n: int, confidence: float, n_resamples: int, method: str, seed: Any
) -> BootstrapInterval:
    _check_options(confidence, n_resamples, method)
    value = float(statistic(*data, axis=-1))
    C = data[0].shape[-1]
    if C < 2:
        return BootstrapInterval(value, math.nan, math.nan, float(confidence), n, C, method)
    # every cluster alone gives the same estimate: every resample does too (scipy would return NaN)
    singles = statistic(*(d[..., None] for d in data), axis=-1)
    if np.all(np.isfinite(singles)) and np.ptp(singles) == 0.0:
        return BootstrapInterval(value, value, value, float(confidence), n, C, method)
    _warn_few_clusters(C)
    return _scipy_interval(data, statistic, True, value, n, C, confidence, n_resamples, method, seed)


def _mean_stat(s, c, axis=-1):
    return np.sum(s, axis=axis) / np.sum(c, axis=axis)


def _ratio_stat(a, b, axis=-1):
    return np.sum(a, axis=axis) / np.sum(b, axis=axis)


def _diff_stat(a, b, c, axis=-1):
    return (np.sum(a, axis=axis) - np.sum(b, axis=axis)) / np.sum(c, axis=axis)


def clustered_mean(
    values: Any, clusters: Any, *, confidence: float = 0.95, n_resamples: int = DEFAULT_RESAMPLES, method: str = "BCa", seed: Any = 0
) -> BootstrapInterval:
    r"""Mean over positions with a cluster bootstrap interval.

    .. math:: \hat\mu = \sum_c S_c \big/ \sum_c n_c, \qquad S_c = \sum_{i \in c} y_i .

    Parameters
    ----------
    values : array_like, shape (n,)
        One finite value per position.
    clusters : array_like, shape (n,)
        The cluster (document) of each position.
    confidence : float
        Confidence level in (0, 1).
    n_resamples : int
        Bootstrap resamples (>= 100).
    method : {"BCa", "percentile", "basic"}
        :func:`scipy.stats.bootstrap`'s interval method (BCa: bias-corrected and accelerated).
    seed : int or numpy.random.Generator, optional
        Seed of the resampling (fixed by default, so a summary is reproducible).

    Returns
    -------
    BootstrapInterval
        The mean and its interval.

    Raises
    ------
    ShapeMismatchError
        If ``values`` and ``clusters`` differ in length or are empty.
    InvalidOptionError
        If a value is not finite, or an option is out of range.

    Examples
    --------
    >>> r = clustered_mean([1.0, 1.0, 0.0, 0.0], [0, 0, 1, 1], n_resamples=200)
    >>> r.value, r.n_clusters
    (0.5, 2)
    """
    s, c = cluster_totals(values, clusters)
    return _bootstrap((s, c.astype(np.float64)), _mean_stat, int(c.sum()), confidence, n_resamples, method, seed)


@fill_doc
def clustered_difference(
    a: Any,
    b: Any,
    clusters: Any,
    *,
    clusters_b: Any = None,
    confidence: float = 0.95,
    n_resamples: int = DEFAULT_RESAMPLES,
    method: str = "BCa",
    seed: Any = 0,
) -> BootstrapInterval:
    r"""Difference of two means, :math:`\hat\mu_a - \hat\mu_b`: paired on the same positions, or of
    two independent samples.

    Paired (``clusters_b`` not given): ``a`` and ``b`` are two values per position, resampled
    together by cluster, so the interval uses their correlation: e.g. the optimum minus a verifier's
    acceptance, position by position. Independent (``clusters_b`` given): ``a`` on ``clusters`` and
    ``b`` on ``clusters_b`` are two samples (e.g. two domains, two corpora), each resampled by its
    own clusters.

    Parameters
    ----------
    a, b : array_like
        Finite values: two per position (same shape) when paired, else one sample each.
    clusters : array_like
        The cluster (document) of each value of ``a`` (and of ``b`` when paired).
    clusters_b : array_like, optional
        The cluster of each value of ``b``: makes the samples independent.
    {bootstrap_args}

    Returns
    -------
    BootstrapInterval
        The difference of the means and its interval.

    Raises
    ------
    ShapeMismatchError
        If paired values differ in shape, or a sample and its clusters differ in length or are empty.
    InvalidOptionError
        If a value is not finite, or an option is out of range.

    Examples
    --------
    >>> r = clustered_difference([0.9, 0.8, 0.7], [0.5, 0.6, 0.5], [0, 0, 1], n_resamples=200)
    >>> round(r.value, 12)
    0.266666666667
    >>> r = clustered_difference([0.9, 0.8, 0.7], [0.5, 0.6], [0, 0, 1], clusters_b=[7, 8], n_resamples=200)
    >>> round(r.value, 12), r.n_clusters
    (0.25, 4)
    """
    a_ = np.asarray(a, dtype=np.float64)
    b_ = np.asarray(b, dtype=np.float64)
    if clusters_b is not None:
        return _independent_difference(a_, clusters, b_, clusters_b, confidence, n_resamples, method, seed)
    if a_.shape != b_.shape:
        raise ShapeMismatchError(f"a and b must have the same shape (got {a_.shape} and {b_.shape}); pass paired values")
    s, c = cluster_totals(np.stack([a_, b_]) if a_.ndim == 1 else a_, clusters)
    return _bootstrap((s[0], s[1], c.astype(np.float64)), _diff_stat, int(c.sum()), confidence, n_resamples, method, seed)


def _independent_difference(a, ga, b, gb, confidence, n_resamples, method, seed) -> BootstrapInterval:
    """Two samples, each resampled by its own clusters: scipy resamples cluster *indices* of each
    sample independently, and the statistic reads the clusters' totals through them."""
    _check_options(confidence, n_resamples, method)
    sa, ca = cluster_totals(a, ga)
    sb, cb = cluster_totals(b, gb)
    ca, cb = ca.astype(np.float64), cb.astype(np.float64)

    def stat(i, j, axis=-1):
        i, j = np.asarray(i, dtype=np.intp), np.asarray(j, dtype=np.intp)
        return np.sum(sa[i], axis=axis) / np.sum(ca[i], axis=axis) - np.sum(sb[j], axis=axis) / np.sum(cb[j], axis=axis)

    ia, ib = np.arange(sa.size), np.arange(sb.size)
    value = float(stat(ia, ib))
    n, C = int(ca.sum() + cb.sum()), int(sa.size + sb.size)
    if sa.size < 2 or sb.size < 2:
        return BootstrapInterval(value, math.nan, math.nan, float(confidence), n, C, method)
    if np.ptp(sa / ca) == 0.0 and np.ptp(sb / cb) == 0.0:
        return BootstrapInterval(value, value, value, float(confidence), n, C, method)
    _warn_few_clusters(min(sa.size, sb.size))
    return _scipy_interval((ia, ib), stat, False, value, n, C, confidence, n_resamples, method, seed)


@fill_doc
def clustered_ratio(
    numerator: Any,
    denominator: Any,
    clusters: Any,
    *,
    confidence: float = 0.95,
    n_resamples: int = DEFAULT_RESAMPLES,
    method: str = "BCa",
    seed: Any = 0,
) -> BootstrapInterval:
    r"""Ratio of two means on the same positions, :math:`\sum a / \sum b`, e.g. a verifier's
    acceptance relative to the optimum.

    Numerator and denominator are resampled together by cluster, so the interval includes the
    denominator's variance (and their covariance), unlike a ratio of two separate intervals or the
    mean of per-position ratios.

    Parameters
    ----------
    numerator, denominator : array_like, shape (n,)
        Finite values per position; the denominator's total must be non-zero.
    clusters : array_like, shape (n,)
        The cluster (document) of each position.
    {bootstrap_args}

    Returns
    -------
    BootstrapInterval
        The ratio and its interval.

    Raises
    ------
    ShapeMismatchError
        If the lengths differ or are zero.
    InvalidOptionError
        If a value is not finite, an option is out of range, or the denominator sums to 0.

    Examples
    --------
    >>> r = clustered_ratio([0.4, 0.5, 0.3], [0.8, 1.0, 0.6], [0, 1, 2], n_resamples=200)
    >>> round(r.value, 12), (r.low, r.high)
    (0.5, (0.5, 0.5))
    """
    a_ = np.asarray(numerator, dtype=np.float64)
    b_ = np.asarray(denominator, dtype=np.float64)
    if a_.shape != b_.shape:
        raise ShapeMismatchError(f"numerator and denominator must have the same shape (got {a_.shape} and {b_.shape}); pass paired values")
    s, c = cluster_totals(np.stack([a_, b_]) if a_.ndim == 1 else a_, clusters)
    if s[1].sum() == 0.0:
        raise InvalidOptionError("the denominator sums to 0, so the ratio is undefined; drop those positions or use clustered_difference")
    return _bootstrap((s[0], s[1]), _ratio_stat, int(c.sum()), confidence, n_resamples, method, seed)


# long-function: a long numpydoc docstring with the delta-method math; the code is short
@fill_doc
def clustered_relative_change(
    numerator_a: Any,
    denominator_a: Any,
    clusters_a: Any,
    numerator_b: Any,
    denominator_b: Any,
    clusters_b: Any,
    *,
    confidence: float = 0.95,
    n_resamples: int = DEFAULT_RESAMPLES,
    method: str = "BCa",
    seed: Any = 0,
) -> BootstrapInterval:
    r"""Relative change of one ratio of totals over another, from two runs on the same clusters.

    .. math:: \hat g = \frac{\sum a_{\mathrm{num}} / \sum a_{\mathrm{den}}}
                             {\sum b_{\mathrm{num}} / \sum b_{\mathrm{den}}} - 1,

    e.g. block verification's block efficiency (tokens over target calls, in its own runs) against
    token verification's (in its own runs). The two runs decode the same prompts with independent
    randomness, so a prompt is one cluster holding both runs' values: resampling prompts moves
    both ratios together (their covariance through the prompt's difficulty enters the interval) and
    each ratio's denominator varies too. Clusters are matched by id; a cluster present in one run
    only adds zero totals to the other.

    Parameters
    ----------
    numerator_a, denominator_a : array_like, shape (n_a,)
        Run a's values per unit (e.g. tokens and target calls per round).
    clusters_a : array_like, shape (n_a,)
        Run a's cluster (prompt) ids.
    numerator_b, denominator_b, clusters_b : array_like, shape (n_b,)
        The same for run b (the reference).
    {bootstrap_args}

    Returns
    -------
    BootstrapInterval
        :math:`\hat g` and its interval (``n`` counts both runs' units).

    Raises
    ------
    ShapeMismatchError
        If a run's arrays differ in length or are empty.
    InvalidOptionError
        If a value is not finite, an option is out of range, or a denominator sums to 0.

    Examples
    --------
    >>> r = clustered_relative_change([3, 5], [1, 1], [0, 1], [2, 4], [1, 1], [0, 1], n_resamples=200)
    >>> round(r.value, 12)
    0.333333333333
    """
    ids: dict[Any, int] = {}
    cols = []
    for num, den, cl in ((numerator_a, denominator_a, clusters_a), (numerator_b, denominator_b, clusters_b)):
        n_ = np.asarray(num, dtype=np.float64)
        d_ = np.asarray(den, dtype=np.float64)
        if n_.shape != d_.shape:
            raise ShapeMismatchError(
                f"numerator and denominator must have the same shape (got {n_.shape} and {d_.shape}); pass paired values"
            )
        s, c = cluster_totals(np.stack([n_, d_]), cl)
        keys = list(dict.fromkeys(np.asarray(cl).tolist()))
        for k in keys:
            ids.setdefault(k, len(ids))
        cols.append((s, c, np.array([ids[k] for k in keys], dtype=np.intp)))
    C = len(ids)
    tot = np.zeros((4, C))
    for r, (s, _, at) in enumerate(cols):
        tot[2 * r, at], tot[2 * r + 1, at] = s[0], s[1]
    if tot[1].sum() == 0.0 or tot[3].sum() == 0.0:
        raise InvalidOptionError("a denominator sums to 0, so the ratio is undefined; drop those units")
    if tot[2].sum() == 0.0:
        raise InvalidOptionError("the reference run's numerator sums to 0, so the relative change is undefined")

    def stat(na, da, nb, db, axis=-1):
        return (np.sum(na, axis=axis) / np.sum(da, axis=axis)) / (np.sum(nb, axis=axis) / np.sum(db, axis=axis)) - 1.0

    n = int(cols[0][1].sum() + cols[1][1].sum())
    return _bootstrap(tuple(tot), stat, n, confidence, n_resamples, method, seed)


def holm(pvalues: Any, alpha: float = 0.05) -> tuple[np.ndarray, np.ndarray]:
    r"""Holm's step-down correction of a family of p-values (family-wise error rate ``alpha``).

    Sort :math:`p_{(1)} \le \dots \le p_{(m)}`; the adjusted values are
    :math:`\tilde p_{(i)} = \max_{j \le i} \min(1, (m - j + 1)\, p_{(j)})` and hypothesis
    :math:`(i)` is rejected when :math:`\tilde p_{(i)} \le \alpha` (Holm 1979). The probability of
    any false rejection in the family is at most ``alpha`` whatever the dependence.

    Parameters
    ----------
    pvalues : array_like, shape (m,)
        p-values in [0, 1]; ``nan`` entries (comparisons not made) are kept out of the family and
        stay ``nan`` / not rejected.
    alpha : float
        Family-wise error rate in (0, 1).

    Returns
    -------
    adjusted : numpy.ndarray
        Holm-adjusted p-values, in the input order.
    rejected : numpy.ndarray of bool
        ``adjusted <= alpha``.

    Raises
    ------
    ShapeMismatchError
        If ``pvalues`` has more than one dimension (one family per call: ravel it, or loop).
    InvalidOptionError
        If a p-value is outside [0, 1] or ``alpha`` is outside (0, 1).

    Examples
    --------
    >>> adj, rej = holm([0.01, 0.04, 0.03, 0.5])
    >>> adj.round(2).tolist(), rej.tolist()
    ([0.04, 0.09, 0.09, 0.5], [True, False, False, False])
    """
    return _adjusted(pvalues, alpha, _holm_adjust)


def _holm_adjust(p: np.ndarray) -> np.ndarray:
    m = p.size
    order = np.argsort(p, kind="stable")
    adj = np.empty(m)
    adj[order] = np.maximum.accumulate(np.minimum(1.0, (m - np.arange(m)) * p[order]))
    return adj


def benjamini_hochberg(pvalues: Any, alpha: float = 0.05) -> tuple[np.ndarray, np.ndarray]:
    r"""Benjamini-Hochberg adjusted p-values (false discovery rate ``alpha``), by
    :func:`scipy.stats.false_discovery_control`.

    Parameters
    ----------
    pvalues : array_like, shape (m,)
        p-values in [0, 1]; ``nan`` entries are kept out of the family.
    alpha : float
        False discovery rate in (0, 1).

    Returns
    -------
    adjusted : numpy.ndarray
        Adjusted p-values, in the input order.
    rejected : numpy.ndarray of bool
        ``adjusted <= alpha``.

    Raises
    ------
    ShapeMismatchError
        If ``pvalues`` has more than one dimension (one family per call: ravel it, or loop).
    InvalidOptionError
        If a p-value is outside [0, 1] or ``alpha`` is outside (0, 1).

    Examples
    --------
    >>> adj, rej = benjamini_hochberg([0.01, 0.04, 0.03, 0.5])
    >>> adj.round(4).tolist(), rej.tolist()
    ([0.04, 0.0533, 0.0533, 0.5], [True, False, False, False])
    """
    from scipy.stats import false_discovery_control

    return _adjusted(pvalues, alpha, lambda p: false_discovery_control(p, method="bh"))


def _adjusted(pvalues: Any, alpha: float, adjust: Callable[[np.ndarray], np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """``adjust`` applied to the family of non-NaN p-values; NaN entries stay NaN and not rejected."""
    p = _check_pvalues(pvalues, alpha)
    out = np.full(p.shape, np.nan)
    ok = ~np.isnan(p)
    if ok.any():
        out[ok] = adjust(p[ok])
    return out, np.where(ok, out <= alpha, False)


def _check_pvalues(pvalues: Any, alpha: float) -> np.ndarray:
    p = np.asarray(pvalues, dtype=np.float64)
    if p.ndim > 1:
        # a 2-D array is several families or one family laid out in a table: flattening it would
        # silently pick "one family" and change every adjusted value, so the caller says which
        raise ShapeMismatchError(
            f"pvalues must be one family, a 1-D array (got shape {p.shape}); pass p.ravel() to correct all of them as one "
            "family, or call once per row for one family per row"
        )
    p = p.reshape(-1)
    if np.any((p[~np.isnan(p)] < 0) | (p[~np.isnan(p)] > 1)):
        raise InvalidOptionError(f"p-values must lie in [0, 1] (got {p.tolist()}); pass probabilities")
    if not 0.0 < float(alpha) < 1.0:
        raise InvalidOptionError(f"alpha must lie in (0, 1) (got {alpha!r}); e.g. 0.05")
    return p
