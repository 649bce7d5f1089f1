r"""The shared-exponential race of the Gumbel-max coupling and of GLS, sampled given the drafts
(torch; twin of :func:`otspec.verifiers.step.gumbel_coupling.race_sample`), without drawing one
exponential per token.

Copy :math:`k = 1..K` drafted :math:`x_k = \arg\min_j E_{k,j}/q(j)`. Given the draft, the copy's
exponentials are :math:`E_{k,x_k} = q(x_k)\, m_k` and :math:`E_{k,j} = q(j)\, m_k + F_{k,j}`
(:math:`m_k, F_{k,j} \sim \mathrm{Exp}(1)`, the race minimum independent of its winner). On the
target clock :math:`T_{k,j} = E_{k,j}/p(j)` the drafted token arrives at the fixed time
:math:`m_k s(x_k)` with :math:`s = q/p`, and every other token at :math:`m_k s(j)` plus an
:math:`\mathrm{Exp}(p(j))` wait. The output is the first arrival. The copies are independent given
their minima, and up to its own drafted arrival copy k's other tokens arrive as a Poisson process
of cumulative rate

.. math:: \Lambda_k(t) = m_k\, G\!\left(\frac{t}{m_k}\right), \qquad
          G(s) = \sum_j \big(p(j)\, s - q(j)\big)_+

(the drafted token's own term is 0 until its arrival). So the step draws, per copy, the first
other arrival as the root of :math:`\Lambda_k(t) = w_k` (:math:`w_k \sim \mathrm{Exp}(1)`) and its
token with weight :math:`p(j)` among the tokens running by then; the output is the drafted token of
the earliest copy if its arrival :math:`m_k s(x_k)` comes before every copy's first other arrival,
else that arrival's token. (A root beyond a copy's own drafted arrival is computed with the drafted
token's term included, but then the drafted arrival is earlier and wins: the outcome is the same.)

:math:`G` is piecewise linear with breaks at the sorted ratios :math:`s_{(i)}` and slope
:math:`P_{(i)} = \sum_{l \le i} p_{(l)}`; one sort per row of (p, q) gives
:math:`G_{(i)} = G(s_{(i)})` as a cumulative sum of non-negative terms, and the root is one search
in :math:`G_{(i)}` plus a linear step inside its segment. Work: :math:`O(V \log V)` per distinct
row of (p, q) plus :math:`O(K \log V)` per drafted row; no host synchronisation.

For one copy the output law given the draft has a closed form: with :math:`F(s) = \int_0^s
\frac{du}{(1 + G(u))^2}`,

.. math:: \pi(x \mid x) = \frac{1}{1 + G(s(x))}, \qquad
          \pi(y \mid x) = p(y)\,\big(F(s(x)) - F(s(y))\big)_+ \quad (y \ne x),

(integrate :math:`m` out of :math:`p(y)\, m\, e^{-m G(u)}`; on a segment :math:`\int du/(1+G)^2 =
\Delta s / ((1 + G_{(i)})(1 + G_{(i+1)}))`), which :func:`single_conditional` evaluates.

References
----------
Daliri, Musco, Suresh, arXiv 2408.07978 (2024); Rowan, Phan, Khisti, arXiv 2506.05632 (2025).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

__all__ = ["RaceTables", "race_step", "race_tables", "race_uniforms", "single_conditional"]


class RaceTables(NamedTuple):
    """The sorted ratios of one batch of (p, q) rows (float64, ``[R, V]`` with ``R`` = B or 1).

    Attributes
    ----------
    s : torch.Tensor
        :math:`s = q/p` in token order (:math:`+\\infty` where p = 0).
    order : torch.Tensor
        Long token ids in increasing :math:`s` (stable).
    s_sorted, p_cum, g : torch.Tensor
        :math:`s_{(i)}`, :math:`P_{(i)}` and :math:`G_{(i)}` in that order.
    """

    s: torch.Tensor
    order: torch.Tensor
    s_sorted: torch.Tensor
    p_cum: torch.Tensor
    g: torch.Tensor


def race_tables(p: torch.Tensor, q: torch.Tensor) -> RaceTables:
    """Sort each row of (p, q) by :math:`q/p` and accumulate :math:`P_{(i)}` and :math:`G_{(i)}`.

    Parameters
    ----------
    p, q : torch.Tensor
        ``[R, V]`` target and draft rows (any float dtype; computed in float64).

    Returns
    -------
    RaceTables
    """
    p64, q64 = p.double(), q.double()
    inf = float("inf")
    pos = p64 > 0
    s = torch.where(pos, q64 / torch.where(pos, p64, 1.0), inf)  # [R, V]
    s_sorted, order = torch.sort(s, dim=1, stable=True)
    p_cum = torch.cumsum(p64.gather(1, order), dim=1)  # [R, V]
    nxt = s_sorted[:, 1:]
    # G(s_(i+1)) - G(s_(i)) = P_(i) (s_(i+1) - s_(i)) >= 0; +inf once the ratios are (p = 0)
    step = torch.where(torch.isinf(nxt), inf, p_cum[:, :-1] * (nxt - torch.where(torch.isinf(nxt), 0.0, s_sorted[:, :-1])))
    g = torch.cat([torch.zeros_like(s_sorted[:, :1]), torch.cumsum(step, dim=1)], dim=1)  # [R, V]
    return RaceTables(s, order, s_sorted.contiguous(), p_cum.contiguous(), g)


def _find(tab: RaceTables, values: torch.Tensor) -> torch.Tensor:
    """``#{i : s_(i) <= value}`` per row: ``values`` ``[B, n]`` (a shared table serves every row)."""
    if tab.s_sorted.shape[0] == 1:
        return torch.searchsorted(tab.s_sorted[0], values.contiguous(), right=True)
    return torch.searchsorted(tab.s_sorted, values.contiguous(), right=True)


def _take(table: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """``table[row, idx]`` for ``idx`` ``[B, n]`` (``table`` ``[1, V]`` is shared by every row)."""
    return table.expand(idx.shape[0], -1).gather(1, idx)


def _g_at(tab: RaceTables, s: torch.Tensor) -> torch.Tensor:
    """:math:`G(s)` for ``s`` ``[B, n]`` (non-negative; :math:`+\\infty` maps to :math:`+\\infty`)."""
    j = _find(tab, s) - 1
    jc = j.clamp_min(0)
    sj = _take(tab.s_sorted, jc)
    finite = torch.isfinite(s) & torch.isfinite(sj)
    val = _take(tab.g, jc) + _take(tab.p_cum, jc) * torch.where(finite, s - torch.where(finite, sj, 0.0), 0.0)
    val = torch.where(j < 0, torch.zeros_like(val), val)
    return torch.where(torch.isinf(s), torch.full_like(val, float("inf")), val)


def race_uniforms(p: torch.Tensor, drafts: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The randomness of one race per row, ``[B, K]`` float64 each: the copies' minima ``m`` and
    their waits ``w`` (``Exp(1)``), then ``u`` (uniform, for the arriving token); three draws.

    Parameters
    ----------
    p : torch.Tensor
        Target rows (their device is used).
    drafts : torch.Tensor
        ``[B, K]`` long drafts.
    generator : torch.Generator
        Source of the draws.

    Returns
    -------
    tuple of torch.Tensor
        ``(m, w, u)``, each ``[B, K]``.
    """
    shape = tuple(drafts.shape)
    m = torch.empty(shape, dtype=torch.float64, device=p.device).exponential_(generator=generator)
    w = torch.empty(shape, dtype=torch.float64, device=p.device).exponential_(generator=generator)
    u = torch.rand(shape, dtype=torch.float64, device=p.device, generator=generator)
    return m, w, u


def race_step(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, m: torch.Tensor, w: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """The race's output token ``[B]`` given the drafts ``[B, K]`` and the draws of :func:`race_uniforms`.

    Parameters
    ----------
    p, q : torch.Tensor
        ``[B, V]`` (or ``[1, V]``, shared) target and draft rows; every copy drafted from q.
    drafts : torch.Tensor
        ``[B, K]`` long drafts (one per copy).
    m, w, u : torch.Tensor
        ``[B, K]`` float64 draws from :func:`race_uniforms`.

    Returns
    -------
    torch.Tensor
        ``[B]`` long output tokens.
    """
    tab = race_tables(p, q)
    # a draw of exactly 0 (probability ~2^-53) would divide by zero: the smallest normal instead
    tiny = torch.finfo(torch.float64).tiny
    m, w = m.clamp_min(tiny), w.clamp_min(tiny)
    # the drafted arrivals m_k s(x_k); the earliest one
    t_min, k_min = (m * _take(tab.s, drafts)).min(dim=1)
    # each copy's first other arrival: the root of m_k G(t / m_k) = w_k, after `count` breaks
    level = w / m  # [B, K]: G(sigma) = level
    if tab.g.shape[0] == 1:
        count = torch.searchsorted(tab.g[0], level.contiguous())  # #{i : G_(i) < level}, >= 1
    else:
        count = torch.searchsorted(tab.g, level.contiguous())
    j = (count - 1).clamp_min(0)
    p_run = _take(tab.p_cum, j)  # mass of the running tokens (> 0: the first break has p > 0)
    t_other = m * (_take(tab.s_sorted, j) + (level - _take(tab.g, j)) / p_run)  # [B, K]
    # the token that arrives: weight p(j) among the running ones (inverse CDF in sorted order)
    r = u * p_run
    if tab.p_cum.shape[0] == 1:
        i = torch.searchsorted(tab.p_cum[0], r.contiguous(), right=True)
    else:
        i = torch.searchsorted(tab.p_cum, r.contiguous(), right=True)
    arrived = _take(tab.order, torch.minimum(i, j))  # [B, K]
    t_first, k_first = t_other.min(dim=1)
    won = t_min < t_first  # ties have probability 0
    return torch.where(won, drafts.gather(1, k_min[:, None])[:, 0], arrived.gather(1, k_first[:, None])[:, 0])


def single_conditional(p: torch.Tensor, q: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    r"""Exact output law ``[B, V]`` (float64) of the one-copy race given the draft ``x`` ``[B]``
    (module notes: :math:`1/(1 + G(s(x)))` at x, :math:`p(y)(F(s(x)) - F(s(y)))_+` elsewhere).

    Parameters
    ----------
    p, q : torch.Tensor
        ``[B, V]`` (or ``[1, V]``) target and draft rows.
    x : torch.Tensor
        ``[B]`` long drafts.

    Returns
    -------
    torch.Tensor
        ``[B, V]`` float64.
    """
    tab = race_tables(p, q)
    s, g = tab.s_sorted, tab.g
    a, b = s[:, :-1], s[:, 1:]
    fin_a, fin_b = torch.isfinite(a), torch.isfinite(b)
    seg = torch.where(fin_b, b - torch.where(fin_b, a, 0.0), 0.0) / ((1.0 + g[:, :-1]) * (1.0 + torch.where(fin_b, g[:, 1:], 0.0)))
    tail = 1.0 / (tab.p_cum[:, :-1] * (1.0 + g[:, :-1]))  # the last finite break to +inf
    seg = torch.where(fin_b, seg, torch.where(fin_a, tail, torch.zeros_like(seg)))
    f_sorted = torch.cat([torch.zeros_like(s[:, :1]), torch.cumsum(seg, dim=1)], dim=1)  # F(s_(i))
    f = torch.empty_like(f_sorted).scatter_(1, tab.order, f_sorted)  # F(s(y)) in token order
    B = x.shape[0]
    f = f.expand(B, -1)
    fx = f.gather(1, x[:, None])
    p64 = p.double().expand(B, -1)
    law = p64 * (fx - f).clamp_min(0.0)
    stay = 1.0 / (1.0 + _g_at(tab, _take(tab.s, x[:, None])))  # [B, 1]
    return law.scatter(1, x[:, None], stay)
