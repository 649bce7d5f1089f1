r"""Recursive rejection sampling without replacement in torch (RSD; twin of ``otspec.verifiers.rrs_wor``).

Distinct drafts by successive sampling; the draft law is updated after each rejection:
:math:`q_1 = q`, :math:`p_j = \mathrm{norm}((p_{j-1}-q_j)_+)`,
:math:`q_{j+1} = \mathrm{norm}(q_j 1_{\ne X_j})`, accept :math:`X_j` w.p.
:math:`\min(1, p_{j-1}(X_j)/q_j(X_j))`.

Every residual :math:`p_j` is a float64 ``[B, V]`` row, normalised when its mass is positive and
otherwise kept equal to :math:`p_{j-1}` (the numpy core's rule).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from otspec.errors import InvalidDraftsError
from otspec_gpu.kernels import try_kernel, use_kernels
from otspec_gpu.verifiers._docs import fill_doc
from otspec_gpu.verifiers.base import StepOutput, TorchVerifier, check_step, deprecated_module_sample, step_output
from otspec_gpu.verifiers.recursive import sample_recursive
from otspec_gpu.verifiers.schedule import AcceptSchedule, accept_ratio, residual, round_uniforms, schedule_conditional

__all__ = ["SharedWor", "conditional", "rrs_wor", "schedule", "shared_wor", "step", "uniforms"]


@fill_doc
def schedule(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor) -> AcceptSchedule:
    r"""RSD accept schedule for distinct drafts (per-row residuals and draft laws).

    Parameters
    ----------
    {p_q}
    {drafts_distinct}

    Returns
    -------
    AcceptSchedule
        Round ``j`` accepts :math:`\min(1, p_{j-1}(x_j)/q_j(x_j))`, :math:`q_{j+1}` is :math:`q_j` without :math:`x_j`, renormalised; per-row residuals.
    """
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
    return AcceptSchedule(drafts, torch.cat(acc, dim=1), P)


class SharedWor(NamedTuple):
    """RSD on a shared law: accept probabilities ``[B, k]`` and the final residual of every row as
    :math:`a (p - C q)_+` (``scale`` a, ``thresh`` C, ``[B]``), with the shared tokens ``order``
    sorted by decreasing ratio p/q and the prefix sums ``sp``, ``sq`` in that order."""

    accept: torch.Tensor
    scale: torch.Tensor
    thresh: torch.Tensor
    order: torch.Tensor
    sp: torch.Tensor
    sq: torch.Tensor
    neg_ratio: torch.Tensor


def shared_wor(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor) -> SharedWor:
    r"""RSD for ``[1, V]`` laws shared by every row, in O(V log V + B k^2 log V).

    Every residual is :math:`p_j = a_j (p - C_j q)_+` with :math:`C_0 = 0, a_0 = 1`,
    :math:`C_j = C_{j-1} + d_j/a_{j-1}`, :math:`d_j = 1/(1 - \sum_{i<j} q(x_i))` (the renormalised
    draft law :math:`q_j = d_j q` off the earlier drafts), :math:`a_j = a_{j-1}/M_j`,
    :math:`M_j = a_{j-1}\sum_t (p - C_j q)_+(t)`. Drafted tokens drop out by themselves: round j is
    reached only when every earlier draft was rejected, i.e. :math:`p_{i-1}(x_i) < q_i(x_i)`, which
    makes :math:`(p - C_i q)(x_i) < 0`. The sums :math:`\sum_t (p - C q)_+` come from prefix sums
    over the tokens sorted by decreasing p/q (one sort, shared by all rows).

    Parameters
    ----------
    p, q : torch.Tensor
        ``[1, V]`` target and draft probability rows,
        float32 or float64.
    drafts : torch.Tensor
        ``[B, k]`` long distinct drafts (successive sampling without replacement).

    Returns
    -------
    SharedWor
        Accept probabilities ``[B, k]`` and the residual of every row in the closed form above.
    """
    B, k = drafts.shape
    p64, q64 = p[0].double(), q[0].double()
    ratio = torch.where(q64 > 0, p64 / torch.where(q64 > 0, q64, torch.ones_like(q64)), torch.where(p64 > 0, float("inf"), -1.0))
    srt = torch.sort(-ratio, stable=True)
    order, neg_ratio = srt.indices, srt.values  # ascending in -ratio
    sp = torch.cat([torch.zeros(1, dtype=torch.float64, device=p.device), torch.cumsum(p64[order], 0)])
    sq = torch.cat([torch.zeros(1, dtype=torch.float64, device=p.device), torch.cumsum(q64[order], 0)])
    C = torch.zeros(B, dtype=torch.float64, device=p.device)
    a = torch.ones_like(C)
    removed = torch.zeros_like(C)
    acc = []
    for j in range(k):  # loop over draft rounds only
        x = drafts[:, j]
        d = 1.0 / (1.0 - removed)
        px = a * torch.clamp(p64[x] - C * q64[x], min=0.0)
        acc.append(accept_ratio(px, d * q64[x])[:, None])
        C_new = C + d / a
        n = torch.searchsorted(neg_ratio, -C_new, right=False)  # tokens with ratio > C_new
        M = a * (sp[n] - C_new * sq[n])
        ok = M > 0
        C = torch.where(ok, C_new, C)
        a = torch.where(ok, a / torch.where(ok, M, torch.ones_like(M)), a)
        removed = removed + q64[x]
    return SharedWor(torch.cat(acc, dim=1), a, C, order, sp, sq, neg_ratio)


def _shared_residual_rows(sw: SharedWor, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    return sw.scale[:, None] * torch.clamp(p.double() - sw.thresh[:, None] * q.double(), min=0.0)


def _shared_residual_draw(sw: SharedWor, u: torch.Tensor) -> torch.Tensor:
    """One draw per row from :math:`(p - C q)_+`: inverse CDF over the ratio-sorted tokens, by a
    vectorised bisection on the (increasing) partial sums ``sp[i] - C sq[i]``, O(B log V)."""
    C = sw.thresh
    n = torch.searchsorted(sw.neg_ratio, -C, right=False)  # the positive part is the first n sorted tokens
    total = sw.sp[n] - C * sw.sq[n]
    u = u * total
    lo = torch.zeros_like(n)  # invariant: partial(lo) <= u < partial(hi)
    hi = n.clone()
    for _ in range(int(sw.order.numel()).bit_length() + 1):  # loop over bisection steps only
        mid = (lo + hi) // 2
        go = (sw.sp[mid] - C * sw.sq[mid]) <= u
        lo = torch.where(go & (mid > lo), mid, lo)
        hi = torch.where(go | (mid == lo), hi, mid)
    idx = torch.clamp(lo, max=torch.clamp(n - 1, min=0))
    return sw.order[idx]


def _check_distinct(drafts: torch.Tensor) -> None:
    s = torch.sort(drafts, dim=1).values
    if bool((s[:, 1:] == s[:, :-1]).any()):
        raise InvalidDraftsError("drafts must be distinct within each row for rrs_wor (got a repeated token); draft without replacement")


@fill_doc
def conditional(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, *, validate: bool = True) -> torch.Tensor:
    r"""Exact RSD output law ``[B, V]`` for distinct drafts.

    {params_distinct}

    {returns_law_raises_inputs}
    {raises_distinct}
    {raises_count}

    Examples
    --------
    >>> import torch
    >>> p = torch.tensor([[0.5, 0.5, 0.0]], dtype=torch.float64); q = torch.tensor([[0.5, 0.25, 0.25]], dtype=torch.float64)
    >>> conditional(p, q, torch.tensor([[0, 2]])).tolist()
    [[1.0, 0.0, 0.0]]
    """
    p, q, drafts = check_step(p, q, drafts, validate=validate, name="rrs_wor")
    if validate:
        _check_distinct(drafts)
    if p.shape[0] == 1 and drafts.shape[0] > 1:
        sw = shared_wor(p, q, drafts)
        return schedule_conditional(AcceptSchedule(drafts, sw.accept, _shared_residual_rows(sw, p, q)), p.dtype)
    return schedule_conditional(schedule(p, q, drafts), p.dtype)


@fill_doc
def uniforms(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """The uniforms :func:`sample` consumes, drawn from ``generator`` in its order: ``[B, k]`` float64 accept coins, then ``[B]`` residual uniforms.

    {uniforms_doc}
    """
    return round_uniforms(drafts.shape[0], drafts.shape[1], p.device, generator)


@fill_doc
def step(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, coins: torch.Tensor, u: torch.Tensor) -> StepOutput:
    """RSD (drafts without replacement) as a pure step of its uniforms.

    {pure_step}

    {step_doc}
    """
    if p.shape[0] == 1 and drafts.shape[0] > 1:  # shared law: O(B k log V) after one sort
        sw = shared_wor(p, q, drafts)
        res_tok = _shared_residual_draw(sw, u)
        hit = coins < sw.accept
        first = torch.argmax(hit.to(torch.uint8), dim=1)
        return step_output(torch.where(hit.any(dim=1), drafts.gather(1, first[:, None]).squeeze(1), res_tok), drafts)
    if use_kernels(p):  # one fused launch (otspec_gpu.kernels.chain.rrs_single_step)
        from otspec_gpu.kernels.chain import rrs_single_step

        out = try_kernel(rrs_single_step, p, q, drafts, coins, u, True)
        if out is not None:
            return step_output(out, drafts)
    return step_output(sample_recursive(p, q, drafts, coins, u, wor=True), drafts)


rrs_wor = TorchVerifier(
    "rrs_wor",
    "without_replacement",
    True,
    conditional,
    reference="RSD (Jeon et al. 2024)",
    uniforms=uniforms,
    step=step,
    check_drafts=lambda q, drafts: _check_distinct(drafts),
)

__getattr__ = deprecated_module_sample(rrs_wor)  # the 0.1.0 module-level sample, for one minor release
