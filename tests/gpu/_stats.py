"""Shared statistics of the torch sampling tests (chain and tree verifiers), and the exact law of the
first three decoded tokens that the end-to-end decoding tests compare their tokens with."""

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


def first_tokens_law(target, prompt: list[int], **sampling) -> np.ndarray:
    r"""``(V, V, V)`` exact law of the first three tokens generated after ``prompt``, from cache-free
    forwards of ``target``: :math:`P(t_1, t_2, t_3) = p(t_1 | c)\, p(t_2 | c t_1)\, p(t_3 | c t_1 t_2)`,
    each ``p`` the processed target law (``sampling``: the keywords of ``probs_from_logits``)."""
    import torch

    from otspec_gpu.processing import probs_from_logits

    V = target.vocab_size

    def law(seqs):
        lg = target.logits(torch.tensor(seqs))[:, -1]
        return probs_from_logits(lg, dtype=torch.float64, **sampling).numpy()

    p1 = law([prompt])[0]
    p2 = law([prompt + [a] for a in range(V)])
    p3 = law([prompt + [a, b] for a in range(V) for b in range(V)]).reshape(V, V, V)
    return p1[:, None, None] * p2[:, :, None] * p3


def first_tokens_pvalue(tokens, joint: np.ndarray) -> float:
    """Pearson chi-square p-value of the first three tokens of ``N`` decodings (``tokens``: ``N`` rows
    of 3) against their exact law ``joint`` (:func:`first_tokens_law`). Cells of probability 0 must
    stay empty (asserted); cells of expected count in (0, 5) are pooled into one."""
    arr = np.asarray(tokens)
    V = joint.shape[0]
    assert arr.ndim == 2 and arr.shape[1] == 3, arr.shape
    counts = np.bincount(arr[:, 0] * V * V + arr[:, 1] * V + arr[:, 2], minlength=V**3).astype(float)
    expected = joint.reshape(-1) * arr.shape[0]
    assert counts[expected == 0].sum() == 0, "a token sequence of target probability 0 was generated"
    big = expected >= 5
    small = (expected > 0) & ~big
    obs, exp = counts[big], expected[big]
    if small.any():
        obs, exp = np.append(obs, counts[small].sum()), np.append(exp, expected[small].sum())
    stat = float(((obs - exp) ** 2 / exp).sum())
    return float(stats.chi2.sf(stat, obs.size - 1))
