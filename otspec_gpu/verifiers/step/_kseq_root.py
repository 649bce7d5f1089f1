r"""K-SEQ's :math:`\rho^*` without host synchronisation: a fixed number of multisection passes over
the float64 values of :math:`[1, k]` (what the K-SEQ pure step, the masked K-SEQ tree walk and every
CUDA call run; :func:`otspec_gpu.verifiers.step.kseq.rho_star` keeps the faster host-driven solver
for eager CPU calls).

With :math:`r = p/q` and, at :math:`\rho`, :math:`A = \sum_{r \le \rho} p`, :math:`B_q = \sum_{r > \rho} q`,
:math:`P_q = \sum_{r > \rho} p`:

.. math::
    \beta(\rho) = A/\rho + B_q,\qquad f(\rho) = (P_q - \rho B_q) - (1 - \beta(\rho))_+^k,

non-increasing in :math:`\rho`, with the root :math:`\rho^*` the smallest :math:`\rho` with
:math:`f(\rho) \le 0` (the masses above :math:`\rho` are summed over those tokens, never as a total
minus a prefix, so :math:`P_q - \rho B_q` is exactly 0 beyond the largest ratio; the numpy core's
evaluation, see :mod:`otspec_gpu.verifiers.step.kseq`).

**Passes.** The bracket :math:`[lo, hi]` is held as the int64 bit patterns of two positive float64
values, which order them, so its width :math:`W` counts the float64 values it spans. A pass puts
:math:`M` candidates :math:`c_i = \min(lo + i s, hi)`, :math:`s = \lceil W/M \rceil`, and gives each
token inside :math:`(lo, hi]` the bin :math:`\lceil (\mathrm{bits}(r) - lo)/s \rceil` (the number of
candidates below its ratio: integer arithmetic, no search); one ``index_add`` of p and q per bin
and prefix / suffix sums give f at every candidate, with the tokens at or below ``lo`` and above
``hi`` added as three dense masked sums. The new bracket is the first candidate with
:math:`f \le 0` and the one before it; the ends keep the signs found for them earlier (f is never
re-evaluated at an end, so rounding cannot break the invariant :math:`f(lo) > 0 \ge f(hi)`). The
first pass runs on :math:`[1, k]` with :math:`c_0 = 1`: :math:`f(1) \le 0` returns 1 (``p == q``
included: no ratio exceeds 1, so :math:`P_q - B_q = 0` exactly), :math:`f(k) > 0` returns k
(impossible in exact arithmetic). After :math:`n` passes the width is :math:`\lceil W_0/M^n \rceil`,
so :math:`n = \lceil \log_M W_0 \rceil` passes (6 for :math:`k \le 2^{64}` with :math:`M = 1024`; M is
``bins_for(V)``: fewer candidates and more passes below V = 1 024) leave two adjacent float64 values, and the upper one is returned: the contract of the numpy core's
bisection (:func:`otspec.verifiers.step.kseq.kseq_rho_star`), up to the order of summation.

Tokens outside the bracket add 0 to bins spread by token index, so no bin receives most of the
row (on CUDA ``index_add`` is atomic; on CPU it is sequential and the result deterministic). ``k``
may differ per row (a tree node with ``m`` alive drafts); the number of passes is set by the
largest.

**Kernel path.** On CUDA with Triton (:func:`otspec_gpu.kernels.use_kernels`) the passes run as the
fused kernels of :func:`otspec_gpu.kernels.kseq.rho_star_passes`: per pass, one launch over
``(row, chunk of V)`` bins the chunk's tokens (masked ``atomic_add`` of p and q for the tokens inside
the bracket, one atomic for the chunk's three sums outside it) and one program per row computes f
at the :math:`M + 1` candidates and moves the bracket in place: two launches per pass, no host read,
so a CUDA graph can capture it. It evaluates the same f at the same candidates up to the order of
summation and :math:`x^k` by binary exponentiation (a few ulps; the contract above holds for its
own evaluation of f). A kernel that fails to compile or launch warns once and the torch passes
below run instead (:func:`otspec_gpu.kernels.try_kernel`).
"""

from __future__ import annotations

import struct

import torch

from otspec_gpu.kernels import try_kernel, use_kernels

__all__ = ["BINS", "MIN_BINS", "bins_for", "passes", "rho_star_masked"]

#: Candidates per pass at most (the bracket shrinks by this factor per pass).
BINS = 1024
#: Candidates per pass at least (small vocabularies).
MIN_BINS = 16


def bins_for(V: int) -> int:
    """Candidates per pass for a vocabulary of ``V``: the power of two at or above V, within
    :data:`MIN_BINS`..:data:`BINS`. A pass costs :math:`O(B(V + M))`, so a small vocabulary with many
    rows (a test's or a tree's batch) takes more, cheaper passes instead of ``B x 1 025`` bins each.

    Parameters
    ----------
    V : int
        Vocabulary size.

    Returns
    -------
    int
        M, a power of two.
    """
    return min(BINS, max(MIN_BINS, 1 << max(0, int(V) - 1).bit_length()))


def passes(k_max: int, bins: int = BINS) -> int:
    """Passes that leave two adjacent float64 values from :math:`[1, k_{max}]` (:math:`\\lceil \\log_M W_0 \\rceil`).

    Parameters
    ----------
    k_max : int
        The largest number of drafts of any row (>= 1).
    bins : int
        Candidates per pass, M (default :data:`BINS`).

    Returns
    -------
    int
        The number of passes (0 for ``k_max = 1``).
    """
    w0 = _bits(float(k_max)) - _bits(1.0)
    n = 0
    while w0 > 1:
        w0 = -(-w0 // bins)
        n += 1
    return n


def _bits(x: float) -> int:
    """The int64 bit pattern of a float64 (ordered like the values for positive ones)."""
    return struct.unpack("<q", struct.pack("<d", x))[0]


def _above(h: torch.Tensor) -> torch.Tensor:
    """``[B, M + 1]``: the mass of the bins above each bin, summed from the top (exactly 0 above the last)."""
    suffix = torch.flip(torch.cumsum(torch.flip(h, [1]), 1), [1])
    return torch.cat([suffix[:, 1:], torch.zeros_like(h[:, :1])], 1)


def _pow_pos(base: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """:math:`\\max(base, 0)^k` (``0^k = 0`` for k >= 1)."""
    return torch.pow(base.clamp_min(0.0), k)


# long-function: one host-sync-free multisection with shared intermediates
def rho_star_masked(p: torch.Tensor, q: torch.Tensor, k: int | torch.Tensor, k_max: int | None = None) -> torch.Tensor:
    r""":math:`\rho^*` per row by :func:`passes` multisection passes, fixed shapes, no host read (on
    CUDA with Triton, the fused kernels of :func:`otspec_gpu.kernels.kseq.rho_star_passes`).

    Parameters
    ----------
    p, q : torch.Tensor
        ``[B, V]`` float64 probability rows (normalised by the caller).
    k : int or torch.Tensor
        Number of i.i.d. drafts, one for every row or ``[B]`` per row (>= 1).
    k_max : int, optional
        An upper bound on ``k`` known on the host (required when ``k`` is a tensor: it sets the
        number of passes without reading ``k``).

    Returns
    -------
    torch.Tensor
        ``[B]`` float64: the upper end of two adjacent float64 values with :math:`f > 0` at the
        lower and :math:`f \le 0` at the returned one; 1 where :math:`f(1) \le 0`; 1 where k = 1.
    """
    B, V = p.shape
    dev = p.device
    if isinstance(k, torch.Tensor):
        if k_max is None:
            raise ValueError("rho_star_masked: pass k_max (a host bound on the per-row k) with a tensor k")
        K = k.to(device=dev, dtype=torch.float64)
    else:
        k_max = int(k)
        K = torch.full((B,), float(k), dtype=torch.float64, device=dev)
    one = torch.ones(B, dtype=torch.float64, device=dev)
    M = bins_for(V)
    n_pass = passes(max(int(k_max), 1), M)
    if n_pass == 0 or B == 0 or V == 0:
        return one
    if use_kernels(p):  # two fused launches per pass (otspec_gpu.kernels.kseq)
        from otspec_gpu.kernels.kseq import rho_star_passes

        out = try_kernel(rho_star_passes, p, q, K, n_pass, M)
        if out is not None:
            return out
    # ratio bits: q = 0 (inf, or nan when p = 0 too) goes above every candidate, on the q branch
    r = torch.where(q > 0, p / torch.where(q > 0, q, 1.0), torch.inf)
    bits = r.view(torch.int64)
    spread = torch.arange(V, device=dev) % (M + 1)  # bins of the tokens outside the bracket (they add 0)
    offset = (torch.arange(B, device=dev) * (M + 1))[:, None]
    lo = one.view(torch.int64).clone()
    hi = torch.maximum(K, one).view(torch.int64).clone()
    i = torch.arange(M + 1, device=dev)
    # rows whose answer is an end: f(1) <= 0 -> 1, f(k) > 0 -> k (found by the first pass)
    at_one = torch.zeros(B, dtype=torch.bool, device=dev)
    at_k = torch.zeros(B, dtype=torch.bool, device=dev)
    for n in range(n_pass):  # a fixed number of passes (set by k_max on the host)
        W = hi - lo
        s = torch.clamp((W + (M - 1)) // M, min=1)
        cbits = torch.minimum(lo[:, None] + i[None, :] * s[:, None], hi[:, None])  # [B, M + 1]; c_0 = lo
        c = cbits.view(torch.float64)
        below = bits <= lo[:, None]
        above = bits > hi[:, None]
        inside = ~(below | above)
        b = torch.div(bits - lo[:, None] + (s[:, None] - 1), s[:, None], rounding_mode="floor")
        b = torch.where(inside, b.clamp(1, M), spread[None, :])  # inside: 1..M (c_{b-1} < r <= c_b)
        flat = (b + offset).reshape(-1)
        hp = torch.zeros(B * (M + 1), dtype=torch.float64, device=dev).index_add_(0, flat, torch.where(inside, p, 0.0).reshape(-1))
        hq = torch.zeros(B * (M + 1), dtype=torch.float64, device=dev).index_add_(0, flat, torch.where(inside, q, 0.0).reshape(-1))
        hp, hq = hp.view(B, M + 1), hq.view(B, M + 1)
        A_lo = torch.where(below, p, 0.0).sum(1)
        Pq_hi = torch.where(above, p, 0.0).sum(1)
        Bq_hi = torch.where(above, q, 0.0).sum(1)
        # at c_j: mass at or below = A_lo + bins 1..j; above = bins j+1..M (summed from the top) + above hi
        A = A_lo[:, None] + torch.cumsum(hp, 1)
        up_p, up_q = _above(hp), _above(hq)
        Pq = Pq_hi[:, None] + up_p
        Bq = Bq_hi[:, None] + up_q
        beta = A / c + Bq
        f = (Pq - c * Bq) - _pow_pos(1.0 - beta, K[:, None])
        if n == 0:  # the ends of [1, k] themselves
            at_one = f[:, 0] <= 0.0
            at_k = f[:, M] > 0.0
        # interior candidates 1..M-1 only: the ends keep their known signs
        nonpos = f[:, 1:M] <= 0.0
        j = torch.where(nonpos.any(1), torch.argmax(nonpos.to(torch.uint8), 1) + 1, M)
        new_hi = cbits.gather(1, j[:, None]).squeeze(1)
        new_lo = cbits.gather(1, (j - 1)[:, None]).squeeze(1)
        hi = torch.where(new_hi > lo, new_hi, hi)  # duplicates of lo (width < M) never become hi
        lo = torch.where(new_hi > new_lo, new_lo, lo)
    out = hi.view(torch.float64)
    out = torch.where(at_k, K, out)
    return torch.where(at_one | (K <= 1.0), one, out)
