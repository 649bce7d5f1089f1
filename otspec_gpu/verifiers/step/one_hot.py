r"""The one-hot rule in torch (twin of ``otspec.verifiers.one_hot``): speculative sampling against
the point mass of the drafted tokens, as engines treat an argmax (or top-k) draft.

Round :math:`j` accepts the distinct drafted token :math:`s_j` with probability
:math:`p(s_j) / (1 - p(s_1) - \dots - p(s_{j-1}))`; if every round rejects, the output is drawn from
:math:`p` restricted to the undrafted tokens. Given any drafts the output law is :math:`p`
(lossless for every law); acceptance :math:`p(S)` on a deterministic draft set :math:`S` (the
optimum for it), :math:`\sum_y p(y) q(y)` for one sampled draft. ``q`` is not used (the drafts are
treated as certain); it only validates that the drafter could propose them.

:func:`conditional` is the rounds above. :func:`step` draws the same conditional law with one
inverse-CDF draw :math:`Y \sim p` per row (given the drafts the rounds output exactly :math:`p`, so
the two samplers have the same law of (drafts, output) and the same acceptance): this needs no
``[B, V]`` residual per row (each row's residual is p off its own drafted set) and one uniform per row.
"""

from __future__ import annotations

import torch

from otspec_gpu.sampling import sample_weights
from otspec_gpu.verifiers._docs import fill_doc
from otspec_gpu.verifiers.base import StepOutput, TorchVerifier, check_step, step_output
from otspec_gpu.verifiers.schedule import AcceptSchedule, gather, schedule_conditional

__all__ = ["conditional", "one_hot", "schedule", "step", "uniforms"]


def _first(drafts: torch.Tensor) -> torch.Tensor:
    """``[B, k]`` bool: slot j holds a token not drafted in an earlier slot."""
    k = drafts.shape[1]
    same = drafts[:, :, None] == drafts[:, None, :]  # [B, k, k]
    earlier = torch.ones(k, k, dtype=torch.bool, device=drafts.device).tril(-1)  # [j, l]: l < j
    return ~(same & earlier).any(dim=2)


def _accept(p: torch.Tensor, drafts: torch.Tensor) -> torch.Tensor:
    first = _first(drafts)
    mass = torch.where(first, gather(p, drafts).double(), 0.0)  # [B, k]
    before = torch.cumsum(mass, dim=1) - mass
    left = (1.0 - before).clamp_min(0.0)
    ratio = torch.where(left > 0, (mass / torch.where(left > 0, left, 1.0)).clamp(max=1.0), 1.0)
    return torch.where(first, ratio, 0.0)


def _residual(p: torch.Tensor, drafts: torch.Tensor) -> torch.Tensor:
    """``[B, V]`` float64 weights: p off the drafted set (p itself where the set carries all of p)."""
    pb = p.double().expand(drafts.shape[0], -1)
    rest = pb.scatter(1, drafts, 0.0)
    return torch.where(rest.sum(-1, keepdim=True) > 0, rest, pb)


@fill_doc
def schedule(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor) -> AcceptSchedule:
    r"""One round per draft slot (0 for a repeated token); residual p off the drafted set.

    Parameters
    ----------
    {p_q}
    {drafts_any}

    Returns
    -------
    AcceptSchedule
        Rounds :math:`p(s_j) / (1 - \sum_{l<j} p(s_l))` and the residual weights.
    """
    return AcceptSchedule(drafts, _accept(p, drafts), _residual(p, drafts))


@fill_doc
def conditional(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, *, validate: bool = True) -> torch.Tensor:
    r"""Exact output law ``[B, V]`` (p itself, up to rounding).

    {params_any}

    {returns_law_raises}

    Examples
    --------
    >>> import torch
    >>> p = torch.tensor([[0.2, 0.5, 0.3]], dtype=torch.float64); q = torch.tensor([[0.0, 1.0, 0.0]], dtype=torch.float64)
    >>> [round(x, 12) for x in conditional(p, q, torch.tensor([[1]]))[0].tolist()]
    [0.2, 0.5, 0.3]
    """
    p, q, drafts = check_step(p, q, drafts, validate=validate, name="one_hot")
    return schedule_conditional(schedule(p, q, drafts), p.dtype)


@fill_doc
def uniforms(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor]:
    """The uniforms :func:`step` consumes: ``[B]`` float64 uniforms for the draw from p (one ``rand`` call).

    {uniforms_doc}
    """
    return (torch.rand(drafts.shape[0], dtype=torch.float64, device=p.device, generator=generator),)


@fill_doc
def step(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, u: torch.Tensor) -> StepOutput:
    """The one-hot rule as a pure step of its uniforms: :math:`Y \\sim p` by inverse CDF, accepted iff
    it is a draft (the rounds' conditional law given the drafts, drawn with one uniform).

    {pure_step}

    {step_head}
    u : torch.Tensor
        ``[B]`` float64 uniforms, from :func:`uniforms`.

    {step_returns}
    """
    return step_output(sample_weights(p, u), drafts)


one_hot = TorchVerifier(
    "one_hot",
    "iid",
    True,
    conditional,
    reference="vLLM's one-hot treatment of argmax drafts; EAGLE top-k with q = 1",
    uniforms=uniforms,
    step=step,
    laws=("iid", "without_replacement", "greedy"),
)
