r"""The *sequential plan* every torch single-step rule (and every tree node) is built from, with
its exact law, its sampler and the residual / categorical helpers (twin of
:mod:`otspec.verifiers.schedule`).

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

import math
import threading
from collections.abc import Callable
from typing import NamedTuple

import torch

__all__ = [
    "Plan",
    "accept_ratio",
    "categorical",
    "gather",
    "normalize_or",
    "plan_conditional",
    "plan_sample",
    "residual",
    "residual_weights",
    "fallback_rows",
    "residual_scratch",
    "sample_rounds",
    "scratch",
    "to_float64",
    "SCRATCH_MAX",
]


class Plan(NamedTuple):
    """Sequential plan: ``tokens`` ``[B, R]`` long, ``accept`` ``[B, R]`` float64 in [0, 1],
    ``residual`` ``[B, V]`` float64 non-negative weights, every row of positive mass (the residual
    law r is the row divided by its sum; :func:`plan_conditional` normalises, the samplers draw from
    the weights directly)."""

    tokens: torch.Tensor
    accept: torch.Tensor
    residual: torch.Tensor


#: Largest temporary (in elements) :func:`scratch` keeps for reuse: 2**19 values (4 MB of float64),
#: e.g. one ``[1, 262 144]`` or ``[8, 49 152]`` row block; larger ones are fresh allocations (their
#: page faults are then small beside the arithmetic). About 15 named buffers exist, so a thread keeps
#: at most ~60 MB.
SCRATCH_MAX = 1 << 19

_SCRATCH = threading.local()


def scratch(name: str, shape: tuple[int, ...], device: torch.device, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """An uninitialised CPU work buffer of ``shape``, reused across calls (one per ``name``, dtype and
    thread); a fresh ``torch.empty`` on other devices or above :data:`SCRATCH_MAX` elements.

    Why: with glibc's allocator a fresh ``[1, 262 144]`` float64 temporary is usually returned to
    the system when freed and page-faults back in on the next step (512 faults, about 1.5 ms on the
    project machine, ten times the arithmetic). The single-step samplers keep their ``[B, V]``
    intermediates here; a buffer never leaves the function that took it (nothing returned to a
    caller aliases one), and two live buffers of one function have distinct names.

    Parameters
    ----------
    name : str
        The buffer's name (one live use per name at a time).
    shape : tuple of int
        Shape of the view returned.
    device : torch.device
        Device of the computation (buffers are kept for CPU only).
    dtype : torch.dtype
        Element type (default float64).

    Returns
    -------
    torch.Tensor
        A contiguous tensor of ``shape``, contents undefined.
    """
    n = math.prod(shape)
    if torch.device(device).type != "cpu" or n > SCRATCH_MAX:
        return torch.empty(shape, dtype=dtype, device=device)
    bufs = _SCRATCH.__dict__.setdefault("bufs", {})
    buf = bufs.get((name, dtype))
    if buf is None or buf.numel() < n:
        buf = bufs[(name, dtype)] = torch.empty(max(n, 1), dtype=dtype)
    return buf[:n].view(shape)


def to_float64(x: torch.Tensor, name: str) -> torch.Tensor:
    """``x`` copied into the float64 :func:`scratch` buffer ``name`` (never ``x`` itself).

    Parameters
    ----------
    x : torch.Tensor
        The tensor to copy (any real dtype).
    name : str
        Scratch buffer name.

    Returns
    -------
    torch.Tensor
        A float64 work copy of ``x``, safe to modify in place.
    """
    return scratch(name, tuple(x.shape), x.device).copy_(x)


def residual_scratch(p: torch.Tensor, q: torch.Tensor, name: str = "residual") -> torch.Tensor:
    """:func:`residual_weights` into the scratch buffer ``name`` (for a sampler's internal use).

    Parameters
    ----------
    p, q : torch.Tensor
        ``[B, V]`` target and draft rows (never modified).
    name : str
        Scratch buffer name.

    Returns
    -------
    torch.Tensor
        ``[B, V]`` float64 weights :math:`(p - q)_+`, rows of mass 0 replaced by ``p``.
    """
    w = to_float64(p, name)
    w.sub_(q).clamp_(min=0.0)
    return fallback_rows(w, w.sum(-1), p)


def gather(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """``x[b, idx[b, j]]`` for ``x`` ``[B, V]`` or ``[1, V]`` (broadcast over the rows of ``idx``).

    Parameters
    ----------
    x : torch.Tensor
        ``[B, V]`` or ``[1, V]`` rows.
    idx : torch.Tensor
        ``[B, j]`` long indices into the vocabulary.

    Returns
    -------
    torch.Tensor
        ``[B, j]``: the gathered entries, in ``x``'s dtype.
    """
    return x.expand(idx.shape[0], -1).gather(1, idx)


def accept_ratio(num: torch.Tensor, den: torch.Tensor) -> torch.Tensor:
    r""":math:`\min(1, \mathrm{num}/\mathrm{den})` in float64, 1 where ``den <= 0`` (never drafted).

    Parameters
    ----------
    num, den : torch.Tensor
        Numerators (e.g. :math:`p(x)`) and denominators (e.g. :math:`q(x)`), same shape.

    Returns
    -------
    torch.Tensor
        float64 acceptance probabilities in ``[0, 1]``.
    """
    num = num.double()
    den = den.double()
    pos = den > 0
    return torch.where(pos, torch.clamp(num / torch.where(pos, den, torch.ones_like(den)), max=1.0), torch.ones_like(den))


def normalize_or(w: torch.Tensor, fallback: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows of ``w`` (float64, non-negative) normalised; rows of mass 0 replaced by ``fallback``.
    Returns ``(rows, mass)``.

    Parameters
    ----------
    w : torch.Tensor
        ``[B, V]`` non-negative weights.
    fallback : torch.Tensor
        ``[B, V]`` (or ``[1, V]``) rows used where a row of ``w`` has mass 0.

    Returns
    -------
    rows : torch.Tensor
        ``[B, V]`` float64 distribution rows.
    mass : torch.Tensor
        ``[B]`` row masses of ``w`` (before normalisation).
    """
    mass = w.sum(-1)
    ok = mass > 0
    rows = torch.where(ok[:, None], w / torch.where(ok, mass, torch.ones_like(mass))[:, None], fallback.double())
    return rows, mass


def residual(p: torch.Tensor, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    r""":math:`(\mathrm{norm}((p-q)_+),\ \sum (p-q)_+)` row-wise in float64; rows of mass 0 keep ``p``.

    Parameters
    ----------
    p, q : torch.Tensor
        ``[B, V]`` target and draft rows.

    Returns
    -------
    residual : torch.Tensor
        ``[B, V]`` float64 distribution rows.
    mass : torch.Tensor
        ``[B]`` float64 :math:`\sum_y (p - q)_+ = d_{TV}(p, q)` per row.
    """
    p64 = p.double()
    return normalize_or(torch.clamp(p64 - q.double(), min=0.0), p64)


def residual_weights(p: torch.Tensor, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    r""":math:`((p-q)_+,\ \sum (p-q)_+)` row-wise in float64, *unnormalised*; rows of mass 0 are
    replaced by ``p`` (as :func:`residual` does). Three passes over ``[B, V]`` and one fresh
    float64 buffer: the weights a sampler draws from without normalising them.

    Parameters
    ----------
    p, q : torch.Tensor
        ``[B, V]`` target and draft rows (float32 or float64, never modified).

    Returns
    -------
    weights : torch.Tensor
        ``[B, V]`` float64 non-negative weights, every row of positive mass when ``p``'s is.
    mass : torch.Tensor
        ``[B]`` float64 :math:`\sum_y (p - q)_+` per row (0 where the row was replaced by ``p``).

    Examples
    --------
    >>> import torch
    >>> w, m = residual_weights(torch.tensor([[0.5, 0.5]]), torch.tensor([[0.75, 0.25]]))
    >>> w.tolist(), m.tolist()
    ([[0.0, 0.25]], [0.25])
    """
    w = p.to(torch.float64, copy=True)
    w.sub_(q).clamp_(min=0.0)
    mass = w.sum(-1)
    return fallback_rows(w, mass, p), mass


def fallback_rows(w: torch.Tensor, mass: torch.Tensor, fallback: torch.Tensor) -> torch.Tensor:
    """``w`` with its rows of mass 0 replaced by ``fallback`` (cast to float64); ``w`` itself when
    every row has positive mass (checked without a device sync only on CPU; elsewhere the
    replacement is always computed).

    Parameters
    ----------
    w : torch.Tensor
        ``[B, V]`` float64 non-negative weights.
    mass : torch.Tensor
        ``[B]`` row sums of ``w``.
    fallback : torch.Tensor
        ``[B, V]`` or ``[1, V]`` rows used where ``mass`` is 0.

    Returns
    -------
    torch.Tensor
        ``[B, V]`` float64 weights, every row of positive mass when ``fallback``'s is.
    """
    empty = mass <= 0
    if w.device.type == "cpu" and not bool(empty.any()):
        return w
    return torch.where(empty[:, None], fallback.to(torch.float64), w)


def categorical(w: torch.Tensor, generator: torch.Generator, n: int | None = None) -> torch.Tensor:
    r"""One draw per row of the non-negative weights ``w`` ``[B, V]`` (each row of positive mass),
    by inverse CDF in float64 with one uniform per row from ``generator``. With ``w`` of shape
    ``[1, V]`` and ``n`` given, ``n`` independent draws from that one row (O(V + n log V)).

    Parameters
    ----------
    w : torch.Tensor
        ``[B, V]`` non-negative weights, every row of positive mass.
    generator : torch.Generator
        Source of the uniforms (one ``torch.rand`` call).
    n : int, optional
        With ``w`` of shape ``[1, V]``: the number of draws (default: one per row).

    Returns
    -------
    torch.Tensor
        ``[B]`` (or ``[n]``) long token ids, :math:`P(y) = w_y / \sum w`.
    """
    B, V = w.shape
    n = B if n is None else int(n)
    cdf = torch.cumsum(w, dim=-1, dtype=torch.float64, out=scratch("categorical_cdf", (B, V), w.device))
    if B == 1 and n != 1:
        u = torch.rand(n, dtype=torch.float64, device=w.device, generator=generator)
        return _search(cdf, u)
    u = torch.rand(B, dtype=torch.float64, device=w.device, generator=generator)
    return _search(cdf, u)


def _search(cdf: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    r"""Inverse CDF: for ``cdf`` ``[B, V]`` (cumulative sums of non-negative weights) and uniforms
    ``u`` ``[B]`` (or ``[n]`` with ``B == 1``), the first index whose cumulative sum exceeds
    :math:`x = \min(u S, S^-)`, :math:`S` the row total and :math:`S^-` the float64 just below it.
    That index always carries positive weight (``cdf`` steps up there), so no token of weight 0 is
    ever returned, even when :math:`u S` rounds up to :math:`S`; O(log V) per draw."""
    V = cdf.shape[1]
    total = cdf[:, -1]
    if cdf.shape[0] == 1 and u.shape[0] != 1:
        x = torch.minimum(u * total, torch.nextafter(total, torch.zeros_like(total)))
        return torch.searchsorted(cdf[0], x, right=True).clamp_(max=V - 1)
    x = torch.minimum(u * total, torch.nextafter(total, torch.zeros_like(total)))
    return torch.searchsorted(cdf, x[:, None], right=True).squeeze(1).clamp_(max=V - 1)


def plan_conditional(plan: Plan, dtype: torch.dtype) -> torch.Tensor:
    r"""Exact output law ``[B, V]`` of a :class:`Plan`, cast to ``dtype``.

    Parameters
    ----------
    plan : Plan
        ``B`` rows of ``R`` rounds and their residuals.
    dtype : torch.dtype
        Output dtype (the computation is float64).

    Returns
    -------
    torch.Tensor
        ``[B, V]``: the module formula's :math:`\pi(\cdot \mid \bar x)` per row.
    """
    tok, acc, res = plan
    surv = torch.ones(tok.shape[0], dtype=torch.float64, device=tok.device)
    pi = torch.zeros((tok.shape[0], res.shape[1]), dtype=torch.float64, device=res.device)
    for j in range(tok.shape[1]):  # loop over draft rounds only
        pi.scatter_add_(1, tok[:, j : j + 1], (surv * acc[:, j])[:, None])
        surv = surv * (1.0 - acc[:, j])
    # the residual rows are weights of positive mass: normalised here, folded into their survival
    pi += (surv / res.sum(-1))[:, None] * res
    return pi.to(dtype)


def plan_sample(plan: Plan, generator: torch.Generator, *, accept: torch.Tensor | None = None) -> torch.Tensor:
    """Run a plan once per row: accept coins from one ``torch.rand`` call (accept iff ``U < a_j``),
    residual draws from a second, separate call. ``accept`` overrides ``plan.accept``.

    Parameters
    ----------
    plan : Plan
        ``B`` rows of ``R`` rounds and their residuals.
    generator : torch.Generator
        Source of the coins and of the residual draws (two separate calls).
    accept : torch.Tensor, optional
        ``[B, R]`` accept probabilities replacing ``plan.accept`` (e.g. a rule's coin schedule).

    Returns
    -------
    torch.Tensor
        ``[B]`` long: the token of the first accepted round, else the residual draw.
    """
    acc = plan.accept if accept is None else accept
    return sample_rounds(plan.tokens, acc, plan.residual, generator)


def sample_rounds(
    tokens: torch.Tensor,
    accept: torch.Tensor,
    residual: torch.Tensor | Callable[[], torch.Tensor],
    generator: torch.Generator,
) -> torch.Tensor:
    """:func:`plan_sample` with a *lazy* residual: ``residual`` may be a callable that builds the
    ``[B, V]`` (or ``[1, V]``) float64 weights, called only when some row rejects every round
    (always on non-CPU devices, where checking would synchronise). The uniforms are drawn exactly as
    :func:`plan_sample` draws them (``[B, R]`` coins, then ``[B]`` residual uniforms, two separate
    calls) whether or not the residual is built, so the tokens do not depend on that shortcut.

    Parameters
    ----------
    tokens : torch.Tensor
        ``[B, R]`` long drafted tokens, in visiting order.
    accept : torch.Tensor
        ``[B, R]`` float64 accept probabilities.
    residual : torch.Tensor or callable
        ``[B, V]`` / ``[1, V]`` float64 weights of positive row mass, or a function returning a fresh
        such tensor (which this function may overwrite).
    generator : torch.Generator
        Source of the coins and of the residual draws (two separate calls).

    Returns
    -------
    torch.Tensor
        ``[B]`` long: the token of the first accepted round, else the residual draw.
    """
    B, R = tokens.shape
    coins = torch.rand((B, R), dtype=torch.float64, device=tokens.device, generator=generator)
    u = torch.rand(B, dtype=torch.float64, device=tokens.device, generator=generator)  # never reuses a coin
    if R:
        hit = coins < accept
        done = hit.any(dim=1)
        drafted = tokens.gather(1, torch.argmax(hit.to(torch.uint8), dim=1)[:, None]).squeeze(1)
        if tokens.device.type == "cpu" and bool(done.all()):
            return drafted
    if callable(residual):
        cdf = residual().cumsum_(dim=-1)
    else:
        cdf = torch.cumsum(residual, dim=-1, dtype=torch.float64, out=scratch("sample_cdf", tuple(residual.shape), residual.device))
    res_tok = _search(cdf, u)
    return torch.where(done, drafted, res_tok) if R else res_tok
