r"""Hu et al.'s optimal verifier for greedy drafts in torch (twin of ``otspec.verifiers.greedy_optimal``).

Greedy drafts (``otspec.greedy(q, k)``): the top-(k-1) tokens G of q, then
:math:`X \sim \tilde q = q 1_{G^c} / q(G^c)`. Accept X w.p. :math:`\min(1, p(X)/\tilde q(X))`,
else draw from :math:`p_{rem} \propto p` on G and :math:`(p-\tilde q)_+` off G. Acceptance
:math:`P(G) + \sum_{x \notin G}\min(p, \tilde q)`, the optimum for this law.

:func:`otspec_gpu.drafting.greedy_top` is the top-(k-1) set G in the tie order of ``otspec.greedy``
(larger q first, then lower token id); :func:`otspec_gpu.drafting.sample_drafts` drafts the greedy
law with it.
"""

from __future__ import annotations

import torch

from otspec_gpu._scratch import to_float64
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

__all__ = ["conditional", "greedy_optimal", "schedule", "step", "uniforms"]


@fill_doc
def schedule(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor) -> AcceptSchedule:
    r"""greedy_optimal's accept schedule: one round on the random draft X = ``drafts[:, -1]``.

    Parameters
    ----------
    {p_q}
    {drafts_greedy}

    Returns
    -------
    AcceptSchedule
        One round on the random draft against :math:`\tilde q`; residual :math:`p` on G and :math:`(p - \tilde q)_+` off G, normalised.
    """
    top = drafts[:1, :-1] if p.shape[0] == 1 else drafts[:, :-1]  # shared p, q: one (shared) top set
    qt = q_rest(q, top)
    p64 = p.double()
    prem = torch.clamp(p64 - qt, min=0.0)
    prem = prem.scatter_(1, top, p64.gather(1, top))
    res = fallback_rows(prem, prem.sum(-1), p64)
    x = drafts[:, -1:]
    return AcceptSchedule(x, accept_ratio(gather(p64, x), gather(qt, x)), res)


@fill_doc
def conditional(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, *, validate: bool = True) -> torch.Tensor:
    r"""Exact output law ``[B, V]`` of the greedy-optimal rule.

    {params_greedy}

    {returns_law_raises_inputs}
    {raises_greedy}
    {raises_count}

    Examples
    --------
    >>> import torch
    >>> p = torch.tensor([[0.2, 0.5, 0.3]], dtype=torch.float64); q = torch.tensor([[0.5, 0.3, 0.2]], dtype=torch.float64)
    >>> [round(v, 12) for v in conditional(p, q, torch.tensor([[0, 2]]))[0].tolist()]  # keep 2 w.p. 0.3 / 0.4
    [0.25, 0.0, 0.75]
    """
    p, q, drafts = check_step(p, q, drafts, validate=validate, name="greedy_optimal")
    if validate:
        check_greedy(q, drafts)
    return schedule_conditional(schedule(p, q, drafts), p.dtype)


@fill_doc
def uniforms(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """The uniforms :func:`sample` consumes, drawn from ``generator`` in its order: ``[B, 1]`` float64 accept coins, then ``[B]`` residual uniforms.

    {uniforms_doc}
    """
    return round_uniforms(drafts.shape[0], 1, p.device, generator)


@fill_doc
def step(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, coins: torch.Tensor, u: torch.Tensor) -> StepOutput:
    """The greedy optimal rule (:func:`schedule` then its run, in scratch buffers) as a pure step of its uniforms.

    {pure_step}

    {step_doc}
    """
    return step_output(_run(p, q, drafts, coins, u), drafts)


def _run(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, coins: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """:func:`schedule` then :func:`~otspec_gpu.verifiers.schedule.rounds_step`, with the same arithmetic,
    in scratch buffers and with the residual built only when a row rejects (CPU)."""
    top = drafts[:1, :-1] if p.shape[0] == 1 else drafts[:, :-1]
    rest = to_float64(q, "greedy_rest").scatter_(1, top, 0.0)
    tot = rest.sum(-1, keepdim=True)
    tot = torch.where(tot > 0, tot, torch.ones_like(tot))
    x = drafts[:, -1:]
    acc = accept_ratio(gather(p, x), gather(rest, x) / tot)

    def residual() -> torch.Tensor:
        w = rest.div_(tot).neg_().add_(p).clamp_(min=0.0)  # (p - q~)_+ off G
        w.scatter_(1, top, p.gather(1, top).double())  # p on G
        return fallback_rows(w, w.sum(-1), p)

    return rounds_step(x, acc, residual, coins, u)


greedy_optimal = TorchVerifier(
    "greedy_optimal",
    "greedy",
    True,
    conditional,
    k_min=1,
    reference="Hu et al., ICLR 2025",
    uniforms=uniforms,
    step=step,
    check_drafts=check_greedy,
)

__getattr__ = deprecated_module_sample(greedy_optimal)  # the 0.1.0 module-level sample, for one minor release
