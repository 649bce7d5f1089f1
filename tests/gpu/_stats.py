"""Shared statistics of the torch sampling tests (chain and tree verifiers)."""

from __future__ import annotations

import numpy as np
from scipy import stats


def pooled_chi_square(counts: np.ndarray, probs: np.ndarray, n: int, alpha: float) -> tuple[float, float, int]:
    """Pearson statistic of ``counts`` against ``probs`` and its ``1 - alpha`` quantile.

    Cells of probability 0 must be empty (checked exactly by the caller); cells with expected count
    < 10 are pooled into one cell (merged into the smallest other cell if the pool is still < 10).
    Returns ``(statistic, threshold, df)``; ``df = 0`` (nothing to test) gives threshold ``inf``.
    """
    pos = probs > 0
    c, e = counts[pos].astype(float), probs[pos] * n
    small = e < 10
    if small.any():
        c = np.append(c[~small], c[small].sum())
        e = np.append(e[~small], e[small].sum())
        if e[-1] < 10 and len(e) > 1:
            j = int(np.argmin(e[:-1]))
            c[j] += c[-1]
            e[j] += e[-1]
            c, e = c[:-1], e[:-1]
    df = len(e) - 1
    if df < 1:
        return 0.0, np.inf, 0
    return float(((c - e) ** 2 / e).sum()), float(stats.chi2.isf(alpha, df)), df
