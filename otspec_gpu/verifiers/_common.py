r"""Shared machinery of the torch single-step verifiers: result types, input checks, residuals and
the *sequential plan* every rule is built from.

A sequential plan visits drafted tokens :math:`t_1..t_R` of each row in order, stops at round j with
probability :math:`a_j` (outputting :math:`t_j`) and otherwise draws from a residual law r:

.. math:: \pi(y \mid \bar x) = \sum_{j=1}^{R} \Big[\prod_{l<j}(1-a_l)\Big] a_j 1\{y = t_j\}
          + \Big[\prod_{l \le R}(1-a_l)\Big] r(y).

Numerics rule (documented in ``docs/gpu.rst``): accept probabilities, residual weights, their masses
and the inverse-CDF sums are computed in **float64** whatever the input dtype, so a residual of
mass 1e-7 built from float32 inputs keeps its full relative precision; a residual row of mass
exactly 0 (e.g. ``p == q``) is replaced by ``p`` itself, as in the numpy core (it is then reached
with probability 0 in exact arithmetic). ``conditional`` results are cast back to the input dtype.

Randomness: every sampler takes an explicit :class:`torch.Generator` and draws each family of
uniforms (accept coins, residual draws, any ordering/selection coin) with a *separate* call, so no
uniform is ever used twice.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch

from otspec.errors import (
    InvalidDistributionError,
    InvalidDraftCountError,
    InvalidDraftsError,
    ShapeMismatchError,
)

__all__ = [
    "SUM_TOL",
    "Plan",
    "StepOutput",
    "TorchVerifier",
    "accept_ratio",
    "categorical",
    "check_probs",
    "check_step",
    "gather",
    "greedy_top",
    "normalize_or",
    "plan_conditional",
    "plan_sample",
    "residual",
    "step_output",
]

#: Row sums of p and q must be within this distance of 1, by input dtype (float32: a sum over
#: 262 144 rounded entries drifts by up to ~1e-5, so 1e-4 leaves margin; float64 as the numpy core).
SUM_TOL = {torch.float32: 1e-4, torch.float64: 1e-9}


class StepOutput(NamedTuple):
    """Result of one batched single-step verification.

    ``token`` ``[B]`` long: the output token; ``accepted`` ``[B]`` bool: the output is one of the
    drafts; ``index`` ``[B]`` long: first draft slot equal to the output, ``-1`` if none.
    """

    token: torch.Tensor
    accepted: torch.Tensor
    index: torch.Tensor


@dataclass(frozen=True)
class TorchVerifier:
    """A batched torch verifier, twin of the numpy verifier of the same ``name``.

    ``sample(p, q, drafts, *, generator, **extra) -> StepOutput`` and
    ``conditional(p, q, drafts, **extra) -> Tensor[B, V]`` (exact output law per row, same dtype as
    ``p``). ``draft_law`` is the otspec law the drafts must come from (``"iid"``,
    ``"without_replacement"`` or ``"greedy"``, see :func:`otspec_gpu.drafting.sample_drafts`);
    ``k_min`` / ``k_max`` bound the number of drafts (``None``: no upper bound).
    """

    name: str
    draft_law: str
    lossless: bool
    sample: Callable[..., StepOutput] = field(repr=False)
    conditional: Callable[..., torch.Tensor] = field(repr=False)
    k_min: int = 1
    k_max: int | None = None
    reference: str = ""


class Plan(NamedTuple):
    """Sequential plan: ``tokens`` ``[B, R]`` long, ``accept`` ``[B, R]`` float64 in [0, 1],
    ``residual`` ``[B, V]`` float64 distribution rows."""

    tokens: torch.Tensor
    accept: torch.Tensor
    residual: torch.Tensor


def check_probs(x: Any, name: str, *, validate: bool = True) -> torch.Tensor:
    """``x`` as a ``[B, V]`` float32/float64 tensor of probability rows (values checked if ``validate``)."""
    if not isinstance(x, torch.Tensor):
        raise InvalidDistributionError(f"{name} must be a torch.Tensor (got {type(x).__name__}); convert it with torch.as_tensor")
    if x.dtype not in (torch.float32, torch.float64):
        raise InvalidDistributionError(f"{name} must be float32 or float64 (got {x.dtype}); cast it with .float() or .double()")
    if x.ndim != 2 or x.shape[1] < 1:
        raise ShapeMismatchError(f"{name} must have shape [B, V] (got {tuple(x.shape)}); add a batch dimension with {name}[None]")
    if validate and x.numel():
        if not bool(torch.isfinite(x).all()) or bool((x < 0).any()):
            raise InvalidDistributionError(
                f"{name} must be finite and non-negative; pass probabilities, not logits (see probs_from_logits)"
            )
        s = x.sum(-1, dtype=torch.float64)
        dev = float((s - 1.0).abs().max())
        if dev > SUM_TOL[x.dtype]:
            raise InvalidDistributionError(
                f"every row of {name} must sum to 1 (a row is off by {dev:.3g} > {SUM_TOL[x.dtype]:g} for {x.dtype}); normalise it first"
            )
    return x


def check_step(p: Any, q: Any, drafts: Any, *, k_min: int = 1, k_max: int | None = None, validate: bool = True, name: str = "") -> tuple:
    """Validate one single-step problem; returns ``(p, q, drafts)``.

    Shapes are always checked (no device sync). With ``validate`` (the default) the values are
    checked too: rows on the simplex, drafts in ``[0, V)`` and of positive draft probability
    ``q[drafts] > 0`` (a draft the drafter could not have produced raises
    :class:`~otspec._validation.InvalidDraftsError`, as the numpy ``sample`` does). Pass
    ``validate=False`` in a hot loop on CUDA to skip the synchronising checks; a draft with
    ``q = 0`` then gets accept probability 1 (the numpy convention).
    """
    p = check_probs(p, "p", validate=validate)
    q = check_probs(q, "q", validate=validate)
    if q.shape != p.shape or q.dtype != p.dtype or q.device != p.device:
        raise ShapeMismatchError(
            f"p and q must share shape, dtype and device (got {tuple(p.shape)} {p.dtype} {p.device} and {tuple(q.shape)} {q.dtype} {q.device}); "
            "process both with the same transform"
        )
    if not isinstance(drafts, torch.Tensor) or drafts.dtype != torch.long:
        raise InvalidDraftsError(
            f"drafts must be a torch.long tensor of shape [B, k] (got {getattr(drafts, 'dtype', type(drafts).__name__)}); build it with torch.as_tensor(..., dtype=torch.long)"
        )
    if drafts.ndim != 2 or (drafts.shape[0] != p.shape[0] and p.shape[0] != 1) or drafts.device != p.device:
        raise ShapeMismatchError(
            f"drafts must have shape [B, k] = [{p.shape[0]}, k] on {p.device} (got {tuple(drafts.shape)} on {drafts.device}); "
            "one row of drafts per row of p (or p, q of shape [1, V], shared by every row of drafts)"
        )
    k = drafts.shape[1]
    if k < k_min or (k_max is not None and k > k_max):
        rng = f"exactly {k_min}" if k_max == k_min else f"between {k_min} and {k_max if k_max is not None else 'any'}"
        raise InvalidDraftCountError(f"verifier {name!r} takes {rng} drafts per row (got k = {k}); draft that many tokens")
    if validate and drafts.numel():
        V = p.shape[1]
        if bool(((drafts < 0) | (drafts >= V)).any()):
            raise InvalidDraftsError(
                f"drafts must be token ids in [0, {V}) (got {int(drafts.min())}..{int(drafts.max())}); pass ids of the vocabulary"
            )
        qd = gather(q, drafts)
        if bool((qd <= 0).any()):
            b, j = (qd <= 0).nonzero()[0].tolist()
            raise InvalidDraftsError(
                f"draft {int(drafts[b, j])} in row {b} has draft probability q = 0, so the drafter never proposes it; pass drafts sampled from q (otspec_gpu.drafting.sample_drafts)"
            )
    return p, q, drafts


def gather(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """``x[b, idx[b, j]]`` for ``x`` ``[B, V]`` or ``[1, V]`` (broadcast over the rows of ``idx``)."""
    return x.expand(idx.shape[0], -1).gather(1, idx)


def accept_ratio(num: torch.Tensor, den: torch.Tensor) -> torch.Tensor:
    r""":math:`\min(1, \mathrm{num}/\mathrm{den})` in float64, 1 where ``den <= 0`` (never drafted)."""
    num = num.double()
    den = den.double()
    pos = den > 0
    return torch.where(pos, torch.clamp(num / torch.where(pos, den, torch.ones_like(den)), max=1.0), torch.ones_like(den))


def normalize_or(w: torch.Tensor, fallback: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows of ``w`` (float64, non-negative) normalised; rows of mass 0 replaced by ``fallback``.
    Returns ``(rows, mass)``."""
    mass = w.sum(-1)
    ok = mass > 0
    rows = torch.where(ok[:, None], w / torch.where(ok, mass, torch.ones_like(mass))[:, None], fallback.double())
    return rows, mass


def residual(p: torch.Tensor, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    r""":math:`(\mathrm{norm}((p-q)_+),\ \sum (p-q)_+)` row-wise in float64; rows of mass 0 keep ``p``."""
    p64 = p.double()
    return normalize_or(torch.clamp(p64 - q.double(), min=0.0), p64)


def categorical(w: torch.Tensor, generator: torch.Generator, n: int | None = None) -> torch.Tensor:
    """One draw per row of the non-negative weights ``w`` ``[B, V]`` (each row of positive mass),
    by inverse CDF in float64 with one uniform per row from ``generator``. With ``w`` of shape
    ``[1, V]`` and ``n`` given, ``n`` independent draws from that one row (O(V + n log V))."""
    B, V = w.shape
    n = B if n is None else int(n)
    cdf = torch.cumsum(w.double(), dim=-1)
    # never step past the last token of positive weight because of rounding
    last = V - 1 - torch.argmax(torch.flip(w > 0, dims=[1]).to(torch.uint8), dim=1)
    if B == 1 and n != 1:
        u = torch.rand(n, dtype=torch.float64, device=w.device, generator=generator) * cdf[0, -1]
        return torch.minimum(torch.searchsorted(cdf[0], u, right=True), last)
    u = torch.rand(B, dtype=torch.float64, device=w.device, generator=generator) * cdf[:, -1]
    idx = torch.searchsorted(cdf, u[:, None], right=True).squeeze(1)
    return torch.minimum(idx, last)


def plan_conditional(plan: Plan, dtype: torch.dtype) -> torch.Tensor:
    """Exact output law ``[B, V]`` of a :class:`Plan`, cast to ``dtype``."""
    tok, acc, res = plan
    surv = torch.ones(tok.shape[0], dtype=torch.float64, device=tok.device)
    pi = torch.zeros((tok.shape[0], res.shape[1]), dtype=torch.float64, device=res.device)
    for j in range(tok.shape[1]):  # loop over draft rounds only
        pi.scatter_add_(1, tok[:, j : j + 1], (surv * acc[:, j])[:, None])
        surv = surv * (1.0 - acc[:, j])
    pi += surv[:, None] * res
    return pi.to(dtype)


def step_output(token: torch.Tensor, drafts: torch.Tensor) -> StepOutput:
    """Wrap output tokens ``[B]`` with their draft-membership flags and first draft slot."""
    eq = drafts == token[:, None]
    hit = eq.any(dim=1)
    index = torch.where(hit, torch.argmax(eq.to(torch.uint8), dim=1), torch.full_like(token, -1))
    return StepOutput(token=token, accepted=hit, index=index)


def plan_sample(plan: Plan, generator: torch.Generator, *, accept: torch.Tensor | None = None) -> torch.Tensor:
    """Run a plan once per row: accept coins from one ``torch.rand`` call (accept iff ``U < a_j``),
    residual draws from a second, separate call. ``accept`` overrides ``plan.accept``."""
    tok, acc, res = plan
    acc = plan.accept if accept is None else accept
    B, R = tok.shape
    coins = torch.rand((B, R), dtype=torch.float64, device=tok.device, generator=generator)
    res_tok = categorical(res, generator, n=B)  # separate call: residual uniforms never reuse a coin
    if R == 0:
        return res_tok
    hit = coins < acc
    first = torch.argmax(hit.to(torch.uint8), dim=1)
    return torch.where(hit.any(dim=1), tok.gather(1, first[:, None]).squeeze(1), res_tok)


def greedy_top(q: torch.Tensor, m: int) -> torch.Tensor:
    """The top-``m`` tokens of each row of ``q`` ``[B, m]``, ordered by larger q first, then lower
    token id (the tie rule of ``otspec.greedy``)."""
    B = q.shape[0]
    if m == 0:
        return torch.zeros((B, 0), dtype=torch.long, device=q.device)
    vals = torch.topk(q, m, dim=1).values
    v = vals[:, -1:]
    gt = q > v
    eq = q == v
    need = m - gt.sum(dim=1, keepdim=True)
    chosen = gt | (eq & (torch.cumsum(eq.to(torch.long), dim=1) <= need))
    idx = torch.nonzero(chosen)[:, 1].view(B, m)  # row-major: ascending token id within a row
    order = torch.sort(q.gather(1, idx), dim=1, descending=True, stable=True).indices
    return idx.gather(1, order)
