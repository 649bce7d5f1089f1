r"""SpecTr's K-SEQ in torch (twin of ``otspec.verifiers.kseq``), with :math:`\rho^*` by batched safeguarded Newton.

With i.i.d. drafts :math:`X_1..X_k \sim q` and :math:`\beta(\rho) = \sum_x \min(p(x)/\rho, q(x))`:

.. math::
    \rho^* = \text{root in } [1, k] \text{ of } f(\rho) = 1-(1-\beta(\rho))^k - \rho\beta(\rho),\qquad
    \gamma = \frac{1-(1-\beta(\rho^*))^k}{\beta(\rho^*)};

return :math:`X_i` (first i) with probability :math:`\min(1, p(X_i)/(\rho^* q(X_i)))`, else draw
:math:`Y \sim \mathrm{norm}((p - \gamma\min(p/\rho^*, q))_+)`.

:func:`rho_star` returns what the numpy core's bisection returns: :math:`f` is non-increasing,
``f(1) <= 0`` returns 1, ``f(k) > 0`` returns k (impossible in exact arithmetic), otherwise the
*upper* end of a bracket of two adjacent float64 values with :math:`f > 0` at its lower end and
:math:`f \le 0` at the returned one (the rule is lossless at the returned value). Rows with
:math:`p = q` get :math:`\rho^* = 1` exactly (there the root is ill-conditioned: summing
:math:`\min(p, q)` leaves :math:`1-\beta \approx 10^{-16}` and moves the root by :math:`10^{-16/k}`).

How the root is found (every row at once; loops over stages and iterations only). Tokens whose
ratio :math:`r = p/q` lies outside the current bracket :math:`[lo, hi]` sit on a fixed branch of the
minimum and are folded into two per-row constants, :math:`\beta(\rho) = (A + \sum_{r \le \rho}
p)/\rho + B + \sum_{r > \rho} q` over the remaining *working set* :math:`lo < r \le hi`.

1. *Histogram* (one pass over ``[B, V]``): token y goes to bin
   :math:`\lceil (r_y - 1)\, n_b/(k-1) \rceil` clipped to :math:`[0, n_b + 1]` (bin 0: :math:`r \le 1`,
   always on the :math:`p/\rho` branch; bin :math:`n_b + 1`: :math:`r > k` or nan, always on the q
   branch), :math:`n_b = \min(1024, \max(4, V/16))`; ``bincount`` of p and q per bin. The bin is a
   non-decreasing function of r, so the cumulative bin sums give f at every bin edge, which locates
   the root's bin; that bin and its two neighbours become the bracket and the working set (20-70
   tokens at V = 49 152, 100-300 at V = 262 144 on the benchmark's laws), moved to the host.
2. *Sweep*: f at every ratio of the working set at once, so that no ratio is left strictly inside
   the new bracket.
3. *Smooth piece*: there :math:`\beta = A_e/\rho + B_e` exactly, so :math:`f(\rho) =
   P_e - B_e\rho - (1-\beta)^k` (:math:`P_e`: the target mass above the piece) with
   :math:`f' = -k A_e (1-\beta)^{k-1}/\rho^2 - B_e`; its root by Newton, then one evaluation at the
   64 float64 values around it (and the midpoint) pins the adjacent pair.

f is evaluated as the numpy core does, :math:`f = \sum_{r > \rho}(p - \rho q) - (1-\beta)^k` (rows sum
to 1), with the masses above :math:`\rho` summed over those tokens (never as a total minus a
prefix): the first term is then exactly 0 beyond the largest ratio, and the sign of f stays right
when every ratio is within ~1e-5 of 1, where :math:`1 - \rho\beta` computed as 1 minus a sum near 1
would be rounding noise larger than :math:`(1-\beta)^k`.

Each evaluation moves the ends to the last candidate with :math:`f > 0` and the first with
:math:`f \le 0`, so the invariant holds whatever the candidates; where a stage does not apply (too
large a working set for the sweep, a grid that misses the sign change) a safeguarded Newton step
with a guard point beyond it, or bisection, is taken instead. The scalar bookkeeping runs in numpy
on the host (``[B]`` arrays), so this solver serves eager CPU calls only (where it is 5-15x faster
than the alternative). On CUDA and while traced, :func:`rho_star` runs
:func:`~otspec_gpu.verifiers.step._kseq_root.rho_star_masked` instead: a fixed number of
multisection passes over the float64 values of :math:`[1, k]`, no host read, the same contract up
to summation order. :func:`step` is then a pure step (:func:`uniforms` + :func:`step` is
:func:`sample`), and :func:`node_step` runs the rule over a per-row number of alive drafts (the
masked K-SEQ tree walk, :func:`otspec_gpu.verifiers.tree.step`).
"""

from __future__ import annotations

import numpy as np
import torch

from otspec_gpu._scratch import host_shortcuts, scratch, to_float64
from otspec_gpu.kernels import try_kernel, use_kernels
from otspec_gpu.verifiers._docs import fill_doc
from otspec_gpu.verifiers.base import StepOutput, TorchVerifier, check_step, deprecated_module_sample, step_output
from otspec_gpu.verifiers.schedule import (
    AcceptSchedule,
    accept_ratio,
    draft_round_uniforms,
    fallback_rows,
    gather,
    rounds_step,
    schedule_conditional,
)
from otspec_gpu.verifiers.step._kseq_root import rho_star_masked

__all__ = ["conditional", "kseq", "node_step", "rho_star", "schedule", "step", "uniforms"]

_MAX_ITER = 200  # each iteration at least halves the bracket in ulps once Newton stalls: < 130 needed
_BINS = 1024  # histogram bins on the ratio band (1, k] before the Newton iterations
_SWEEP_MAX = 1 << 18  # B * m * m bound for evaluating f at every ratio of the working set at once
_GRID_ULPS = 64  # brackets this narrow (in float64 steps) are finished by one grid evaluation


def _one_minus_pow(beta: torch.Tensor, k: int) -> torch.Tensor:
    """:math:`1-(1-\\beta)^k` accurately for small beta; 1 for beta >= 1."""
    b = torch.clamp(beta, max=1.0)
    return torch.where(beta >= 1.0, torch.ones_like(beta), -torch.expm1(k * torch.log1p(-b)))


def _f_host(rho: np.ndarray, A: np.ndarray, Bq: np.ndarray, Pq: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """:math:`f(\\rho)` and :math:`\\beta(\\rho)` on the host for :math:`\\beta = A/\\rho + B_q`, with
    ``A`` the target mass of the tokens on the :math:`p/\\rho` branch and ``Bq``, ``Pq`` the draft and
    target masses of those on the q branch (ratio above rho).

    :math:`f = (1 - \\rho\\beta) - (1-\\beta)^k` with :math:`1 - \\rho\\beta = P_q - \\rho B_q`, the sum of
    :math:`p - \\rho q` over the q-branch tokens (rows sum to 1), as the numpy core evaluates it: 0
    exactly beyond the largest ratio. As 1 minus a sum near 1, its rounding would decide the sign of f
    wherever :math:`(1-\\beta)^k` is smaller (every ratio within ~1e-5 of 1)."""
    b = A / rho + Bq
    return (Pq - rho * Bq) - np.power(np.maximum(1.0 - b, 0.0), k), b


def _compact(keep: torch.Tensor, r: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The entries of ``r`` ``[B, n]`` and ``w`` ``[B, n, 2]`` where ``keep``, left-aligned in
    ``[B, m]`` (``m`` the largest count; padding: ratio inf, weights 0)."""
    B = keep.shape[0]
    if B == 1:
        idx = keep[0].nonzero().squeeze(1)
        return r[:, idx], w[:, idx]
    cnt = keep.sum(-1)
    m = int(cnt.max())
    slot = torch.where(keep, torch.cumsum(keep, dim=-1) - 1, m)  # dropped entries go to column m
    r2 = torch.full((B, m + 1), float("inf"), dtype=r.dtype, device=r.device).scatter_(1, slot, r)
    w2 = torch.zeros((B, m + 1, 2), dtype=w.dtype, device=w.device).scatter_(1, slot[:, :, None].expand(-1, -1, 2), w)
    return r2[:, :m], w2[:, :m]


def _compact_band(band: torch.Tensor, r: torch.Tensor, p: torch.Tensor, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`_compact` of ``r`` and ``(p, q)`` on ``band`` without stacking the full rows."""
    if band.shape[0] == 1:
        idx = band[0].nonzero().squeeze(1)
        return r[:, idx], torch.stack([p[0, idx], q[0, idx]], dim=-1)[None]
    return _compact(band, r, torch.stack([p, q], dim=-1))


def _model_root(lo: np.ndarray, hi: np.ndarray, A: np.ndarray, Bq: np.ndarray, Pq: np.ndarray, k: int) -> np.ndarray:
    """Root in ``[lo, hi]`` of :math:`g(\rho) = P_q - B_q\rho - (1-\beta)^k`, :math:`\beta = A/\rho + B_q`
    (the smooth piece of f between two ratios; :func:`_f_host`), by Newton from ``lo`` clipped to the bracket, until
    the step is below 4 float64 steps (at most 12 steps)."""
    x = lo.copy()
    for _ in range(12):
        g, b = _f_host(x, A, Bq, Pq, k)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            d1 = np.where(b >= 1.0, 0.0, k * np.power(np.maximum(1.0 - b, 0.0), k - 1))
            x_new = np.clip(x - g / (-d1 * A / (x * x) - Bq), lo, hi)
        x_new = np.where(np.isfinite(x_new), x_new, x)
        step = np.abs(x_new - x)
        x = x_new
        if (step <= 4.0 * np.spacing(x)).all():
            break
    return x


# long-function: the exact root with its long docstring and two code paths (host and masked)
def rho_star(p: torch.Tensor, q: torch.Tensor, k: int) -> torch.Tensor:
    r"""The optimal division factor :math:`\rho^* \in [1, k]` per row ``[B]`` (float64).

    Parameters
    ----------
    p, q : torch.Tensor
        ``[B, V]`` target and draft probability rows,
        float32 or float64.
    k : int
        Number of i.i.d. drafts.

    Returns
    -------
    torch.Tensor
        ``[B]`` float64 :math:`\rho^*` per row: the upper end of a bracket of two adjacent float64
        values with :math:`f > 0` at the lower end and :math:`f \le 0` at the returned one.

    Examples
    --------
    >>> import torch
    >>> rho_star(torch.tensor([[0.5, 0.5]]), torch.tensor([[0.5, 0.5]]), 4).tolist()
    [1.0]
    """
    # One function on purpose (over 80 lines): its stages (histogram, sweep, smooth-piece Newton,
    # grid) share a dozen per-row running arrays -- the bracket ends, f there, the masses at or below
    # and above each end, the folded constants A, Bq, Pq and the working set -- that helpers would
    # have to pass back and forth every iteration; each stage is marked by a comment.
    p = p.double()
    q = q.double()
    B = p.shape[0]
    dev = p.device
    if k == 1 or B == 0:  # one draft: rho* = 1; no rows: an empty result
        return torch.ones(B, dtype=torch.float64, device=dev)
    if not host_shortcuts(p):  # CUDA, or traced: fixed passes, no host read (_kseq_root)
        return rho_star_masked(p, q, k)
    K = float(k)
    shape = tuple(p.shape)
    # q = 0: inf (or nan when p = 0): such tokens sit on the q branch and add q = 0
    r = torch.div(p, q, out=scratch("kseq_ratio", shape, dev))
    # One histogram pass instead of the first bisection steps: token y goes to bin
    # ceil((r_y - 1) nb / (k - 1)) clipped to [0, nb + 1] (0: r <= 1, always on the p / rho branch;
    # nb + 1: r > k or nan, always on the q branch). The bin is a non-decreasing function of r, so
    # the tokens of a run of bins are exactly the tokens of a ratio interval.
    nb = max(4, min(_BINS, shape[1] // 16))  # about 16 tokens per bin at most; B * (nb + 2) host values
    t = torch.sub(r, 1.0, out=scratch("kseq_bin_f", shape, dev)).mul_(nb / (K - 1.0)).ceil_().clamp_(0.0, nb + 1.0)
    t.nan_to_num_(nan=nb + 1.0)
    bins = scratch("kseq_bin", shape, dev, torch.long).copy_(t)
    if B > 1:
        bins += (torch.arange(B, device=dev) * (nb + 2))[:, None]
    flat = bins.view(-1)
    hist = torch.stack(
        [
            torch.bincount(flat, weights=p.reshape(-1), minlength=B * (nb + 2)),
            torch.bincount(flat, weights=q.reshape(-1), minlength=B * (nb + 2)),
        ]
    )
    hp, hq = hist.view(2, B, nb + 2).cpu().numpy()
    # p == q (on normalised rows): f(1) = t - t^k with t = sum (q - p)_+ = 0 exactly, so rho* = 1;
    # summing min(p, q) instead would leave t ~ 1e-16 and move rho* by t^(1/k) (ill-conditioned).
    # t = 0 forces sum_{r > 1} (p - q) = sum (p - q) ~ 0 (rows sum to 1): rows where the histogram
    # shows that sum above 1e-9 have t > 0, the others get the exact test
    excess = hp[:, 1:].sum(1) - hq[:, 1:].sum(1)
    same_h = np.zeros(B, dtype=bool)
    if (excess <= 1e-9).any():
        same_h = (~torch.lt(p, q, out=scratch("kseq_mask", shape, dev, torch.bool)).any(-1)).cpu().numpy() & (excess <= 1e-9)
    A0, B0, P0 = hp[:, 0], hq[:, nb + 1], hp[:, nb + 1]
    Pcum = np.concatenate([np.zeros((B, 1)), np.cumsum(hp[:, 1 : nb + 1], axis=1)], axis=1)  # [B, nb + 1]
    # the masses above each edge summed from the top (not as a total minus a prefix), so that they
    # are exactly 0 where no token lies above (see _f_host)
    Pup = np.concatenate([np.cumsum(hp[:, nb:0:-1], axis=1)[:, ::-1], np.zeros((B, 1))], axis=1)  # [B, nb + 1]
    Qup = np.concatenate([np.cumsum(hq[:, nb:0:-1], axis=1)[:, ::-1], np.zeros((B, 1))], axis=1)
    edges = 1.0 + np.arange(nb + 1) * ((K - 1.0) / nb)
    edges[-1] = K
    f_e, _ = _f_host(edges[None, :], A0[:, None] + Pcum, B0[:, None] + Qup, P0[:, None] + Pup, k)
    f_lo = np.where(same_h, 0.0, f_e[:, 0])
    f_hi = f_e[:, nb]
    active = (f_lo > 0.0) & (f_hi <= 0.0)
    # the root's bin i (first edge with f <= 0), widened by one bin on each side where possible
    nonpos = f_e <= 0.0
    i = np.where(active, nonpos.argmax(1), nb)
    rows = np.arange(B)
    jl = np.where(i >= 2, i - 2, i - 1).clip(0)
    jh = np.where((i + 1 <= nb) & nonpos[rows, np.minimum(i + 1, nb)], np.minimum(i + 1, nb), i)
    jl = np.where(active, jl, 0)
    jh = np.where(active, jh, 0)  # inactive rows: empty working set
    keep = (bins > torch.from_numpy(jl + rows * (nb + 2)).to(dev)[:, None]) & (
        bins <= torch.from_numpy(jh + rows * (nb + 2)).to(dev)[:, None]
    )
    rb, W = _compact_band(keep, r, p, q)  # the working set: [B, m], [B, m, 2]
    # a few bins' worth of tokens: the iterations run on the host (numpy), without per-op dispatch
    rb, W = rb.cpu().numpy(), W.cpu().numpy()
    tot = W.sum(1)
    Pw, Qw = tot[:, 0].copy(), tot[:, 1].copy()
    A = A0 + Pcum[rows, jl]
    Bq = B0 + Qup[rows, jh]
    Pq = P0 + Pup[rows, jh]
    # the bracket [lo, hi] and, for each end, the p- and q-masses at or below it (Plo, Qlo, Phi, Qhi)
    # and above it (Pulo, Qulo, Puhi, Quhi) among the working set (tokens not yet folded into A, Bq, Pq)
    lo, hi = edges[jl], edges[jh]
    lo = np.where(active, lo, 1.0)
    hi = np.where(active, hi, K)
    Plo, Qlo, Phi, Qhi = np.zeros(B), np.zeros(B), Pw.copy(), Qw.copy()
    Pulo, Qulo, Puhi, Quhi = Pw.copy(), Qw.copy(), np.zeros(B), np.zeros(B)
    f_lo = np.where(active, f_e[rows, jl], f_lo)
    f_hi = np.where(active, f_e[rows, jh], f_hi)
    result = np.where(f_lo <= 0.0, 1.0, K)
    for _ in range(_MAX_ITER):
        lo_i, hi_i = lo.view(np.int64), hi.view(np.int64)
        width = np.where(active, hi_i - lo_i, 0)
        act = width > 1
        if not act.any():
            break
        inside = (rb > lo[:, None]) & (rb < hi[:, None]) & act[:, None]  # ratios strictly inside
        if width.max() <= _GRID_ULPS:
            # every float64 strictly inside the bracket: one evaluation pins adjacent ends
            steps = np.arange(1, int(width.max()))
            c = np.minimum(lo_i[:, None] + steps[None, :], np.maximum(hi_i - 1, lo_i)[:, None]).view(np.float64)
        elif not inside.any():
            # no ratio strictly inside: beta = A_lo / rho + B_lo on the whole bracket, so the model's
            # root is f's; a grid of float64 steps around it (and the midpoint, so that the bracket
            # at least halves) pins adjacent ends in one evaluation
            x = _model_root(lo, hi, A + Plo, Bq + Qulo, Pq + Pulo, k)
            grid = x.view(np.int64)[:, None] + np.arange(-(_GRID_ULPS // 2) + 1, _GRID_ULPS // 2 + 1)[None, :]
            grid = np.clip(grid, (lo_i + 1)[:, None], np.maximum(hi_i - 1, lo_i + 1)[:, None]).view(np.float64)
            c = np.concatenate([grid, (0.5 * (lo + hi))[:, None]], axis=1)
        elif B * rb.shape[1] * rb.shape[1] <= _SWEEP_MAX:
            # few ratios left: evaluate f at every one of them, so the next bracket has none inside
            c = np.where(inside, rb, hi[:, None])
        else:
            # Newton on the smooth piece through the end with the smaller |f| (there
            # beta = A_e / rho + B_e exactly), plus a guard point beyond it so that the bracket
            # closes from both sides; bisection where the step leaves the bracket
            use_lo = (f_lo < -f_hi) | (f_hi == 0.0)  # f(hi) = 0 says nothing about the slope
            e = np.where(use_lo, lo, hi)
            fe = np.where(use_lo, f_lo, f_hi)
            Ae = A + np.where(use_lo, Plo, Phi)
            Be = Bq + np.where(use_lo, Qulo, Quhi)
            be = Ae / e + Be
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                d1 = np.where(be >= 1.0, 0.0, k * np.power(np.maximum(1.0 - be, 0.0), k - 1))
                df = -d1 * Ae / (e * e) - Be
                c1 = e - fe / df
                step = c1 - e
                # Newton's error is about step^2 (f''/2f' = O(1) here): a guard that far beyond c1
                c2 = c1 + np.sign(step) * (np.minimum(0.125 * np.abs(step), 4.0 * step * step) + 8.0 * np.spacing(c1))
            mid = 0.5 * (lo + hi)
            ok1 = np.isfinite(c1) & (c1 > lo) & (c1 < hi)
            c1 = np.where(ok1, c1, mid)
            ok2 = ok1 & np.isfinite(c2) & (c2 > lo) & (c2 < hi)
            c2 = np.where(ok2, c2, 0.5 * (c1 + np.where(c1 > mid, lo, hi)))
            c = np.stack([c1, c2], axis=1)
        c = np.where(act[:, None], c, hi[:, None])
        c.sort(axis=1)
        if rb.shape[1]:
            below_c = rb[:, None, :] <= c[:, :, None]
            S = below_c.astype(np.float64) @ W  # [B, J, 2]: masses at or below each candidate
            U = (~below_c).astype(np.float64) @ W  # and above it, summed directly (see _f_host)
            Pc, Qc, Pu, Qu = S[:, :, 0], S[:, :, 1], U[:, :, 0], U[:, :, 1]
        else:
            Pc = Qc = Pu = Qu = np.zeros_like(c)
        fc, _ = _f_host(c, (A + 0.0)[:, None] + Pc, Bq[:, None] + Qu, Pq[:, None] + Pu, k)
        # new hi: the first candidate with f <= 0; new lo: the last candidate before it (f > 0)
        nonpos = fc <= 0.0
        jh = np.where(nonpos.any(1), nonpos.argmax(1), c.shape[1])
        has_hi = act & (jh < c.shape[1])
        jl = jh - 1
        has_lo = act & (jl >= 0)
        rows = np.arange(B)
        jhc, jlc = np.minimum(jh, c.shape[1] - 1), np.maximum(jl, 0)
        # each moved end takes its candidate's value, f and masses (at or below it, above it)
        cand = (c, fc, Pc, Qc, Pu, Qu)
        hi, f_hi, Phi, Qhi, Puhi, Quhi = (
            np.where(has_hi, x[rows, jhc], e) for x, e in zip(cand, (hi, f_hi, Phi, Qhi, Puhi, Quhi), strict=False)
        )
        lo, f_lo, Plo, Qlo, Pulo, Qulo = (
            np.where(has_lo, x[rows, jlc], e) for x, e in zip(cand, (lo, f_lo, Plo, Qlo, Pulo, Qulo), strict=False)
        )
        if rb.shape[1]:
            # fold the tokens outside (lo, hi] into the constants; keep the rest
            A = A + Plo
            Bq = Bq + Quhi
            Pq = Pq + Puhi
            keep = (rb > lo[:, None]) & (rb <= hi[:, None]) & act[:, None]
            if B == 1:
                rb, W = rb[:, keep[0]], W[:, keep[0]]
            else:
                rb, W = np.where(keep, rb, np.inf), np.where(keep[:, :, None], W, 0.0)
                if not keep.any():
                    rb, W = rb[:, :0], W[:, :0]
            tot = W.sum(1)
            Pw, Qw = tot[:, 0].copy(), tot[:, 1].copy()
            Plo, Qlo, Phi, Qhi = np.zeros(B), np.zeros(B), Pw.copy(), Qw.copy()
            Pulo, Qulo, Puhi, Quhi = Pw.copy(), Qw.copy(), np.zeros(B), np.zeros(B)
    result = np.where(active, hi, result)
    return torch.from_numpy(result).to(dev)


@fill_doc
def schedule(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor) -> AcceptSchedule:
    r"""The K-SEQ accept schedule: rounds over every draft with accept ``min(1, p/(rho* q))``, one residual.

    Parameters
    ----------
    {p_q}
    {drafts_iid}

    Returns
    -------
    AcceptSchedule
        ``k`` rounds, accept :math:`\min(1, p(x_j)/(\rho^* q(x_j)))`, residual :math:`\mathrm{norm}((p - \gamma \min(p/\rho^*, q))_+)`.
    """
    k = drafts.shape[1]
    p64, q64, rho = _normalised_rho(p, q, k)
    acc = accept_ratio(gather(p64, drafts), rho[:, None] * gather(q64, drafts))
    return AcceptSchedule(drafts, acc, _residual(p64, q64, rho, k))


def _normalised(p: torch.Tensor, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``p`` and ``q`` as float64 rows divided by their sums (work copies in scratch buffers)."""
    # the root is ill-conditioned near p == q (a 1e-8 error in sum(p) moves rho* by 1e-4 at k = 2),
    # so the rows are renormalised in float64 first: the rule is exact for the normalised laws
    p64 = to_float64(p, "kseq_p")
    p64.div_(p64.sum(-1, keepdim=True))
    q64 = to_float64(q, "kseq_q")
    q64.div_(q64.sum(-1, keepdim=True))
    return p64, q64


def _normalised_rho(p: torch.Tensor, q: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`_normalised` rows and their rho* for ``k`` drafts (:func:`rho_star`)."""
    p64, q64 = _normalised(p, q)
    return p64, q64, rho_star(p64, q64, k)


def _fused_select(
    p64: torch.Tensor,
    q64: torch.Tensor,
    rho: torch.Tensor,
    count: torch.Tensor | None,
    drafts: torch.Tensor,
    coins: torch.Tensor,
    u: torch.Tensor,
) -> torch.Tensor | None:
    """The output tokens from :func:`otspec_gpu.kernels.kseq.kseq_select` (three launches) when
    :func:`~otspec_gpu.kernels.use_kernels` says so; ``None`` otherwise or after a kernel failure
    (the caller then runs the torch selection)."""
    if not use_kernels(p64):
        return None
    from otspec_gpu.kernels.kseq import kseq_select

    return try_kernel(kseq_select, p64, q64, rho, count, drafts, coins, u)


def _residual(p64: torch.Tensor, q64: torch.Tensor, rho: torch.Tensor, k: int, buffer: str | None = None) -> torch.Tensor:
    r"""Residual weights :math:`(p - \gamma \min(p/\rho^*, q))_+` (rows of mass 0: ``p``), fresh or
    in the scratch buffer ``buffer``."""
    m = p64 / rho[:, None] if buffer is None else torch.div(p64, rho[:, None], out=scratch(buffer, tuple(p64.shape), p64.device))
    torch.minimum(m, q64, out=m)
    beta = m.sum(-1)
    pos = beta > 0
    gamma = torch.where(pos, _one_minus_pow(beta, k) / torch.where(pos, beta, torch.ones_like(beta)), torch.zeros_like(beta))
    w = m.mul_(-gamma[:, None]).add_(p64).clamp_(min=0.0)
    return fallback_rows(w, w.sum(-1), p64)


@fill_doc
def conditional(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, *, validate: bool = True) -> torch.Tensor:
    r"""Exact K-SEQ output law ``[B, V]`` for i.i.d. drafts ``[B, k]`` (k = ``drafts.shape[1]``).

    {params_iid}

    {returns_law_raises}

    Examples
    --------
    >>> import torch
    >>> p = torch.tensor([[0.5, 0.5]], dtype=torch.float64); q = torch.tensor([[0.9, 0.1]], dtype=torch.float64)
    >>> conditional(p, q, torch.tensor([[0, 1]])).sum().item()
    1.0
    """
    p, q, drafts = check_step(p, q, drafts, validate=validate, name="kseq")
    return schedule_conditional(schedule(p, q, drafts), p.dtype)


def uniforms(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """The uniforms :func:`sample` consumes: ``[B, k]`` accept coins then ``[B]`` residual uniforms
    (float64, two ``rand`` calls; :func:`~otspec_gpu.verifiers.schedule.draft_round_uniforms`).

    Parameters
    ----------
    p, q : torch.Tensor
        ``[B, V]`` (or ``[1, V]``) target and draft rows (their device is used).
    drafts : torch.Tensor
        ``[B, k]`` long drafts.
    generator : torch.Generator
        Source of the uniforms.

    Returns
    -------
    tuple of torch.Tensor
        ``(coins [B, k], u [B])``.
    """
    return draft_round_uniforms(p, q, drafts, generator)


def step(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, coins: torch.Tensor, u: torch.Tensor) -> StepOutput:
    r"""K-SEQ as a pure step of its uniforms: :func:`sample` is the checks, :func:`uniforms`, then this.

    On CPU in eager mode :math:`\rho^*` comes from the host-driven solver of :func:`rho_star`; while
    traced and on CUDA from :func:`~otspec_gpu.verifiers.step._kseq_root.rho_star_masked` (no host
    synchronisation). Both return the root's adjacent float64 bracket end up to summation order
    (a few ulps), so the tokens agree except where a uniform falls within that distance of a
    threshold. On CUDA with Triton (:func:`~otspec_gpu.kernels.use_kernels`) the selection given
    :math:`\rho^*` -- the accept tests, :math:`\beta`, :math:`\gamma` and the residual draw -- runs as
    the three launches of :func:`otspec_gpu.kernels.kseq.kseq_select` (the same arithmetic, sums in
    another order), falling back to the torch selection if a kernel fails.

    Parameters
    ----------
    p, q : torch.Tensor
        ``[B, V]`` (or ``[1, V]``) target and draft rows.
    drafts : torch.Tensor
        ``[B, k]`` long i.i.d. drafts.
    coins : torch.Tensor
        ``[B, k]`` float64 accept coins.
    u : torch.Tensor
        ``[B]`` float64 residual uniforms.

    Returns
    -------
    StepOutput
        Output token, accepted flag and draft slot per row.
    """
    k = drafts.shape[1]
    p64, q64, rho = _normalised_rho(p, q, k)
    tok = _fused_select(p64, q64, rho, None, drafts, coins, u)
    if tok is not None:
        return step_output(tok, drafts)
    acc = accept_ratio(gather(p64, drafts), rho[:, None] * gather(q64, drafts))
    # the residual is built only when a row rejects every draft (CPU early exit, see schedule.rounds_step)
    return step_output(rounds_step(drafts, acc, lambda: _residual(p64, q64, rho, k, "kseq_res"), coins, u), drafts)


def node_step(
    p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, count: torch.Tensor, coins: torch.Tensor, u: torch.Tensor
) -> torch.Tensor:
    r"""K-SEQ over the first ``count[b]`` drafts of each row (a tree node with that many alive
    drafts), with masks instead of row groups: fixed shapes, no host synchronisation.

    Row b runs the rule with :math:`k = m_b =` ``count[b]``: :math:`\rho^*` for :math:`m_b`
    (:func:`~otspec_gpu.verifiers.step._kseq_root.rho_star_masked` with a per-row k), accept
    probability 0 for the slots past :math:`m_b`, and the residual's :math:`\gamma` for :math:`m_b`;
    the same law as :func:`sample` on those :math:`m_b` drafts. On CUDA with Triton the selection
    runs fused (:func:`otspec_gpu.kernels.kseq.kseq_select` with ``count``), as in :func:`step`.

    Parameters
    ----------
    p, q : torch.Tensor
        ``[B, V]`` node rows.
    drafts : torch.Tensor
        ``[B, k]`` long, the alive drafts first (slots past ``count`` are ignored).
    count : torch.Tensor
        ``[B]`` long alive drafts per row, in ``1..k`` (rows already stopped may hold any value in
        that range; their output is discarded by the caller).
    coins : torch.Tensor
        ``[B, k]`` float64 accept coins.
    u : torch.Tensor
        ``[B]`` float64 residual uniforms.

    Returns
    -------
    torch.Tensor
        ``[B]`` long output tokens.
    """
    k = drafts.shape[1]
    m = count.clamp(1, k).to(torch.float64)
    p64, q64 = _normalised(p, q)
    rho = rho_star_masked(p64, q64, m, k_max=k)
    tok = _fused_select(p64, q64, rho, count, drafts, coins, u)
    if tok is not None:
        return tok
    acc = accept_ratio(gather(p64, drafts), rho[:, None] * gather(q64, drafts))
    acc = torch.where(torch.arange(k, device=drafts.device)[None, :] < count[:, None], acc, 0.0)
    return rounds_step(drafts, acc, _residual(p64, q64, rho, m), coins, u)


kseq = TorchVerifier(
    "kseq",
    "iid",
    True,
    conditional,
    reference="SpecTr (Sun et al. 2023), Algorithm 2",
    uniforms=uniforms,
    step=step,
)

__getattr__ = deprecated_module_sample(kseq)  # the 0.1.0 module-level sample, for one minor release
