r"""Triton kernels of K-SEQ: the :math:`\rho^*` multisection passes (the fused twin of the torch passes of
:func:`otspec_gpu.verifiers.step._kseq_root.rho_star_masked`; the maths is in that module) and the
selection given :math:`\rho^*` (:func:`kseq_select`, the twin of the accept tests and residual draw of
:func:`otspec_gpu.verifiers.step.kseq.step` and ``node_step``).

**rho* passes.** Each pass is two launches, with no host synchronisation and no Python branch on a tensor value:

1. ``_bin_pass``, one program per ``(row, chunk of V)``: the chunk's ratios :math:`r = p/q`
   (``inf`` where :math:`q = 0`; IEEE float64 division, so the same bits as torch's), their int64 bit
   patterns and, for the tokens inside the bracket :math:`(lo, hi]`, the bin
   :math:`\lceil (\mathrm{bits}(r) - lo)/s \rceil \in [1, M]` by integer arithmetic; the inside tokens
   add their p and q to the row's ``[M + 1]`` histograms with masked ``atomic_add`` (the others issue
   none), and the program adds its float64 partial sums of p at or below ``lo``, p above ``hi`` and
   q above ``hi`` with one (3-lane) ``atomic_add``;
2. ``_update``, one program per row: the ``M + 1`` bins' prefix sums (mass at or below each
   candidate :math:`c_j = \min(lo + j s, hi)`, plus the sum at or below ``lo``) and suffix sums from
   the top (mass strictly above :math:`c_j`, plus the sums above ``hi``: exactly 0 above the last
   occupied bin), f at every candidate by the torch formula
   :math:`f = (P_q - c B_q) - (1 - \beta)_+^k`, :math:`\beta = A/c + B_q`, and the first interior
   candidate with :math:`f \le 0`, which moves the bracket (the int64 ends, in place). The first
   pass also records the rows with :math:`f(1) \le 0` (result 1) and :math:`f(k) > 0` (result k).
   The program then zeroes its row's histograms and sums for the next pass, and writes the row's
   current result (so the last pass leaves the answer, with no extra launch).

Compared with the torch passes: the bins, candidates, bracket moves and the formula of f are the
same; the bins and the masked sums add in another order (chunked, and in the order of the atomics
on CUDA), the prefix / suffix sums are parallel scans rather than running sums, and
:math:`x^k` is computed by binary exponentiation (k is an integer: at most :math:`2\log_2 k`
roundings, where ``torch.pow`` rounds once; Triton's interpreter has no ``pow``). f therefore differs
by a few ulps, and the root by a few ulps of :math:`\rho^*` on well-conditioned rows; the result keeps
the contract (:math:`f > 0` one float64 below it, :math:`f \le 0` at it, for the kernel's evaluation
of f). Both the kernel and torch's CUDA ``index_add`` use atomics, so on CUDA the last bits may vary
from run to run; under the interpreter the programs run in order and the result is deterministic.

**Selection** (:func:`kseq_select`): three launches, laid out as
:func:`otspec_gpu.kernels.chain.rrs_single_step` (a row spread over up to ``MAX_CHUNKS`` programs):

1. ``_select_beta``, one program per ``(row, chunk)``: the chunk's float64 share of
   :math:`\beta = \sum_y \min(p(y)/\rho^*, q(y))`;
2. ``_select_partials``, one program per ``(row, chunk)``: the row's :math:`\beta` from its partials
   (each program sums them itself, in the same order, so every program of the row has the same
   bits), :math:`\gamma = (1 - (1 - \beta)^m)/\beta` (0 where :math:`\beta = 0`; ``log1p`` and ``expm1``
   by the Goldberg / Kahan identities, so it keeps ``_one_minus_pow``'s accuracy for small
   :math:`\beta`: within a few ulps of it), then the chunk's float64 sums of the residual weights
   :math:`(p - \gamma \min(p/\rho^*, q))_+` and of ``p`` (the fallback of a residual of mass 0);
3. ``_select``, one program per row: the accept tests of the valid slots
   (:math:`u_j < \min(1, p(x_j)/(\rho^* q(x_j)))`, the arithmetic of ``accept_ratio``: the same
   decisions as torch), the first accepted draft, else the inverse-CDF draw of
   :func:`otspec_gpu.sampling.search_cdf`'s rule from the chunk sums and one float64 scan of the chunk
   found (the search of :mod:`otspec_gpu.kernels.chain`).

Every launch recomputes the row's accept tests (``k`` gathers) and a row that accepts reads nothing
of its ``[V]`` rows. Against the torch selection, for the same :math:`\rho^*` and uniforms: the same
accept decisions and, elementwise, the same residual weights up to :math:`\gamma` (a few ulps:
:math:`\beta` adds in another order); a token can differ only where a uniform falls within a few ulps
of a cumulative boundary.

Triton reads ``TRITON_INTERPRET`` when this module is imported (the kernels are jitted then); under
``TRITON_INTERPRET=1`` they also run on CPU tensors (the tests use that; slow, for checking only).
"""

import torch
import triton
import triton.language as tl

from otspec_gpu.kernels._common import layout, no_fma, pow2, row_stride

__all__ = ["kseq_select", "rho_star_passes"]


@triton.jit
def _bin_pass(p_ptr, q_ptr, lo_ptr, hi_ptr, h_ptr, s_ptr, V, sp_b, sq_b, M: tl.constexpr, BLOCK_V: tl.constexpr, CHUNK: tl.constexpr):
    """Program ``(b, c)``: chunk ``c`` of row ``b`` into the histograms ``h[b, 0 | 1, 1..M]`` (p | q of
    the tokens inside ``(lo, hi]``) and the sums ``s[b, 0..2]`` (p at or below ``lo``, p and q above ``hi``)."""
    b = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1)
    lo = tl.load(lo_ptr + b)
    hi = tl.load(hi_ptr + b)
    step = tl.maximum((hi - lo + (M - 1)) // M, 1)  # s = ceil(W / M), at least 1 (W >= 0)
    hp = h_ptr + b * (2 * (M + 1))
    hq = hp + (M + 1)
    offs = tl.arange(0, BLOCK_V)
    acc_a = tl.zeros([BLOCK_V], tl.float64)
    acc_p = tl.zeros([BLOCK_V], tl.float64)
    acc_q = tl.zeros([BLOCK_V], tl.float64)
    for j in range(0, CHUNK, BLOCK_V):
        idx = c * CHUNK + j + offs
        m = idx < V
        pv = tl.load(p_ptr + b * sp_b + idx, mask=m, other=0.0)
        qv = tl.load(q_ptr + b * sq_b + idx, mask=m, other=0.0)  # padding: q = 0, ratio inf, adds 0 above hi
        pos = qv > 0
        r = tl.where(pos, pv / tl.where(pos, qv, 1.0), float("inf"))
        bits = r.to(tl.int64, bitcast=True)
        below = bits <= lo
        above = bits > hi
        inside = m & (bits > lo) & (bits <= hi)
        k = tl.minimum(tl.maximum((bits - lo + (step - 1)) // step, 1), M)  # inside: c_{k-1} < r <= c_k
        tl.atomic_add(hp + k, pv, mask=inside)
        tl.atomic_add(hq + k, qv, mask=inside)
        acc_a += tl.where(below, pv, 0.0)
        acc_p += tl.where(above, pv, 0.0)
        acc_q += tl.where(above, qv, 0.0)
    i = tl.arange(0, 4)
    tot = tl.where(i == 0, tl.sum(acc_a, axis=0), tl.where(i == 1, tl.sum(acc_p, axis=0), tl.sum(acc_q, axis=0)))
    tl.atomic_add(s_ptr + b * 4 + i, tot, mask=i < 3)


@triton.jit
def _pow_int(x, e):
    """``x ** e`` elementwise for an integer-valued float64 scalar ``e >= 0`` (binary exponentiation)."""
    res = tl.full(x.shape, 1.0, tl.float64)
    base = x
    while e > 0.0:
        half = tl.floor(e * 0.5)
        res = tl.where(e - 2.0 * half > 0.0, res * base, res)  # the low bit of e
        base = base * base
        e = half
    return res


@triton.jit
def _update(h_ptr, s_ptr, k_ptr, lo_ptr, hi_ptr, end_ptr, out_ptr, M: tl.constexpr, BLOCK_M: tl.constexpr, FIRST: tl.constexpr):
    """Program ``b``: f at the ``M + 1`` candidates of row ``b``, the new bracket (in place), on the first
    pass the ends' signs (``end[b]``: 1 if f(1) <= 0, 2 if f(k) > 0, else 0), the row's current
    result ``out[b]``; then its histograms and sums are zeroed for the next pass."""
    b = tl.program_id(0).to(tl.int64)
    lo = tl.load(lo_ptr + b)
    hi = tl.load(hi_ptr + b)
    K = tl.load(k_ptr + b)
    step = tl.maximum((hi - lo + (M - 1)) // M, 1)
    hp = h_ptr + b * (2 * (M + 1))
    hq = hp + (M + 1)
    j = tl.arange(0, BLOCK_M)
    jm = j <= M
    bin_p = tl.load(hp + j, mask=jm, other=0.0)
    next_p = tl.load(hp + j + 1, mask=j < M, other=0.0)  # bin j + 1: its suffix sum is the mass above c_j
    next_q = tl.load(hq + j + 1, mask=j < M, other=0.0)
    A = tl.load(s_ptr + b * 4) + tl.cumsum(bin_p, axis=0)
    Pq = tl.load(s_ptr + b * 4 + 1) + tl.cumsum(next_p, axis=0, reverse=True)
    Bq = tl.load(s_ptr + b * 4 + 2) + tl.cumsum(next_q, axis=0, reverse=True)
    cb = tl.minimum(lo + j.to(tl.int64) * step, hi)  # c_0 = lo
    c = cb.to(tl.float64, bitcast=True)
    beta = A / c + Bq
    f = (Pq - c * Bq) - _pow_int(tl.maximum(1.0 - beta, 0.0), K)
    # the first interior candidate (1..M-1) with f <= 0, else M: the ends keep their known signs
    jn = tl.min(tl.where((j >= 1) & (j < M) & (f <= 0.0), j, M), axis=0).to(tl.int64)
    new_hi = tl.minimum(lo + jn * step, hi)
    new_lo = tl.minimum(lo + (jn - 1) * step, hi)
    hi_out = tl.where(new_hi > lo, new_hi, hi)  # duplicates of lo (width < M) never become hi
    lo_out = tl.where(new_hi > new_lo, new_lo, lo)
    tl.store(hi_ptr + b, hi_out)
    tl.store(lo_ptr + b, lo_out)
    if FIRST:  # the ends of [1, k] themselves
        f_one = tl.min(tl.where(j == 0, f, float("inf")), axis=0)
        f_k = tl.min(tl.where(j == M, f, float("inf")), axis=0)
        end = tl.where(f_one <= 0.0, 1, tl.where(f_k > 0.0, 2, 0))
        tl.store(end_ptr + b, end)
    else:
        end = tl.load(end_ptr + b)
    rho = tl.where(end == 2, K, hi_out.to(tl.float64, bitcast=True))
    tl.store(out_ptr + b, tl.where((end == 1) | (K <= 1.0), 1.0, rho))
    tl.store(hp + j, tl.zeros([BLOCK_M], tl.float64), mask=jm)
    tl.store(hq + j, tl.zeros([BLOCK_M], tl.float64), mask=jm)
    i = tl.arange(0, 4)
    tl.store(s_ptr + b * 4 + i, tl.zeros([4], tl.float64), mask=i < 3)


def rho_star_passes(p: torch.Tensor, q: torch.Tensor, K: torch.Tensor, n_pass: int, bins: int) -> torch.Tensor:
    r"""Fused twin of :func:`~otspec_gpu.verifiers.step._kseq_root.rho_star_masked`'s passes: ``n_pass``
    multisection passes of two launches each, no host synchronisation (fixed launches: a CUDA graph
    can capture it).

    Parameters
    ----------
    p, q : torch.Tensor
        ``[B, V]`` float64 probability rows (normalised by the caller; ``q`` may be ``[1, V]``, shared).
    K : torch.Tensor
        ``[B]`` float64 number of drafts per row (integer values >= 1).
    n_pass : int
        Number of passes (:func:`~otspec_gpu.verifiers.step._kseq_root.passes` of the largest k and
        ``bins``; >= 1).
    bins : int
        Candidates per pass, M, a power of two (:func:`~otspec_gpu.verifiers.step._kseq_root.bins_for`).

    Returns
    -------
    torch.Tensor
        ``[B]`` float64 :math:`\rho^*`: 1 where :math:`f(1) \le 0` or :math:`K \le 1`, K where
        :math:`f(K) > 0`, else the upper end of the final bracket.
    """
    V = p.shape[1]
    B = max(p.shape[0], q.shape[0], K.numel())  # a [1, V] row may be shared by per-row k (stride 0)
    dev = p.device
    p = p.to(torch.float64)
    q = q.to(torch.float64)
    p, q = (x if x.stride(-1) == 1 else x.contiguous() for x in (p, q))
    K = K.to(device=dev, dtype=torch.float64).reshape(-1).expand(B).contiguous()
    block, chunk, nch = layout(V)
    M = int(bins)
    hist = torch.zeros((B, 2, M + 1), dtype=torch.float64, device=dev)  # [B, p | q, bin]
    sums = torch.zeros((B, 4), dtype=torch.float64, device=dev)  # [B, (A_lo, Pq_hi, Bq_hi, unused)]
    lo = torch.ones(B, dtype=torch.float64, device=dev).view(torch.int64)  # bits of 1.0
    hi = torch.clamp(K, min=1.0).view(torch.int64)  # bits of max(k, 1) (a fresh tensor: updated in place)
    end = torch.zeros(B, dtype=torch.int32, device=dev)
    out = torch.ones(B, dtype=torch.float64, device=dev)
    opts = no_fma()
    strides = (row_stride(p), row_stride(q))
    for n in range(n_pass):  # a fixed number of passes: two launches each
        _bin_pass[(B, nch)](p, q, lo, hi, hist, sums, V, *strides, M=M, BLOCK_V=block, CHUNK=chunk, **opts)
        _update[(B,)](hist, sums, K, lo, hi, end, out, M=M, BLOCK_M=pow2(M + 1), FIRST=n == 0, **opts)
    return out


@triton.jit
def _accept(
    p_ptr, q_ptr, d_ptr, c_ptr, cnt_ptr, rho_ptr, b, sp_b, sq_b, sr, K: tl.constexpr, BLOCK_K: tl.constexpr, HAS_COUNT: tl.constexpr
):
    """Row ``b``'s accept tests, the arithmetic of ``accept_ratio``: slot ``j < cnt`` accepts iff
    ``coin_j < min(1, p(x_j) / (rho q(x_j)))`` (1 where ``rho q(x_j) <= 0``). Returns ``(done, token, rho, cnt)``:
    whether a slot accepted, the first accepted draft, the row's rho* and its number of valid slots."""
    rho = tl.load(rho_ptr + b * sr)
    if HAS_COUNT:
        cnt = tl.load(cnt_ptr + b)
    else:
        cnt = tl.full([], K, tl.int64)
    kk = tl.arange(0, BLOCK_K)
    km = kk < K
    x = tl.load(d_ptr + b * K + kk, mask=km, other=0)
    px = tl.load(p_ptr + b * sp_b + x, mask=km, other=0.0)
    qx = tl.load(q_ptr + b * sq_b + x, mask=km, other=0.0)
    den = rho * qx
    pos = den > 0
    acc = tl.where(pos, tl.minimum(px / tl.where(pos, den, 1.0), 1.0), 1.0)
    coin = tl.load(c_ptr + b * K + kk, mask=km, other=1.0)
    hit = (coin < acc) & km & (kk < cnt)
    first = tl.min(tl.where(hit, kk, BLOCK_K), axis=0)
    return first < BLOCK_K, tl.sum(tl.where(kk == first, x, 0), axis=0), rho, cnt


@triton.jit
def _gamma(beta_ptr, b, cnt, NCH, K: tl.constexpr, BLOCK_C: tl.constexpr):
    r"""Row ``b``'s :math:`\gamma = (1 - (1 - \beta)^m)/\beta` (0 where :math:`\beta = 0`), :math:`\beta` the
    sum of its ``NCH`` chunk partials (the same reduction in every program of the row, so the same bits),
    :math:`m` = ``cnt`` clipped to ``1..K``. :math:`1 - (1 - \beta)^m = -\mathrm{expm1}(m\,\mathrm{log1p}(-\beta))`
    as ``_one_minus_pow`` (1 for :math:`\beta \ge 1`), with ``log1p`` and ``expm1`` by the Goldberg and Kahan
    identities from ``log`` and ``exp`` (a few ulps; accurate for small :math:`\beta`)."""
    ci = tl.arange(0, BLOCK_C)
    beta = tl.sum(tl.load(beta_ptr + b * NCH + ci, mask=ci < NCH, other=0.0), axis=0)
    m = tl.minimum(tl.maximum(cnt, 1), K).to(tl.float64)
    full = beta >= 1.0
    nb = -tl.where(full, 0.5, beta)  # log1p(nb); beta >= 1 takes the other branch (no log(0))
    w = 1.0 + nb
    one = w == 1.0
    l1p = tl.where(one, nb, tl.log(w) * (nb / tl.where(one, 1.0, w - 1.0)))  # Goldberg
    y = m * l1p
    e = tl.exp(y)
    flat = (e == 1.0) | (e == 0.0)
    em1 = tl.where(e == 1.0, y, tl.where(e == 0.0, -1.0, ((e - 1.0) * y) / tl.log(tl.where(flat, 2.0, e))))  # Kahan
    omp = tl.where(full, 1.0, -em1)
    pos = beta > 0
    return tl.where(pos, omp / tl.where(pos, beta, 1.0), 0.0)


@triton.jit
def _select_beta(
    p_ptr, q_ptr, d_ptr, c_ptr, cnt_ptr, rho_ptr, beta_ptr, V, NCH, sp_b, sq_b, sr,
    K: tl.constexpr, BLOCK_K: tl.constexpr, HAS_COUNT: tl.constexpr, BLOCK_V: tl.constexpr, CHUNK: tl.constexpr,
):  # fmt: skip
    r"""Program ``(b, c)``: chunk ``c``'s float64 share of :math:`\beta = \sum_y \min(p/\rho^*, q)` (0 for a
    row that accepts a draft: it reads nothing of its rows)."""
    b = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1)
    done, out, rho, cnt = _accept(p_ptr, q_ptr, d_ptr, c_ptr, cnt_ptr, rho_ptr, b, sp_b, sq_b, sr, K, BLOCK_K, HAS_COUNT)
    lim = tl.where(done, 0, V)  # loads below lim only (a bound rather than a scalar mask: the interpreter needs vector masks)
    offs = tl.arange(0, BLOCK_V)
    acc = tl.zeros([BLOCK_V], tl.float64)
    for j in range(0, CHUNK, BLOCK_V):
        idx = c * CHUNK + j + offs
        m = idx < lim
        pv = tl.load(p_ptr + b * sp_b + idx, mask=m, other=0.0)
        qv = tl.load(q_ptr + b * sq_b + idx, mask=m, other=0.0)
        acc += tl.minimum(pv / rho, qv)
    tl.store(beta_ptr + b * NCH + c, tl.sum(acc, axis=0))


@triton.jit
def _select_partials(
    p_ptr, q_ptr, d_ptr, c_ptr, cnt_ptr, rho_ptr, beta_ptr, part_ptr, V, NCH, sp_b, sq_b, sr,
    K: tl.constexpr, BLOCK_K: tl.constexpr, HAS_COUNT: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_C: tl.constexpr,
    CHUNK: tl.constexpr,
):  # fmt: skip
    r"""Program ``(b, c)``: chunk ``c``'s float64 sums of the residual weights
    :math:`(p - \gamma \min(p/\rho^*, q))_+` and of the fallback row ``p`` (``part[b, 0 | 1, c]``; 0 for a
    row that accepts a draft)."""
    b = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1)
    done, out, rho, cnt = _accept(p_ptr, q_ptr, d_ptr, c_ptr, cnt_ptr, rho_ptr, b, sp_b, sq_b, sr, K, BLOCK_K, HAS_COUNT)
    gamma = _gamma(beta_ptr, b, cnt, NCH, K, BLOCK_C)
    lim = tl.where(done, 0, V)
    offs = tl.arange(0, BLOCK_V)
    acc_r = tl.zeros([BLOCK_V], tl.float64)
    acc_p = tl.zeros([BLOCK_V], tl.float64)
    for j in range(0, CHUNK, BLOCK_V):
        idx = c * CHUNK + j + offs
        m = idx < lim
        pv = tl.load(p_ptr + b * sp_b + idx, mask=m, other=0.0)
        qv = tl.load(q_ptr + b * sq_b + idx, mask=m, other=0.0)
        acc_r += tl.maximum(pv + tl.minimum(pv / rho, qv) * -gamma, 0.0)  # two roundings, as torch's mul_ then add_
        acc_p += pv
    tl.store(part_ptr + b * 2 * NCH + c, tl.sum(acc_r, axis=0))
    tl.store(part_ptr + (b * 2 + 1) * NCH + c, tl.sum(acc_p, axis=0))


@triton.jit
def _select(
    p_ptr, q_ptr, d_ptr, c_ptr, cnt_ptr, rho_ptr, beta_ptr, part_ptr, u_ptr, tok_ptr, V, NCH, sp_b, sq_b, sr,
    K: tl.constexpr, BLOCK_K: tl.constexpr, HAS_COUNT: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_C: tl.constexpr,
    CHUNK: tl.constexpr,
):  # fmt: skip
    r"""Program ``b``: the first accepted draft of row ``b``, else the inverse-CDF draw
    (:func:`otspec_gpu.sampling.search_cdf`'s rule) from the residual's chunk sums and one float64 scan
    of the chunk holding :math:`\min(uS, S^-)`; a residual of mass 0 draws from ``p`` instead. Only
    indices of positive weight are taken (the chunk's last such index if rounding leaves none past
    the target)."""
    b = tl.program_id(0).to(tl.int64)
    done, out, rho, cnt = _accept(p_ptr, q_ptr, d_ptr, c_ptr, cnt_ptr, rho_ptr, b, sp_b, sq_b, sr, K, BLOCK_K, HAS_COUNT)
    gamma = _gamma(beta_ptr, b, cnt, NCH, K, BLOCK_C)
    ci = tl.arange(0, BLOCK_C)
    cm = ci < NCH
    part_r = tl.load(part_ptr + b * 2 * NCH + ci, mask=cm, other=0.0)
    part_p = tl.load(part_ptr + (b * 2 + 1) * NCH + ci, mask=cm, other=0.0)
    cum_r = tl.cumsum(part_r, axis=0)
    cum_p = tl.cumsum(part_p, axis=0)
    s_r = tl.max(tl.where(cm, cum_r, 0.0), axis=0)
    use_res = s_r > 0  # fallback_rows: a residual of mass 0 is replaced by p
    S = tl.where(use_res, s_r, tl.max(tl.where(cm, cum_p, 0.0), axis=0))
    cum = tl.where(use_res, cum_r, cum_p)
    pc = tl.where(use_res, part_r, part_p)
    prev = tl.where(S > 0, (S.to(tl.int64, bitcast=True) - 1).to(tl.float64, bitcast=True), 0.0)  # S^-
    xq = tl.minimum(tl.load(u_ptr + b) * S, prev)
    c = tl.min(tl.where((cum > xq) & (pc > 0) & cm, ci, BLOCK_C), axis=0)  # the chunk holding xq
    has = (c < NCH) & (done == 0)
    c = tl.minimum(c, NCH - 1)
    run = tl.sum(tl.where(ci == c - 1, cum, 0.0), axis=0)  # the running sum before chunk c
    offs = tl.arange(0, BLOCK_V)
    first = tl.zeros([], tl.int32) + V
    last = tl.zeros([], tl.int32) - 1
    lim = tl.where(has, V, 0)  # a row that accepted reads nothing
    for j in range(0, CHUNK, BLOCK_V):
        idx = c * CHUNK + j + offs
        m = idx < lim
        pv = tl.load(p_ptr + b * sp_b + idx, mask=m, other=0.0)
        qv = tl.load(q_ptr + b * sq_b + idx, mask=m, other=0.0)
        wv = tl.where(use_res, tl.maximum(pv + tl.minimum(pv / rho, qv) * -gamma, 0.0), pv)
        cc = run + tl.cumsum(wv, axis=0)
        pos = m & (wv > 0)
        first = tl.minimum(first, tl.min(tl.where(pos & (cc > xq), idx, V), axis=0))
        last = tl.maximum(last, tl.max(tl.where(pos, idx, -1), axis=0))
        run = tl.max(tl.where(m, cc, run), axis=0)
    tok = tl.where(first < V, first, tl.where(last >= 0, last, V - 1)).to(tl.int64)
    tl.store(tok_ptr + b, tl.where(done, out, tok))


def kseq_select(
    p: torch.Tensor,
    q: torch.Tensor,
    rho: torch.Tensor,
    count: torch.Tensor | None,
    drafts: torch.Tensor,
    coins: torch.Tensor,
    u: torch.Tensor,
) -> torch.Tensor:
    r"""Fused twin of K-SEQ's selection given :math:`\rho^*` (the accept tests and the residual draw of
    :func:`otspec_gpu.verifiers.step.kseq.step` / ``node_step``): three launches, no host
    synchronisation, each row spread over the chunks of ``V``.

    Row b accepts its first valid draft :math:`x_j` (:math:`j <` ``count[b]``) with
    :math:`u_j < \min(1, p(x_j)/(\rho^* q(x_j)))`, else draws from
    :math:`(p - \gamma \min(p/\rho^*, q))_+`, :math:`\gamma = (1 - (1-\beta)^m)/\beta`,
    :math:`\beta = \sum_y \min(p(y)/\rho^*, q(y))` (:math:`\gamma = 0` where :math:`\beta = 0`),
    :math:`m` = ``count[b]`` clipped to ``1..k``; a residual of mass 0 draws from ``p``. Launches:
    ``(row, chunk)`` programs for :math:`\beta`'s chunk partials, ``(row, chunk)`` programs for the
    residual's and p's chunk sums (each sums its row's partials itself), then one program per row for
    the accept tests and the draw (the chunk search and one scan, as
    :func:`otspec_gpu.kernels.chain.token_single_step`). A row that accepts reads nothing of its
    ``[V]`` rows.

    Parameters
    ----------
    p, q : torch.Tensor
        ``[B, V]`` (or ``[1, V]``, shared) float64 rows, normalised by the caller.
    rho : torch.Tensor
        ``[B]`` (or ``[1]`` with shared rows) float64 :math:`\rho^*` per row.
    count : torch.Tensor or None
        ``[B]`` long valid draft slots per row (a tree node's alive drafts); ``None``: every slot.
    drafts : torch.Tensor
        ``[B, k]`` long drafts.
    coins : torch.Tensor
        ``[B, k]`` float64 accept coins.
    u : torch.Tensor
        ``[B]`` float64 residual uniforms.

    Returns
    -------
    torch.Tensor
        ``[B]`` long output tokens.
    """
    B, k = drafts.shape
    V = p.shape[-1]
    dev = p.device
    tok = torch.empty(B, dtype=torch.long, device=dev)
    if B == 0:
        return tok
    p, q = (x if x.stride(-1) == 1 else x.contiguous() for x in (p, q))
    block, chunk, nch = layout(V)
    beta = torch.empty((B, nch), dtype=torch.float64, device=dev)
    part = torch.empty((B, 2, nch), dtype=torch.float64, device=dev)
    d, c = drafts.contiguous(), coins.contiguous()
    cnt = d if count is None else count.to(torch.long).contiguous()  # not read without a count
    rows = (V, nch, row_stride(p), row_stride(q), rho.stride(0) if rho.shape[0] > 1 else 0)
    kw = {"K": k, "BLOCK_K": pow2(k), "HAS_COUNT": count is not None, "BLOCK_V": block, "CHUNK": chunk, **no_fma()}
    _select_beta[(B, nch)](p, q, d, c, cnt, rho, beta, *rows, **kw)
    _select_partials[(B, nch)](p, q, d, c, cnt, rho, beta, part, *rows, BLOCK_C=pow2(nch), **kw)
    _select[(B,)](p, q, d, c, cnt, rho, beta, part, u.contiguous(), tok, *rows, BLOCK_C=pow2(nch), **kw)
    return tok
