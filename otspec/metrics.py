r"""One dictionary of speculative-decoding metrics: each defined once, with converters between them.

Engines and papers report the same few quantities under clashing names (see :doc:`metrics`). Here
every metric has one name, one symbol and one formula; :data:`METRICS` lists them with the names
each engine uses, and the converters below turn what an engine prints into otspec's quantities.

Notation: one *round* drafts :math:`\gamma` tokens and runs the target once; :math:`\tau \in
\{0, \dots, \gamma\}` is the number of drafted tokens it accepts, and the round emits
:math:`\tau + 1` tokens (the accepted drafts plus one token from the target: the correction after a
rejection or the *bonus* token after a full acceptance).

========================================  ===========================================================
name                                      formula
========================================  ===========================================================
``expected_accepted``                     :math:`E[\tau]` (no bonus token)
``mean_acceptance_length``                :math:`1 + E[\tau]` (bonus included; = block efficiency)
``draft_acceptance_rate``                 :math:`E[\tau] / \gamma \in [0, 1]`
``cumulative_acceptance``                 :math:`a_i = P(\tau \ge i)`, :math:`i = 1..\gamma`
``conditional_acceptance``                :math:`\beta_i = P(\tau \ge i \mid \tau \ge i - 1) = a_i / a_{i-1}`
``constant_acceptance``                   :math:`\alpha` with :math:`\sum_{i=1}^{\gamma} \alpha^i = E[\tau]`
========================================  ===========================================================

Examples
--------
>>> expected_accepted_from_acceptance_length(3.5)      # vLLM prints "Mean acceptance length: 3.50"
2.5
>>> m = from_engine_counts(num_drafts=10, num_draft_tokens=40, num_accepted_tokens=22, accepted_per_position=[9, 7, 4, 2])
>>> m.mean_acceptance_length, m.draft_acceptance_rate, m.cumulative_acceptance
(3.2, 0.55, (0.9, 0.7, 0.4, 0.2))
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from otspec._validation import as_int_in_range
from otspec.errors import InvalidOptionError

__all__ = [
    "METRICS",
    "Metric",
    "SpecDecodeMetrics",
    "acceptance_length_from_expected_accepted",
    "conditional_from_cumulative",
    "constant_acceptance_equivalent",
    "cumulative_from_conditional",
    "expected_accepted_constant",
    "expected_accepted_from_acceptance_length",
    "expected_accepted_from_cumulative",
    "expected_accepted_from_draft_acceptance_rate",
    "from_engine_counts",
    "tau_distribution_from_cumulative",
]

#: Slack when checking that a rate lies in [0, 1] or a sequence is non-increasing: engines print
#: rates rounded to a few digits, and a sum of float counts divides with ~1e-16 relative error.
_RATE_SLACK = 1e-9


@dataclass(frozen=True)
class Metric:
    """One entry of the metric dictionary.

    Attributes
    ----------
    name : str
        otspec's name (the field or function name in otspec's outputs).
    symbol : str
        The LaTeX symbol used in the docs.
    formula : str
        The definition, in LaTeX.
    includes_bonus : bool or None
        Whether the bonus / correction token is counted (``None``: not a token count).
    reported_as : tuple of str
        How engines and papers name it (``"engine: name"``).
    """

    name: str
    symbol: str
    formula: str
    includes_bonus: bool | None
    reported_as: tuple[str, ...]


#: The dictionary, by otspec's name. ``docs/metrics.rst`` renders it; a test checks both agree.
METRICS: dict[str, Metric] = {
    m.name: m
    for m in (
        Metric(
            "expected_accepted",
            r"E[\tau]",
            r"\sum_{i=1}^{\gamma} P(\tau \ge i)",
            False,
            ("otspec: expected_accepted, E[tau]", "vLLM: num_accepted_tokens / num_drafts", "Leviathan et al.: E[#tokens] - 1"),
        ),
        Metric(
            "mean_acceptance_length",
            r"L",
            r"1 + E[\tau]",
            True,
            (
                "vLLM: Mean acceptance length (1 + accepted / drafts)",
                "SGLang: accept length (tokens per verify step)",
                "EAGLE: average acceptance length tau",
                "Spec-Bench: mean accepted tokens",
                "otspec: block_efficiency, mean_accepted_length",
            ),
        ),
        Metric(
            "block_efficiency",
            r"L",
            r"1 + E[\tau] \quad (\text{tokens per target call; same number as } L)",
            True,
            ("Sun et al. (block verification): block efficiency", "otspec: block_efficiency"),
        ),
        Metric(
            "draft_acceptance_rate",
            r"\bar a",
            r"E[\tau] / \gamma",
            False,
            ("vLLM: Avg Draft acceptance rate (accepted / drafted tokens)",),
        ),
        Metric(
            "cumulative_acceptance",
            r"a_i",
            r"P(\tau \ge i), \quad i = 1..\gamma",
            None,
            ("vLLM: Per-position acceptance rate (accepted at position i / drafts)", "otspec: survival of tau"),
        ),
        Metric(
            "conditional_acceptance",
            r"\beta_i",
            r"P(\tau \ge i \mid \tau \ge i-1) = a_i / a_{i-1}",
            None,
            ("Leviathan et al.: beta (per-token acceptance, one position)", "otspec: per-position accept probability of a trace"),
        ),
        Metric(
            "constant_acceptance",
            r"\alpha",
            r"\text{the } \alpha \text{ with } \sum_{i=1}^{\gamma} \alpha^i = E[\tau]",
            None,
            ("Leviathan et al.: alpha = E[beta], assumed the same at every position",),
        ),
    )
}


def _finite(x: Any, name: str) -> float:
    if isinstance(x, (str, bytes, bool, np.bool_)):  # "3.2" from a log line: parse it first, never guess
        raise InvalidOptionError(f"{name} must be a number (got {x!r}); pass a float")
    try:
        v = float(x)
    except (TypeError, ValueError):
        raise InvalidOptionError(f"{name} must be a number (got {x!r}); pass a float") from None
    if not math.isfinite(v):
        raise InvalidOptionError(f"{name} must be finite (got {v!r}); pass the metric's value")
    return v


def _rates(x: Any, name: str) -> np.ndarray:
    """A 1-D float64 array of probabilities (each in [0, 1] up to _RATE_SLACK, clipped exactly there)."""
    a = np.asarray(x, dtype=np.float64) if not isinstance(x, str) else np.array([np.nan])
    if a.ndim != 1 or a.size == 0:
        raise InvalidOptionError(f"{name} must be a non-empty 1-D sequence of rates (got shape {a.shape}); pass one rate per position")
    bad = ~np.isfinite(a) | (a < -_RATE_SLACK) | (a > 1 + _RATE_SLACK)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise InvalidOptionError(f"{name}[{i}] must be a probability in [0, 1] (got {a[i]!r}); pass rates, not percentages or counts")
    return np.clip(a, 0.0, 1.0)


def expected_accepted_from_acceptance_length(mean_acceptance_length: Any) -> float:
    r""":math:`E[\tau]` from a mean acceptance length that counts the bonus token.

    .. math:: E[\tau] = L - 1

    vLLM's "Mean acceptance length", SGLang's "accept length", EAGLE's :math:`\tau` and otspec's
    ``block_efficiency`` are all :math:`L = 1 + E[\tau]`.

    Parameters
    ----------
    mean_acceptance_length : float
        :math:`L \ge 1`.

    Returns
    -------
    float
        :math:`E[\tau] = L - 1`.

    Raises
    ------
    InvalidOptionError
        If ``L`` is not a finite number >= 1 (a value below 1 is a rate, not a length).

    Examples
    --------
    >>> expected_accepted_from_acceptance_length(1.0)
    0.0
    """
    L = _finite(mean_acceptance_length, "mean_acceptance_length")
    if L < 1.0:
        raise InvalidOptionError(
            f"mean_acceptance_length must be >= 1 (got {L!r}): it counts the target's token of every round; "
            "a value in [0, 1) is a rate: use expected_accepted_from_draft_acceptance_rate"
        )
    return L - 1.0


def acceptance_length_from_expected_accepted(expected_accepted: Any) -> float:
    r"""The mean acceptance length :math:`L = 1 + E[\tau]` (vLLM's and SGLang's number) from :math:`E[\tau]`.

    Parameters
    ----------
    expected_accepted : float
        :math:`E[\tau] \ge 0`.

    Returns
    -------
    float
        :math:`1 + E[\tau]`.

    Raises
    ------
    InvalidOptionError
        If the value is negative or not finite.

    Examples
    --------
    >>> acceptance_length_from_expected_accepted(2.5)
    3.5
    """
    t = _finite(expected_accepted, "expected_accepted")
    if t < 0:
        raise InvalidOptionError(f"expected_accepted must be >= 0 (got {t!r}); it counts accepted draft tokens")
    return 1.0 + t


def expected_accepted_from_draft_acceptance_rate(rate: Any, gamma: Any) -> float:
    r""":math:`E[\tau] = \gamma\,\bar a` from vLLM's draft acceptance rate :math:`\bar a` (accepted / drafted tokens).

    Parameters
    ----------
    rate : float
        :math:`\bar a \in [0, 1]`.
    gamma : int
        Draft tokens per round.

    Returns
    -------
    float
        :math:`\gamma \bar a`.

    Raises
    ------
    InvalidOptionError
        If ``rate`` is not in [0, 1] (a number above 1 is an acceptance length).
    InvalidDraftCountError
        If ``gamma`` is not a positive integer.

    Examples
    --------
    >>> expected_accepted_from_draft_acceptance_rate(0.5, 4)
    2.0
    """
    g = as_int_in_range(gamma, "gamma")
    r = _finite(rate, "rate")
    if not -_RATE_SLACK <= r <= 1 + _RATE_SLACK:
        raise InvalidOptionError(
            f"rate must be in [0, 1] (got {r!r}); a number above 1 is a mean acceptance length: use expected_accepted_from_acceptance_length"
        )
    return g * min(max(r, 0.0), 1.0)


def cumulative_from_conditional(conditional: Any) -> np.ndarray:
    r"""Cumulative acceptance :math:`a_i = \prod_{j \le i} \beta_j` from per-position conditional rates.

    Parameters
    ----------
    conditional : array_like, shape (gamma,)
        :math:`\beta_i = P(\tau \ge i \mid \tau \ge i-1)`.

    Returns
    -------
    ndarray, shape (gamma,)
        :math:`a_i = P(\tau \ge i)`.

    Raises
    ------
    InvalidOptionError
        If a rate is outside [0, 1] or not finite.

    Examples
    --------
    >>> cumulative_from_conditional([0.9, 0.5]).tolist()
    [0.9, 0.45]
    """
    return np.cumprod(_rates(conditional, "conditional"))


def conditional_from_cumulative(cumulative: Any) -> np.ndarray:
    r"""Per-position conditional rates :math:`\beta_i = a_i / a_{i-1}` (:math:`a_0 = 1`) from cumulative ones.

    Parameters
    ----------
    cumulative : array_like, shape (gamma,)
        :math:`a_i = P(\tau \ge i)`, non-increasing (vLLM's per-position acceptance rates).

    Returns
    -------
    ndarray, shape (gamma,)
        :math:`\beta_i`; ``nan`` where :math:`a_{i-1} = 0` (the position is never reached, so its
        conditional rate is undefined -- it is not 0).

    Raises
    ------
    InvalidOptionError
        If a rate is outside [0, 1] or the sequence increases (then it is not cumulative: it may
        already be conditional).

    Examples
    --------
    >>> conditional_from_cumulative([0.9, 0.45, 0.0, 0.0]).round(6).tolist()
    [0.9, 0.5, 0.0, nan]
    """
    a = _rates(cumulative, "cumulative")
    rise = np.flatnonzero(np.diff(a) > _RATE_SLACK)
    if rise.size:
        i = int(rise[0]) + 1
        raise InvalidOptionError(
            f"cumulative must be non-increasing (P(tau >= i) cannot grow with i), but cumulative[{i}] = {a[i]!r} > "
            f"cumulative[{i - 1}] = {a[i - 1]!r}; these look like conditional rates: use cumulative_from_conditional"
        )
    prev = np.concatenate([[1.0], a[:-1]])
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(prev > 0, np.minimum(a, prev) / np.where(prev > 0, prev, 1.0), np.nan)
    return out


def expected_accepted_from_cumulative(cumulative: Any) -> float:
    r""":math:`E[\tau] = \sum_{i=1}^{\gamma} a_i` (the tail-sum formula of a non-negative integer variable).

    Parameters
    ----------
    cumulative : array_like, shape (gamma,)
        :math:`a_i = P(\tau \ge i)`.

    Returns
    -------
    float
        :math:`E[\tau]`.

    Raises
    ------
    InvalidOptionError
        If a rate is outside [0, 1] or the sequence increases.

    Examples
    --------
    >>> expected_accepted_from_cumulative([0.9, 0.7, 0.4, 0.2])
    2.2
    """
    conditional_from_cumulative(cumulative)  # validates: rates, non-increasing
    return float(math.fsum(np.clip(np.asarray(cumulative, dtype=np.float64), 0.0, 1.0)))


def tau_distribution_from_cumulative(cumulative: Any) -> np.ndarray:
    r"""The law of :math:`\tau`: :math:`P(\tau = i) = a_i - a_{i+1}` (:math:`a_0 = 1`, :math:`a_{\gamma+1} = 0`).

    Parameters
    ----------
    cumulative : array_like, shape (gamma,)
        :math:`a_i = P(\tau \ge i)`.

    Returns
    -------
    ndarray, shape (gamma + 1,)
        :math:`P(\tau = 0), \dots, P(\tau = \gamma)`.

    Raises
    ------
    InvalidOptionError
        If a rate is outside [0, 1] or the sequence increases.

    Examples
    --------
    >>> tau_distribution_from_cumulative([0.5, 0.25]).tolist()
    [0.5, 0.25, 0.25]
    """
    conditional_from_cumulative(cumulative)
    a = np.concatenate([[1.0], np.clip(np.asarray(cumulative, dtype=np.float64), 0.0, 1.0), [0.0]])
    a = np.minimum.accumulate(a)  # rounding in a printed log may raise a rate by < _RATE_SLACK
    return a[:-1] - a[1:]


def expected_accepted_constant(alpha: Any, gamma: Any) -> float:
    r""":math:`E[\tau]` when every position is accepted with the same probability :math:`\alpha`.

    .. math:: E[\tau] = \sum_{i=1}^{\gamma} \alpha^i = \frac{\alpha (1 - \alpha^{\gamma})}{1 - \alpha}

    (Leviathan et al. 2023, eq. 1, minus its bonus token). Real chains accept later positions
    less often than earlier ones, so this formula with :math:`\alpha = \beta_1` overstates
    :math:`E[\tau]`; use the per-position rates when you have them.

    Parameters
    ----------
    alpha : float
        Per-position acceptance in [0, 1].
    gamma : int
        Draft tokens per round.

    Returns
    -------
    float
        :math:`E[\tau]`.

    Raises
    ------
    InvalidOptionError
        If ``alpha`` is not in [0, 1].
    InvalidDraftCountError
        If ``gamma`` is not a positive integer.

    Examples
    --------
    >>> round(expected_accepted_constant(0.5, 3), 12)
    0.875
    """
    g = as_int_in_range(gamma, "gamma")
    a = float(_rates([alpha], "alpha")[0])
    return float(math.fsum(a**i for i in range(1, g + 1)))


def constant_acceptance_equivalent(expected_accepted: Any, gamma: Any) -> float:
    r"""The constant per-position rate :math:`\alpha` that would give :math:`E[\tau]`: the root of
    :math:`\sum_{i=1}^{\gamma} \alpha^i = E[\tau]` in [0, 1].

    The left side increases strictly from 0 to :math:`\gamma`, so the root is unique; it is found by
    bisection to machine precision.

    Parameters
    ----------
    expected_accepted : float
        :math:`E[\tau] \in [0, \gamma]`.
    gamma : int
        Draft tokens per round.

    Returns
    -------
    float
        :math:`\alpha`.

    Raises
    ------
    InvalidOptionError
        If :math:`E[\tau]` is outside :math:`[0, \gamma]`.
    InvalidDraftCountError
        If ``gamma`` is not a positive integer.

    Examples
    --------
    >>> round(constant_acceptance_equivalent(0.875, 3), 12)
    0.5
    """
    g = as_int_in_range(gamma, "gamma")
    t = _finite(expected_accepted, "expected_accepted")
    if not -_RATE_SLACK <= t <= g + _RATE_SLACK:
        raise InvalidOptionError(
            f"expected_accepted must be in [0, gamma = {g}] (got {t!r}); a mean acceptance length includes the bonus token: subtract 1"
        )
    lo, hi = 0.0, 1.0
    for _ in range(200):  # the interval halves each step: 2^-200 is far below machine precision
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        if expected_accepted_constant(mid, g) < t:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


@dataclass(frozen=True)
class SpecDecodeMetrics:
    r"""Every metric of the dictionary for one run, from an engine's counters.

    Attributes
    ----------
    gamma : int
        Draft tokens per round (``num_draft_tokens / num_drafts``).
    rounds : int
        Rounds (vLLM's ``num_drafts``).
    expected_accepted : float
        :math:`E[\tau]` = accepted / rounds.
    mean_acceptance_length : float
        :math:`1 + E[\tau]` (vLLM's "Mean acceptance length").
    block_efficiency : float
        The same number as ``mean_acceptance_length`` (tokens per target call).
    draft_acceptance_rate : float
        :math:`E[\tau]/\gamma` (vLLM's "Avg Draft acceptance rate").
    cumulative_acceptance : tuple of float
        :math:`a_i = P(\tau \ge i)` (vLLM's per-position acceptance rates); empty when not given.
    conditional_acceptance : tuple of float
        :math:`\beta_i = a_i / a_{i-1}` (``nan`` where a position is never reached); empty when not given.
    constant_acceptance : float
        The constant :math:`\alpha` giving the same :math:`E[\tau]`.
    """

    gamma: int
    rounds: int
    expected_accepted: float
    mean_acceptance_length: float
    block_efficiency: float
    draft_acceptance_rate: float
    cumulative_acceptance: tuple
    conditional_acceptance: tuple
    constant_acceptance: float


# long-function: a public converter whose numpydoc docstring states every formula and counter
def from_engine_counts(
    *, num_drafts: Any, num_draft_tokens: Any, num_accepted_tokens: Any, accepted_per_position: Any = None
) -> SpecDecodeMetrics:
    r"""Every metric from the counters a serving engine keeps (vLLM's ``SpecDecodingStats`` names).

    .. math::

       E[\tau] = \frac{\text{accepted}}{\text{drafts}}, \quad
       L = 1 + E[\tau], \quad \bar a = \frac{\text{accepted}}{\text{draft tokens}}, \quad
       a_i = \frac{\text{accepted at position } i}{\text{drafts}}

    Parameters
    ----------
    num_drafts : int
        Rounds (draft-verify steps).
    num_draft_tokens : int
        Drafted tokens over all rounds (:math:`\gamma` per round).
    num_accepted_tokens : int
        Accepted drafted tokens over all rounds (bonus tokens not counted).
    accepted_per_position : sequence of int, optional
        Accepted tokens at each draft position (length :math:`\gamma`); must sum to
        ``num_accepted_tokens`` and be non-increasing (a token is accepted only after its prefix).

    Returns
    -------
    SpecDecodeMetrics
        The dictionary's metrics.

    Raises
    ------
    InvalidOptionError
        If the counters are inconsistent (accepted > drafted, draft tokens not a multiple of drafts,
        per-position counts that do not sum to the total or increase).
    NotAnIntegerError
        If a counter is not a whole number.

    Examples
    --------
    >>> m = from_engine_counts(num_drafts=4, num_draft_tokens=8, num_accepted_tokens=6)
    >>> m.gamma, m.expected_accepted, m.mean_acceptance_length
    (2, 1.5, 2.5)
    """
    n = as_int_in_range(num_drafts, "num_drafts")
    nd = as_int_in_range(num_draft_tokens, "num_draft_tokens")
    na = as_int_in_range(num_accepted_tokens, "num_accepted_tokens", minimum=0)
    if nd % n:
        raise InvalidOptionError(
            f"num_draft_tokens = {nd} is not a multiple of num_drafts = {n}; these metrics need a fixed gamma per round "
            "(aggregate runs with one gamma each)"
        )
    g = nd // n
    if na > nd:
        raise InvalidOptionError(f"num_accepted_tokens = {na} exceeds num_draft_tokens = {nd}; bonus tokens are not accepted drafts")
    cum: tuple = ()
    cond: tuple = ()
    if accepted_per_position is not None:
        counts = np.asarray(accepted_per_position)
        if counts.ndim != 1 or counts.size != g:
            raise InvalidOptionError(
                f"accepted_per_position must have gamma = {g} entries (got shape {counts.shape}); pass one count per draft position"
            )
        ints = [as_int_in_range(c, f"accepted_per_position[{i}]", minimum=0, maximum=n) for i, c in enumerate(counts.tolist())]
        if sum(ints) != na:
            raise InvalidOptionError(
                f"accepted_per_position sums to {sum(ints)}, not num_accepted_tokens = {na}; pass the same run's counters"
            )
        a = np.array(ints, dtype=np.float64) / n
        cond = tuple(float(x) for x in conditional_from_cumulative(a))
        cum = tuple(float(x) for x in a)
    e_tau = na / n
    return SpecDecodeMetrics(
        gamma=g,
        rounds=n,
        expected_accepted=e_tau,
        mean_acceptance_length=1.0 + e_tau,
        block_efficiency=1.0 + e_tau,
        draft_acceptance_rate=na / nd,
        cumulative_acceptance=cum,
        conditional_acceptance=cond,
        constant_acceptance=constant_acceptance_equivalent(e_tau, g),
    )
