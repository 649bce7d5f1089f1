r"""Assertions about verifiers: exact losslessness, sampler agreement, acceptance against the optimum.

Every function takes a verifier in any form :func:`otspec.testing.as_verifier` accepts, a target
``p`` and a draft law. On failure they raise :class:`VerifierAssertionError` (an
``AssertionError``) whose message locates the fault: the token whose output mass is wrong, the
expected and actual mass, and the draft tuples that contribute most.

The mathematics (see :doc:`testing`):

* a verifier with conditional output law :math:`\pi(\cdot \mid \bar x)` is **lossless** for
  ``(p, Q)`` iff every row is a distribution and
  :math:`\sum_{\bar x} Q(\bar x)\, \pi(y \mid \bar x) = p(y)` for every token :math:`y`;
* its **acceptance** is :math:`\alpha = \sum_{\bar x} Q(\bar x) \sum_{y \in \bar x} \pi(y \mid \bar x)`,
  and no lossless verifier exceeds the optimum :math:`\alpha^*(p, Q)` of
  :func:`otspec.optimal_acceptance`;
* a **sampler** is compared with the kernel tuple by tuple (Pearson's chi-square, Bonferroni over
  tuples), and a sampler alone with ``p`` (the law of its output when drafts are drawn from Q).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from otspec._tolerances import EXACT_ATOL
from otspec.laws import DraftLaw
from otspec.testing._base import UnsupportedMethodError
from otspec.testing.adapters import ChainVerifier, SamplerVerifier, as_verifier

__all__ = [
    "EXPECTED_COUNT_MIN",
    "TOP_CONTRIBUTORS",
    "AcceptanceRatio",
    "SamplerCheck",
    "VerifierAssertionError",
    "acceptance_ratio",
    "assert_acceptance_matches_kernel",
    "assert_chain_lossless",
    "assert_chain_within_optimum",
    "assert_kernel_valid",
    "assert_lossless",
    "assert_sampler_lossless",
    "assert_sampler_matches",
    "assert_within_optimum",
    "reference_optimum",
]

#: Cells of a chi-square test with expected count below this are pooled (the usual rule of thumb
#: for the chi-square approximation to Pearson's statistic).
EXPECTED_COUNT_MIN = 5.0

#: How many draft tuples (or paths) a failure message lists.
TOP_CONTRIBUTORS = 3

#: A cell whose expected count is below this is "impossible": seeing it at all is a failure (the
#: chance of a false alarm from one such cell is below this number).
_IMPOSSIBLE_COUNT = 1e-9


class VerifierAssertionError(AssertionError):
    """A verifier failed a property. ``details`` holds the numbers the message reports.

    Parameters
    ----------
    message : str
        What failed, with the numbers and the draft tuples responsible.
    details : dict, optional
        Machine-readable facts (``"property"``, the expected and actual values, ``"tuples"``...).
    """

    def __init__(self, message: str, details: dict | None = None):
        super().__init__(message)
        self.details = dict(details or {})


def _fmt(x: float) -> str:
    return f"{x:.6g}"


def _tuple_text(t: Any) -> str:
    return "(" + ", ".join(str(int(v)) for v in np.atleast_1d(t)) + ")"


def _prepare(verifier: Any, p: Any, law: Any) -> tuple[Any, np.ndarray]:
    v = as_verifier(verifier)
    if isinstance(v, ChainVerifier):
        raise UnsupportedMethodError(f"{v!r} is a chain verifier; use assert_chain_lossless(verifier, p_model, q_model, gamma)")
    p = v._check(p, law)
    return v, p


# ------------------------------------------------------------------------------------------------
# Exact losslessness


def assert_lossless(verifier: Any, p: Any, law: DraftLaw, *, atol: float = EXACT_ATOL) -> None:
    r"""Assert, exactly from the kernel, that ``verifier`` outputs ``p`` when drafts follow ``law``.

    Checks that every kernel row :math:`\pi(\cdot \mid \bar x)` is a distribution (non-negative,
    sums to 1 within ``atol``) and that the output law
    :math:`\sum_{\bar x} Q(\bar x)\, \pi(\cdot \mid \bar x)` equals ``p`` within ``atol`` at every
    token.

    Parameters
    ----------
    verifier : verifier, conditional law or Verifier subclass
        See :func:`otspec.testing.as_verifier` (a sampler alone has no kernel: use
        :func:`assert_sampler_lossless`).
    p : array_like, shape (V,)
    law : DraftLaw
        An enumerable draft law (keep V**k small).
    atol : float
        Absolute tolerance per token (default :data:`otspec._tolerances.EXACT_ATOL`).

    Raises
    ------
    VerifierAssertionError
        Naming the token with the largest error, its expected mass ``p[y]`` and the actual
        output mass, and the draft tuples :math:`\bar x` with the largest contributions
        :math:`Q(\bar x)\,(\pi(y \mid \bar x) - p(y))` to it (these sum to the error); or the
        first tuple whose row is not a distribution.

    Examples
    --------
    >>> import otspec
    >>> from otspec.verifiers import kseq
    >>> assert_lossless(kseq, [0.5, 0.3, 0.2], otspec.iid([0.2, 0.3, 0.5], 2))
    >>> def keep_always(p, q, drafts):
    ...     out = [0.0] * len(p); out[drafts[0]] = 1.0; return out
    >>> assert_lossless(keep_always, [0.5, 0.5], otspec.iid([0.75, 0.25], 1))
    Traceback (most recent call last):
    ...
    otspec.testing.asserts.VerifierAssertionError: verifier 'keep_always' is not lossless on iid(V=2, k=1): token 0 gets output mass 0.75 but p[0] = 0.5 (error +0.25, atol 1e-09)...
    """
    finding = check_lossless(verifier, p, law, atol=atol)
    if finding is not None:
        raise finding


def assert_kernel_valid(verifier: Any, p: Any, law: DraftLaw, *, atol: float = EXACT_ATOL) -> Any:
    r"""Assert that ``verifier.kernel(p, law)`` is a well-formed transport plan; return the kernel.

    The kernel must list every ordered draft tuple of positive probability once (``tuples``
    ``(M, k)``) with its probability :math:`Q(\bar x)` (``weights`` ``(M,)``, as ``law.enumerate()``
    gives it, within ``atol``), and one output law per tuple (``pi`` ``(M, V)``) that is a
    distribution: entries :math:`\ge -\text{atol}`, sum within ``atol`` of 1. This holds for lossy
    verifiers too; losslessness is :func:`assert_lossless`.

    Parameters
    ----------
    verifier : verifier, conditional law or Verifier subclass
        See :func:`otspec.testing.as_verifier`.
    p : array_like, shape (V,)
        Target distribution.
    law : DraftLaw
        An enumerable draft law.
    atol : float
        Absolute tolerance on weights, entries and row sums.

    Returns
    -------
    Kernel
        The verifier's kernel (``tuples``, ``weights``, ``pi``), checked.

    Raises
    ------
    VerifierAssertionError
        Naming the first malformed part (missing or repeated tuples, wrong weights, a row that is
        not a distribution).
    UnsupportedMethodError
        If the verifier is a chain verifier, or a sampler without a kernel.

    Examples
    --------
    >>> import otspec
    >>> from otspec.verifiers import nss
    >>> assert_kernel_valid(nss, [0.5, 0.5], otspec.iid([0.9, 0.1], 2)).pi.shape
    (4, 2)
    """
    v, p = _prepare(verifier, p, law)
    K = v.kernel(p, law)
    finding = kernel_finding(v.name, K, law, atol=atol)
    if finding is not None:
        raise finding
    return K


def kernel_finding(name: str, kernel: Any, law: DraftLaw, *, atol: float = EXACT_ATOL) -> VerifierAssertionError | None:
    """The error :func:`assert_kernel_valid` raises for ``kernel``, or ``None``."""
    tuples, weights, pi = np.asarray(kernel.tuples), np.asarray(kernel.weights), np.asarray(kernel.pi)
    where = f"kernel of {name!r} on {law!r}"
    M = tuples.shape[0] if tuples.ndim == 2 else -1
    if tuples.shape != (M, law.k) or weights.shape != (M,) or pi.shape != (M, law.V):
        return VerifierAssertionError(
            f"{where} has tuples {tuples.shape}, weights {weights.shape}, pi {pi.shape}; expected (M, {law.k}), (M,), (M, {law.V})",
            {"property": "kernel"},
        )
    ref_t, ref_w = law.enumerate()
    ref = {tuple(int(x) for x in t): float(w) for t, w in zip(ref_t, ref_w, strict=False)}
    got = {tuple(int(x) for x in t): float(w) for t, w in zip(tuples, weights, strict=False)}
    if len(got) != M or set(got) != set(ref) or any(abs(got[t] - ref[t]) > atol for t in ref):
        bad = next((t for t in sorted(set(ref) | set(got)) if abs(got.get(t, 0.0) - ref.get(t, 0.0)) > atol), None)
        return VerifierAssertionError(
            f"{where} does not list the law's draft tuples with their probabilities: x = {bad} has weight "
            f"{got.get(bad, 0.0):.6g} in the kernel and {ref.get(bad, 0.0):.6g} in the law (or a tuple is repeated)",
            {"property": "kernel", "tuples": [list(bad)] if bad else []},
        )
    sums = pi.sum(axis=1)
    bad_rows = np.flatnonzero(~np.isfinite(sums) | (np.abs(sums - 1.0) > atol) | np.any(pi < -atol, axis=1))
    if bad_rows.size:
        b = int(bad_rows[0])
        return VerifierAssertionError(
            f"pi(.|x) of {name!r} for drafts x = {_tuple_text(tuples[b])} on {law!r} is not a distribution: "
            f"sums to {_fmt(sums[b])}, smallest entry {pi[b].min():.3g} ({bad_rows.size} of {M} rows)",
            {"property": "kernel", "tuples": [tuples[b].tolist()], "row_sum": float(sums[b])},
        )
    return None


def check_lossless(verifier: Any, p: Any, law: DraftLaw, *, atol: float = EXACT_ATOL, kernel: Any = None) -> VerifierAssertionError | None:
    """:func:`assert_lossless` returning the error instead of raising it (``None`` when it holds);
    ``kernel`` is the verifier's kernel for ``(p, law)`` when the caller already has it."""
    v, p = _prepare(verifier, p, law)
    if isinstance(v, SamplerVerifier):
        raise UnsupportedMethodError(
            f"verifier {v.name!r} is a sampler only, so exact losslessness cannot be checked; use assert_sampler_lossless"
        )
    K = v.kernel(p, law) if kernel is None else kernel
    pi, w, tuples = np.asarray(K.pi), np.asarray(K.weights), np.asarray(K.tuples)
    where = f"verifier {v.name!r} is not lossless on {law!r}"
    out = w @ pi
    err = out - p
    y = int(np.argmax(np.abs(err))) if err.size else 0
    sums = pi.sum(axis=1)
    row_bad = np.flatnonzero(~np.isfinite(sums) | (np.abs(sums - 1.0) > atol) | np.any(pi < -atol, axis=1))
    if not np.all(np.isfinite(err)) or abs(err[y]) > atol:
        contrib = w * (pi[:, y] - p[y])
        order = np.argsort(-np.sign(err[y]) * contrib, kind="stable")[:TOP_CONTRIBUTORS]
        lines = [
            f"{where}: token {y} gets output mass {_fmt(out[y])} but p[{y}] = {_fmt(p[y])} (error {err[y]:+.3g}, atol {atol:g})",
            f"draft tuples contributing most, Q(x) * (pi({y}|x) - p[{y}]) (these sum to the error):",
        ]
        lines += [
            f"  x = {_tuple_text(tuples[m])}: Q(x) = {_fmt(w[m])}, pi({y}|x) = {_fmt(pi[m, y])}, contribution {contrib[m]:+.3g}"
            for m in order
        ]
        if row_bad.size:
            b = int(row_bad[0])
            lines.append(
                f"and {row_bad.size} kernel row(s) are not distributions, e.g. x = {_tuple_text(tuples[b])} sums to {_fmt(sums[b])}"
            )
        lines.append(f"output law {np.array2string(out, precision=6)} vs p {np.array2string(p, precision=6)}")
        return VerifierAssertionError(
            "\n".join(lines),
            {
                "property": "lossless",
                "token": y,
                "expected": float(p[y]),
                "actual": float(out[y]),
                "error": float(err[y]),
                "tuples": [tuples[m].tolist() for m in order],
                "contributions": [float(contrib[m]) for m in order],
            },
        )
    if row_bad.size:
        b = int(row_bad[0])
        return VerifierAssertionError(
            f"{where}: pi(.|x) for drafts x = {_tuple_text(tuples[b])} is not a distribution "
            f"(sums to {_fmt(sums[b])}, smallest entry {_fmt(pi[b].min())}); {row_bad.size} such row(s)",
            {"property": "lossless", "tuples": [tuples[b].tolist()], "row_sum": float(sums[b])},
        )
    return None


def assert_acceptance_matches_kernel(
    verifier: Any, p: Any, law: DraftLaw, *, method: str = "auto", atol: float = EXACT_ATOL, rng: np.random.Generator | None = None
) -> Any:
    r"""Assert that ``verifier.acceptance(p, law, method=method)`` equals the kernel's exact acceptance.

    The kernel's value is :math:`\sum_{\bar x} Q(\bar x) \sum_{y \in \bar x} \pi(y \mid \bar x)`.
    An exact answer (closed form or kernel) must agree within ``atol``; a Monte Carlo answer must
    hold it in its 99% interval. ``method="closed_form"`` checks a closed form (and raises
    ``UnsupportedMethodError`` where there is none).

    Parameters
    ----------
    verifier : verifier, conditional law or Verifier subclass
        See :func:`otspec.testing.as_verifier`.
    p : array_like, shape (V,)
        Target distribution.
    law : DraftLaw
        An enumerable draft law.
    method : str
        Passed to ``verifier.acceptance`` (``"auto"``, ``"closed_form"``, ``"kernel"``,
        ``"monte_carlo"``).
    atol : float
        Slack on the comparison.
    rng : numpy.random.Generator, optional
        For a Monte Carlo acceptance (default ``numpy.random.default_rng(0)``).

    Returns
    -------
    AcceptanceEstimate
        The verifier's acceptance, as checked.

    Raises
    ------
    VerifierAssertionError
        If the acceptance disagrees with the kernel's.
    UnsupportedMethodError
        If the verifier has no kernel, or no such ``method``.

    Examples
    --------
    >>> import otspec
    >>> from otspec.verifiers import kseq
    >>> assert_acceptance_matches_kernel(kseq, [0.5, 0.3, 0.2], otspec.iid([0.2, 0.3, 0.5], 2), method="closed_form").how
    'closed_form'
    """
    v, p = _prepare(verifier, p, law)
    est = v.acceptance(p, law, method=method, rng=np.random.default_rng(0) if rng is None else rng)
    finding = acceptance_finding(v.name, est, v.kernel(p, law), law, atol=atol)
    if finding is not None:
        raise finding
    return est


def acceptance_finding(name: str, est: Any, kernel: Any, law: Any, *, atol: float = EXACT_ATOL) -> VerifierAssertionError | None:
    """The error :func:`assert_acceptance_matches_kernel` raises, or ``None``."""
    exact = kernel.acceptance()
    if est.how == "monte_carlo":
        ok = est.ci_low - atol <= exact <= est.ci_high + atol
    else:
        ok = abs(est.value - exact) <= atol
    if ok:
        return None
    return VerifierAssertionError(
        f"acceptance() of {name!r} on {law!r} is {est.value:.12g} ({est.how}) but its kernel gives {exact:.12g} (atol {atol:g})",
        {"property": "acceptance", "acceptance": float(est.value), "kernel": float(exact)},
    )


# ------------------------------------------------------------------------------------------------
# Samplers


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
    verifier : verifier, conditional law or Verifier subclass
        A verifier with both a kernel and a sampler (see :func:`otspec.testing.as_verifier`).
    p : array_like, shape (V,)
        Target distribution.
    law : DraftLaw
        An enumerable draft law.
    n : int
        Total draws (split evenly over the tuples).
    false_alarm : float
        Probability that a correct sampler fails.
    tv : float
        TV error for which the power is reported.
    rng : numpy.random.Generator, optional
        Default ``numpy.random.default_rng(0)`` (reproducible).
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
    v, p = _prepare(verifier, p, law)
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
                f"sampler of {v.name!r} on {law!r} output token {y} given drafts x = {_tuple_text(tuples[m])} "
                f"({int(counts[m, y])} of {per} draws), but the kernel gives pi({y}|x) = {_fmt(pi[m, y])}",
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
            f"sampler of {v.name!r} disagrees with its kernel on {law!r} given drafts x = {_tuple_text(tuples[m])}: "
            f"chi-square p-value {pval:.3g} < {alpha:.3g} (false alarm {false_alarm:g} / {M} tuples, {per} draws each); "
            f"token {y}: sampled frequency {_fmt(freq[y])} vs kernel pi({y}|x) = {_fmt(pi[m, y])}\n"
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
            f"sampler of {v.name!r} on {law!r} output token {y} given drafts x = {_tuple_text(x)}, but the kernel gives pi({y}|x) = {_fmt(pi[cell // V, y])}",
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
            f"{n} draws); largest deviation given drafts x = {_tuple_text(x)}: token {y} sampled with frequency "
            f"{_fmt(observed[cell] / seen)} vs kernel pi({y}|x) = {_fmt(pi[cell // V, y])}",
            {"property": "sampler", "tuples": [x.tolist()], "token": int(y), "p_value": pval},
        )
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

    The test for verifiers known only by a sampler (:class:`~otspec.testing.SamplerVerifier`), and
    a cross-check for any other: ``n`` draft tuples are drawn from ``law``, the sampler is run once
    on each, and the output counts are compared with ``n p`` by Pearson's chi-square (cells with
    expected count < :data:`EXPECTED_COUNT_MIN` pooled; an output of probability 0 under ``p``
    fails at once), at level ``false_alarm``. The power against a TV error ``tv`` of the output law
    is the same bound as in :func:`assert_sampler_matches` with ``n`` draws.

    Parameters
    ----------
    verifier : verifier, sampler or Verifier subclass
        See :func:`otspec.testing.as_verifier`.
    p : array_like, shape (V,)
        Target distribution.
    law : DraftLaw
        The draft law (it is only sampled: any V).
    n : int
        Draft tuples drawn (one output each).
    false_alarm : float
        Probability that a lossless sampler fails.
    tv : float
        TV error of the output law for which the power is reported.
    rng : numpy.random.Generator, optional
        Draws the drafts and drives the sampler (default ``numpy.random.default_rng(0)``).

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
    otspec.testing.asserts.VerifierAssertionError: sampler of 'keep_always' is not lossless on iid(V=2, k=1): token 0 ...
    """
    v, p = _prepare(verifier, p, law)
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
            f"sampler of {v.name!r} is not lossless on {law!r}: it output token {y} ({int(counts[y])} of {n} draws) but p[{y}] = {_fmt(p[y])}; "
            f"drafts it happened after most often: {', '.join(_tuple_text(t) for t in top)}",
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
            f"sampler of {v.name!r} is not lossless on {law!r}: token {y} has output frequency {_fmt(freq[y])} but p[{y}] = {_fmt(p[y])} "
            f"({n} draws; chi-square p-value {pval:.3g} < false alarm {false_alarm:g})",
            f"draft tuples contributing most, (#outputs {y} after x - #x * p[{y}]) / n:",
        ]
        lines += [
            f"  x = {_tuple_text(rows[m])}: seen {int(seen[m])} times, output {y} {int(got[m])} times, contribution {contrib[m]:+.3g}"
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


def _most_common_rows(rows: np.ndarray, top: int) -> list:
    if rows.shape[0] == 0:
        return []
    uniq, cnt = np.unique(rows, axis=0, return_counts=True)
    return [tuple(int(x) for x in uniq[i]) for i in np.argsort(-cnt, kind="stable")[:top]]


# ------------------------------------------------------------------------------------------------
# Acceptance against the optimum


@dataclass(frozen=True)
class AcceptanceRatio:
    r"""A verifier's acceptance next to the optimum :math:`\alpha^*(p, Q)`.

    ``ratio = acceptance / optimum`` (1 when both are 0), ``gap = optimum - acceptance``; ``how``
    says how the acceptance was obtained (``"closed_form"``, ``"kernel"`` or ``"monte_carlo"``,
    in which case ``ci_low``/``ci_high`` bound it at 99%). ``float(result)`` is the ratio.

    Attributes
    ----------
    acceptance : float
        The verifier's acceptance :math:`\alpha` (or :math:`E[\tau]` for chain verifiers).
    optimum : float
        :math:`\alpha^*(p, Q)` (or the block optimum).
    ratio : float
        ``acceptance / optimum``.
    gap : float
        ``optimum - acceptance``.
    how : str
        How ``acceptance`` was obtained.
    ci_low, ci_high : float
        99% interval of a Monte Carlo acceptance (equal to ``acceptance`` when exact).
    """

    acceptance: float
    optimum: float
    ratio: float
    gap: float
    how: str
    ci_low: float
    ci_high: float

    def __float__(self) -> float:
        return float(self.ratio)


def reference_optimum(p: np.ndarray, law: DraftLaw) -> float:
    r"""The optimum :math:`\alpha^*(p, Q)` the assertions compare with.

    Brute force over the :math:`2^V` cuts (``method="subsets"``) for product and explicit laws
    with ``V <= 12`` (exact, no solver needed); :func:`otspec.optimal_acceptance` with
    ``method="auto"`` otherwise.

    Parameters
    ----------
    p : ndarray, shape (V,)
        Target distribution (validated).
    law : DraftLaw
        The draft law.

    Returns
    -------
    float
        The optimal acceptance.
    """
    import otspec

    # brute force over the 2^V cuts is exact and cheap at the sizes tests use, and needs no solver
    method = "subsets" if law.kind in ("product", "explicit") and law.V <= 12 else "auto"
    return float(otspec.optimal_acceptance(p, law, method=method).value)


def acceptance_ratio(
    verifier: Any, p: Any, law: DraftLaw, *, n_samples: int = 20_000, rng: np.random.Generator | None = None, optimum: float | None = None
) -> AcceptanceRatio:
    r"""The verifier's acceptance :math:`\alpha` divided by the optimum :math:`\alpha^*(p, Q)`.

    The acceptance is ``verifier.acceptance(p, law)`` (exact when the verifier has a closed form
    or a kernel; Monte Carlo with ``n_samples`` and ``rng`` for a sampler), the optimum
    :func:`otspec.optimal_acceptance` (brute force over the :math:`2^V` cuts for product and
    explicit laws with V <= 12), or ``optimum`` when the caller has it from another method.

    Parameters
    ----------
    verifier : verifier, conditional law, sampler or Verifier subclass
        See :func:`otspec.testing.as_verifier`.
    p : array_like, shape (V,)
        Target distribution.
    law : DraftLaw
        The draft law.
    n_samples : int
        Draft tuples for a Monte Carlo acceptance.
    rng : numpy.random.Generator, optional
        Its generator (default ``numpy.random.default_rng(0)``).
    optimum : float, optional
        :math:`\alpha^*` if already known.

    Returns
    -------
    AcceptanceRatio
        Acceptance, optimum, ratio, gap and how the acceptance was obtained.

    Raises
    ------
    UnsupportedMethodError
        If ``verifier`` is a chain verifier.

    Examples
    --------
    >>> import otspec
    >>> from otspec.verifiers import rrs
    >>> r = acceptance_ratio(rrs, [0.5, 0.5], otspec.iid([0.9, 0.1], 2))
    >>> round(r.acceptance, 6), round(r.optimum, 6), round(r.ratio, 4)
    (0.64, 0.69, 0.9275)
    """
    v, p = _prepare(verifier, p, law)
    est = v.acceptance(p, law, n_samples=n_samples, rng=np.random.default_rng(0) if rng is None else rng)
    return ratio_from(est, reference_optimum(p, law) if optimum is None else float(optimum))


def assert_within_optimum(
    verifier: Any,
    p: Any,
    law: DraftLaw,
    *,
    atol: float = EXACT_ATOL,
    at_least: float | None = None,
    n_samples: int = 20_000,
    rng: np.random.Generator | None = None,
    optimum: float | None = None,
) -> AcceptanceRatio:
    r"""Assert :math:`\alpha \le \alpha^*(p, Q)` (no lossless verifier beats the optimum), and
    optionally :math:`\alpha \ge \text{at\_least} \cdot \alpha^*`.

    Exact acceptances are compared with ``atol`` slack; a Monte Carlo acceptance fails only when
    its whole 99% interval is on the wrong side. ``at_least=1`` asserts that the verifier attains
    the optimum; ``at_least=1 - 1/e`` is the guarantee of SpecTr's K-SEQ for i.i.d. drafts.
    ``optimum`` replaces the computed optimum (e.g. one obtained from an independent LP).

    Parameters
    ----------
    verifier : verifier, conditional law, sampler or Verifier subclass
        See :func:`otspec.testing.as_verifier`.
    p : array_like, shape (V,)
        Target distribution.
    law : DraftLaw
        The draft law.
    atol : float
        Slack on exact comparisons.
    at_least : float, optional
        Lower bound on ``acceptance / optimum`` to assert as well.
    n_samples : int
        Draft tuples for a Monte Carlo acceptance.
    rng : numpy.random.Generator, optional
        Its generator (default ``numpy.random.default_rng(0)``).
    optimum : float, optional
        :math:`\alpha^*` if already known.

    Returns
    -------
    AcceptanceRatio
        The comparison that passed.

    Raises
    ------
    VerifierAssertionError
        If the acceptance exceeds the optimum, or falls below ``at_least`` times it.

    Examples
    --------
    >>> import otspec
    >>> from otspec.verifiers import khisti
    >>> round(assert_within_optimum(khisti, [0.5, 0.5], otspec.iid([0.9, 0.1], 2), at_least=1.0).ratio, 9)
    1.0
    """
    r = acceptance_ratio(verifier, p, law, n_samples=n_samples, rng=rng, optimum=optimum)
    finding = optimum_finding(as_verifier(verifier).name, r, law, atol=atol, at_least=at_least)
    if finding is not None:
        raise finding
    return r


def ratio_from(est: Any, optimum: float) -> AcceptanceRatio:
    """An :class:`AcceptanceRatio` from an acceptance estimate and the optimum."""
    ratio = est.value / optimum if optimum > 0 else (1.0 if est.value <= 0 else math.inf)
    return AcceptanceRatio(
        float(est.value), float(optimum), float(ratio), float(optimum) - float(est.value), est.how, float(est.ci_low), float(est.ci_high)
    )


def optimum_finding(
    name: str, r: AcceptanceRatio, law: Any, *, atol: float = EXACT_ATOL, at_least: float | None = None
) -> VerifierAssertionError | None:
    """The error :func:`assert_within_optimum` raises for ``r``, or ``None``."""
    low, high = (r.ci_low, r.ci_high) if r.how == "monte_carlo" else (r.acceptance, r.acceptance)
    if low > r.optimum + atol:
        return VerifierAssertionError(
            f"verifier {name!r} accepts {_fmt(r.acceptance)} ({r.how}) on {law!r}, above the optimum {_fmt(r.optimum)} that no lossless "
            f"verifier can exceed: it is lossy (or its acceptance is wrong)",
            {"property": "optimum", "acceptance": r.acceptance, "optimum": r.optimum},
        )
    if at_least is not None and high < at_least * r.optimum - atol:
        return VerifierAssertionError(
            f"verifier {name!r} accepts {_fmt(r.acceptance)} ({r.how}) on {law!r}, below {at_least:g} x the optimum {_fmt(r.optimum)} "
            f"(ratio {r.ratio:.6g})",
            {"property": "ratio", "acceptance": r.acceptance, "optimum": r.optimum, "ratio": r.ratio},
        )
    return None


# ------------------------------------------------------------------------------------------------
# Chain (block) verifiers


def check_chain_lossless(
    verifier: Any, p_model: Any, q_model: Any, gamma: int, *, atol: float = EXACT_ATOL
) -> VerifierAssertionError | None:
    """:func:`assert_chain_lossless` returning the error instead of raising it."""
    from otspec import models

    v = as_verifier(verifier)
    if not isinstance(v, ChainVerifier):
        raise UnsupportedMethodError(f"{v!r} is a single-step verifier; use assert_lossless(verifier, p, law)")
    p_model = models.as_model(p_model, name="p_model")
    K = v.kernel(p_model, q_model, gamma)
    where = f"chain verifier {v.name!r} is not lossless for gamma = {gamma}"
    sums = K.law.sum(axis=(1, 2))
    bad = np.flatnonzero(~np.isfinite(sums) | (np.abs(sums - 1.0) > atol) | np.any(K.law < -atol, axis=(1, 2)))
    if bad.size:
        b = int(bad[0])
        return VerifierAssertionError(
            f"{where}: the law of (tau, Y) given the drafted path {_tuple_text(K.paths[b])} is not a distribution (sums to {_fmt(sums[b])})",
            {"property": "lossless", "tuples": [K.paths[b].tolist()], "row_sum": float(sums[b])},
        )
    # Losslessness criterion: with Q(h) = P(O starts with h, |O| >= |h|) and C(h) = P(O starts
    # with h, |O| > |h|), the stream is exact iff Q(h + (y,)) = C(h) * M_b(y | h) for all h, y.
    blaw = K.block_law()
    Q: dict = {}
    C: dict = {}
    for o, w in blaw.items():
        for i in range(1, len(o) + 1):
            Q[o[:i]] = Q.get(o[:i], 0.0) + w
        for i in range(len(o)):
            C[o[:i]] = C.get(o[:i], 0.0) + w
    worst = (0.0, (), 0, 0.0, 0.0)
    for head in sorted(set(C) | {key[:-1] for key in Q}, key=lambda h: (len(h), h)):
        c = C.get(head, 0.0)
        target = p_model(head)
        for y in range(p_model.V):
            got, want = Q.get(head + (y,), 0.0), c * float(target[y])
            if abs(got - want) > worst[0] + 1e-300:
                worst = (abs(got - want), head, y, want, got)
    err, head, y, want, got = worst
    if err <= atol:
        return None
    key = head + (y,)
    h, g = len(head), K.paths.shape[1]
    contrib = []
    for path, w, lw in zip(K.paths, K.weights, K.law, strict=False):  # mass each path puts on blocks starting with key
        if tuple(int(x) for x in path[:h]) != head:
            continue
        c = w * lw[h, y] + (w * lw[h + 1 :].sum() if h < g and int(path[h]) == y else 0.0)
        if c > 0:
            contrib.append((float(c), tuple(int(x) for x in path)))
    contrib.sort(key=lambda z: -z[0])
    lines = [
        f"{where}: the emitted blocks start with {_tuple_text(key)} with probability {_fmt(got)} but the target gives "
        f"C{_tuple_text(head)} * M_b({y}|{_tuple_text(head)}) = {_fmt(want)} (error {got - want:+.3g}, atol {atol:g})",
        "drafted paths putting the most mass on it: "
        + ", ".join(f"{_tuple_text(pth)} ({_fmt(c)})" for c, pth in contrib[:TOP_CONTRIBUTORS]),
    ]
    return VerifierAssertionError(
        "\n".join(lines),
        {
            "property": "lossless",
            "prefix": list(head),
            "token": y,
            "expected": want,
            "actual": got,
            "tuples": [list(pth) for _, pth in contrib[:TOP_CONTRIBUTORS]],
        },
    )


def assert_chain_lossless(verifier: Any, p_model: Any, q_model: Any, gamma: int, *, atol: float = EXACT_ATOL) -> None:
    r"""Assert, exactly, that a chain verifier keeps the decoded stream's law equal to the target's.

    The emitted block :math:`O = (X^\tau, Y)` must satisfy, for every prefix :math:`h` and token
    :math:`y`, :math:`P(O \text{ starts with } h y) = P(O \text{ starts with } h,\ |O| > |h|)\,
    M_b(y \mid h)` -- each token the stream emits after :math:`h` follows the target's conditional.

    Parameters
    ----------
    verifier : ChainVerifier, module or conditional law
        A chain verifier (see :func:`otspec.testing.as_verifier`).
    p_model, q_model : Model or callable
        Target :math:`M_b` and draft models.
    gamma : int
        Draft block length.
    atol : float
        Absolute tolerance per emitted block prefix.

    Raises
    ------
    VerifierAssertionError
        Naming the block prefix with the largest error, the expected and emitted masses and the
        drafted paths contributing most; or the first path whose law is not a distribution.
    UnsupportedMethodError
        If ``verifier`` is a single-step verifier.

    Examples
    --------
    >>> from otspec import models
    >>> from otspec.verifiers import block
    >>> p, q = models.context_free([1/3, 2/3]), models.context_free([2/3, 1/3])
    >>> assert_chain_lossless(block, p, q, 2)
    """
    finding = check_chain_lossless(verifier, p_model, q_model, gamma, atol=atol)
    if finding is not None:
        raise finding


def assert_chain_within_optimum(verifier: Any, p_model: Any, q_model: Any, gamma: int, *, atol: float = EXACT_ATOL) -> AcceptanceRatio:
    r"""Assert :math:`E[\tau] \le` :func:`otspec.block_optimum` and return the ratio.

    Parameters
    ----------
    verifier : ChainVerifier, module or conditional law
        A chain verifier.
    p_model, q_model : Model or callable
        Target and draft models.
    gamma : int
        Draft block length.
    atol : float
        Slack on the comparison.

    Returns
    -------
    AcceptanceRatio
        :math:`E[\tau]` against the block optimum (``how="kernel"``).

    Raises
    ------
    VerifierAssertionError
        If :math:`E[\tau]` exceeds the optimum of any lossless chain verifier.

    Examples
    --------
    >>> from otspec import models
    >>> from otspec.verifiers import block
    >>> p, q = models.context_free([1/3, 2/3]), models.context_free([2/3, 1/3])
    >>> round(assert_chain_within_optimum(block, p, q, 2).ratio, 9)
    1.0
    """
    import otspec

    v = as_verifier(verifier)
    e = v.expected_accepted(p_model, q_model, gamma)
    opt = float(otspec.block_optimum(p_model, q_model, gamma).value)
    r = AcceptanceRatio(e, opt, e / opt if opt > 0 else 1.0, opt - e, "kernel", e, e)
    if e > opt + atol:
        raise VerifierAssertionError(
            f"chain verifier {v.name!r} accepts E[tau] = {_fmt(e)} drafts for gamma = {gamma}, above the optimum {_fmt(opt)} of any "
            "lossless chain verifier: it is lossy",
            {"property": "optimum", "acceptance": e, "optimum": opt},
        )
    return r
