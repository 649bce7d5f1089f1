r"""Verifiers for greedy drafts in torch: Hu et al.'s optimal rule (twin of
``otspec.verifiers.greedy_optimal``) and SpecHub's hub rule (twin of ``otspec.verifiers.spechub``).

Greedy drafts (``otspec.greedy(q, k)``): the top-(k-1) tokens G of q, then
:math:`X \sim \tilde q = q 1_{G^c} / q(G^c)`.

*greedy_optimal*: accept X w.p. :math:`\min(1, p(X)/\tilde q(X))`, else draw from
:math:`p_{rem} \propto p` on G and :math:`(p-\tilde q)_+` off G. Acceptance
:math:`P(G) + \sum_{x \notin G}\min(p, \tilde q)`, the optimum for this law.

*spechub* (k = 2, drafts ``(a, i)``, a the top token): the drafter's latent order is redrawn from
its exact conditional law (``(i, a)`` w.p. :math:`1-q(a)`, a separate ``rand`` call); from
``(i, a)`` accept i w.p. :math:`\min(1, p_i/q_i)`, from ``(a, i)`` w.p.
:math:`\min(1, (p_i-q_i)_+/(q(a)\tilde q_i))`; then a w.p. :math:`\min(1, p_a/L)`,
:math:`L = 1-\sum\min(p, \tilde q)`; else the residual :math:`(p-\tilde q)_+` off a. Its
conditional law equals greedy_optimal's (the numpy core tests the same identity).

:func:`otspec_gpu.drafting.greedy_top` is the top-(k-1) set G in the tie order of ``otspec.greedy``
(larger q first, then lower token id); :func:`otspec_gpu.drafting.sample_drafts` drafts the greedy
law with it.
"""

from __future__ import annotations

import torch

from otspec.errors import InvalidDraftsError
from otspec_gpu import drafting  # module import: drafting imports this package back
from otspec_gpu.verifiers.base import StepOutput, TorchVerifier, check_step, step_output
from otspec_gpu.verifiers.plan import Plan, accept_ratio, fallback_rows, gather, plan_conditional, sample_rounds, scratch, to_float64

__all__ = [
    "VERIFIERS",
    "conditional",
    "conditional_hub",
    "greedy_optimal",
    "hub_plans",
    "plan",
    "sample",
    "sample_hub",
    "spechub",
]


def _q_rest(q: torch.Tensor, top: torch.Tensor) -> torch.Tensor:
    """:math:`\\tilde q`: q with the greedy top set removed, renormalised (float64)."""
    rest = q.double().scatter(1, top, 0.0)
    tot = rest.sum(-1, keepdim=True)
    return rest / torch.where(tot > 0, tot, torch.ones_like(tot))


def _check_greedy(q: torch.Tensor, drafts: torch.Tensor) -> None:
    k = drafts.shape[1]
    top = drafting.greedy_top(q, k - 1)
    if not bool((drafts[:, :-1] == top).all()):
        raise InvalidDraftsError(
            f"greedy drafts must start with the top-{k - 1} tokens of q (larger q first, ties to the lower id); draw them with sample_drafts(q, k, 'greedy')"
        )


def plan(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor) -> Plan:
    r"""greedy_optimal's plan: one round on the random draft X = ``drafts[:, -1]``.

    Parameters
    ----------
    p, q : torch.Tensor
        ``[B, V]`` (or ``[1, V]``, shared by every row of drafts) target and draft probability rows,
        float32 or float64.
    drafts : torch.Tensor
        ``[B, k]`` long greedy drafts: the top-(k-1) tokens of q, then the random draft.

    Returns
    -------
    Plan
        One round on the random draft against :math:`\tilde q`; residual :math:`p` on G and :math:`(p - \tilde q)_+` off G, normalised.
    """
    top = drafts[:1, :-1] if p.shape[0] == 1 else drafts[:, :-1]  # shared p, q: one (shared) top set
    qt = _q_rest(q, top)
    p64 = p.double()
    prem = torch.clamp(p64 - qt, min=0.0)
    prem = prem.scatter_(1, top, p64.gather(1, top))
    res = fallback_rows(prem, prem.sum(-1), p64)
    x = drafts[:, -1:]
    return Plan(x, accept_ratio(gather(p64, x), gather(qt, x)), res)


def conditional(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, *, validate: bool = True) -> torch.Tensor:
    r"""Exact output law ``[B, V]`` of the greedy-optimal rule.

    Parameters
    ----------
    p, q : torch.Tensor
        ``[B, V]`` (or ``[1, V]``, shared by every row of drafts) target and draft probability rows,
        float32 or float64.
    drafts : torch.Tensor
        ``[B, k]`` long greedy drafts: the top-(k-1) tokens of q, then the random draft.
    validate : bool
        Also check the values of ``p``, ``q`` and ``drafts`` (synchronises on CUDA); shapes are
        always checked.

    Returns
    -------
    torch.Tensor
        ``[B, V]``: the exact output law :math:`\pi(\cdot \mid \bar x)` of each row, in ``p``'s dtype.

    Raises
    ------
    InvalidDistributionError, ShapeMismatchError
        If ``p`` or ``q`` is malformed, or ``p``, ``q`` and ``drafts`` disagree in shape, dtype or device.
    InvalidDraftsError
        If ``drafts`` is not a long tensor, or (``validate``) holds an id outside ``[0, V)`` or a draft
        with ``q = 0``, or the fixed drafts are not q's top tokens.
    InvalidDraftCountError
        If the number of drafts is not one the rule takes.

    Examples
    --------
    >>> import torch
    >>> p = torch.tensor([[0.2, 0.5, 0.3]], dtype=torch.float64); q = torch.tensor([[0.5, 0.3, 0.2]], dtype=torch.float64)
    >>> [round(v, 12) for v in conditional(p, q, torch.tensor([[0, 2]]))[0].tolist()]  # keep 2 w.p. 0.3 / 0.4
    [0.25, 0.0, 0.75]
    """
    p, q, drafts = check_step(p, q, drafts, validate=validate, name="greedy_optimal")
    if validate:
        _check_greedy(q, drafts)
    return plan_conditional(plan(p, q, drafts), p.dtype)


def sample(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, *, generator: torch.Generator, validate: bool = True) -> StepOutput:
    """One output token per row (coins and residual draws from separate ``rand`` calls).

    Parameters
    ----------
    p, q : torch.Tensor
        ``[B, V]`` (or ``[1, V]``, shared by every row of drafts) target and draft probability rows,
        float32 or float64.
    drafts : torch.Tensor
        ``[B, k]`` long greedy drafts: the top-(k-1) tokens of q, then the random draft.
    generator : torch.Generator
        The only source of randomness (separate ``rand`` calls per family of uniforms).
    validate : bool
        Also check the values of ``p``, ``q`` and ``drafts`` (synchronises on CUDA); shapes are
        always checked.

    Returns
    -------
    StepOutput
        ``token`` ``[B]``, ``accepted`` ``[B]`` (the output is one of the drafts) and ``index`` (its
        first draft slot, ``-1`` if none).

    Raises
    ------
    InvalidDistributionError, ShapeMismatchError
        If ``p`` or ``q`` is malformed, or ``p``, ``q`` and ``drafts`` disagree in shape, dtype or device.
    InvalidDraftsError
        If ``drafts`` is not a long tensor, or (``validate``) holds an id outside ``[0, V)`` or a draft
        with ``q = 0``, or the fixed drafts are not q's top tokens.
    InvalidDraftCountError
        If the number of drafts is not one the rule takes.
    """
    p, q, drafts = check_step(p, q, drafts, validate=validate, name="greedy_optimal")
    if validate:
        _check_greedy(q, drafts)
    return step_output(_sample(p, q, drafts, generator), drafts)


def _sample(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """:func:`plan` then :func:`~otspec_gpu.verifiers.plan.plan_sample`, with the same arithmetic,
    in scratch buffers and with the residual built only when a row rejects."""
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

    return sample_rounds(x, acc, residual, generator)


def hub_plans(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor) -> tuple[Plan, torch.Tensor, torch.Tensor]:
    """SpecHub's two plans: ``(plan with the (i, a) accept row, accept row of (a, i), q(a))``.

    Parameters
    ----------
    p, q : torch.Tensor
        ``[B, V]`` (or ``[1, V]``, shared by every row of drafts) target and draft probability rows,
        float32 or float64.
    drafts : torch.Tensor
        ``[B, 2]`` long: the top token of q, then the draft from the rest (greedy, k = 2).

    Returns
    -------
    plan : Plan
        The plan for the drafting order (i, a) (random draft first).
    accept_ai : torch.Tensor
        ``[B, 2]`` accept row for the order (a, i).
    q_a : torch.Tensor
        ``[B]`` :math:`q(a)`, the probability of the order (a, i).
    """
    a = drafts[:, :1]
    i = drafts[:, 1:2]
    a_rows = a[:1] if p.shape[0] == 1 else a  # shared p, q: one (shared) top token
    p64, q64 = p.double(), q.double()
    qa = gather(q64, a)
    qt = _q_rest(q64, a_rows)
    pi_, qi_ = gather(p64, i), gather(q64, i)
    a1 = accept_ratio(pi_, qi_)
    a2 = accept_ratio(torch.clamp(pi_ - qi_, min=0.0), qa * gather(qt, i))
    L = 1.0 - torch.minimum(p64, qt).sum(-1, keepdim=True)  # qt vanishes at a
    pa = gather(p64, a)
    c = torch.where(L > 0, torch.clamp(pa / torch.where(L > 0, L, torch.ones_like(L)), max=1.0), torch.zeros_like(pa))
    left = torch.clamp(p64 - qt, min=0.0).scatter(1, a_rows, 0.0)
    res = fallback_rows(left, left.sum(-1), p64)
    toks = torch.cat([i, a], dim=1)
    return Plan(toks, torch.cat([a1, c], dim=1), res), torch.cat([a2, c], dim=1), qa.squeeze(1)


def conditional_hub(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, *, validate: bool = True) -> torch.Tensor:
    r"""Exact SpecHub output law ``[B, V]``, averaged over the latent drafting order.

    Parameters
    ----------
    p, q : torch.Tensor
        ``[B, V]`` (or ``[1, V]``, shared by every row of drafts) target and draft probability rows,
        float32 or float64.
    drafts : torch.Tensor
        ``[B, 2]`` long: the top token of q, then the draft from the rest (greedy, k = 2).
    validate : bool
        Also check the values of ``p``, ``q`` and ``drafts`` (synchronises on CUDA); shapes are
        always checked.

    Returns
    -------
    torch.Tensor
        ``[B, V]``: the exact output law :math:`\pi(\cdot \mid \bar x)` of each row, in ``p``'s dtype.

    Raises
    ------
    InvalidDistributionError, ShapeMismatchError
        If ``p`` or ``q`` is malformed, or ``p``, ``q`` and ``drafts`` disagree in shape, dtype or device.
    InvalidDraftsError
        If ``drafts`` is not a long tensor, or (``validate``) holds an id outside ``[0, V)`` or a draft
        with ``q = 0``, or the first draft is not q's top token.
    InvalidDraftCountError
        If the number of drafts is not one the rule takes.

    Examples
    --------
    >>> import torch
    >>> p = torch.tensor([[0.2, 0.5, 0.3]], dtype=torch.float64); q = torch.tensor([[0.5, 0.3, 0.2]], dtype=torch.float64)
    >>> [round(v, 12) for v in conditional_hub(p, q, torch.tensor([[0, 2]]))[0].tolist()]  # = greedy_optimal's row
    [0.25, 0.0, 0.75]
    """
    p, q, drafts = check_step(p, q, drafts, k_min=2, k_max=2, validate=validate, name="spechub")
    if validate:
        _check_greedy(q, drafts)
    pl, acc_ai, qa = hub_plans(p, q, drafts)
    pi_ia = plan_conditional(pl, torch.float64)
    pi_ai = plan_conditional(Plan(pl.tokens, acc_ai, pl.residual), torch.float64)
    return ((1.0 - qa)[:, None] * pi_ia + qa[:, None] * pi_ai).to(p.dtype)


def sample_hub(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, *, generator: torch.Generator, validate: bool = True) -> StepOutput:
    """One SpecHub output token per row: order coin, accept coins and residual draw, each from its own ``rand`` call.

    Parameters
    ----------
    p, q : torch.Tensor
        ``[B, V]`` (or ``[1, V]``, shared by every row of drafts) target and draft probability rows,
        float32 or float64.
    drafts : torch.Tensor
        ``[B, 2]`` long: the top token of q, then the draft from the rest (greedy, k = 2).
    generator : torch.Generator
        The only source of randomness (separate ``rand`` calls per family of uniforms).
    validate : bool
        Also check the values of ``p``, ``q`` and ``drafts`` (synchronises on CUDA); shapes are
        always checked.

    Returns
    -------
    StepOutput
        ``token`` ``[B]``, ``accepted`` ``[B]`` (the output is one of the drafts) and ``index`` (its
        first draft slot, ``-1`` if none).

    Raises
    ------
    InvalidDistributionError, ShapeMismatchError
        If ``p`` or ``q`` is malformed, or ``p``, ``q`` and ``drafts`` disagree in shape, dtype or device.
    InvalidDraftsError
        If ``drafts`` is not a long tensor, or (``validate``) holds an id outside ``[0, V)`` or a draft
        with ``q = 0``, or the first draft is not q's top token.
    InvalidDraftCountError
        If the number of drafts is not one the rule takes.
    """
    p, q, drafts = check_step(p, q, drafts, k_min=2, k_max=2, validate=validate, name="spechub")
    if validate:
        _check_greedy(q, drafts)
    return step_output(_sample_hub(p, q, drafts, generator), drafts)


def _sample_hub(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """:func:`hub_plans` then the order coin and :func:`~otspec_gpu.verifiers.plan.plan_sample`, with
    the same arithmetic and uniforms, in scratch buffers and with the residual built only when a
    row rejects."""
    a = drafts[:, :1]
    i = drafts[:, 1:2]
    a_rows = a[:1] if p.shape[0] == 1 else a
    qa = gather(q, a).double()
    qt = to_float64(q, "hub_rest").scatter_(1, a_rows, 0.0)
    tot = qt.sum(-1, keepdim=True)
    qt.div_(torch.where(tot > 0, tot, torch.ones_like(tot)))
    pi_, qi_ = gather(p, i).double(), gather(q, i).double()
    a1 = accept_ratio(pi_, qi_)
    a2 = accept_ratio(torch.clamp(pi_ - qi_, min=0.0), qa * gather(qt, i))
    L = 1.0 - torch.minimum(qt, p, out=scratch("hub_min", tuple(qt.shape), qt.device)).sum(-1, keepdim=True)
    pa = gather(p, a).double()
    c = torch.where(L > 0, torch.clamp(pa / torch.where(L > 0, L, torch.ones_like(L)), max=1.0), torch.zeros_like(pa))

    def residual() -> torch.Tensor:
        w = qt.neg_().add_(p).clamp_(min=0.0).scatter_(1, a_rows, 0.0)  # (p - q~)_+ off a
        return fallback_rows(w, w.sum(-1), p)

    qa = qa.squeeze(1)
    order_ai = torch.rand(qa.shape, dtype=torch.float64, device=qa.device, generator=generator) < qa
    acc = torch.where(order_ai[:, None], torch.cat([a2, c], dim=1), torch.cat([a1, c], dim=1))
    return sample_rounds(torch.cat([i, a], dim=1), acc, residual, generator)


greedy_optimal = TorchVerifier("greedy_optimal", "greedy", True, sample, conditional, k_min=1, reference="Hu et al., ICLR 2025")
spechub = TorchVerifier(
    "spechub", "greedy", True, sample_hub, conditional_hub, k_min=2, k_max=2, reference="SpecHub (Sun et al., EMNLP 2024)"
)
VERIFIERS = (greedy_optimal, spechub)
