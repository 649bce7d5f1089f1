r"""The output-law test with stated power: how many draws detect a lossless verifier that is off by a
total-variation distance :math:`\delta`, with false alarm :math:`\alpha` and miss rate :math:`\beta`.

A lossless verifier's output :math:`Y` has law :math:`p` when the drafts come from the law
:math:`Q`. Draw :math:`n` rounds (drafts from :math:`Q`, one output each), let :math:`\hat P` be the
empirical law of the outputs over the :math:`V` tokens, and reject when

.. math::

   D_n = d_{TV}(\hat P, p) \ge t_n(\alpha) = \tfrac12 \sqrt{(V-1)/n} + \sqrt{\ln(1/\alpha) / (2n)} .

**False alarm.** :math:`D_n` is a function of :math:`n` independent outputs that moves by at most
:math:`1/n` when one output changes, so McDiarmid's inequality gives :math:`P(D_n - E D_n \ge s) \le
e^{-2 n s^2}`. Under :math:`Y \sim p`, :math:`E|\hat P_y - p_y| \le \sqrt{p_y(1-p_y)/n}` and by
Cauchy-Schwarz :math:`E D_n \le \frac12 \sum_y \sqrt{p_y (1 - p_y)/n} \le \frac12 \sqrt{(V-1)/n}`.
Hence :math:`P(D_n \ge t_n(\alpha)) \le \alpha` for every :math:`p` and :math:`n` (no asymptotics).

**Power.** If the output law is :math:`r` with :math:`d_{TV}(r, p) \ge \delta`, the triangle
inequality gives :math:`D_n \ge \delta - d_{TV}(\hat P, r)`, and the same two bounds applied to
:math:`r` give :math:`d_{TV}(\hat P, r) < \frac12 \sqrt{(V-1)/n} + \sqrt{\ln(1/\beta)/(2n)}` with
probability at least :math:`1 - \beta`. The test then rejects as soon as
:math:`\delta \ge \sqrt{(V-1)/n} + \sqrt{\ln(1/\alpha)/(2n)} + \sqrt{\ln(1/\beta)/(2n)}`, i.e. for

.. math::

   n \ge n(\delta, \alpha, \beta, V) = \left\lceil \frac{\bigl(\sqrt{V-1} + \sqrt{\ln(1/\alpha)/2}
   + \sqrt{\ln(1/\beta)/2}\bigr)^2}{\delta^2} \right\rceil ,

it **detects any output law at TV >= delta from p with probability >= 1 - beta**, whatever the
verifier does. Over :math:`m` problems each test runs at level :math:`\alpha/m` (Bonferroni), so a
lossless verifier fails the battery with probability at most :math:`\alpha`, and a verifier off by
:math:`\delta` on any one problem is caught with probability at least :math:`1 - \beta`.

**A declared TV budget.** A lossy rule that declares :math:`d_{TV}(r, p) \le \varepsilon` is tested
the same way against the shifted threshold: reject when :math:`D_n \ge \varepsilon + t_n(\alpha)`.
Under the claim :math:`D_n \le \varepsilon + d_{TV}(\hat P, r)`, and the bound above applied to
:math:`r` keeps the false alarm :math:`\le \alpha`; an output law at TV
:math:`\ge \varepsilon + \delta` is rejected with probability :math:`\ge 1 - \beta` at the same
:math:`n(\delta, \alpha, \beta, V)`. (:math:`\varepsilon = 0` is the lossless test.)

A verifier that exposes its exact kernel (:math:`\pi(\cdot \mid \bar x)` for every draft tuple) is
not sampled: its output law :math:`\sum_{\bar x} Q(\bar x)\,\pi(\cdot \mid \bar x)` is compared with
:math:`p` exactly, which catches any TV above the float tolerance with probability 1.

Examples
--------
>>> sample_size(0.01, alpha=1e-3, beta=1e-3, V=4)
296914
>>> import otspec
>>> from otspec.verifiers import rrs
>>> r = assert_output_law(rrs, [0.5, 0.3, 0.2], otspec.iid([0.2, 0.3, 0.5], 2), delta=0.05)
>>> r.method, r.tv <= 1e-12
('exact', True)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from otspec._tolerances import EXACT_ATOL
from otspec._validation import as_generator, as_int_in_range
from otspec.errors import InvalidOptionError, UnsupportedMethodError
from otspec.laws import DraftLaw
from otspec.testing._findings import VerifierAssertionError, fmt_number
from otspec.testing.adapters import step_verifier
from otspec.testing.forms import SamplerVerifier

__all__ = [
    "DEFAULT_MAX_DRAWS",
    "OutputLawCheck",
    "assert_output_law",
    "detectable_tv",
    "power_statement",
    "rejection_threshold",
    "sample_size",
    "tv_budget_value",
]

#: Largest sample :func:`assert_output_law` draws unless told otherwise: 10^8 outputs is a few
#: seconds of a vectorised numpy sampler; a smaller delta needs an explicit ``max_draws``.
DEFAULT_MAX_DRAWS = 100_000_000


def _level(x: Any, name: str) -> float:
    try:
        v = float(x)
    except (TypeError, ValueError):
        raise InvalidOptionError(f"{name} must be a number in (0, 1) (got {x!r}); pass e.g. 1e-3") from None
    if not 0.0 < v < 1.0:
        raise InvalidOptionError(f"{name} must lie in (0, 1) (got {v!r}); pass e.g. 1e-3")
    return v


def _constant(alpha: float, beta: float, V: int) -> float:
    return math.sqrt(V - 1) + math.sqrt(math.log(1.0 / alpha) / 2.0) + math.sqrt(math.log(1.0 / beta) / 2.0)


def sample_size(delta: float, *, alpha: float = 1e-3, beta: float = 1e-3, V: int) -> int:
    r"""Draws that detect any output law at TV :math:`\ge \delta` from :math:`p` with probability
    :math:`\ge 1 - \beta`, at false alarm :math:`\le \alpha` (module docstring for the proof).

    .. math::

       n = \left\lceil \bigl(\sqrt{V-1} + \sqrt{\ln(1/\alpha)/2} + \sqrt{\ln(1/\beta)/2}\bigr)^2 / \delta^2 \right\rceil

    Parameters
    ----------
    delta : float
        TV tolerance in (0, 1).
    alpha : float
        False-alarm probability (a lossless verifier fails with at most this probability).
    beta : float
        Miss probability at TV :math:`\delta`.
    V : int
        Number of output tokens (vocabulary of the problem), ``>= 2``.

    Returns
    -------
    int
        The sample size :math:`n`.

    Raises
    ------
    InvalidOptionError
        If ``delta``, ``alpha`` or ``beta`` is not in (0, 1).
    InvalidDraftCountError
        If ``V`` is not an integer >= 2.

    Examples
    --------
    >>> sample_size(0.1, alpha=0.05, beta=0.05, V=4)
    1748
    """
    d = _level(delta, "delta")
    a, b = _level(alpha, "alpha"), _level(beta, "beta")
    v = as_int_in_range(V, "V", minimum=2)
    return int(math.ceil((_constant(a, b, v) / d) ** 2))


def rejection_threshold(n: int, *, alpha: float, V: int) -> float:
    r"""The test's threshold :math:`t_n(\alpha) = \frac12\sqrt{(V-1)/n} + \sqrt{\ln(1/\alpha)/(2n)}` on :math:`d_{TV}(\hat P, p)`.

    Parameters
    ----------
    n : int
        Draws.
    alpha : float
        False-alarm probability.
    V : int
        Number of output tokens.

    Returns
    -------
    float
        :math:`t_n(\alpha)`.

    Raises
    ------
    InvalidOptionError
        If ``alpha`` is not in (0, 1).
    InvalidDraftCountError
        If ``n`` < 1 or ``V`` < 2.

    Examples
    --------
    >>> round(rejection_threshold(10_000, alpha=0.05, V=5), 4)
    0.0222
    """
    n = as_int_in_range(n, "n")
    a = _level(alpha, "alpha")
    v = as_int_in_range(V, "V", minimum=2)
    return 0.5 * math.sqrt((v - 1) / n) + math.sqrt(math.log(1.0 / a) / (2.0 * n))


def detectable_tv(n: int, *, alpha: float = 1e-3, beta: float = 1e-3, V: int) -> float:
    r"""The smallest TV the test with ``n`` draws detects with probability :math:`\ge 1 - \beta`:
    :math:`\bigl(\sqrt{V-1} + \sqrt{\ln(1/\alpha)/2} + \sqrt{\ln(1/\beta)/2}\bigr)/\sqrt n`.

    Parameters
    ----------
    n : int
        Draws.
    alpha : float
        False-alarm probability.
    beta : float
        Miss probability.
    V : int
        Number of output tokens.

    Returns
    -------
    float
        The detectable TV (may exceed 1 for a tiny ``n``: then nothing is guaranteed).

    Raises
    ------
    InvalidOptionError
        If ``alpha`` or ``beta`` is not in (0, 1).
    InvalidDraftCountError
        If ``n`` < 1 or ``V`` < 2.

    Examples
    --------
    >>> n = sample_size(0.02, alpha=1e-3, beta=1e-2, V=8)
    >>> detectable_tv(n, alpha=1e-3, beta=1e-2, V=8) <= 0.02
    True
    """
    n = as_int_in_range(n, "n")
    a, b = _level(alpha, "alpha"), _level(beta, "beta")
    v = as_int_in_range(V, "V", minimum=2)
    return _constant(a, b, v) / math.sqrt(n)


def power_statement(delta: float, alpha: float, beta: float, n: int | None = None, *, budget: float = 0.0) -> str:
    """The sentence a passing check states: what it detects, with which probability.

    Parameters
    ----------
    delta : float
        TV tolerance.
    alpha : float
        False-alarm probability.
    beta : float
        Miss probability.
    n : int, optional
        Draws per problem (``None``: an exact check, no sampling).
    budget : float
        The declared TV budget the check allows (0: lossless).

    Returns
    -------
    str
        ``"detects any output law at TV >= delta from p with probability >= 1 - beta ..."``
        (``budget + delta`` under a budget).

    Examples
    --------
    >>> power_statement(0.01, 1e-3, 1e-3, 145014)
    'detects any output law at TV >= 0.01 from p with probability >= 0.999 (145014 draws; false alarm <= 0.001)'
    """
    over = f"{budget:g} + " if budget > 0 else ""
    if n is None:
        return f"detects any output law at TV > {over}{EXACT_ATOL:g} from p with probability 1 (exact kernel)"
    return f"detects any output law at TV >= {over}{delta:g} from p with probability >= {1 - beta:g} ({n} draws; false alarm <= {alpha:g})"


@dataclass(frozen=True)
class OutputLawCheck:
    """What a passed :func:`assert_output_law` measured, and the power it states.

    Attributes
    ----------
    method : str
        ``"exact"`` (from the kernel) or ``"sampling"``.
    tv : float
        :math:`d_{TV}` between the (exact or empirical) output law and ``p``.
    threshold : float
        The rejection threshold (``EXACT_ATOL`` for the exact check).
    n : int
        Draws (0 for the exact check).
    delta : float
        The TV tolerance the power refers to.
    alpha : float
        False-alarm probability of this check.
    beta : float
        Miss probability at TV ``delta``.
    statement : str
        The power statement (:func:`power_statement`).
    """

    method: str
    tv: float
    threshold: float
    n: int
    delta: float
    alpha: float
    beta: float
    statement: str


def tv_budget_value(eps: Any) -> float:
    """``eps`` as a declared TV budget: a finite number in ``[0, 1)``, or raise.

    Parameters
    ----------
    eps : float
        The budget.

    Returns
    -------
    float
        The validated budget.

    Raises
    ------
    InvalidOptionError
        If ``eps`` is not a number in ``[0, 1)``.

    Examples
    --------
    >>> tv_budget_value(0.05)
    0.05
    """
    try:
        v = float(eps)
    except (TypeError, ValueError):
        raise InvalidOptionError(f"tv_budget must be a number in [0, 1) (got {eps!r}); pass e.g. 0.05") from None
    if not 0.0 <= v < 1.0:
        raise InvalidOptionError(f"tv_budget must lie in [0, 1) (got {v!r}); a TV distance is below 1, pass e.g. 0.05")
    return v


def _has_kernel(v) -> bool:
    return not isinstance(v, SamplerVerifier)


# long-function: a public assertion whose numpydoc docstring states the test, N and the error rates
def assert_output_law(
    verifier: Any,
    p: Any,
    law: DraftLaw,
    *,
    delta: float = 0.01,
    alpha: float = 1e-3,
    beta: float = 1e-3,
    method: str = "auto",
    rng: np.random.Generator | None = None,
    max_draws: int = DEFAULT_MAX_DRAWS,
    tv_budget: float = 0.0,
) -> OutputLawCheck:
    r"""Assert that the verifier's output has law ``p`` when drafts come from ``law``, with stated power
    (or, with ``tv_budget`` :math:`\varepsilon > 0`, that it lies within TV :math:`\varepsilon` of ``p``).

    ``method="exact"`` (the default for a verifier with a kernel) compares
    :math:`\sum_{\bar x} Q(\bar x)\pi(\cdot\mid\bar x)` with ``p`` exactly (fails above
    ``EXACT_ATOL``); ``method="sampling"`` (the default for a sampler) draws
    :math:`n = n(\delta, \alpha, \beta, V)` rounds (:func:`sample_size`) and rejects when
    :math:`d_{TV}(\hat P, p) \ge t_n(\alpha)` (:func:`rejection_threshold`): false alarm
    :math:`\le \alpha`, and any output law at TV :math:`\ge \delta` from ``p`` is detected with
    probability :math:`\ge 1 - \beta` (proof in the module docstring). A declared budget shifts both
    thresholds by :math:`\varepsilon`: the exact check fails above :math:`\varepsilon +` ``EXACT_ATOL``,
    the sampled one rejects at :math:`D_n \ge \varepsilon + t_n(\alpha)` and catches TV
    :math:`\ge \varepsilon + \delta` with probability :math:`\ge 1 - \beta`.

    Parameters
    ----------
    verifier : any form accepted by :func:`otspec.testing.as_verifier`
        Including a batched numpy sampler (:func:`otspec.testing.batched.batched_sampler`) and,
        with ``otspec_gpu`` installed, a batched torch verifier.
    p : array_like, shape (V,)
        Target distribution.
    law : DraftLaw
        Law of the drafts.
    delta : float
        TV tolerance of the sampling check.
    alpha : float
        False-alarm probability.
    beta : float
        Miss probability at TV ``delta``.
    method : {"auto", "exact", "sampling"}
        ``"auto"``: exact when the verifier has a kernel.
    rng : numpy.random.Generator, optional
        Drafts and sampler draws (default ``numpy.random.default_rng(0)``).
    max_draws : int
        Refuse a sample size above this (say so instead of running for hours).
    tv_budget : float
        The TV distance to ``p`` the verifier declares, in ``[0, 1)`` (default 0: lossless).

    Returns
    -------
    OutputLawCheck
        Method, measured TV, threshold, draws and the power statement.

    Raises
    ------
    VerifierAssertionError
        If the output law differs from ``p`` (the message names the token of largest deviation).
    InvalidOptionError
        If ``delta``, ``alpha``, ``beta`` or ``method`` is invalid, or the sample would exceed ``max_draws``.
    UnsupportedMethodError
        If ``method="exact"`` for a verifier that has no kernel.
    OtspecTypeError
        If ``rng`` is not a ``numpy.random.Generator``.

    Examples
    --------
    >>> import numpy as np, otspec
    >>> from otspec.testing.batched import batched_sampler
    >>> @batched_sampler(k=1)
    ... def keep_first(p, q, drafts, rng):       # always keeps the draft: output law q, not p
    ...     return drafts[:, 0]
    >>> assert_output_law(keep_first, [0.5, 0.5], otspec.iid([0.6, 0.4], 1), delta=0.1)
    Traceback (most recent call last):
    ...
    otspec.testing.VerifierAssertionError: output law of 'keep_first' on iid(V=2, k=1) is at TV ...
    """
    v, p = step_verifier(verifier, p, law)
    d = _level(delta, "delta")
    a, b = _level(alpha, "alpha"), _level(beta, "beta")
    if method not in ("auto", "exact", "sampling"):
        raise InvalidOptionError(f"method must be 'auto', 'exact' or 'sampling' (got {method!r}); pick one")
    rng = np.random.default_rng(0) if rng is None else as_generator(rng)
    eps = tv_budget_value(tv_budget)
    V = int(p.shape[0])
    exact = method == "exact" or (method == "auto" and _has_kernel(v))
    if exact:
        if not _has_kernel(v):
            raise UnsupportedMethodError(f"verifier {v.name!r} is a sampler only: it has no kernel; use method='sampling'")
        out_law = np.asarray(v.kernel(p, law).output_law(), dtype=np.float64)
        tv = 0.5 * float(np.abs(out_law - p).sum())
        check = OutputLawCheck("exact", tv, eps + EXACT_ATOL, 0, d, 0.0, 0.0, power_statement(d, a, b, budget=eps))
        if tv > eps + EXACT_ATOL:
            _fail(v, law, out_law, p, check)
        return check
    n = sample_size(d, alpha=a, beta=b, V=V)
    cap = as_int_in_range(max_draws, "max_draws")
    if n > cap:
        raise InvalidOptionError(
            f"delta = {d:g} at alpha = {a:g}, beta = {b:g}, V = {V} needs n = {n} draws, above max_draws = {cap}; "
            "raise max_draws or delta, or give the verifier's kernel (an exact check needs no draws)"
        )
    draw_rng, out_rng = rng.spawn(2)  # drafts and the verifier's own draws on independent streams
    freq = np.zeros(V, dtype=np.float64)
    chunk = 1 << 20
    for s in range(0, n, chunk):  # bounded memory at any n
        m = min(chunk, n - s)
        drafts = law.sample(draw_rng, m)
        freq += np.bincount(v.sample_batch(p, law, drafts, rng=out_rng), minlength=V)
    freq /= n
    tv = 0.5 * float(np.abs(freq - p).sum())
    t = eps + rejection_threshold(n, alpha=a, V=V)
    check = OutputLawCheck("sampling", tv, t, n, d, a, b, power_statement(d, a, b, n, budget=eps))
    if tv >= t:
        _fail(v, law, freq, p, check)
    return check


def _fail(v, law, got: np.ndarray, p: np.ndarray, check: OutputLawCheck) -> None:
    y = int(np.argmax(np.abs(got - p)))
    what = "exact output law" if check.method == "exact" else f"sampled output law ({check.n} draws)"
    raise VerifierAssertionError(
        f"output law of {v.name!r} on {law!r} is at TV {check.tv:.4g} from p ({what}; threshold {check.threshold:.4g}); "
        f"token {y}: output probability {fmt_number(got[y])} vs p[{y}] = {fmt_number(p[y])}\n"
        f"output {np.array2string(got, precision=5)} vs p {np.array2string(p, precision=5)}\n"
        f"this check {check.statement}",
        {"property": "output_law", "token": y, "expected": float(p[y]), "actual": float(got[y]), "tv": check.tv},
    )
