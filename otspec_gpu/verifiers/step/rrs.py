r"""Recursive rejection sampling with replacement in torch (SpecInfer; twin of ``otspec.verifiers.rrs``).

I.i.d. drafts :math:`X_j \sim q`:

.. math:: p_0 = p;\ \text{return } X_j \text{ w.p. } \min\big(1, \tfrac{p_{j-1}(X_j)}{q(X_j)}\big),\
          p_j = \mathrm{norm}((p_{j-1}-q)_+);\ \text{else } Y \sim p_k.

Every residual :math:`p_j` is a float64 ``[B, V]`` row, normalised when its mass is positive and
otherwise kept equal to :math:`p_{j-1}` (the numpy core's rule).
"""

from __future__ import annotations

import torch

from otspec_gpu.kernels import try_kernel, use_kernels
from otspec_gpu.verifiers._docs import fill_doc
from otspec_gpu.verifiers.base import StepOutput, TorchVerifier, check_step, deprecated_module_sample, step_output
from otspec_gpu.verifiers.recursive import sample_recursive
from otspec_gpu.verifiers.schedule import AcceptSchedule, accept_ratio, gather, residual, round_uniforms, schedule_conditional

__all__ = ["conditional", "rrs", "schedule", "step", "uniforms"]


@fill_doc
def schedule(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor) -> AcceptSchedule:
    r"""RRS-with-replacement accept schedule (the residual chain does not depend on the drafts).

    Parameters
    ----------
    {p_q}
    {drafts_iid}

    Returns
    -------
    AcceptSchedule
        Round ``j`` accepts :math:`\min(1, p_{j-1}(x_j)/q(x_j))`; residual :math:`p_k` with :math:`p_j = \mathrm{norm}((p_{j-1} - q)_+)`.
    """
    pc = p.double()
    q64 = q.double()
    acc = []
    for j in range(drafts.shape[1]):  # loop over draft rounds only
        x = drafts[:, j : j + 1]
        acc.append(accept_ratio(gather(pc, x), gather(q64, x)))
        pc, _ = residual(pc, q64)
    return AcceptSchedule(drafts, torch.cat(acc, dim=1), pc)


@fill_doc
def conditional(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, *, validate: bool = True) -> torch.Tensor:
    r"""Exact RRS (with replacement) output law ``[B, V]``.

    {params_iid}

    {returns_law_raises}

    Examples
    --------
    >>> import torch
    >>> p = torch.tensor([[0.5, 0.5]], dtype=torch.float64); q = torch.tensor([[0.9, 0.1]], dtype=torch.float64)
    >>> [round(v, 6) for v in conditional(p, q, torch.tensor([[0, 0]]))[0].tolist()]
    [0.555556, 0.444444]
    """
    p, q, drafts = check_step(p, q, drafts, validate=validate, name="rrs")
    return schedule_conditional(schedule(p, q, drafts), p.dtype)


@fill_doc
def uniforms(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """The uniforms :func:`sample` consumes, drawn from ``generator`` in its order: ``[B, k]`` float64 accept coins, then ``[B]`` residual uniforms.

    {uniforms_doc}
    """
    return round_uniforms(drafts.shape[0], drafts.shape[1], p.device, generator)


@fill_doc
def step(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, coins: torch.Tensor, u: torch.Tensor) -> StepOutput:
    """RRS (with replacement) as a pure step of its uniforms.

    {pure_step}

    {step_doc}
    """
    if use_kernels(p):  # one fused launch (otspec_gpu.kernels.chain.rrs_single_step)
        from otspec_gpu.kernels.chain import rrs_single_step

        out = try_kernel(rrs_single_step, p, q, drafts, coins, u, False)
        if out is not None:
            return step_output(out, drafts)
    return step_output(sample_recursive(p, q, drafts, coins, u), drafts)


rrs = TorchVerifier("rrs", "iid", True, conditional, reference="SpecInfer (Miao et al. 2024)", uniforms=uniforms, step=step)

__getattr__ = deprecated_module_sample(rrs)  # the 0.1.0 module-level sample, for one minor release
