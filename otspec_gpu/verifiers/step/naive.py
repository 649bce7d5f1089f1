r"""NaiveTree in torch (twin of ``otspec.verifiers.naive``).

Single-draft speculative sampling on :math:`X_1` against the marginal law :math:`q_1` of the first
draft; its residual :math:`\mathrm{norm}((p-q_1)_+)` may land on the other drafts.
:math:`q_1 = q` for ``"iid"`` and ``"without_replacement"`` drafts; for ``"greedy"`` drafts with
k >= 2 the first draft is the top token, so :math:`q_1` is a point mass there (pass ``law="greedy"``).
"""

from __future__ import annotations

import torch

from otspec.errors import UnsupportedMethodError
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
from otspec_gpu.verifiers.step._greedy import check_greedy

__all__ = ["conditional", "naive", "sample", "schedule", "step", "uniforms"]

_LAWS = ("iid", "without_replacement", "greedy")


def _first_marginal(q: torch.Tensor, drafts: torch.Tensor, law: str) -> torch.Tensor:
    if law not in _LAWS:
        raise UnsupportedMethodError(f"law must be one of {list(_LAWS)} (got {law!r}); pass the law the drafts came from")
    if law == "greedy" and drafts.shape[1] >= 2:
        top = drafts[:1, :1] if q.shape[0] == 1 else drafts[:, :1]  # shared q: one (shared) top token
        return torch.zeros_like(q, dtype=torch.float64).scatter(1, top, 1.0)
    return q  # read in float64 where used (accept_ratio, residual_weights)


@fill_doc
def schedule(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, law: str = "iid") -> AcceptSchedule:
    r"""One round on ``drafts[:, 0]`` against its marginal :math:`q_1`; residual ``norm((p - q_1)_+)``.

    Parameters
    ----------
    {p_q}
    {drafts_any}
    {naive_law}

    Returns
    -------
    AcceptSchedule
        One round on ``drafts[:, 0]``, accept :math:`\min(1, p/q_1)`, residual :math:`\mathrm{norm}((p - q_1)_+)`.
    """
    q1 = _first_marginal(q, drafts, law)
    x = drafts[:, :1]
    res, _ = residual_weights(p, q1)
    return AcceptSchedule(x, accept_ratio(gather(p, x), gather(q1, x)), res)


@fill_doc
def conditional(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, *, law: str = "iid", validate: bool = True) -> torch.Tensor:
    r"""Exact NaiveTree output law ``[B, V]`` (``law``: how the drafts were drawn).

    Parameters
    ----------
    {p_q}
    {drafts_any}
    {naive_law}
    {validate}

    {returns_law_raises}
    {raises_law}

    Examples
    --------
    >>> import torch
    >>> p = torch.tensor([[0.5, 0.5]], dtype=torch.float64); q = torch.tensor([[0.9, 0.1]], dtype=torch.float64)
    >>> [round(v, 6) for v in conditional(p, q, torch.tensor([[0, 1]]))[0].tolist()]
    [0.555556, 0.444444]
    """
    p, q, drafts = check_step(p, q, drafts, validate=validate, name="naive")
    if validate and law == "greedy":
        check_greedy(q, drafts)
    return schedule_conditional(schedule(p, q, drafts, law), p.dtype)


@fill_doc
def sample(
    p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, *, generator: torch.Generator, law: str = "iid", validate: bool = True
) -> StepOutput:
    """One NaiveTree output token per row (coins and residual draws from separate ``rand`` calls).

    Parameters
    ----------
    {p_q}
    {drafts_any}
    {generator}
    {naive_law}
    {validate}

    {returns_step_raises}
    {raises_law}
    """
    p, q, drafts = check_step(p, q, drafts, validate=validate, name="naive")
    if validate and law == "greedy":
        check_greedy(q, drafts)
    return step(p, q, drafts, *uniforms(p, q, drafts, generator), law=law)


@fill_doc
def uniforms(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """The uniforms :func:`sample` consumes, drawn from ``generator`` in its order: ``[B, 1]`` float64 accept coins, then ``[B]`` residual uniforms.

    {uniforms_doc}
    """
    return round_uniforms(drafts.shape[0], 1, p.device, generator)


@fill_doc
def step(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, coins: torch.Tensor, u: torch.Tensor, *, law: str = "iid") -> StepOutput:
    """NaiveTree (``law``: how the drafts were drawn) as a pure step of its uniforms.

    {pure_step}

    {step_head}
    {coins_u}
    law : {"iid", "without_replacement", "greedy"}
        How the drafts were drawn.

    {step_returns}
    """
    q1 = _first_marginal(q, drafts, law)
    x = drafts[:, :1]
    acc = accept_ratio(gather(p, x), gather(q1, x))
    # the residual (p - q_1)_+ is built only when a row rejects (CPU early exit, see schedule.rounds_step)
    return step_output(rounds_step(x, acc, lambda: residual_scratch(p, q1), coins, u), drafts)


naive = TorchVerifier(
    "naive",
    "iid",
    True,
    conditional,
    sample=sample,
    reference="Thomas et al. 2026, App. B (NaiveTree)",
    uniforms=uniforms,
    step=step,
    laws=("iid", "without_replacement", "greedy"),
)
