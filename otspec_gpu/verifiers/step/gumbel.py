r"""The drafter-invariant Gumbel-max coupling in torch (twin of ``otspec.verifiers.gumbel``;
Daliri, Musco, Suresh 2024): one draft, lossless.

Drafter and verifier share exponentials :math:`E_j`; the draft is :math:`\arg\min_j E_j/q(j)`, the
output :math:`\arg\min_j E_j/p(j)`. Given a draft that was produced elsewhere (an ordinary draw
from q), the step draws the exponentials *conditionally on the draft* (the race minimum
:math:`m \sim \mathrm{Exp}(1)` is independent of its winner), so the joint law of (draft, output),
and with it the acceptance, is the coupling's:

.. math:: P(Y = x \mid X = x) = \frac{p(x)}{\sum_j \max\big(p(x) q(j),\, p(j) q(x)\big)} .

The step never builds the V exponentials: :mod:`otspec_gpu.verifiers.step._race` samples the first
arrival of the race from one sort of :math:`q/p` per row. What a decoder using this twin gives up
is the drafter *invariance* itself (the output depends on q through the conditioning); a drafter
that supplies its own shared noise would keep it, and produces the same joint law.
"""

from __future__ import annotations

import torch

from otspec_gpu.verifiers._docs import fill_doc
from otspec_gpu.verifiers.base import StepOutput, TorchVerifier, check_step, step_output
from otspec_gpu.verifiers.step._race import race_step, race_uniforms, single_conditional

__all__ = ["conditional", "gumbel", "step", "uniforms"]


@fill_doc
def conditional(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, *, validate: bool = True) -> torch.Tensor:
    r"""Exact output law ``[B, V]`` given one draft per row (closed form, :math:`O(V \log V)` per row).

    {params_one}

    {returns_law_raises}

    Examples
    --------
    >>> import torch
    >>> p = torch.tensor([[1.0, 0.0]], dtype=torch.float64); q = torch.tensor([[0.5, 0.5]], dtype=torch.float64)
    >>> conditional(p, q, torch.tensor([[0], [1]])).tolist()  # acceptance 1/2 + 0 = the coupling's 1/2
    [[1.0, 0.0], [1.0, 0.0]]
    """
    p, q, drafts = check_step(p, q, drafts, k_min=1, k_max=1, validate=validate, name="gumbel")
    return single_conditional(p, q, drafts[:, 0]).to(p.dtype)


@fill_doc
def uniforms(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, ...]:
    """The draws :func:`step` consumes, ``[B, 1]`` float64 each: the race minimum ``m`` and the wait
    ``w`` (exponential), then ``u`` (uniform); three calls.

    {uniforms_doc}
    """
    return race_uniforms(p, drafts, generator)


def step(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, m: torch.Tensor, w: torch.Tensor, u: torch.Tensor) -> StepOutput:
    """The Gumbel-max coupling as a pure step of its draws (no generator, no validation, no host
    sync on CUDA): :func:`uniforms` then this is the verifier's ``sample``.

    Parameters
    ----------
    p, q : torch.Tensor
        ``[B, V]`` (or ``[1, V]``) target and draft rows.
    drafts : torch.Tensor
        ``[B, 1]`` long drafts.
    m, w, u : torch.Tensor
        ``[B, 1]`` float64 draws from :func:`uniforms`.

    Returns
    -------
    StepOutput
        Output token, accepted flag and draft slot per row.
    """
    return step_output(race_step(p, q, drafts[:, :1], m, w, u), drafts)


gumbel = TorchVerifier(
    "gumbel",
    "iid",
    True,
    conditional,
    k_min=1,
    k_max=1,
    reference="Daliri, Musco, Suresh 2024 (arXiv 2408.07978)",
    uniforms=uniforms,
    step=step,
)
