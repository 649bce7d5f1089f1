r"""Single-draft speculative sampling in torch (twin of ``otspec.verifiers.token``).

Draw :math:`X \sim q`; return it with probability :math:`\min(1, p(X)/q(X))`, otherwise draw
:math:`Y \sim \mathrm{norm}((p-q)_+)`. Output law :math:`\min(p, q) + \ldots = p`; acceptance
:math:`\sum \min(p, q)`.
"""

from __future__ import annotations

import torch

from otspec_gpu.kernels import try_kernel, use_kernels
from otspec_gpu.verifiers._docs import fill_doc
from otspec_gpu.verifiers.base import StepOutput, TorchVerifier, check_step, deprecated_module_sample, step_output
from otspec_gpu.verifiers.schedule import (
    AcceptSchedule,
    accept_ratio,
    draft_round_uniforms,
    gather,
    residual_weights,
    rounds_step,
    schedule_conditional,
)

__all__ = ["conditional", "schedule", "step", "token", "uniforms"]


@fill_doc
def schedule(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor) -> AcceptSchedule:
    r"""One round on ``drafts[:, 0]`` against q; residual ``norm((p - q)_+)``.

    Parameters
    ----------
    {p_q}
    {drafts_one}

    Returns
    -------
    AcceptSchedule
        One round per row, accept :math:`\min(1, p(x)/q(x))`, residual :math:`\mathrm{norm}((p - q)_+)`.
    """
    x = drafts[:, :1]
    res, _ = residual_weights(p, q)
    return AcceptSchedule(x, accept_ratio(gather(p, x), gather(q, x)), res)


@fill_doc
def conditional(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, *, validate: bool = True) -> torch.Tensor:
    r"""Exact output law ``[B, V]`` given one draft per row ``drafts`` ``[B, 1]``.

    {params_one}

    {returns_law_raises}

    Examples
    --------
    >>> import torch
    >>> p = torch.tensor([[0.5, 0.5]], dtype=torch.float64); q = torch.tensor([[0.75, 0.25]], dtype=torch.float64)
    >>> conditional(p, q, torch.tensor([[0]])).tolist()
    [[0.6666666666666666, 0.33333333333333337]]
    """
    p, q, drafts = check_step(p, q, drafts, k_min=1, k_max=1, validate=validate, name="token")
    return schedule_conditional(schedule(p, q, drafts), p.dtype)


def uniforms(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """The uniforms :func:`sample` consumes: ``[B, 1]`` accept coins then ``[B]`` residual uniforms
    (float64, two ``rand`` calls; :func:`~otspec_gpu.verifiers.schedule.draft_round_uniforms` of the
    first draft slot).

    Parameters
    ----------
    p, q : torch.Tensor
        ``[B, V]`` (or ``[1, V]``) target and draft rows (their device is used).
    drafts : torch.Tensor
        ``[B, 1]`` long drafts.
    generator : torch.Generator
        Source of the uniforms.

    Returns
    -------
    tuple of torch.Tensor
        ``(coins [B, 1], u [B])``.
    """
    return draft_round_uniforms(p, q, drafts[:, :1], generator)


def step(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, coins: torch.Tensor, u: torch.Tensor) -> StepOutput:
    """Token verification as a pure step of its uniforms (no generator, no validation, no host sync
    on CUDA): :func:`sample` is the checks, :func:`uniforms`, then this.

    Parameters
    ----------
    p, q : torch.Tensor
        ``[B, V]`` (or ``[1, V]``) target and draft rows.
    drafts : torch.Tensor
        ``[B, 1]`` long drafts.
    coins : torch.Tensor
        ``[B, 1]`` float64 accept coins.
    u : torch.Tensor
        ``[B]`` float64 residual uniforms.

    Returns
    -------
    StepOutput
        Output token, accepted flag and draft slot per row.
    """
    if use_kernels(p):  # one fused launch (otspec_gpu.kernels.chain)
        from otspec_gpu.kernels.chain import token_single_step

        out = try_kernel(token_single_step, p, q, drafts, coins, u)
        if out is not None:
            return step_output(out[1], drafts)
    x = drafts[:, :1]
    acc = accept_ratio(gather(p, x), gather(q, x))
    # the residual (p - q)_+ is built only when a row rejects (CPU early exit, see schedule.rounds_step)
    return step_output(rounds_step(x, acc, lambda: residual_weights(p, q)[0], coins, u), drafts)


token = TorchVerifier(
    "token",
    "iid",
    True,
    conditional,
    k_min=1,
    k_max=1,
    reference="Leviathan et al. 2023; Chen et al. 2023",
    uniforms=uniforms,
    step=step,
)

__getattr__ = deprecated_module_sample(token)  # the 0.1.0 module-level sample, for one minor release
