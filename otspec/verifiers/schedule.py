r"""The sequential accept/reject schedule every sequential rule (and every tree node) is built from.

A sequential rule is one object, an :class:`AcceptSchedule`: the rule
visits drafted tokens :math:`t_1, \dots, t_R` in order, stops at round :math:`j` with probability
:math:`a_j` (outputting :math:`t_j`), and otherwise draws from a residual law :math:`r`. Its exact
conditional output law is

.. math:: \pi(y \mid \bar x) = \sum_{j=1}^{R} \Big[\prod_{l<j} (1 - a_l)\Big] a_j\, 1\{y = t_j\}
          + \Big[\prod_{l \le R} (1 - a_l)\Big]\, r(y),

and its sampler draws one accept coin per round from one random stream and the residual token from
a *separate* child stream (:doc:`verifiers`, the verifier contract: separate streams: reusing the accept uniform biases the residual).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from otspec.sampling import sample_categorical, sample_categorical_rows

__all__ = ["AcceptSchedule", "residual", "residual_rows", "accept_ratio", "schedule_rows", "sample_schedule"]


@dataclass(frozen=True, eq=False)
class AcceptSchedule:
    """Rounds of a sequential accept/reject rule for ``n`` draft tuples (see the module docstring).

    ``tokens`` and ``accept`` are ``(n, R)``; ``residual`` is ``(V,)`` (shared) or ``(n, V)``;
    each residual row is a distribution (any distribution where it is reached with probability 0).

    Attributes
    ----------
    tokens : ndarray of int64, shape (n, R)
        ``tokens[m, j]`` is the token :math:`t_j` examined in round ``j`` for tuple ``m``.
    accept : ndarray, shape (n, R)
        Acceptance probabilities :math:`a_j \\in [0, 1]` of the rounds.
    residual : ndarray, shape (V,) or (n, V)
        The law :math:`r` drawn from when every round rejects.
    """

    tokens: np.ndarray
    accept: np.ndarray
    residual: np.ndarray


def residual(p: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, float]:
    r"""Return :math:`(\mathrm{norm}((p-q)_+),\ \sum (p-q)_+)`.

    When the mass is 0 (p == q on the support) the residual is never sampled; ``p`` is returned in
    its place so that callers never see 0/0.

    Parameters
    ----------
    p, q : ndarray, shape (V,)
        Target and draft distributions.

    Returns
    -------
    residual : ndarray, shape (V,)
        The residual law (a distribution).
    mass : float
        :math:`\sum_y (p - q)_+ = d_{TV}(p, q)`.

    Examples
    --------
    >>> import numpy as np
    >>> r, m = residual(np.array([0.5, 0.5]), np.array([0.75, 0.25]))
    >>> r.tolist(), m
    ([0.0, 1.0], 0.25)
    """
    diff = np.maximum(p - q, 0.0)
    mass = float(diff.sum())
    if mass > 0.0:
        return diff / mass, mass
    return np.array(p, dtype=np.float64, copy=True), 0.0


def residual_rows(P: np.ndarray, Q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row-wise :func:`residual` for ``(n, V)`` arrays: rows of zero mass keep ``P``.

    Parameters
    ----------
    P, Q : ndarray, shape (n, V)
        Target and draft rows.

    Returns
    -------
    residual : ndarray, shape (n, V)
        :math:`\\mathrm{norm}((P - Q)_+)` per row (``P`` itself where the mass is 0).
    mass : ndarray, shape (n,)
        :math:`\\sum_y (P - Q)_+` per row.
    """
    diff = np.maximum(P - Q, 0.0)
    mass = diff.sum(axis=1)
    ok = mass > 0.0
    out = np.where(ok[:, None], diff / np.where(ok, mass, 1.0)[:, None], P)
    return out, mass


def accept_ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    r""":math:`\min(1, \text{num}/\text{den})` elementwise, with 1 where ``den == 0`` (a token with
    zero draft probability is never drafted, so the value there is never used).

    Parameters
    ----------
    num, den : array_like
        Non-negative numerators (e.g. :math:`p(x)`) and denominators (e.g. :math:`q(x)`), broadcastable.

    Returns
    -------
    ndarray
        The acceptance probabilities, in ``[0, 1]``.

    Examples
    --------
    >>> accept_ratio([0.2, 0.5, 0.1], [0.4, 0.25, 0.0]).tolist()
    [0.5, 1.0, 1.0]
    """
    num = np.asarray(num, dtype=np.float64)
    den = np.asarray(den, dtype=np.float64)
    safe = np.where(den > 0.0, den, 1.0)
    with np.errstate(over="ignore"):  # a denormal den overflows num/den to +inf: min(1, inf) = 1 is exact
        return np.where(den > 0.0, np.minimum(1.0, num / safe), 1.0)


def schedule_rows(schedule: AcceptSchedule, V: int) -> np.ndarray:
    """Exact conditional output laws ``(n, V)`` of an :class:`AcceptSchedule`.

    Row ``m`` is :math:`\\pi(\\cdot \\mid \\bar x_m)` of the module's formula: the survival
    probability times :math:`a_j` on each round's token, the final survival times the residual.

    Parameters
    ----------
    schedule : AcceptSchedule
        The rounds of ``n`` tuples.
    V : int
        Vocabulary size.

    Returns
    -------
    ndarray, shape (n, V)
        The output laws (each sums to 1).
    """
    tok, acc = schedule.tokens, schedule.accept
    n = tok.shape[0]
    surv = np.ones(n)
    pi = np.zeros((n, V))
    r = np.arange(n)
    for j in range(tok.shape[1]):
        pi[r, tok[:, j]] += surv * acc[:, j]
        surv = surv * (1.0 - acc[:, j])
    res = schedule.residual
    pi += surv[:, None] * (res[None, :] if res.ndim == 1 else res)
    return pi


def sample_schedule(schedule: AcceptSchedule, coin_rng: np.random.Generator, res_rng: np.random.Generator) -> np.ndarray:
    """Run the sequential rule once per row: accept coins from ``coin_rng`` (one uniform per round,
    accept iff U < a_j), residual draws from ``res_rng``.

    Parameters
    ----------
    schedule : AcceptSchedule
        The rounds of ``n`` tuples.
    coin_rng : numpy.random.Generator
        Stream of the accept coins (``n * R`` uniforms, drawn for every round).
    res_rng : numpy.random.Generator
        Independent stream of the residual draws (never the coin stream).

    Returns
    -------
    ndarray of int64, shape (n,)
        One output token per row, distributed as :func:`schedule_rows`.
    """
    tok, acc = schedule.tokens, schedule.accept
    n, R = tok.shape
    out = np.empty(n, dtype=np.int64)
    if R:
        hit = coin_rng.random((n, R)) < acc
        any_hit = hit.any(axis=1)
        first = np.argmax(hit, axis=1)
        out[any_hit] = tok[np.flatnonzero(any_hit), first[any_hit]]
    else:
        any_hit = np.zeros(n, dtype=bool)
    rej = np.flatnonzero(~any_hit)
    if rej.size:
        res = schedule.residual
        if res.ndim == 1:
            out[rej] = sample_categorical(res_rng, res, rej.size)
        else:
            out[rej] = sample_categorical_rows(res_rng, res[rej])
    return out
