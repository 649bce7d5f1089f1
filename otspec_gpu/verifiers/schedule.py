r"""The *accept schedule* every torch single-step rule (and every tree node) is built from, with
its exact law, its sampler and the residual helpers (twin of the core's sequential accept/reject
rule in :mod:`otspec.verifiers`). An accept schedule is not a transport plan: it is the order in
which drafted tokens are tried, their accept probabilities and the residual law.

An accept schedule visits drafted tokens :math:`t_1..t_R` of each row in order, stops at round j with
probability :math:`a_j` (outputting :math:`t_j`) and otherwise draws from a residual law r:

.. math:: \pi(y \mid \bar x) = \sum_{j=1}^{R} \Big[\prod_{l<j}(1-a_l)\Big] a_j 1\{y = t_j\}
          + \Big[\prod_{l \le R}(1-a_l)\Big] r(y).

Numerics rule (documented in ``docs/gpu.rst``): accept probabilities, residual weights, their masses
and the inverse-CDF sums are computed in **float64** whatever the input dtype, so a residual of
mass 1e-7 built from float32 inputs keeps its full relative precision; a residual row of mass
exactly 0 (e.g. ``p == q``) is replaced by ``p`` itself, as in the numpy core (it is then reached
with probability 0 in exact arithmetic). ``conditional`` results are cast back to the input dtype.

Randomness: every sampler takes an explicit :class:`torch.Generator` and draws each family of
uniforms (accept coins, residual draws, any ordering/selection coin) with a *separate* call, so no
uniform is ever used twice.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch

from otspec_gpu._scratch import host_shortcuts, to_float64
from otspec_gpu.sampling import sample_weights, search_cdf
from otspec_gpu.verifiers._docs import fill_doc

__all__ = [
    "AcceptSchedule",
    "accept_ratio",
    "draft_round_uniforms",
    "fallback_rows",
    "gather",
    "normalize_or",
    "residual",
    "residual_scratch",
    "residual_weights",
    "round_uniforms",
    "rounds_step",
    "sample_rounds",
    "schedule_conditional",
    "schedule_sample",
]


class AcceptSchedule(NamedTuple):
    """Accept schedule: ``tokens`` ``[B, R]`` long, ``accept`` ``[B, R]`` float64 in [0, 1],
    ``residual`` ``[B, V]`` float64 non-negative weights, every row of positive mass (the residual
    law r is the row divided by its sum; :func:`schedule_conditional` normalises, the samplers draw from
    the weights directly)."""

    tokens: torch.Tensor
    accept: torch.Tensor
    residual: torch.Tensor


def residual_scratch(p: torch.Tensor, q: torch.Tensor, name: str = "residual") -> torch.Tensor:
    """:func:`residual_weights` into the scratch buffer ``name`` (for a sampler's internal use).

    Parameters
    ----------
    p, q : torch.Tensor
        ``[B, V]`` target and draft rows (never modified).
    name : str
        Scratch buffer name.

    Returns
    -------
    torch.Tensor
        ``[B, V]`` float64 weights :math:`(p - q)_+`, rows of mass 0 replaced by ``p``.
    """
    w = to_float64(p, name)
    w.sub_(q).clamp_(min=0.0)
    return fallback_rows(w, w.sum(-1), p)


def gather(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """``x[b, idx[b, j]]`` for ``x`` ``[B, V]`` or ``[1, V]`` (broadcast over the rows of ``idx``).

    Parameters
    ----------
    x : torch.Tensor
        ``[B, V]`` or ``[1, V]`` rows.
    idx : torch.Tensor
        ``[B, j]`` long indices into the vocabulary.

    Returns
    -------
    torch.Tensor
        ``[B, j]``: the gathered entries, in ``x``'s dtype.
    """
    return x.expand(idx.shape[0], -1).gather(1, idx)


def accept_ratio(num: torch.Tensor, den: torch.Tensor) -> torch.Tensor:
    r""":math:`\min(1, \mathrm{num}/\mathrm{den})` in float64, 1 where ``den <= 0`` (never drafted).

    Parameters
    ----------
    num, den : torch.Tensor
        Numerators (e.g. :math:`p(x)`) and denominators (e.g. :math:`q(x)`), same shape.

    Returns
    -------
    torch.Tensor
        float64 acceptance probabilities in ``[0, 1]``.
    """
    num = num.double()
    den = den.double()
    pos = den > 0
    return torch.where(pos, torch.clamp(num / torch.where(pos, den, torch.ones_like(den)), max=1.0), torch.ones_like(den))


def normalize_or(w: torch.Tensor, fallback: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows of ``w`` (float64, non-negative) normalised; rows of mass 0 replaced by ``fallback``.
    Returns ``(rows, mass)``.

    Parameters
    ----------
    w : torch.Tensor
        ``[B, V]`` non-negative weights.
    fallback : torch.Tensor
        ``[B, V]`` (or ``[1, V]``) rows used where a row of ``w`` has mass 0.

    Returns
    -------
    rows : torch.Tensor
        ``[B, V]`` float64 distribution rows.
    mass : torch.Tensor
        ``[B]`` row masses of ``w`` (before normalisation).
    """
    mass = w.sum(-1)
    ok = mass > 0
    rows = torch.where(ok[:, None], w / torch.where(ok, mass, torch.ones_like(mass))[:, None], fallback.double())
    return rows, mass


def residual(p: torch.Tensor, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    r""":math:`(\mathrm{norm}((p-q)_+),\ \sum (p-q)_+)` row-wise in float64; rows of mass 0 keep ``p``.

    Parameters
    ----------
    p, q : torch.Tensor
        ``[B, V]`` target and draft rows.

    Returns
    -------
    residual : torch.Tensor
        ``[B, V]`` float64 distribution rows.
    mass : torch.Tensor
        ``[B]`` float64 :math:`\sum_y (p - q)_+ = d_{TV}(p, q)` per row.
    """
    p64 = p.double()
    return normalize_or(torch.clamp(p64 - q.double(), min=0.0), p64)


def residual_weights(p: torch.Tensor, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    r""":math:`((p-q)_+,\ \sum (p-q)_+)` row-wise in float64, *unnormalised*; rows of mass 0 are
    replaced by ``p`` (as :func:`residual` does). Three passes over ``[B, V]`` and one fresh
    float64 buffer: the weights a sampler draws from without normalising them.

    Parameters
    ----------
    p, q : torch.Tensor
        ``[B, V]`` target and draft rows (float32 or float64, never modified).

    Returns
    -------
    weights : torch.Tensor
        ``[B, V]`` float64 non-negative weights, every row of positive mass when ``p``'s is.
    mass : torch.Tensor
        ``[B]`` float64 :math:`\sum_y (p - q)_+` per row (0 where the row was replaced by ``p``).

    Examples
    --------
    >>> import torch
    >>> w, m = residual_weights(torch.tensor([[0.5, 0.5]]), torch.tensor([[0.75, 0.25]]))
    >>> w.tolist(), m.tolist()
    ([[0.0, 0.25]], [0.25])
    """
    w = p.to(torch.float64, copy=True)
    w.sub_(q).clamp_(min=0.0)
    mass = w.sum(-1)
    return fallback_rows(w, mass, p), mass


def fallback_rows(w: torch.Tensor, mass: torch.Tensor, fallback: torch.Tensor) -> torch.Tensor:
    """``w`` with its rows of mass 0 replaced by ``fallback`` (cast to float64); ``w`` itself when
    every row has positive mass (checked without a device sync only on CPU; elsewhere the
    replacement is always computed).

    Parameters
    ----------
    w : torch.Tensor
        ``[B, V]`` float64 non-negative weights.
    mass : torch.Tensor
        ``[B]`` row sums of ``w``.
    fallback : torch.Tensor
        ``[B, V]`` or ``[1, V]`` rows used where ``mass`` is 0.

    Returns
    -------
    torch.Tensor
        ``[B, V]`` float64 weights, every row of positive mass when ``fallback``'s is.
    """
    empty = mass <= 0
    if host_shortcuts(w) and not bool(empty.any()):
        return w
    return torch.where(empty[:, None], fallback.to(torch.float64), w)


def schedule_conditional(schedule: AcceptSchedule, dtype: torch.dtype) -> torch.Tensor:
    r"""Exact output law ``[B, V]`` of a :class:`AcceptSchedule`, cast to ``dtype``.

    Parameters
    ----------
    schedule : AcceptSchedule
        ``B`` rows of ``R`` rounds and their residuals.
    dtype : torch.dtype
        Output dtype (the computation is float64).

    Returns
    -------
    torch.Tensor
        ``[B, V]``: the module formula's :math:`\pi(\cdot \mid \bar x)` per row.
    """
    tok, acc, res = schedule
    surv = torch.ones(tok.shape[0], dtype=torch.float64, device=tok.device)
    pi = torch.zeros((tok.shape[0], res.shape[1]), dtype=torch.float64, device=res.device)
    for j in range(tok.shape[1]):  # loop over draft rounds only
        pi.scatter_add_(1, tok[:, j : j + 1], (surv * acc[:, j])[:, None])
        surv = surv * (1.0 - acc[:, j])
    # the residual rows are weights of positive mass: normalised here, folded into their survival
    pi += (surv / res.sum(-1))[:, None] * res
    return pi.to(dtype)


@fill_doc
def schedule_sample(schedule: AcceptSchedule, generator: torch.Generator, *, accept: torch.Tensor | None = None) -> torch.Tensor:
    """Run a schedule once per row: accept coins from one ``torch.rand`` call (accept iff ``U < a_j``),
    residual draws from a second, separate call. ``accept`` overrides ``schedule.accept``.

    Parameters
    ----------
    schedule : AcceptSchedule
        ``B`` rows of ``R`` rounds and their residuals.
    generator : torch.Generator
        Source of the coins and of the residual draws (two separate calls).
    accept : torch.Tensor, optional
        ``[B, R]`` accept probabilities replacing ``schedule.accept`` (e.g. a rule's coin schedule).

    {rounds_returns}
    """
    acc = schedule.accept if accept is None else accept
    return sample_rounds(schedule.tokens, acc, schedule.residual, generator)


@fill_doc
def sample_rounds(
    tokens: torch.Tensor,
    accept: torch.Tensor,
    residual: torch.Tensor | Callable[[], torch.Tensor],
    generator: torch.Generator,
) -> torch.Tensor:
    """:func:`schedule_sample` with a *lazy* residual: ``residual`` may be a callable that builds the
    ``[B, V]`` (or ``[1, V]``) float64 weights, called only when some row rejects every round
    (always on non-CPU devices, where checking would synchronise). The uniforms are drawn exactly as
    :func:`schedule_sample` draws them (``[B, R]`` coins, then ``[B]`` residual uniforms, two separate
    calls) whether or not the residual is built, so the tokens do not depend on that shortcut.

    Parameters
    ----------
    {rounds_inputs}
    generator : torch.Generator
        Source of the coins and of the residual draws (two separate calls).

    {rounds_returns}
    """
    return rounds_step(tokens, accept, residual, *round_uniforms(tokens.shape[0], tokens.shape[1], tokens.device, generator))


def round_uniforms(B: int, R: int, device: torch.device, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """The uniforms of one accept schedule run: ``[B, R]`` float64 accept coins, then ``[B]`` float64
    residual uniforms, from two separate ``torch.rand`` calls on ``generator`` (no uniform is used twice).

    Parameters
    ----------
    B, R : int
        Rows and rounds.
    device : torch.device
        Device of the uniforms.
    generator : torch.Generator
        Source of both calls.

    Returns
    -------
    coins : torch.Tensor
        ``[B, R]`` float64 accept coins.
    u : torch.Tensor
        ``[B]`` float64 residual uniforms.
    """
    coins = torch.rand((B, R), dtype=torch.float64, device=device, generator=generator)
    u = torch.rand(B, dtype=torch.float64, device=device, generator=generator)  # never reuses a coin
    return coins, u


def draft_round_uniforms(
    p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`round_uniforms` of the drafts' shape, one round per draft slot, on the rows' device: the
    ``uniforms`` of a single-step rule whose schedule tries every draft once in order (token, K-SEQ).

    Parameters
    ----------
    p, q : torch.Tensor
        ``[B, V]`` (or ``[1, V]``) target and draft rows (their device is used).
    drafts : torch.Tensor
        ``[B, k]`` long drafts (their shape is used).
    generator : torch.Generator
        Source of the uniforms.

    Returns
    -------
    coins : torch.Tensor
        ``[B, k]`` float64 accept coins.
    u : torch.Tensor
        ``[B]`` float64 residual uniforms (a separate ``rand`` call).
    """
    return round_uniforms(drafts.shape[0], drafts.shape[1], p.device, generator)


@fill_doc
def rounds_step(
    tokens: torch.Tensor,
    accept: torch.Tensor,
    residual: torch.Tensor | Callable[[], torch.Tensor],
    coins: torch.Tensor,
    u: torch.Tensor,
) -> torch.Tensor:
    """:func:`sample_rounds` as a pure function of its uniforms (no generator, no host synchronisation
    except the CPU early exit of :func:`~otspec_gpu._scratch.host_shortcuts`, which does not change
    the result): accept iff ``coins < accept``, first accepted round wins, else an inverse-CDF draw
    from the residual weights with ``u``.

    Parameters
    ----------
    {rounds_inputs}
    coins : torch.Tensor
        ``[B, R]`` float64 accept coins.
    u : torch.Tensor
        ``[B]`` float64 residual uniforms.

    {rounds_returns}
    """
    R = tokens.shape[1]
    if R:
        hit = coins < accept
        done = hit.any(dim=1)
        drafted = tokens.gather(1, torch.argmax(hit.to(torch.uint8), dim=1)[:, None]).squeeze(1)
        if host_shortcuts(tokens) and bool(done.all()):
            return drafted
    if callable(residual):
        res_tok = search_cdf(residual().cumsum_(dim=-1), u)
    else:
        res_tok = sample_weights(residual, u)
    return torch.where(done, drafted, res_tok) if R else res_tok
