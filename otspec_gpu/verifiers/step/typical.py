r"""Typical acceptance in torch (twin of ``otspec.verifiers.typical``; Medusa, vLLM's defaults): lossy.

A draft :math:`x` passes when :math:`p(x) > \tau(p) = \min(\epsilon, \alpha e^{-H(p)})` (exact
entropy in nats; :math:`\epsilon` = ``posterior_threshold`` = 0.09, :math:`\alpha` =
``posterior_alpha`` = 0.3). The output is the passing draft of largest :math:`p` (the first slot among
ties); when none passes the rule rejects and emits :math:`Y \sim p` (``on_reject="sample"``, Medusa)
or :math:`\arg\max p` (``on_reject="argmax"``, vLLM's recovered token).
"""

from __future__ import annotations

import torch

from otspec_gpu.sampling import sample_weights
from otspec_gpu.verifiers._docs import fill_doc
from otspec_gpu.verifiers.base import StepOutput, TorchVerifier, check_step, step_output
from otspec_gpu.verifiers.schedule import gather

__all__ = ["POSTERIOR_ALPHA", "POSTERIOR_THRESHOLD", "conditional", "sample", "step", "threshold", "typical", "uniforms"]

#: vLLM's default ``posterior_threshold``.
POSTERIOR_THRESHOLD = 0.09
#: vLLM's default ``posterior_alpha``.
POSTERIOR_ALPHA = 0.3
_REJECT = ("sample", "argmax")


def threshold(p: torch.Tensor, posterior_threshold: float = POSTERIOR_THRESHOLD, posterior_alpha: float = POSTERIOR_ALPHA) -> torch.Tensor:
    r"""``[B, 1]`` float64 thresholds :math:`\min(\epsilon, \alpha e^{-H(p)})` (``0 log 0 = 0``).

    Parameters
    ----------
    p : torch.Tensor
        ``[B, V]`` (or ``[1, V]``) target rows.
    posterior_threshold, posterior_alpha : float
        :math:`\epsilon` and :math:`\alpha`.

    Returns
    -------
    torch.Tensor
        ``[B, 1]`` float64.

    Examples
    --------
    >>> import torch
    >>> threshold(torch.tensor([[0.5, 0.5]], dtype=torch.float64)).tolist()
    [[0.09]]
    """
    p64 = p.double()
    h = -torch.special.xlogy(p64, p64).sum(-1, keepdim=True)
    return torch.clamp(posterior_alpha * torch.exp(-h), max=posterior_threshold)


def _chosen(p, drafts, posterior_threshold, posterior_alpha):
    px = gather(p, drafts).double()  # [B, k]
    score = torch.where(px > threshold(p, posterior_threshold, posterior_alpha), px, -1.0)
    j = torch.argmax(score, dim=1, keepdim=True)  # the first maximum: slot order breaks ties
    return score.gather(1, j).squeeze(1) >= 0.0, drafts.gather(1, j).squeeze(1)


def _reject_law(p: torch.Tensor, on_reject: str) -> torch.Tensor:
    if on_reject == "sample":
        return p.double()
    return torch.zeros_like(p, dtype=torch.float64).scatter(1, torch.argmax(p, dim=1, keepdim=True), 1.0)


def _check_reject(on_reject: str) -> None:
    if on_reject not in _REJECT:
        from otspec.errors import InvalidOptionError

        raise InvalidOptionError(f"on_reject must be 'sample' or 'argmax' (got {on_reject!r}); pick one of those")


@fill_doc
def conditional(
    p: torch.Tensor,
    q: torch.Tensor,
    drafts: torch.Tensor,
    *,
    posterior_threshold: float = POSTERIOR_THRESHOLD,
    posterior_alpha: float = POSTERIOR_ALPHA,
    on_reject: str = "sample",
    validate: bool = True,
) -> torch.Tensor:
    r"""Exact output law ``[B, V]`` given the drafts: a point mass on the chosen passing draft, else
    the rejection law (p, or the point mass on argmax p).

    {params_any}
    posterior_threshold, posterior_alpha : float
        :math:`\epsilon` and :math:`\alpha` (vLLM's defaults).
    on_reject : {"sample", "argmax"}
        What a rejection emits.

    {returns_law_raises}

    Examples
    --------
    >>> import torch
    >>> p = torch.tensor([[0.6, 0.3, 0.1]], dtype=torch.float64); q = torch.full((1, 3), 1 / 3, dtype=torch.float64)
    >>> conditional(p, q, torch.tensor([[2]])).tolist()       # p(2) = 0.1 > tau = 0.09: kept
    [[0.0, 0.0, 1.0]]
    """
    _check_reject(on_reject)
    p, q, drafts = check_step(p, q, drafts, validate=validate, name="typical")
    passed, tok = _chosen(p, drafts, posterior_threshold, posterior_alpha)
    hit = torch.zeros((drafts.shape[0], p.shape[1]), dtype=torch.float64, device=p.device).scatter(1, tok[:, None], 1.0)
    rej = _reject_law(p, on_reject).expand(drafts.shape[0], -1)
    return torch.where(passed[:, None], hit, rej).to(p.dtype)


@fill_doc
def uniforms(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor]:
    """The uniforms :func:`step` consumes: ``[B]`` float64 uniforms for the draw from p on rejection
    (drawn for every row, used where the row rejects).

    {uniforms_doc}
    """
    return (torch.rand(drafts.shape[0], dtype=torch.float64, device=p.device, generator=generator),)


@fill_doc
def step(
    p: torch.Tensor,
    q: torch.Tensor,
    drafts: torch.Tensor,
    u: torch.Tensor,
    *,
    posterior_threshold: float = POSTERIOR_THRESHOLD,
    posterior_alpha: float = POSTERIOR_ALPHA,
    on_reject: str = "sample",
) -> StepOutput:
    r"""Typical acceptance as a pure step of its uniforms.

    {pure_step}

    {step_head}
    u : torch.Tensor
        ``[B]`` float64 uniforms, from :func:`uniforms`.
    posterior_threshold, posterior_alpha : float
        :math:`\epsilon` and :math:`\alpha`.
    on_reject : {"sample", "argmax"}
        What a rejection emits.

    {step_returns}
    """
    passed, tok = _chosen(p, drafts, posterior_threshold, posterior_alpha)
    if on_reject == "sample":
        rej = sample_weights(p, u)  # [B] also for a shared [1, V] p
    else:
        rej = torch.argmax(p, dim=1).expand(drafts.shape[0])
    return step_output(torch.where(passed, tok, rej), drafts)


@fill_doc
def sample(
    p: torch.Tensor,
    q: torch.Tensor,
    drafts: torch.Tensor,
    *,
    generator: torch.Generator,
    posterior_threshold: float = POSTERIOR_THRESHOLD,
    posterior_alpha: float = POSTERIOR_ALPHA,
    on_reject: str = "sample",
    validate: bool = True,
) -> StepOutput:
    r"""One output token per row: the checks, :func:`uniforms`, then :func:`step`.

    Parameters
    ----------
    {p_q}
    {drafts_any}
    {generator}
    posterior_threshold, posterior_alpha : float
        :math:`\epsilon` and :math:`\alpha` (vLLM's defaults).
    on_reject : {"sample", "argmax"}
        What a rejection emits.
    {validate}

    {returns_step_raises}
    """
    _check_reject(on_reject)
    p, q, drafts = check_step(p, q, drafts, validate=validate, name="typical")
    return step(
        p,
        q,
        drafts,
        *uniforms(p, q, drafts, generator),
        posterior_threshold=posterior_threshold,
        posterior_alpha=posterior_alpha,
        on_reject=on_reject,
    )


typical = TorchVerifier(
    "typical",
    "iid",
    False,
    conditional,
    reference="Medusa (Cai et al. 2024) §3.3.1; vLLM TypicalAcceptanceSampler",
    uniforms=uniforms,
    step=step,
    laws=("iid", "without_replacement", "greedy"),
    sample=sample,
)
