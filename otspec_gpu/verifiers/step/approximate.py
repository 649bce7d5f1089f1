r"""A lossy single-draft verifier with a predicate tensor (twin of
``otspec.verifiers.step.approximate.ApproximateVerifier``; SPRINTER-style, single-token analysis).

One draft :math:`X \sim q`. A cheap predicate passes it with probability :math:`a(X)`
(``pass_prob``, a ``[B, V]`` or ``[V]`` tensor in [0, 1]) and a passed token is kept without the
target; a flagged token goes through the exact rule (keep w.p. :math:`\min(1, p/q)`, else draw
from :math:`\mathrm{norm}((p-q)_+)`). The exact output law is

.. math:: P(x) = q(x)a(x) + q(x)(1-a(x))\min\big(1, \tfrac{p(x)}{q(x)}\big) + R\,\mathrm{norm}((p-q)_+)(x),
          \quad R = \sum_y (1-a(y))(q(y)-p(y))_+,

at total-variation distance :math:`\sum_x a(x)(q(x)-p(x))_+` from p. ``pass_prob=None`` is the
exact-rule predicate :math:`a = 1\{p \ge q\}` (TV 0), the numpy registry's default instance.
"""

from __future__ import annotations

from typing import Any

import torch

from otspec.errors import InvalidDistributionError, ShapeMismatchError
from otspec_gpu.verifiers._docs import fill_doc
from otspec_gpu.verifiers.base import StepOutput, TorchVerifier, check_step, step_output
from otspec_gpu.verifiers.schedule import (
    AcceptSchedule,
    accept_ratio,
    gather,
    residual_scratch,
    residual_weights,
    round_uniforms,
    rounds_step,
    schedule_conditional,
)

__all__ = ["approximate", "conditional", "pass_probabilities", "sample", "schedule", "step", "tv_to_target", "uniforms"]


@fill_doc
def pass_probabilities(p: torch.Tensor, q: torch.Tensor, pass_prob: Any = None, *, validate: bool = True) -> torch.Tensor:
    r"""The ``[B, V]`` float64 pass probabilities (default ``1{p >= q}``).

    Parameters
    ----------
    {p_q}
    {pass_prob}
    validate : bool
        Check that the values lie in ``[0, 1]``.

    Returns
    -------
    torch.Tensor
        ``[B, V]`` (or ``[1, V]``) float64 pass probabilities.

    Raises
    ------
    ShapeMismatchError
        If ``pass_prob`` is not ``[V]`` or ``[B, V]``.
    InvalidDistributionError
        If (``validate``) an entry is outside ``[0, 1]`` or not finite.
    """
    if pass_prob is None:
        return (p >= q).double()
    a = torch.as_tensor(pass_prob, device=p.device).double()
    if a.ndim == 1:
        a = a[None, :]
    if a.ndim != 2 or a.shape[1] != p.shape[1]:
        raise ShapeMismatchError(
            f"pass_prob must have shape [V] or [B, V] = [{p.shape[0]}, {p.shape[1]}] (got {tuple(a.shape)}); give one pass probability per token"
        )
    if validate and (not bool(torch.isfinite(a).all()) or bool(((a < 0) | (a > 1)).any())):
        raise InvalidDistributionError("pass_prob must lie in [0, 1]; pass probabilities, not logits")
    return a


def _pass_rows(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, pass_prob: Any, validate: bool) -> torch.Tensor:
    a = pass_probabilities(p, q, pass_prob, validate=validate)
    if a.shape[0] not in (1, drafts.shape[0]):
        raise ShapeMismatchError(f"pass_prob must have 1 or B = {drafts.shape[0]} rows (got {a.shape[0]}); give one row per row of drafts")
    return a


@fill_doc
def schedule(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, pass_prob: Any = None, *, validate: bool = True) -> AcceptSchedule:
    r"""Two rounds on the same token: the predicate's coin, then the exact rule's coin.

    Parameters
    ----------
    {p_q}
    {drafts_one}
    {pass_prob}
    validate : bool
        Check the pass probabilities.

    Returns
    -------
    AcceptSchedule
        Two rounds on the draft: the predicate's coin :math:`a(x)`, then the exact coin :math:`\min(1, p/q)`; residual :math:`\mathrm{norm}((p - q)_+)`.

    Raises
    ------
    ShapeMismatchError
        If ``pass_prob`` has neither 1 nor ``B`` rows.
    InvalidDistributionError
        If (``validate``) a pass probability is outside ``[0, 1]``.
    """
    a = _pass_rows(p, q, drafts, pass_prob, validate)
    x = drafts[:, :1]
    res, _ = residual_weights(p, q)
    return AcceptSchedule(torch.cat([x, x], dim=1), torch.cat([gather(a, x), accept_ratio(gather(p, x), gather(q, x))], dim=1), res)


@fill_doc
def conditional(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, *, pass_prob: Any = None, validate: bool = True) -> torch.Tensor:
    r"""Exact output law ``[B, V]`` given the draft (lossy unless ``pass_prob`` vanishes where q > p).

    Parameters
    ----------
    {p_q}
    {drafts_one}
    {pass_prob}
    {validate}

    {returns_law_raises}

    Examples
    --------
    >>> import torch
    >>> p = torch.tensor([[0.5, 0.5]], dtype=torch.float64); q = torch.tensor([[0.75, 0.25]], dtype=torch.float64)
    >>> conditional(p, q, torch.tensor([[0]]), pass_prob=torch.ones(2)).tolist()
    [[1.0, 0.0]]
    """
    p, q, drafts = check_step(p, q, drafts, k_min=1, k_max=1, validate=validate, name="approximate")
    return schedule_conditional(schedule(p, q, drafts, pass_prob, validate=validate), p.dtype)


@fill_doc
def sample(
    p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, *, generator: torch.Generator, pass_prob: Any = None, validate: bool = True
) -> StepOutput:
    r"""One output token per row (predicate and accept coins from one ``rand`` call, residual from another).

    Parameters
    ----------
    {p_q}
    {drafts_one}
    {generator}
    {pass_prob}
    {validate}

    {returns_step_raises}
    """
    p, q, drafts = check_step(p, q, drafts, k_min=1, k_max=1, validate=validate, name="approximate")
    a = None if pass_prob is None else _pass_rows(p, q, drafts, pass_prob, validate)
    return step(p, q, drafts, *uniforms(p, q, drafts, generator), pass_prob=a)


@fill_doc
def uniforms(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """The uniforms :func:`sample` consumes, drawn from ``generator`` in its order: ``[B, 2]`` float64 coins (predicate, accept), then ``[B]`` residual uniforms.

    {uniforms_doc}
    """
    return round_uniforms(drafts.shape[0], 2, p.device, generator)


@fill_doc
def step(
    p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, coins: torch.Tensor, u: torch.Tensor, *, pass_prob: Any = None
) -> StepOutput:
    r"""The approximate rule (``pass_prob`` as in :func:`sample`, not validated here) as a pure step of its uniforms.

    {pure_step}

    {step_head}
    {coins_u}
    pass_prob : torch.Tensor or None
        ``[1, V]`` / ``[B, V]`` float64 pass probabilities (``None``: :math:`1\{p \ge q\}`), not validated here.

    {step_returns}
    """
    x = drafts[:, :1]
    px, qx = gather(p, x), gather(q, x)
    if pass_prob is None:  # the default predicate 1{p >= q}, read at the draft only
        ax = (px >= qx).double()
    else:
        ax = gather(_pass_rows(p, q, drafts, pass_prob, False), x)
    # the residual (p - q)_+ is built only when a row rejects (CPU early exit, see schedule.rounds_step)
    acc = torch.cat([ax, accept_ratio(px, qx)], dim=1)
    return step_output(rounds_step(torch.cat([x, x], dim=1), acc, lambda: residual_scratch(p, q), coins, u), drafts)


@fill_doc
def tv_to_target(p: torch.Tensor, q: torch.Tensor, pass_prob: Any = None) -> torch.Tensor:
    r""":math:`d_{TV}(P, p) = \sum_x a(x)(q(x)-p(x))_+` per row ``[B]`` (float64).

    Parameters
    ----------
    {p_q}
    {pass_prob}

    Returns
    -------
    torch.Tensor
        ``[B]`` float64 total-variation distance between the output law and ``p``.
    """
    a = pass_probabilities(p, q, pass_prob)
    return (a * torch.clamp(q.double() - p.double(), min=0.0)).sum(-1)


approximate = TorchVerifier(
    "approximate",
    "iid",
    False,
    conditional,
    sample=sample,
    k_min=1,
    k_max=1,
    reference="SPRINTER (Zhong et al. 2025), single-token analysis",
    uniforms=uniforms,
    step=step,
)
