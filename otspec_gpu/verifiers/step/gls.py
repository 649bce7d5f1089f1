r"""GLS, Gumbel-max list sampling, in torch (twin of ``otspec.verifiers.gls``; Rowan, Phan, Khisti
2025): K >= 2 i.i.d. drafts, lossless.

Each of the K drafting copies owns exponentials :math:`E_{k,j}` and drafted
:math:`x_k = \arg\min_j E_{k,j}/q(j)`; the output is the token of
:math:`\arg\min_{k,j} E_{k,j}/p(j)`. As in :mod:`otspec_gpu.verifiers.step.gumbel`, the step takes
drafts drawn elsewhere (i.i.d. from q) and draws each copy's exponentials conditionally on its
draft, which gives the coupling's joint law of (drafts, output); it samples the race's first
arrival from one sort of :math:`q/p` per row and one search per copy
(:mod:`otspec_gpu.verifiers.step._race`), never the :math:`K \times V` exponentials.

``conditional`` is the numpy core's exact race law
(:func:`otspec.verifiers.step.gumbel_coupling.race_joint`, a finite sum of exponential integrals),
evaluated on the host once per distinct (p, q) row: exact, and affordable at small V and K only
(:data:`~otspec.verifiers.step.gumbel_coupling.RACE_KERNEL_MAX_WORK`); the sampler has no such limit.
"""

from __future__ import annotations

import numpy as np
import torch

from otspec_gpu.verifiers._docs import fill_doc
from otspec_gpu.verifiers.base import StepOutput, TorchVerifier, check_step, step_output
from otspec_gpu.verifiers.step._race import race_step, race_uniforms

__all__ = ["conditional", "gls", "step", "uniforms"]


@fill_doc
def conditional(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, *, validate: bool = True) -> torch.Tensor:
    r"""Exact output law ``[B, V]`` given K i.i.d. drafts per row (the core's race law, on the host).

    {params_iid}

    Returns
    -------
    torch.Tensor
        ``[B, V]``: the exact output law of each row, in ``p``'s dtype.

    Raises
    ------
    InvalidDistributionError, ShapeMismatchError
        If ``p`` or ``q`` is malformed, or ``p``, ``q`` and ``drafts`` disagree in shape, dtype or device.
    InvalidDraftsError
        If ``drafts`` is not a long tensor, or (``validate``) holds an id outside ``[0, V)`` or a draft
        with ``q = 0``.
    InvalidDraftCountError
        If a row has fewer than 2 drafts.
    ProblemTooLargeError
        If the exact race law is beyond the core's work limit (large V or K).

    Examples
    --------
    >>> import torch
    >>> p = torch.tensor([[0.5, 0.5]], dtype=torch.float64)
    >>> conditional(p, p, torch.tensor([[0, 0], [0, 1]])).tolist()  # p == q: a drafted token always wins
    [[1.0, 0.0], [0.5, 0.5]]
    """
    from otspec.verifiers.step.gumbel_coupling import conditional_rows, race_joint

    p, q, drafts = check_step(p, q, drafts, k_min=2, validate=validate, name="gls")
    B, K = drafts.shape
    P = p.detach().double().cpu().numpy()
    Q = q.detach().double().cpu().numpy()
    X = drafts.detach().cpu().numpy()
    out = np.zeros((B, P.shape[1]))
    rows = np.zeros(B, dtype=np.int64) if P.shape[0] == 1 else np.arange(B)
    groups: dict[bytes, list[int]] = {}
    for b in range(B):  # one race law per distinct (p, q) row
        groups.setdefault(P[rows[b]].tobytes() + Q[rows[b]].tobytes(), []).append(b)
    for members in groups.values():
        r = rows[members[0]]
        qs = [Q[r]] * K
        out[members] = conditional_rows(race_joint(P[r], qs, X[members]), P[r], qs, X[members])
    return torch.as_tensor(out, dtype=p.dtype, device=p.device)


@fill_doc
def uniforms(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, ...]:
    """The draws :func:`step` consumes, ``[B, K]`` float64 each: the copies' race minima ``m`` and
    waits ``w`` (exponential), then ``u`` (uniform); three calls.

    {uniforms_doc}
    """
    return race_uniforms(p, drafts, generator)


def step(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, m: torch.Tensor, w: torch.Tensor, u: torch.Tensor) -> StepOutput:
    """GLS as a pure step of its draws (no generator, no validation, no host sync on CUDA):
    :func:`uniforms` then this is the verifier's ``sample``.

    Parameters
    ----------
    p, q : torch.Tensor
        ``[B, V]`` (or ``[1, V]``) target and draft rows.
    drafts : torch.Tensor
        ``[B, K]`` long i.i.d. drafts, one per copy.
    m, w, u : torch.Tensor
        ``[B, K]`` float64 draws from :func:`uniforms`.

    Returns
    -------
    StepOutput
        Output token, accepted flag and first matching draft slot per row.
    """
    return step_output(race_step(p, q, drafts, m, w, u), drafts)


gls = TorchVerifier(
    "gls",
    "iid",
    True,
    conditional,
    k_min=2,
    reference="Rowan, Phan, Khisti 2025 (arXiv 2506.05632)",
    uniforms=uniforms,
    step=step,
)
