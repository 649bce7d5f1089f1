r"""NSS in torch (twin of ``otspec.verifiers.nss``): ignores the drafts and outputs :math:`Y \sim p`
(any draft law).
"""

from __future__ import annotations

import torch

from otspec_gpu.sampling import sample_weights
from otspec_gpu.verifiers._docs import fill_doc
from otspec_gpu.verifiers.base import StepOutput, TorchVerifier, check_step, deprecated_module_sample, step_output

__all__ = ["conditional", "nss", "step", "uniforms"]


@fill_doc
def conditional(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, *, validate: bool = True) -> torch.Tensor:
    """Output law ``[B, V]`` of NSS: p itself, whatever the drafts.

    {params_any}

    Returns
    -------
    torch.Tensor
        ``[B, V]``: ``p`` broadcast over the rows (the drafts are ignored).

    Raises
    ------
    {raises}

    Examples
    --------
    >>> import torch
    >>> p = torch.tensor([[0.5, 0.5]]); q = torch.tensor([[1.0, 0.0]])
    >>> conditional(p, q, torch.tensor([[0, 0]])).tolist()
    [[0.5, 0.5]]
    """
    p, q, drafts = check_step(p, q, drafts, validate=validate, name="nss")
    return p.expand(drafts.shape[0], -1).clone()


@fill_doc
def uniforms(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor]:
    """The uniforms :func:`sample` consumes, drawn from ``generator`` in its order: ``[B]`` float64 uniforms (one ``rand`` call, as :func:`~otspec_gpu.sampling.categorical`).

    {uniforms_doc}
    """
    return (torch.rand(drafts.shape[0], dtype=torch.float64, device=p.device, generator=generator),)


@fill_doc
def step(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, u: torch.Tensor) -> StepOutput:
    """NSS (one inverse-CDF draw from ``p`` per row) as a pure step of its uniforms.

    {pure_step}

    {step_head}
    u : torch.Tensor
        ``[B]`` float64 uniforms, from :func:`uniforms`.

    {step_returns}
    """
    return step_output(sample_weights(p, u), drafts)


nss = TorchVerifier(
    "nss",
    "iid",
    True,
    conditional,
    reference="Miao et al. (SpecInfer) naive sampling",
    uniforms=uniforms,
    step=step,
    laws=("iid", "without_replacement", "greedy"),
)

__getattr__ = deprecated_module_sample(nss)  # the 0.1.0 module-level sample, for one minor release
