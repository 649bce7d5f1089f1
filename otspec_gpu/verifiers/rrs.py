r"""Recursive rejection sampling in torch: with replacement (SpecInfer; twin of
``otspec.verifiers.rrs``) and without replacement (RSD; twin of ``otspec.verifiers.rrs_wor``).

With replacement, i.i.d. drafts :math:`X_j \sim q`:

.. math:: p_0 = p;\ \text{return } X_j \text{ w.p. } \min\big(1, \tfrac{p_{j-1}(X_j)}{q(X_j)}\big),\
          p_j = \mathrm{norm}((p_{j-1}-q)_+);\ \text{else } Y \sim p_k.

Without replacement (successive sampling), the draft law is updated after each rejection:
:math:`q_1 = q`, :math:`p_j = \mathrm{norm}((p_{j-1}-q_j)_+)`,
:math:`q_{j+1} = \mathrm{norm}(q_j 1_{\ne X_j})`, accept :math:`X_j` w.p.
:math:`\min(1, p_{j-1}(X_j)/q_j(X_j))`.

Every residual :math:`p_j` is a float64 ``[B, V]`` row, normalised when its mass is positive and
otherwise kept equal to :math:`p_{j-1}` (the numpy core's rule).
"""

from __future__ import annotations

import torch

from otspec.errors import InvalidDraftsError
from otspec_gpu.verifiers._common import (
    Plan,
    StepOutput,
    TorchVerifier,
    accept_ratio,
    check_step,
    gather,
        plan_conditional,
    plan_sample,
    residual,
    step_output,
)

__all__ = ["rrs", "rrs_wor", "VERIFIERS", "plan", "plan_wor", "sample", "conditional", "sample_wor", "conditional_wor"]


def plan(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor) -> Plan:
    """RRS-with-replacement plan (the residual chain does not depend on the drafts)."""
    pc = p.double()
    q64 = q.double()
    acc = []
    for j in range(drafts.shape[1]):  # loop over draft rounds only
        x = drafts[:, j : j + 1]
        acc.append(accept_ratio(gather(pc, x), gather(q64, x)))
        pc, _ = residual(pc, q64)
    return Plan(drafts, torch.cat(acc, dim=1), pc)


def plan_wor(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor) -> Plan:
    """RSD plan for distinct drafts (per-row residuals and draft laws)."""
    B, k = drafts.shape
    P = p.double().expand(B, -1)
    Q = q.double().expand(B, -1)
    acc = []
    for j in range(k):
        x = drafts[:, j : j + 1]
        acc.append(accept_ratio(P.gather(1, x), Q.gather(1, x)))
        P, _ = residual(P, Q)
        if j + 1 < k:
            Q = Q.scatter(1, x, 0.0)
            tot = Q.sum(-1, keepdim=True)
            Q = Q / torch.where(tot > 0, tot, torch.ones_like(tot))
    return Plan(drafts, torch.cat(acc, dim=1), P)


def _check_distinct(drafts: torch.Tensor) -> None:
    s = torch.sort(drafts, dim=1).values
    if bool((s[:, 1:] == s[:, :-1]).any()):
        raise InvalidDraftsError("drafts must be distinct within each row for rrs_wor (got a repeated token); draft without replacement")


def conditional(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, *, validate: bool = True) -> torch.Tensor:
    r"""Exact RRS (with replacement) output law ``[B, V]``.

    Examples
    --------
    >>> import torch
    >>> p = torch.tensor([[0.5, 0.5]], dtype=torch.float64); q = torch.tensor([[0.9, 0.1]], dtype=torch.float64)
    >>> [round(v, 6) for v in conditional(p, q, torch.tensor([[0, 0]]))[0].tolist()]
    [0.555556, 0.444444]
    """
    p, q, drafts = check_step(p, q, drafts, validate=validate, name="rrs")
    return plan_conditional(plan(p, q, drafts), p.dtype)


def sample(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, *, generator: torch.Generator, validate: bool = True) -> StepOutput:
    """One RRS output token per row (coins and residual draws from separate ``rand`` calls)."""
    p, q, drafts = check_step(p, q, drafts, validate=validate, name="rrs")
    return step_output(plan_sample(plan(p, q, drafts), generator), drafts)


def conditional_wor(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, *, validate: bool = True) -> torch.Tensor:
    r"""Exact RSD output law ``[B, V]`` for distinct drafts.

    Examples
    --------
    >>> import torch
    >>> p = torch.tensor([[0.5, 0.5, 0.0]], dtype=torch.float64); q = torch.tensor([[0.5, 0.25, 0.25]], dtype=torch.float64)
    >>> conditional_wor(p, q, torch.tensor([[0, 2]])).tolist()
    [[1.0, 0.0, 0.0]]
    """
    p, q, drafts = check_step(p, q, drafts, validate=validate, name="rrs_wor")
    if validate:
        _check_distinct(drafts)
    return plan_conditional(plan_wor(p, q, drafts), p.dtype)


def sample_wor(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, *, generator: torch.Generator, validate: bool = True) -> StepOutput:
    """One RSD output token per row (coins and residual draws from separate ``rand`` calls)."""
    p, q, drafts = check_step(p, q, drafts, validate=validate, name="rrs_wor")
    if validate:
        _check_distinct(drafts)
    return step_output(plan_sample(plan_wor(p, q, drafts), generator), drafts)


rrs = TorchVerifier("rrs", "iid", True, sample, conditional, reference="SpecInfer (Miao et al. 2024)")
rrs_wor = TorchVerifier("rrs_wor", "without_replacement", True, sample_wor, conditional_wor, reference="RSD (Jeon et al. 2024)")
VERIFIERS = (rrs, rrs_wor)
