r"""Statistical checks of a verifier's sampler: against its own kernel, tuple by tuple, or alone
against the target (Pearson's chi-square, Bonferroni over tuples, stated false alarm and power)."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from otspec.errors import UnsupportedMethodError
from otspec.laws import DraftLaw
from otspec.testing._docs import fill_doc
from otspec.testing._findings import TOP_CONTRIBUTORS, VerifierAssertionError, fmt_number, tuple_text
from otspec.testing.adapters import step_verifier
from otspec.testing.forms import SamplerVerifier

__all__ = ["EXPECTED_COUNT_MIN", "SamplerCheck", "assert_sampler_lossless", "assert_sampler_matches"]

#: Cells of a chi-square test with expected count below this are pooled (the usual rule of thumb
#: for the chi-square approximation to Pearson's statistic).
EXPECTED_COUNT_MIN = 5.0


#: A cell whose expected count is below this is "impossible": seeing it at all is a failure (the
#: chance of a false alarm from one such cell is below this number).
_IMPOSSIBLE_COUNT = 1e-9


@dataclass(frozen=True)
class SamplerCheck:
    r"""What a passed sampler test measured, and how strong it was.

    Attributes
    ----------
    n : int
        Total number of sampler draws.
    cells : int
        Number of tested groups (draft tuples for :func:`assert_sampler_matches`; 1 for
        :func:`assert_sampler_lossless`).
    min_p_value : float
        Smallest chi-square p-value over the groups.
    false_alarm : float
        Probability that a correct sampler fails the test (Bonferroni over the groups).
    tv : float
        The total-variation error the power refers to.
    power : float
        Lower bound (asymptotic) on the probability of failing a sampler whose law is at TV
        distance ``tv`` from the reference in the worst-powered group.
    detectable_tv : float
        Smallest TV error detected with probability at least 0.99 in every group.
    worst : tuple
        The draft tuple with the smallest p-value (empty for :func:`assert_sampler_lossless`).
    pooled : int
        Number of cells (over all groups) merged because their expected count was below
        :data:`EXPECTED_COUNT_MIN`; the power refers to the merged partition.
    """

    n: int
    cells: int
    min_p_value: float
    false_alarm: float
    tv: float
    power: float
    detectable_tv: float
    worst: tuple = field(default=())
    pooled: int = 0


def _pooled_chi_square(observed: np.ndarray, expected: np.ndarray) -> tuple[float, int, np.ndarray, np.ndarray]:
    """Pearson's statistic with cells of expected count < EXPECTED_COUNT_MIN pooled (smallest first).

    Returns ``(statistic, df, pooled_observed, pooled_expected)``; ``df = cells - 1``."""
    order = np.argsort(expected, kind="stable")
    e, o = expected[order], observed[order]
    cum = np.cumsum(e)
    # pool the smallest cells together until the pool reaches the minimum expected count
    cut = int(np.searchsorted(cum, EXPECTED_COUNT_MIN)) if e[0] < EXPECTED_COUNT_MIN else -1
    if cut >= 0:
        cut = min(cut, e.size - 1)
        e = np.concatenate([[cum[cut]], e[cut + 1 :]])
        o = np.concatenate([[o[: cut + 1].sum()], o[cut + 1 :]])
        if e.size > 1 and e[0] < EXPECTED_COUNT_MIN:  # the pool holds all but big cells: merge into the next
            e = np.concatenate([[e[0] + e[1]], e[2:]])
            o = np.concatenate([[o[0] + o[1]], o[2:]])
    stat = float(((o - e) ** 2 / e).sum()) if e.size > 1 else 0.0
    return stat, int(e.size - 1), o, e


@functools.lru_cache(maxsize=1024)
def _power(alpha: float, df: int, n: float, tv: float) -> float:
    """Asymptotic power of Pearson's test at level ``alpha`` against any law at TV distance ``tv``:
    chi^2-divergence >= (2 TV)^2 (Cauchy-Schwarz), so the non-centrality is >= 4 n TV^2."""
    if df <= 0:
        return 1.0
    from scipy import stats  # lazy: scipy.stats is slow to import

    crit = stats.chi2.isf(alpha, df)
    return float(stats.ncx2.sf(crit, df, 4.0 * n * tv * tv))


@functools.lru_cache(maxsize=1024)
def _detectable_tv(alpha: float, df: int, n: float, power: float = 0.99) -> float:
    if df <= 0:
        return 0.0
    lo, hi = 0.0, 1.0
    for _ in range(40):  # to ~1e-12
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if _power(alpha, df, n, mid) >= power else (mid, hi)
    return hi


def _one_test_check(n: int, pval: float, false_alarm: float, tv: float, df: int, pooled: int) -> SamplerCheck:
    """The report of one passed chi-square test with ``df`` degrees of freedom over ``n`` draws."""
    return SamplerCheck(
        n=n,
        cells=1,
        min_p_value=pval,
        false_alarm=false_alarm,
        tv=tv,
        power=_power(false_alarm, df, n, tv),
        detectable_tv=_detectable_tv(false_alarm, df, n),
        pooled=pooled,
    )


# long-function: a public assertion whose numpydoc docstring states the test, N and the false-alarm rate
@fill_doc
def assert_sampler_matches(
    verifier: Any,
    p: Any,
    law: DraftLaw,
    *,
    n: int = 200_000,
    false_alarm: float = 1e-6,
    tv: float = 0.05,
    rng: np.random.Generator | None = None,
    per_tuple: bool = True,
) -> SamplerCheck:
    r"""Assert that ``verifier.sample_batch`` draws from ``verifier.kernel``, draft tuple by draft tuple.

    For each of the M draft tuples :math:`\bar x` of ``law``, ``n // M`` outputs are sampled given
    :math:`\bar x` and compared with :math:`\pi(\cdot \mid \bar x)` by Pearson's chi-square
    (cells with expected count < :data:`EXPECTED_COUNT_MIN` pooled; an output of kernel probability
    0 fails at once). Each tuple is tested at level ``false_alarm / M``, so a correct sampler fails
    with probability at most ``false_alarm``.

    **Power.** If the sampler's law given some tuple is at total-variation distance ``tv`` from the
    kernel row (on the pooled cells), the statistic is asymptotically non-central chi-square with
    non-centrality at least :math:`4 (n/M)\, \mathrm{tv}^2` (since
    :math:`\chi^2(P'\|P) \ge (2\,\mathrm{TV})^2`); the returned :class:`SamplerCheck` states this
    power and the TV error detectable with probability 0.99.

    With ``per_tuple=False`` the test is instead one chi-square on the joint law of (draft tuple,
    output): ``n`` tuples drawn from the law, one output each, cells
    :math:`n\,Q(\bar x)\,\pi(y \mid \bar x)`, level ``false_alarm``; the power then refers to a TV
    error ``tv`` of that joint law (non-centrality :math:`\ge 4 n\, \mathrm{tv}^2`).

    Parameters
    ----------
    {step_args}
    n : int
        Total draws (split evenly over the tuples).
    {sampler_test}
    per_tuple : bool
        One test per draft tuple (``True``) or one test of the joint law (``False``).

    Returns
    -------
    SamplerCheck
        Draws, cells, smallest p-value, level, power at ``tv`` and the TV detectable at power 0.99.

    Raises
    ------
    VerifierAssertionError
        If a chi-square test rejects, or the sampler outputs a token of kernel probability 0.
    UnsupportedMethodError
        If the verifier has no kernel (a sampler alone: use :func:`assert_sampler_lossless`).

    Examples
    --------
    >>> import otspec
    >>> from otspec.verifiers import rrs
    >>> chk = assert_sampler_matches(rrs, [0.5, 0.3, 0.2], otspec.iid([0.2, 0.3, 0.5], 2), n=90_000)
    >>> chk.cells, chk.power > 0.99, round(chk.detectable_tv, 3)   # 10 000 draws per tuple
    (9, True, 0.038)
    """
    v, p = step_verifier(verifier, p, law)
    if isinstance(v, SamplerVerifier):
        raise UnsupportedMethodError(
            f"verifier {v.name!r} is a sampler only: there is no kernel to compare with; use assert_sampler_lossless"
        )
    rng = np.random.default_rng(0) if rng is None else rng
    K = v.kernel(p, law)
    pi, tuples = np.asarray(K.pi), np.asarray(K.tuples)
    M, V = pi.shape
    if not per_tuple:
        return _joint_sampler_test(v, p, law, K, int(n), false_alarm, tv, rng)
    per = int(n) // M
    if per < 1:
        raise UnsupportedMethodError(f"n = {n} draws cannot cover the {M} draft tuples of {law!r}; pass n >= {M * 100}")
    from scipy import stats  # lazy: scipy.stats is slow to import

    ys = v.sample_batch(p, law, np.repeat(tuples, per, axis=0), rng=rng).reshape(M, per)
    counts = np.stack([np.bincount(row, minlength=V) for row in ys]).astype(np.float64)
    alpha = false_alarm / M
    worst = (1.0, 0, 0)
    min_power, detect, pooled = 1.0, 0.0, 0
    for m in range(M):
        e = per * np.clip(pi[m], 0.0, None)
        impossible = e < _IMPOSSIBLE_COUNT
        if counts[m, impossible].sum() > 0:
            y = int(np.flatnonzero(impossible & (counts[m] > 0))[0])
            raise VerifierAssertionError(
                f"sampler of {v.name!r} on {law!r} output token {y} given drafts x = {tuple_text(tuples[m])} "
                f"({int(counts[m, y])} of {per} draws), but the kernel gives pi({y}|x) = {fmt_number(pi[m, y])}",
                {"property": "sampler", "tuples": [tuples[m].tolist()], "token": y},
            )
        stat, df, _, _ = _pooled_chi_square(counts[m, ~impossible], e[~impossible])
        pooled += int(np.count_nonzero(~impossible)) - (df + 1)
        pval = float(stats.chi2.sf(stat, df)) if df > 0 else 1.0
        if pval < worst[0]:
            worst = (pval, m, df)
        if df > 0:
            min_power = min(min_power, _power(alpha, df, per, tv))
            detect = max(detect, _detectable_tv(alpha, df, per))
    pval, m, df = worst
    if pval < alpha:
        freq = counts[m] / per
        y = int(np.argmax(np.abs(freq - pi[m]) / np.sqrt(np.maximum(pi[m], 1.0 / per))))
        raise VerifierAssertionError(
            f"sampler of {v.name!r} disagrees with its kernel on {law!r} given drafts x = {tuple_text(tuples[m])}: "
            f"chi-square p-value {pval:.3g} < {alpha:.3g} (false alarm {false_alarm:g} / {M} tuples, {per} draws each); "
            f"token {y}: sampled frequency {fmt_number(freq[y])} vs kernel pi({y}|x) = {fmt_number(pi[m, y])}\n"
            f"sampled {np.array2string(freq, precision=4)} vs kernel {np.array2string(pi[m], precision=4)}",
            {
                "property": "sampler",
                "tuples": [tuples[m].tolist()],
                "token": y,
                "p_value": pval,
                "expected": float(pi[m, y]),
                "actual": float(freq[y]),
            },
        )
    return SamplerCheck(
        n=per * M,
        cells=M,
        min_p_value=pval,
        false_alarm=false_alarm,
        tv=tv,
        power=min_power,
        detectable_tv=detect,
        worst=tuple(int(t) for t in tuples[m]),
        pooled=pooled,
    )


def _joint_sampler_test(v, p, law, K, n, false_alarm, tv, rng) -> SamplerCheck:
    """Pearson's chi-square on the joint law of (draft tuple, output) (see assert_sampler_matches)."""
    from scipy import stats  # lazy: scipy.stats is slow to import

    pi, w, tuples = np.asarray(K.pi), np.asarray(K.weights), np.asarray(K.tuples)
    M, V = pi.shape
    draw_rng = rng.spawn(1)[0]  # the sampler's own stream, independent of the tuple draws
    m = rng.choice(M, size=n, p=w / w.sum())
    ys = v.sample_batch(p, law, tuples[m], rng=draw_rng)
    observed = np.bincount(m * V + ys, minlength=M * V).astype(np.float64)
    expected = n * (w[:, None] * np.clip(pi, 0.0, None)).ravel()
    impossible = expected < _IMPOSSIBLE_COUNT
    if observed[impossible].sum() > 0:
        cell = int(np.flatnonzero(impossible & (observed > 0))[0])
        x, y = tuples[cell // V], cell % V
        raise VerifierAssertionError(
            f"sampler of {v.name!r} on {law!r} output token {y} given drafts x = {tuple_text(x)}, but the kernel gives pi({y}|x) = {fmt_number(pi[cell // V, y])}",
            {"property": "sampler", "tuples": [x.tolist()], "token": int(y)},
        )
    stat, df, _, _ = _pooled_chi_square(observed[~impossible], expected[~impossible])
    pooled = int(np.count_nonzero(~impossible)) - (df + 1)
    pval = float(stats.chi2.sf(stat, df)) if df > 0 else 1.0
    if pval < false_alarm:
        z = np.where(impossible, 0.0, (observed - expected) / np.sqrt(np.maximum(expected, 1.0)))
        cell = int(np.argmax(np.abs(z)))
        x, y = tuples[cell // V], cell % V
        seen = max(float(np.sum(m == cell // V)), 1.0)
        raise VerifierAssertionError(
            f"sampler of {v.name!r} disagrees with its kernel on {law!r} (joint chi-square p-value {pval:.3g} < {false_alarm:g}, "
            f"{n} draws); largest deviation given drafts x = {tuple_text(x)}: token {y} sampled with frequency "
            f"{fmt_number(observed[cell] / seen)} vs kernel pi({y}|x) = {fmt_number(pi[cell // V, y])}",
            {"property": "sampler", "tuples": [x.tolist()], "token": int(y), "p_value": pval},
        )
    return _one_test_check(n, pval, false_alarm, tv, df, pooled)


# long-function: a public assertion whose numpydoc docstring states the test, N and the false-alarm rate
@fill_doc
def assert_sampler_lossless(
    verifier: Any,
    p: Any,
    law: DraftLaw,
    *,
    n: int = 200_000,
    false_alarm: float = 1e-6,
    tv: float = 0.02,
    rng: np.random.Generator | None = None,
) -> SamplerCheck:
    r"""Assert statistically that the sampler's output has law ``p`` when drafts are drawn from ``law``.

    The test for verifiers known only by a sampler (:class:`~otspec.testing.forms.SamplerVerifier`), and
    a cross-check for any other: ``n`` draft tuples are drawn from ``law``, the sampler is run once
    on each, and the output counts are compared with ``n p`` by Pearson's chi-square (cells with
    expected count < :data:`EXPECTED_COUNT_MIN` pooled; an output of probability 0 under ``p``
    fails at once), at level ``false_alarm``. The power against a TV error ``tv`` of the output law
    is the same bound as in :func:`assert_sampler_matches` with ``n`` draws.

    Parameters
    ----------
    {step_args}
    n : int
        Draft tuples drawn (one output each).
    {sampler_test}

    Returns
    -------
    SamplerCheck
        The test's size, p-value, power and detectable TV.

    Raises
    ------
    VerifierAssertionError
        If the chi-square test rejects, or an output has probability 0 under ``p``.
    UnsupportedMethodError
        If ``verifier`` is a chain verifier.

    Examples
    --------
    >>> import numpy as np, otspec
    >>> def keep_always(p, q, drafts, rng):
    ...     return int(drafts[0])
    >>> assert_sampler_lossless(keep_always, [0.5, 0.5], otspec.iid([0.75, 0.25], 1), n=2_000)
    Traceback (most recent call last):
    ...
    otspec.testing.VerifierAssertionError: sampler of 'keep_always' is not lossless on iid(V=2, k=1): token 0 ...
    """
    v, p = step_verifier(verifier, p, law)
    rng = np.random.default_rng(0) if rng is None else rng
    from scipy import stats  # lazy: scipy.stats is slow to import

    n = int(n)
    drafts = law.sample(rng, n)
    ys = v.sample_batch(p, law, drafts, rng=rng)
    V = p.shape[0]
    counts = np.bincount(ys, minlength=V).astype(np.float64)
    e = n * p
    impossible = e < _IMPOSSIBLE_COUNT
    freq = counts / n
    if counts[impossible].sum() > 0:
        y = int(np.flatnonzero(impossible & (counts > 0))[0])
        hit = drafts[ys == y]
        top = _most_common_rows(hit, TOP_CONTRIBUTORS)
        raise VerifierAssertionError(
            f"sampler of {v.name!r} is not lossless on {law!r}: it output token {y} ({int(counts[y])} of {n} draws) but p[{y}] = {fmt_number(p[y])}; "
            f"drafts it happened after most often: {', '.join(tuple_text(t) for t in top)}",
            {"property": "lossless", "token": y, "expected": float(p[y]), "actual": float(freq[y]), "tuples": [list(t) for t in top]},
        )
    stat, df, _, _ = _pooled_chi_square(counts[~impossible], e[~impossible])
    pooled = int(np.count_nonzero(~impossible)) - (df + 1)
    pval = float(stats.chi2.sf(stat, df)) if df > 0 else 1.0
    if pval < false_alarm:
        z = (freq - p) / np.sqrt(np.maximum(p, 1.0 / n))
        y = int(np.argmax(np.abs(z)))
        # the tuples after which token y was output in excess (or deficit) of its average rate
        rows, inv = np.unique(drafts, axis=0, return_inverse=True)
        inv = inv.ravel()
        seen = np.bincount(inv, minlength=rows.shape[0]).astype(float)
        got = np.bincount(inv, weights=(ys == y).astype(float), minlength=rows.shape[0])
        contrib = (got - seen * p[y]) / n
        order = np.argsort(-np.sign(freq[y] - p[y]) * contrib, kind="stable")[:TOP_CONTRIBUTORS]
        lines = [
            f"sampler of {v.name!r} is not lossless on {law!r}: token {y} has output frequency {fmt_number(freq[y])} but p[{y}] = {fmt_number(p[y])} "
            f"({n} draws; chi-square p-value {pval:.3g} < false alarm {false_alarm:g})",
            f"draft tuples contributing most, (#outputs {y} after x - #x * p[{y}]) / n:",
        ]
        lines += [
            f"  x = {tuple_text(rows[m])}: seen {int(seen[m])} times, output {y} {int(got[m])} times, contribution {contrib[m]:+.3g}"
            for m in order
        ]
        lines.append(f"output frequencies {np.array2string(freq, precision=4)} vs p {np.array2string(p, precision=4)}")
        raise VerifierAssertionError(
            "\n".join(lines),
            {
                "property": "lossless",
                "token": y,
                "expected": float(p[y]),
                "actual": float(freq[y]),
                "p_value": pval,
                "tuples": [rows[m].tolist() for m in order],
                "contributions": [float(contrib[m]) for m in order],
            },
        )
    return _one_test_check(n, pval, false_alarm, tv, df, pooled)


def _most_common_rows(rows: np.ndarray, top: int) -> list:
    if rows.shape[0] == 0:
        return []
    uniq, cnt = np.unique(rows, axis=0, return_counts=True)
    return [tuple(int(x) for x in uniq[i]) for i in np.argsort(-cnt, kind="stable")[:top]]
