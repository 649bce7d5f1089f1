r"""SpecHub's hub rule for two greedy drafts in torch (twin of ``otspec.verifiers.spechub``).

Drafts ``(a, i)``, a the top token of q (greedy, k = 2). The drafter's latent order is redrawn from
its exact conditional law (``(i, a)`` w.p. :math:`1-q(a)`, a separate ``rand`` call); from
``(i, a)`` accept i w.p. :math:`\min(1, p_i/q_i)`, from ``(a, i)`` w.p.
:math:`\min(1, (p_i-q_i)_+/(q(a)\tilde q_i))`; then a w.p. :math:`\min(1, p_a/L)`,
:math:`L = 1-\sum\min(p, \tilde q)`; else the residual :math:`(p-\tilde q)_+` off a. Its
conditional law equals greedy_optimal's (the numpy core tests the same identity).
"""

from __future__ import annotations

import torch

from otspec_gpu._scratch import scratch, to_float64
from otspec_gpu.verifiers._docs import fill_doc
from otspec_gpu.verifiers.base import StepOutput, TorchVerifier, check_step, deprecated_module_sample, step_output
from otspec_gpu.verifiers.schedule import (
    AcceptSchedule,
    accept_ratio,
    fallback_rows,
    gather,
    round_uniforms,
    rounds_step,
    schedule_conditional,
)
from otspec_gpu.verifiers.step._greedy import check_greedy, q_rest

__all__ = ["conditional", "schedules", "spechub", "step", "uniforms"]


@fill_doc
def schedules(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor) -> tuple[AcceptSchedule, torch.Tensor, torch.Tensor]:
    """SpecHub's two accept schedules: ``(schedule with the (i, a) accept row, accept row of (a, i), q(a))``.

    Parameters
    ----------
    {p_q}
    {drafts_hub}

    Returns
    -------
    schedule : AcceptSchedule
        The schedule for the drafting order (i, a) (random draft first).
    accept_ai : torch.Tensor
        ``[B, 2]`` accept row for the order (a, i).
    q_a : torch.Tensor
        ``[B]`` :math:`q(a)`, the probability of the order (a, i).
    """
    a = drafts[:, :1]
    i = drafts[:, 1:2]
    a_rows = a[:1] if p.shape[0] == 1 else a  # shared p, q: one (shared) top token
    p64, q64 = p.double(), q.double()
    qa = gather(q64, a)
    qt = q_rest(q64, a_rows)
    pi_, qi_ = gather(p64, i), gather(q64, i)
    a1 = accept_ratio(pi_, qi_)
    a2 = accept_ratio(torch.clamp(pi_ - qi_, min=0.0), qa * gather(qt, i))
    L = 1.0 - torch.minimum(p64, qt).sum(-1, keepdim=True)  # qt vanishes at a
    pa = gather(p64, a)
    c = torch.where(L > 0, torch.clamp(pa / torch.where(L > 0, L, torch.ones_like(L)), max=1.0), torch.zeros_like(pa))
    left = torch.clamp(p64 - qt, min=0.0).scatter(1, a_rows, 0.0)
    res = fallback_rows(left, left.sum(-1), p64)
    toks = torch.cat([i, a], dim=1)
    return AcceptSchedule(toks, torch.cat([a1, c], dim=1), res), torch.cat([a2, c], dim=1), qa.squeeze(1)


@fill_doc
def conditional(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, *, validate: bool = True) -> torch.Tensor:
    r"""Exact SpecHub output law ``[B, V]``, averaged over the latent drafting order.

    {params_hub}

    {returns_law_raises_inputs}
    {raises_greedy}
    {raises_count}

    Examples
    --------
    >>> import torch
    >>> p = torch.tensor([[0.2, 0.5, 0.3]], dtype=torch.float64); q = torch.tensor([[0.5, 0.3, 0.2]], dtype=torch.float64)
    >>> [round(v, 12) for v in conditional(p, q, torch.tensor([[0, 2]]))[0].tolist()]  # = greedy_optimal's row
    [0.25, 0.0, 0.75]
    """
    p, q, drafts = check_step(p, q, drafts, k_min=2, k_max=2, validate=validate, name="spechub")
    if validate:
        check_greedy(q, drafts)
    pl, acc_ai, qa = schedules(p, q, drafts)
    pi_ia = schedule_conditional(pl, torch.float64)
    pi_ai = schedule_conditional(AcceptSchedule(pl.tokens, acc_ai, pl.residual), torch.float64)
    return ((1.0 - qa)[:, None] * pi_ia + qa[:, None] * pi_ai).to(p.dtype)


@fill_doc
def uniforms(
    p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The uniforms :func:`sample` consumes, drawn from ``generator`` in its order: ``[B]`` float64 order coins, ``[B, 2]`` accept coins, then ``[B]`` residual uniforms.

    {uniforms_doc}
    """
    B = drafts.shape[0]
    order = torch.rand(B, dtype=torch.float64, device=p.device, generator=generator)
    return (order, *round_uniforms(B, 2, p.device, generator))


@fill_doc
def step(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, order: torch.Tensor, coins: torch.Tensor, u: torch.Tensor) -> StepOutput:
    """SpecHub (order coin ``order``, accept ``coins``, residual ``u``) as a pure step of its uniforms.

    {pure_step}

    {step_head}
    order : torch.Tensor
        ``[B]`` float64 order coins (which draft is tried first).
    {coins_u}

    {step_returns}
    """
    return step_output(_run(p, q, drafts, order, coins, u), drafts)


def _run(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, order: torch.Tensor, coins: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """:func:`schedules` then the order coin and :func:`~otspec_gpu.verifiers.schedule.schedule_sample`, with
    the same arithmetic and uniforms, in scratch buffers and with the residual built only when a
    row rejects."""
    a = drafts[:, :1]
    i = drafts[:, 1:2]
    a_rows = a[:1] if p.shape[0] == 1 else a
    qa = gather(q, a).double()
    qt = to_float64(q, "hub_rest").scatter_(1, a_rows, 0.0)
    tot = qt.sum(-1, keepdim=True)
    qt.div_(torch.where(tot > 0, tot, torch.ones_like(tot)))
    pi_, qi_ = gather(p, i).double(), gather(q, i).double()
    a1 = accept_ratio(pi_, qi_)
    a2 = accept_ratio(torch.clamp(pi_ - qi_, min=0.0), qa * gather(qt, i))
    L = 1.0 - torch.minimum(qt, p, out=scratch("hub_min", tuple(qt.shape), qt.device)).sum(-1, keepdim=True)
    pa = gather(p, a).double()
    c = torch.where(L > 0, torch.clamp(pa / torch.where(L > 0, L, torch.ones_like(L)), max=1.0), torch.zeros_like(pa))

    def residual() -> torch.Tensor:
        w = qt.neg_().add_(p).clamp_(min=0.0).scatter_(1, a_rows, 0.0)  # (p - q~)_+ off a
        return fallback_rows(w, w.sum(-1), p)

    qa = qa.squeeze(1)
    order_ai = order < qa
    acc = torch.where(order_ai[:, None], torch.cat([a2, c], dim=1), torch.cat([a1, c], dim=1))
    return rounds_step(torch.cat([i, a], dim=1), acc, residual, coins, u)


spechub = TorchVerifier(
    "spechub",
    "greedy",
    True,
    conditional,
    k_min=2,
    k_max=2,
    reference="SpecHub (Sun et al., EMNLP 2024)",
    uniforms=uniforms,
    step=step,
    check_drafts=check_greedy,
)

__getattr__ = deprecated_module_sample(spechub)  # the 0.1.0 module-level sample, for one minor release
