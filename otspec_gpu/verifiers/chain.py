r"""Chain verifiers in torch: token verification and block verification of one drafted block per row.

Sun, Mendlovic, Leviathan, Aharoni, Ro, Beirami, Suresh, "Block Verification Accelerates
Speculative Decoding" (ICLR 2025; arXiv 2403.10444): token verification is their Algorithm 1,
block verification their Algorithm 2. These are the batched twins of
:mod:`otspec.verifiers.token_chain` and :mod:`otspec.verifiers.block`; ``*_conditional`` equals
their per-path kernel row (``kernel(...).law``) and ``*_sample`` draws from it.

Shapes (``B`` rows, block length ``gamma``, vocabulary ``V``)::

    p       [B, gamma + 1, V]  p[:, i] = M_b(. | context, x_1..x_i)   (row gamma: the bonus law)
    q       [B, gamma, V]      q[:, i] = M_s(. | context, x_1..x_i)   (the law x_{i+1} was drawn from)
    drafts  [B, gamma]         the drafted tokens x_1..x_gamma
    conditional [B, gamma + 1, V]   law[b, t, y] = P(tau = t, Y = y | drafted path of row b)

``p`` and ``q`` are probabilities (float32 or float64, any device), already processed by the same
temperature / top-k / top-p transform (:func:`otspec_gpu.processing.probs_from_logits`).

Numerical rules (see ``docs/gpu_chains.rst``):

* :math:`1 - a_i` (token verification) is formed as :math:`(q - p)/q`, and :math:`\log r_i` as
  ``log1p((p - q) / q)`` when :math:`|r_i - 1| < 1/2`: both keep their relative precision when
  the target and the draft agree to a few ulps.
* Block verification's running ratio is kept in log space,
  :math:`\log p_i = L_i - \max(0, \max_{j \le i} L_j)` with :math:`L_i = \sum_{j \le i} \log r_j`,
  :math:`1 - p_i` is ``-expm1(log p_i)`` (no cancellation when :math:`p_i \to 1`), and
  :math:`1 - h_i = (1 - p_i) / (Z_{i+1} + 1 - p_i)` is formed directly.
* :math:`h_i = Z_{i+1} / (Z_{i+1} + 1 - p_i)`, set to 1 where the denominator is 0, clipped to
  [0, 1].
* A residual is normalised by its own computed sum (elementwise differences of two floats are exact
  when they are within a factor 2 of each other, so a residual of tiny mass keeps its shape). A
  residual whose computed mass is 0 is replaced by the target row ``p[:, t]``: for exact
  distributions this only happens on events of probability 0, and it never divides by zero.
* The residual / bonus token is drawn by inverse CDF with the cumulative sum in float64, from its
  own uniform, independent of the accept coins.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch

from otspec.errors import InvalidDraftsError, ShapeMismatchError
from otspec_gpu._scratch import host_shortcuts, scratch
from otspec_gpu._validation import check_rows, check_same_device, check_tensor_types
from otspec_gpu.kernels import try_kernel, use_kernels
from otspec_gpu.sampling import sample_weights
from otspec_gpu.verifiers._docs import fill_doc
from otspec_gpu.verifiers.base import StepOutput

__all__ = [
    "CHAIN_RULES",
    "ChainRule",
    "block_conditional",
    "block_sample",
    "block_step",
    "expected_accepted",
    "token_conditional",
    "token_sample",
    "token_step",
]


def _output(tau: torch.Tensor, token: torch.Tensor) -> StepOutput:
    """A chain step's :class:`~otspec_gpu.verifiers.base.StepOutput` (``index`` 0: one drafted block)."""
    return StepOutput(accepted=tau, token=token, index=torch.zeros_like(tau))


# ------------------------------------------------------------------------------------------------
# Validation: shapes, dtypes and devices always; with validate=True also every row of p and q (a
# distribution: one fused reduction per tensor, otspec_gpu._validation.check_rows), the token range
# and the drafted tokens' draft probability (each a device synchronisation on CUDA).


def _check(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, validate: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    check_tensor_types(p, q, drafts)
    if drafts.ndim != 2 or drafts.shape[1] < 1:
        raise ShapeMismatchError(f"drafts must have shape [B, gamma] with gamma >= 1 (got {list(drafts.shape)}); one drafted block per row")
    B, g = drafts.shape
    if q.ndim != 3 or q.shape[0] != B or q.shape[1] != g or q.shape[2] < 1:
        raise ShapeMismatchError(
            f"q must have shape [B, gamma, V] = [{B}, {g}, V] to match drafts (got {list(q.shape)}); row i is M_s(. | x^i)"
        )
    V = q.shape[2]
    if p.ndim != 3 or tuple(p.shape) != (B, g + 1, V):
        raise ShapeMismatchError(
            f"p must have shape [B, gamma + 1, V] = [{B}, {g + 1}, {V}] (got {list(p.shape)}); row i is M_b(. | x^i), row gamma the bonus law"
        )
    check_same_device(p, q, drafts)
    drafts = drafts.long()
    if validate:
        check_rows(p, "p")  # every row a distribution: one fused pass per tensor
        check_rows(q, "q")
        if bool(((drafts < 0) | (drafts >= V)).any()):
            raise InvalidDraftsError(
                f"drafts must be token ids in [0, {V}) (got min {int(drafts.min())}, max {int(drafts.max())}); every drafted token must be in the vocabulary"
            )
        qx = q.gather(2, drafts.unsqueeze(-1)).squeeze(-1)
        bad = qx <= 0
        if bool(bad.any()):
            b, i = (int(v) for v in bad.nonzero()[0])
            raise InvalidDraftsError(
                f"drafts[{b}, {i}] = {int(drafts[b, i])} has draft probability q[{b}, {i}, {int(drafts[b, i])}] = {float(qx[b, i]):.3g} <= 0; "
                "the drafts must be sampled from the same processed q that is passed here"
            )
    return p, q, drafts


def _drafted(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(px, qx)`` [B, gamma]: target and draft probability of each drafted token."""
    g = drafts.shape[1]
    idx = drafts.unsqueeze(-1)  # [B, g, 1]
    return p[:, :g].gather(2, idx).squeeze(-1), q.gather(2, idx).squeeze(-1)


def _normalise(res: torch.Tensor, fallback: torch.Tensor) -> torch.Tensor:
    """Each row of ``res`` [..., V] divided by its sum; rows of computed mass 0 become ``fallback``."""
    mass = res.sum(-1, keepdim=True)
    ok = mass > 0
    return torch.where(ok, res / torch.where(ok, mass, torch.ones_like(mass)), fallback)


def _rows(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """``x[b, t[b]]`` for x [B, n, V], t [B] -> [B, V]."""
    return x[torch.arange(x.shape[0], device=x.device), t]


def _emission_weights(p: torch.Tensor, q: torch.Tensor, tau: torch.Tensor, w_tau: torch.Tensor | None) -> torch.Tensor:
    """Unnormalised law [B, V] of the emitted token given tau [B]: the residual
    ``(w_tau p[:, tau] - q[:, tau])_+`` (``w_tau`` [B, 1], 1 if None) for tau < gamma, ``p[:, gamma]``
    (bonus) for tau = gamma; a residual of computed mass 0 falls back to ``p[:, tau]`` (the rule of
    :func:`_normalise`). ``sample_weights`` normalises by the cumulative sum."""
    g = q.shape[1]
    pt = _rows(p, tau)  # [B, V]
    res = _rows(q, tau.clamp_max(g - 1)).neg_()  # a gathered copy, so in-place is safe
    res = res.add_(pt) if w_tau is None else res.add_(pt * w_tau)
    res.clamp_min_(0.0)
    use_res = (tau < g) & (res.sum(-1) > 0)
    return torch.where(use_res.unsqueeze(-1), res, pt)


# ------------------------------------------------------------------------------------------------
# Token verification (Algorithm 1).


def _token_accept(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(a_i, 1 - a_i) [B, gamma], a_i = min(1, r_i); 1 - a_i = (q - p) / q computed directly (exact
    difference when p and q are close). a_i = 1 where q(x_i) = 0 (a draft the drafter cannot produce)."""
    px, qx = _drafted(p, q, drafts)
    acc = px >= qx
    safe_q = torch.where(acc, torch.ones_like(qx), qx)
    return torch.where(acc, torch.ones_like(px), px / safe_q), torch.where(acc, torch.zeros_like(px), (qx - px) / safe_q)


@fill_doc
def token_conditional(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, *, validate: bool = True) -> torch.Tensor:
    r"""Exact law of :math:`(\tau, Y)` under token verification, per row: ``[B, gamma + 1, V]``.

    .. math::
        a_i = \min(1, r_i), \quad P(\tau = t \mid x^\gamma) = \Big(\prod_{j \le t} a_j\Big)(1 - a_{t+1}),
        \quad Y \mid \tau = t < \gamma \sim \mathrm{norm}\big((p_t - q_t)_+\big), \quad
        Y \mid \tau = \gamma \sim p_\gamma,

    with :math:`r_i = p_{i-1}(x_i) / q_{i-1}(x_i)` and :math:`p_t = ` ``p[:, t]``.

    {chain_conditional_doc}

    Examples
    --------
    >>> import torch
    >>> p = torch.tensor([[[1/3, 2/3]] * 3], dtype=torch.float64)
    >>> q = torch.tensor([[[2/3, 1/3]] * 2], dtype=torch.float64)
    >>> law = token_conditional(p, q, torch.tensor([[0, 1]]))
    >>> [round(v, 12) for v in law.sum(-1)[0].tolist()]
    [0.5, 0.0, 0.5]
    """
    p, q, drafts = _check(p, q, drafts, validate)
    g = drafts.shape[1]
    a, not_a = _token_accept(p, q, drafts)  # [B, g]
    reach = torch.cat([torch.ones_like(a[:, :1]), torch.cumprod(a, dim=1)], dim=1)  # [B, g+1] P(tau >= t)
    stop = reach[:, :g] * not_a  # [B, g] P(tau = t), t < g
    res = _normalise((p[:, :g] - q).clamp_min(0.0), p[:, :g])  # [B, g, V]
    return torch.cat([stop.unsqueeze(-1) * res, reach[:, g:].unsqueeze(-1) * p[:, g:]], dim=1)


def _draw_uniforms(p: torch.Tensor, drafts: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """The uniforms of one chain verification per row, from two separate ``generator`` calls:
    ``coins`` ``[B, gamma]`` (dtype of ``p``, one per drafted position) then ``u`` ``[B]`` float64
    (the residual / bonus draw), so no uniform is used twice."""
    B, g = drafts.shape
    coins = torch.rand((B, g), generator=generator, dtype=p.dtype, device=p.device)
    u = torch.rand((B,), generator=generator, dtype=torch.float64, device=p.device)
    return coins, u


@fill_doc
def token_step(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, coins: torch.Tensor, u: torch.Tensor) -> StepOutput:
    """Token verification as a pure step of its uniforms (no generator, no validation):
    :func:`token_sample` is :func:`_check`, the uniforms, then this.

    Parameters
    ----------
    {chain_inputs}
    coins : torch.Tensor
        ``[B, gamma]`` accept uniforms on ``[0, 1)`` (dtype of ``p``).
    u : torch.Tensor
        ``[B]`` float64 uniforms of the residual / bonus draw.

    Returns
    -------
    {chain_step}
    """
    if use_kernels(p):  # two fused launches (otspec_gpu.kernels.chain)
        from otspec_gpu.kernels.chain import token_chain_step

        out = try_kernel(token_chain_step, p, q, drafts, coins, u)
        if out is not None:
            return StepOutput(*out)
    g = drafts.shape[1]
    a, _ = _token_accept(p, q, drafts)
    rejected = ~(coins < a)  # [B, g]
    tau = torch.where(rejected.any(dim=1), rejected.to(torch.int8).argmax(dim=1), torch.full_like(drafts[:, 0], g))  # first rejection
    return _output(tau, sample_weights(_emission_weights(p, q, tau, None), u))


@fill_doc
def token_sample(
    p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, *, generator: torch.Generator, validate: bool = True
) -> StepOutput:
    r"""Token verification (Sun et al. Algorithm 1) of one drafted block per row.

    Position :math:`i` is accepted when its own coin :math:`\eta_i < \min(1, r_i)`; the first
    rejection stops the block and :math:`Y \sim \mathrm{norm}((p_\tau - q_\tau)_+)`, else
    :math:`Y \sim p_\gamma` (bonus). The ``gamma`` coins and the residual uniform are separate draws
    from ``generator``. Shapes as in :func:`token_conditional`.

    {chain_sample_doc}

    Examples
    --------
    >>> import torch
    >>> p = torch.full((4, 3, 2), 0.5)
    >>> out = token_sample(p, p[:, :2], torch.zeros(4, 2, dtype=torch.long), generator=torch.Generator().manual_seed(0))
    >>> out.accepted.tolist()
    [2, 2, 2, 2]
    """
    p, q, drafts = _check(p, q, drafts, validate)
    return token_step(p, q, drafts, *_draw_uniforms(p, drafts, generator))


# ------------------------------------------------------------------------------------------------
# Block verification (Algorithm 2).


def _log_running_ratio(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor) -> torch.Tensor:
    """log p_i, i = 1..gamma [B, gamma]: L_i - max(0, max_{j <= i} L_j), L = cumsum log r (-inf where p(x_i) = 0)."""
    px, qx = _drafted(p, q, drafts)
    safe_q = torch.where(qx > 0, qx, torch.ones_like(qx))
    d = (px - qx) / safe_q  # r - 1, with px - qx exact when px and qx are within a factor 2
    near = d.abs() < 0.5  # log1p keeps log r accurate near r = 1 (log px - log qx cancels there)
    logr = torch.where(near, torch.log1p(torch.where(near, d, torch.zeros_like(d))), torch.log(px) - torch.log(safe_q))
    logr = torch.where(qx > 0, logr, torch.zeros_like(logr))
    L = torch.cumsum(logr, dim=1)
    return L - torch.cummax(L.clamp_min(0.0), dim=1).values


def _block_h(logp: torch.Tensor, Z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(h_i, 1 - h_i) [B, gamma] from log p_i [B, gamma] and the look-ahead masses Z_{i+1} [B, gamma - 1].

    1 - p_i is -expm1(log p_i) and 1 - h_i = (1 - p_i) / (Z + 1 - p_i) is formed directly, so
    neither loses its relative precision when p_i or h_i is close to 1."""
    onem = -torch.expm1(logp)  # [B, g] 1 - p_i
    denom = Z + onem[:, :-1]
    ok = denom > 0
    safe = torch.where(ok, denom, torch.ones_like(denom))
    h_in = torch.where(ok, Z / safe, torch.ones_like(denom))
    not_h_in = torch.where(ok, onem[:, :-1] / safe, torch.zeros_like(denom))
    h = torch.cat([h_in, torch.exp(logp[:, -1:])], dim=1).clamp(0.0, 1.0)
    return h, torch.cat([not_h_in, onem[:, -1:]], dim=1).clamp(0.0, 1.0)


def _block_residuals(p: torch.Tensor, q: torch.Tensor, logp: torch.Tensor) -> torch.Tensor:
    """(p_t p[:, t] - q[:, t])_+ for t = 0..gamma-1 [B, gamma, V], with p_0 = 1."""
    w = torch.cat([torch.ones_like(logp[:, :1]), torch.exp(logp[:, :-1])], dim=1)  # [B, g] p_t
    return (w.unsqueeze(-1) * p[:, :-1] - q).clamp_min(0.0)


@fill_doc
def block_conditional(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, *, validate: bool = True) -> torch.Tensor:
    r"""Exact law of :math:`(\tau, Y)` under block verification, per row: ``[B, gamma + 1, V]``.

    With :math:`p_0 = 1`, :math:`p_i = \min(p_{i-1} r_i, 1)`,
    :math:`Z_{i+1} = \sum_x (p_i\, p_i(x) - q_i(x))_+` (the weighted residual mass one position
    ahead), :math:`h_i = Z_{i+1} / (Z_{i+1} + 1 - p_i)` for :math:`i < \gamma`,
    :math:`h_\gamma = p_\gamma` and :math:`h_0 = 1`, the coins are independent and :math:`\tau` is
    the last index that passes, so

    .. math::
        P(\tau = t \mid x^\gamma) = h_t \prod_{j > t} (1 - h_j), \qquad
        Y \mid \tau = t < \gamma \sim \mathrm{norm}\big((p_t\, p_t(\cdot) - q_t(\cdot))_+\big), \quad
        Y \mid \tau = \gamma \sim p_\gamma(\cdot).

    Parameters and return value as in :func:`token_conditional`.

    {chain_conditional_doc}

    Examples
    --------
    >>> import torch
    >>> p = torch.tensor([[[1/3, 2/3]] * 3], dtype=torch.float64)
    >>> q = torch.tensor([[[2/3, 1/3]] * 2], dtype=torch.float64)
    >>> law = block_conditional(p, q, torch.tensor([[0, 1]]))
    >>> [round(v, 12) for v in law.sum(-1)[0].tolist()]
    [0.0, 0.0, 1.0]
    """
    p, q, drafts = _check(p, q, drafts, validate)
    g = drafts.shape[1]
    logp = _log_running_ratio(p, q, drafts)  # [B, g]
    res = _block_residuals(p, q, logp)  # [B, g, V]
    h, not_h = _block_h(logp, res[:, 1:].sum(-1))  # [B, g]
    suffix = torch.flip(torch.cumprod(torch.flip(not_h, [1]), dim=1), [1])  # prod_{j >= i} (1 - h_j)
    hh = torch.cat([torch.ones_like(h[:, :1]), h], dim=1)  # [B, g+1], h_0 = 1
    tau = hh * torch.cat([suffix, torch.ones_like(h[:, :1])], dim=1)  # [B, g+1]
    law_res = _normalise(res, p[:, :g])  # [B, g, V]
    return torch.cat([tau[:, :g].unsqueeze(-1) * law_res, tau[:, g:].unsqueeze(-1) * p[:, g:]], dim=1)


@fill_doc
def block_step(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, coins: torch.Tensor, u: torch.Tensor) -> StepOutput:
    """Block verification as a pure step of its uniforms (no generator, no validation):
    :func:`block_sample` is :func:`_check`, the uniforms, then this.

    Parameters
    ----------
    {chain_inputs}
    coins : torch.Tensor
        ``[B, gamma]`` uniforms on ``[0, 1)`` (dtype of ``p``), one per position.
    u : torch.Tensor
        ``[B]`` float64 uniforms of the residual / bonus draw.

    Returns
    -------
    {chain_step}
    """
    if use_kernels(p):  # three fused launches (otspec_gpu.kernels.chain)
        from otspec_gpu.kernels.chain import block_chain_step

        out = try_kernel(block_chain_step, p, q, drafts, coins, u)
        if out is not None:
            return StepOutput(*out)
    B, g = drafts.shape
    logp = _log_running_ratio(p, q, drafts)  # [B, g]
    pr = torch.exp(logp)
    Z = p.new_empty((B, max(g - 1, 0)))
    if host_shortcuts(p) and B and g:
        # tau = g as soon as the last coin passes, and h_gamma = p_gamma needs no look-ahead mass:
        # when every row passes there, the gamma - 1 passes over [B, V] for Z are skipped
        h_last = _block_h(logp, Z.fill_(float("nan")))[0][:, -1]
        if bool((coins[:, -1] < h_last).all()):
            tau = torch.full_like(drafts[:, 0], g)
            return _output(tau, sample_weights(_emission_weights(p, q, tau, pr[:, -1:]), u))
    buf = scratch("block_buf", (B, p.shape[-1]), p.device, p.dtype)  # one [B, V] buffer reused for every position
    for i in range(1, g):
        torch.mul(p[:, i], pr[:, i - 1 : i], out=buf)
        Z[:, i - 1] = buf.sub_(q[:, i]).clamp_min_(0.0).sum(-1)
    h, _ = _block_h(logp, Z)
    passed = coins < h  # [B, g]
    pos = torch.arange(1, g + 1, device=p.device)
    tau = (passed * pos).amax(dim=1)  # last index that passes, 0 if none
    wt = torch.cat([torch.ones_like(pr[:, :1]), pr], dim=1).gather(1, tau.unsqueeze(-1))  # [B, 1] p_tau
    return _output(tau, sample_weights(_emission_weights(p, q, tau, wt), u))


@fill_doc
def block_sample(
    p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, *, generator: torch.Generator, validate: bool = True
) -> StepOutput:
    r"""Block verification (Sun et al. Algorithm 2) of one drafted block per row.

    Every position draws its own coin :math:`\eta_i`; :math:`\tau` is the *last* index with
    :math:`\eta_i < h_i` (no break) and :math:`Y` comes from the weighted residual at
    :math:`\tau` or the bonus law (see :func:`block_conditional`), drawn with a separate uniform
    from ``generator``. Shapes as in :func:`token_conditional`.

    {chain_sample_doc}

    Examples
    --------
    >>> import torch
    >>> p = torch.full((4, 3, 2), 0.5)
    >>> out = block_sample(p, p[:, :2], torch.zeros(4, 2, dtype=torch.long), generator=torch.Generator().manual_seed(0))
    >>> out.accepted.tolist()
    [2, 2, 2, 2]
    """
    p, q, drafts = _check(p, q, drafts, validate)
    return block_step(p, q, drafts, *_draw_uniforms(p, drafts, generator))


def expected_accepted(conditional: torch.Tensor) -> torch.Tensor:
    r""":math:`E[\tau \mid \text{drafted path}] = \sum_t t \sum_y \text{law}[b, t, y]`, per row: ``[B]``.

    ``conditional`` is the ``[B, gamma + 1, V]`` output of :func:`token_conditional` or
    :func:`block_conditional` (or a ``[B, gamma + 1]`` law of :math:`\tau`). The coins are
    integrated out exactly: averaged over real drafted paths it estimates :math:`E[\tau]` with less
    variance than counting accepted tokens.

    Parameters
    ----------
    conditional : torch.Tensor
        ``[B, gamma + 1, V]`` law of :math:`(\tau, Y)` (or ``[B, gamma + 1]`` law of :math:`\tau`).

    Returns
    -------
    torch.Tensor
        ``[B]`` :math:`E[\tau \mid \text{drafted path}]`, in the law's dtype.

    Examples
    --------
    >>> import torch
    >>> expected_accepted(torch.tensor([[[0.25, 0.25], [0.0, 0.0], [0.5, 0.0]]])).tolist()
    [1.0]
    """
    tau = conditional.sum(-1) if conditional.ndim == 3 else conditional
    return tau @ torch.arange(tau.shape[-1], dtype=tau.dtype, device=tau.device)


class ChainRule(NamedTuple):
    """A chain verifier of the torch table: its name (that of the numpy module's rule) and functions.

    Attributes
    ----------
    name : str
        ``"token"`` (:mod:`otspec.verifiers.token_chain`) or ``"block"`` (:mod:`otspec.verifiers.block`).
    sample : callable
        ``sample(p, q, drafts, *, generator, validate=True) -> StepOutput``.
    conditional : callable
        ``conditional(p, q, drafts, *, validate=True) -> Tensor[B, gamma + 1, V]``.
    """

    name: str
    sample: Callable[..., StepOutput]
    conditional: Callable[..., torch.Tensor]


#: The chain rules, by name.
CHAIN_RULES = {
    "token": ChainRule("token", token_sample, token_conditional),
    "block": ChainRule("block", block_sample, block_conditional),
}
