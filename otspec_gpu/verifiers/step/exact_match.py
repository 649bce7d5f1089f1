r"""Strict exact match in torch (twin of ``otspec.verifiers.exact_match``): draw :math:`Y \sim p` and
accept iff it is one of the drafts (any draft law). The output is always :math:`Y \sim p`
(lossless); acceptance :math:`\mathbb{E}_Q[p(\{X_1, \dots, X_k\})]`, :math:`\sum_y p(y) q(y)` for one
draft.
"""

from __future__ import annotations

import torch

from otspec_gpu.sampling import sample_weights
from otspec_gpu.verifiers._docs import fill_doc
from otspec_gpu.verifiers.base import StepOutput, TorchVerifier, check_step, step_output

__all__ = ["conditional", "exact_match", "step", "uniforms"]


@fill_doc
def conditional(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, *, validate: bool = True) -> torch.Tensor:
    """Output law ``[B, V]`` of exact match: p itself, whatever the drafts.

    {params_any}

    Returns
    -------
    torch.Tensor
        ``[B, V]``: ``p`` broadcast over the rows.

    Raises
    ------
    {raises}

    Examples
    --------
    >>> import torch
    >>> p = torch.tensor([[0.25, 0.75]]); q = torch.tensor([[1.0, 0.0]])
    >>> conditional(p, q, torch.tensor([[0]])).tolist()
    [[0.25, 0.75]]
    """
    p, q, drafts = check_step(p, q, drafts, validate=validate, name="exact_match")
    return p.expand(drafts.shape[0], -1).clone()


@fill_doc
def uniforms(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor]:
    """The uniforms :func:`step` consumes: ``[B]`` float64 uniforms for the draw from p (one ``rand`` call).

    {uniforms_doc}
    """
    return (torch.rand(drafts.shape[0], dtype=torch.float64, device=p.device, generator=generator),)


@fill_doc
def step(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, u: torch.Tensor) -> StepOutput:
    """Exact match as a pure step of its uniforms: one inverse-CDF draw from ``p`` per row, accepted
    iff it equals a draft.

    {pure_step}

    {step_head}
    u : torch.Tensor
        ``[B]`` float64 uniforms, from :func:`uniforms`.

    {step_returns}
    """
    return step_output(sample_weights(p, u), drafts)


exact_match = TorchVerifier(
    "exact_match",
    "iid",
    True,
    conditional,
    reference="engines' strict rule (vLLM, mlx-lm)",
    uniforms=uniforms,
    step=step,
    laws=("iid", "without_replacement", "greedy"),
)
