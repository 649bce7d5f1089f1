r"""Triton kernels of the token chain, the block chain, the single-step token rule and the single-step
RRS / RSD rounds, each spreading a row's passes over ``V`` across many programs.

The chain and single-step token steps run in two or three launches, with no host synchronisation
and no Python branch on a tensor value:

1. ``_masses`` (block chain only), one program per ``(row, chunk of V)``: the chunk's share of the
   look-ahead masses :math:`Z_{i+1} = \sum_y (p_i\, p[:, i](y) - q[:, i](y))_+`, ``i = 1..gamma-1``
   (float64 partial sums), after recomputing the row's log running ratio :math:`\log p_i` from its
   ``gamma`` drafted probabilities (the formula of :func:`otspec_gpu.verifiers.chain._log_running_ratio`);
2. ``_partials``, one program per ``(row, chunk)``: the row's scalar work (cheap, repeated by every
   program of the row) -- the accept tests and :math:`\tau` (token chain, ``MODE = 0``; the first
   rejection), :math:`h_i` from the summed masses and :math:`\tau` (block chain, ``MODE = 1``; the
   last index that passes, weight :math:`p_\tau`), or the float64 accept ratio (single-step token,
   ``MODE = 2``) -- then the chunk's float64 sums of the emission weights (the residual
   :math:`(p_\tau\, p_\tau(\cdot) - q_\tau(\cdot))_+`, :math:`p_\tau = 1` for the token rules) and of
   the fallback row :math:`p_\tau` (also the bonus row when :math:`\tau = \gamma`);
3. ``_search``, one program per row: the chunk sums' running sum (float64) gives the total
   :math:`S` and the chunk holding :math:`\min(uS, S^-)` (the rule of
   :func:`otspec_gpu.sampling.search_cdf`); one float64 block scan of that chunk finds the first
   index whose running sum exceeds it. The index found always carries positive weight: only indices
   of positive weight are candidates, and if rounding leaves none in the chosen chunk (the chunk's
   scan and its partial sum add in different orders), the chunk's last index of positive weight is
   taken.

Compared with the pure-torch steps (the reference and the CPU path), for the same uniforms:

* token chain and single-step token: the same accept decisions (same arithmetic: IEEE division,
  no fused multiply-add) and the same emission weights elementwise; the cumulative sums add in a
  different order (chunk sums, block scans) than torch's running sum, so a token can differ only
  when a uniform falls within rounding (a few ulps of the running sum) of a cumulative boundary;
* block chain: the running ratio, :math:`1 - p_i` and :math:`h_i` are the same formulas computed
  with the kernel's ``log`` / ``exp`` (``log1p`` and ``expm1`` by the Goldberg / Kahan identities:
  a few ulps), the masses in float64 then rounded to the input dtype (torch sums them in the input
  dtype). A decision can differ only when a coin lies within a few ulps of :math:`h_i`, and a token
  only when the uniform falls within a few ulps of a boundary.

RRS / RSD (``rrs_single_step``) run ``k + 1`` launches of the same shape: round ``j``'s mass
:math:`\sum_y (d - D_j q)_+` needs the rounds before it, so each round is one launch over
``(row, chunk)`` whose programs first replay the earlier rounds' scalar recurrence from their chunk
sums (a few float64 operations per round), then one launch for the final residual's and the previous
residual's chunk sums, then one program per row for the ``k`` accept tests and the draw (the same
search). The arithmetic is that of the torch rounds; the masses add in another order (chunk sums).

Neither changes the law beyond the input dtype's rounding; ``tests/gpu/test_kernels.py`` checks
equality with the torch steps for fixed uniforms and a chi-square of the drawn outputs against the
exact conditional laws. ``BLOCK_V`` (elements per block scan) and ``MAX_CHUNKS`` (chunks per row
at most; both in ``otspec_gpu.kernels._common``) set the split: a chunk is a power-of-two multiple of
the block, at most ``MAX_CHUNKS`` per row (V 49 152: 48 chunks of 1 024; V 262 144: 128 chunks of
2 048).

Triton reads ``TRITON_INTERPRET`` when this module is imported (the kernels are jitted then); under
``TRITON_INTERPRET=1`` they also run on CPU tensors (the tests use that; it is slow, for checking only).
"""

import torch
import triton
import triton.language as tl

from otspec_gpu.kernels._common import layout, no_fma, pow2

__all__ = ["block_chain_step", "rrs_single_step", "token_chain_step", "token_single_step"]


@triton.jit
def _div(a, b):
    """``a / b`` rounded as IEEE division (Triton's float32 ``/`` is approximate)."""
    if a.dtype == tl.float32:
        return tl.math.div_rn(a, b)
    else:
        return a / b


@triton.jit
def _token_tau(p_ptr, q_ptr, d_ptr, c_ptr, b, G, sp_b, sp_t, sq_b, sq_t, BLOCK_G: tl.constexpr):
    """Token chain: the first rejection of row ``b`` (``G`` if none), the accept tests of ``token_step``."""
    gi = tl.arange(0, BLOCK_G)
    gm = gi < G
    x = tl.load(d_ptr + b * G + gi, mask=gm, other=0)
    px = tl.load(p_ptr + b * sp_b + gi * sp_t + x, mask=gm, other=1.0)
    qx = tl.load(q_ptr + b * sq_b + gi * sq_t + x, mask=gm, other=1.0)
    coin = tl.load(c_ptr + b * G + gi, mask=gm, other=0.0)
    ok = px >= qx
    a = tl.where(ok, 1.0, _div(px, tl.where(ok, 1.0, qx).to(px.dtype)))
    rej = (coin >= a) & gm
    return tl.min(tl.where(rej, gi, G), axis=0)


@triton.jit
def _block_logp(p_ptr, q_ptr, d_ptr, b, G, sp_b, sp_t, sq_b, sq_t, BLOCK_G: tl.constexpr):
    """Block chain: ``log p_i``, ``i = 1..G``, of row ``b`` (vector index ``i - 1``), as ``_log_running_ratio``."""
    gi = tl.arange(0, BLOCK_G)
    gm = gi < G
    x = tl.load(d_ptr + b * G + gi, mask=gm, other=0)
    px = tl.load(p_ptr + b * sp_b + gi * sp_t + x, mask=gm, other=1.0)
    qx = tl.load(q_ptr + b * sq_b + gi * sq_t + x, mask=gm, other=1.0)
    pos = qx > 0
    safe_q = tl.where(pos, qx, 1.0).to(px.dtype)
    d = _div(px - qx, safe_q)  # r - 1
    near = tl.abs(d) < 0.5
    dn = tl.where(near, d, 0.0).to(px.dtype)
    w = (1.0 + dn).to(px.dtype)
    one = w == 1.0
    l1p = tl.where(one, dn, tl.log(w) * _div(dn, tl.where(one, 1.0, w - 1.0).to(px.dtype)))  # log1p(dn), Goldberg
    logr = tl.where(near, l1p, tl.log(px) - tl.log(safe_q))
    logr = tl.where(pos & gm, logr, 0.0).to(px.dtype)
    L = tl.cumsum(logr, axis=0)
    top = tl.max(tl.where(gi[None, :] <= gi[:, None], tl.maximum(L, 0.0)[None, :], 0.0), axis=1)  # max(0, max_{j <= i} L_j)
    return L - top.to(px.dtype)


@triton.jit
def _block_tau(logp, coin_ptr, z_ptr, b, G, NCH, BLOCK_G: tl.constexpr, BLOCK_C: tl.constexpr):
    """Block chain: ``(tau, p_tau)`` of row ``b`` from its ``log p_i``, coins and the masses' chunk sums, as ``block_step``."""
    gi = tl.arange(0, BLOCK_G)
    gm = gi < G
    ci = tl.arange(0, BLOCK_C)
    zm = (gi[:, None] < G - 1) & (ci[None, :] < NCH)
    Z = tl.sum(tl.load(z_ptr + (b * (G - 1) + gi[:, None]) * NCH + ci[None, :], mask=zm, other=0.0), axis=1).to(logp.dtype)
    pr = tl.exp(logp)
    em1 = tl.where(pr == 1.0, logp, _div((pr - 1.0) * logp, tl.where(pr == 1.0, 1.0, tl.log(pr)).to(logp.dtype)))  # expm1, Kahan
    onem = tl.where(pr == 0.0, 1.0, -em1).to(logp.dtype)  # 1 - p_i
    denom = Z + onem
    ok = denom > 0
    h = tl.where(gi < G - 1, tl.where(ok, _div(Z, tl.where(ok, denom, 1.0).to(logp.dtype)), 1.0), pr)
    h = tl.minimum(tl.maximum(h, 0.0), 1.0)
    coin = tl.load(coin_ptr + b * G + gi, mask=gm, other=1.0)
    tau = tl.max(tl.where((coin < h) & gm, gi + 1, 0), axis=0)  # the last index that passes, 0 if none
    w = tl.where(tau == 0, 1.0, tl.sum(tl.where(gi == tau - 1, pr, 0.0), axis=0)).to(logp.dtype)
    return tau, w


@triton.jit
def _weights(pv, qv, w, MODE: tl.constexpr):
    """Float64 emission weights of a block: ``(p - q)_+`` (token chain), ``(w p - q)_+`` (block chain,
    two roundings), the float64 difference (single-step token), or RRS's residual ``(d + w q)_+``
    with ``d = p - q`` in float64 and ``w = -D``."""
    if MODE == 3:
        r = tl.maximum((pv.to(tl.float64) - qv.to(tl.float64)) + qv.to(tl.float64) * w, 0.0)
    elif MODE == 2:
        r = tl.maximum(pv.to(tl.float64) - qv.to(tl.float64), 0.0)
    elif MODE == 1:
        r = tl.maximum(pv * w - qv, 0.0).to(tl.float64)
    else:
        r = tl.maximum(pv - qv, 0.0).to(tl.float64)
    return r


@triton.jit
def _fallback(pv, qv, w2, MODE: tl.constexpr):
    """Float64 weights of the fallback draw (a residual of mass 0): the row ``p`` itself, or RRS's
    previous residual ``(d - w2 q)_+``."""
    if MODE == 3:
        r = tl.maximum((pv.to(tl.float64) - qv.to(tl.float64)) - w2 * qv.to(tl.float64), 0.0)
    else:
        r = pv.to(tl.float64)
    return r


@triton.jit
def _masses(
    p_ptr, q_ptr, d_ptr, z_ptr, G, V, NCH, sp_b, sp_t, sq_b, sq_t,
    BLOCK_G: tl.constexpr, BLOCK_V: tl.constexpr, CHUNK: tl.constexpr,
):  # fmt: skip
    """Block chain, program ``(b, c)``: chunk ``c``'s float64 share of ``Z_{i+1}``, ``i = 1..G-1``."""
    b = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1)
    gi = tl.arange(0, BLOCK_G)
    rm = gi < G - 1
    pr = tl.exp(_block_logp(p_ptr, q_ptr, d_ptr, b, G, sp_b, sp_t, sq_b, sq_t, BLOCK_G))  # p_i at vector index i - 1
    offs = tl.arange(0, BLOCK_V)
    acc = tl.zeros([BLOCK_G, BLOCK_V], tl.float64)
    for j in range(0, CHUNK, BLOCK_V):
        idx = c * CHUNK + j + offs
        m = rm[:, None] & (idx < V)[None, :]
        pv = tl.load(p_ptr + b * sp_b + (gi[:, None] + 1) * sp_t + idx[None, :], mask=m, other=0.0)
        qv = tl.load(q_ptr + b * sq_b + (gi[:, None] + 1) * sq_t + idx[None, :], mask=m, other=0.0)
        acc += tl.maximum(pv * pr[:, None] - qv, 0.0).to(tl.float64)
    tl.store(z_ptr + (b * (G - 1) + gi) * NCH + c, tl.sum(acc, axis=1), mask=rm)


@triton.jit
def _partials(
    p_ptr, q_ptr, d_ptr, c_ptr, z_ptr, part_ptr, tau_ptr, w_ptr, G, V, NCH, sp_b, sp_t, sq_b, sq_t,
    MODE: tl.constexpr, BLOCK_G: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_C: tl.constexpr, CHUNK: tl.constexpr,
):  # fmt: skip
    """Program ``(b, c)``: row ``b``'s accept decisions, then chunk ``c``'s float64 sums of the emission
    weights and of the fallback row (``part[b, 0, c]``, ``part[b, 1, c]``); chunk 0 stores ``tau``
    (single step: 1 if the draft is accepted) and, for the block chain, the weight ``p_tau``."""
    b = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1)
    if MODE == 2:
        x = tl.load(d_ptr + b)
        px = tl.load(p_ptr + b * sp_b + x).to(tl.float64)
        qx = tl.load(q_ptr + b * sq_b + x).to(tl.float64)
        a = tl.where(qx > 0, tl.minimum(px / tl.where(qx > 0, qx, 1.0), 1.0), 1.0)
        tau = (tl.load(c_ptr + b) < a).to(tl.int32)  # accepted
        need = tau == 0
        is_res = need
        w = 1.0
        prow = p_ptr + b * sp_b
        qrow = q_ptr + b * sq_b
    else:
        if MODE == 1:
            logp = _block_logp(p_ptr, q_ptr, d_ptr, b, G, sp_b, sp_t, sq_b, sq_t, BLOCK_G)
            tau, w = _block_tau(logp, c_ptr, z_ptr, b, G, NCH, BLOCK_G, BLOCK_C)
        else:
            tau = _token_tau(p_ptr, q_ptr, d_ptr, c_ptr, b, G, sp_b, sp_t, sq_b, sq_t, BLOCK_G)
            w = 1.0
        need = tau >= 0  # a chain always draws
        is_res = tau < G
        prow = p_ptr + b * sp_b + tau * sp_t
        qrow = q_ptr + b * sq_b + tl.minimum(tau, G - 1) * sq_t
    offs = tl.arange(0, BLOCK_V)
    acc_r = tl.zeros([BLOCK_V], tl.float64)
    acc_p = tl.zeros([BLOCK_V], tl.float64)
    lim = tl.where(need, V, 0)  # loads below lim only (a bound rather than a scalar mask: the interpreter needs vector masks)
    lim_q = tl.where(need & is_res, V, 0)
    for j in range(0, CHUNK, BLOCK_V):
        idx = c * CHUNK + j + offs
        pv = tl.load(prow + idx, mask=idx < lim, other=0.0)
        qv = tl.load(qrow + idx, mask=idx < lim_q, other=0.0)
        acc_r += _weights(pv, qv, w, MODE)
        acc_p += pv.to(tl.float64)
    tl.store(part_ptr + b * 2 * NCH + c, tl.sum(acc_r, axis=0))
    tl.store(part_ptr + (b * 2 + 1) * NCH + c, tl.sum(acc_p, axis=0))
    if c == 0:
        tl.store(tau_ptr + b, tau.to(tl.int64))
        if MODE == 1:
            tl.store(w_ptr + b, w)


@triton.jit
def _draw_row(
    prow, qrow, part, u, NCH, V, w, w2, is_res, MODE: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_C: tl.constexpr, CHUNK: tl.constexpr
):  # fmt: skip
    """The inverse-CDF draw of one row from its chunk sums ``part`` (residual row, then fallback row,
    ``NCH`` each) and one float64 scan of the chunk found: the residual weights where ``is_res`` and
    their total is positive, else the fallback's. A row of total 0 returns ``V - 1``."""
    ci = tl.arange(0, BLOCK_C)
    cm = ci < NCH
    part_r = tl.load(part + ci, mask=cm, other=0.0)
    part_p = tl.load(part + NCH + ci, mask=cm, other=0.0)
    cum_r = tl.cumsum(part_r, axis=0)
    cum_p = tl.cumsum(part_p, axis=0)
    s_r = tl.max(tl.where(cm, cum_r, 0.0), axis=0)
    use_res = is_res & (s_r > 0)
    S = tl.where(use_res, s_r, tl.max(tl.where(cm, cum_p, 0.0), axis=0))
    cum = tl.where(use_res, cum_r, cum_p)
    pc = tl.where(use_res, part_r, part_p)
    prev = tl.where(S > 0, (S.to(tl.int64, bitcast=True) - 1).to(tl.float64, bitcast=True), 0.0)  # S^-
    xq = tl.minimum(u * S, prev)
    c = tl.min(tl.where((cum > xq) & (pc > 0) & cm, ci, BLOCK_C), axis=0)  # the chunk holding xq
    has = c < NCH
    c = tl.minimum(c, NCH - 1)
    run = tl.sum(tl.where(ci == c - 1, cum, 0.0), axis=0)  # the running sum before chunk c
    offs = tl.arange(0, BLOCK_V)
    first = tl.zeros([], tl.int32) + V
    last = tl.zeros([], tl.int32) - 1
    lim = tl.where(has, V, 0)  # loads below lim only (a bound rather than a scalar mask: the interpreter needs vector masks)
    if MODE == 3:
        lim_q = lim  # both RRS weights read q
    else:
        lim_q = tl.where(has & use_res, V, 0)
    for j in range(0, CHUNK, BLOCK_V):
        idx = c * CHUNK + j + offs
        m = idx < lim
        pv = tl.load(prow + idx, mask=m, other=0.0)
        qv = tl.load(qrow + idx, mask=idx < lim_q, other=0.0)
        wv = tl.where(use_res, _weights(pv, qv, w, MODE), _fallback(pv, qv, w2, MODE))
        cc = run + tl.cumsum(wv, axis=0)
        pos = m & (wv > 0)
        first = tl.minimum(first, tl.min(tl.where(pos & (cc > xq), idx, V), axis=0))
        last = tl.maximum(last, tl.max(tl.where(pos, idx, -1), axis=0))
        run = tl.max(tl.where(m, cc, run), axis=0)
    return tl.where(first < V, first, tl.where(last >= 0, last, V - 1)).to(tl.int64)


@triton.jit
def _search(
    p_ptr, q_ptr, d_ptr, u_ptr, part_ptr, tau_ptr, w_ptr, tok_ptr, idx_ptr, G, V, NCH, sp_b, sp_t, sq_b, sq_t,
    MODE: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_C: tl.constexpr, CHUNK: tl.constexpr,
):  # fmt: skip
    """Program ``b``: the inverse-CDF draw of row ``b`` from its chunk sums and one scan of the chunk found
    (a chain also stores its ``index`` 0: one drafted block)."""
    b = tl.program_id(0).to(tl.int64)
    tau = tl.load(tau_ptr + b)
    if MODE == 2:
        is_res = tau == 0
        prow = p_ptr + b * sp_b
        qrow = q_ptr + b * sq_b
    else:
        is_res = tau < G
        prow = p_ptr + b * sp_b + tau * sp_t
        qrow = q_ptr + b * sq_b + tl.minimum(tau, G - 1) * sq_t
    if MODE == 1:
        w = tl.load(w_ptr + b)
    else:
        w = 1.0
    u = tl.load(u_ptr + b)
    tok = _draw_row(prow, qrow, part_ptr + b * 2 * NCH, u, NCH, V, w, 0.0, is_res, MODE, BLOCK_V, BLOCK_C, CHUNK)
    if MODE == 2:
        tok = tl.where(tau == 1, tl.load(d_ptr + b), tok)
    else:
        tl.store(idx_ptr + b, tl.zeros([], tl.int64))
    tl.store(tok_ptr + b, tok)


@triton.jit
def _rrs_replay(
    p_ptr, q_ptr, d_ptr, c_ptr, s_ptr, b, m_row, R, NCH, sp_b, sq_b,
    K: tl.constexpr, WOR: tl.constexpr, ACCEPT: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_C: tl.constexpr,
):  # fmt: skip
    """RRS / RSD rounds ``0..R-1`` of row ``b`` on the closed form ``p_j = a_j (d - D_j q)_+``
    (:func:`otspec_gpu.verifiers.step._recursive.sample_recursive`, same arithmetic, float64), from the
    rounds' masses summed over their chunk sums (``s[b, j + 1, :]`` for round ``j``); with ``ACCEPT``
    also the accept tests. Rounds ``j >= m_row`` are padding (no accept, no update). Returns
    ``(D, a, c_prev, out, done)``."""
    kk = tl.arange(0, BLOCK_K)
    km = kk < K
    x = tl.load(d_ptr + b * K + kk, mask=km, other=0)
    pdv = tl.load(p_ptr + b * sp_b + x, mask=km, other=0.0).to(tl.float64)
    qdv = tl.load(q_ptr + b * sq_b + x, mask=km, other=0.0).to(tl.float64)
    ci = tl.arange(0, BLOCK_C)
    sm = (kk[:, None] >= 1) & (kk[:, None] < R) & (ci[None, :] < NCH)
    Sv = tl.sum(tl.load(s_ptr + (b * (K + 1) + kk[:, None] + 1) * NCH + ci[None, :], mask=sm, other=0.0), axis=1)
    coinv = tl.load(c_ptr + b * K + kk, mask=km, other=1.0)
    D = tl.full([], -1.0, tl.float64)
    a = tl.full([], 1.0, tl.float64)
    c_prev = tl.full([], 1.0, tl.float64)
    removed = tl.zeros([], tl.float64)
    out = tl.zeros([], tl.int64)
    done = tl.zeros([], tl.int1)
    for j in tl.static_range(K):
        act = j < R
        vj = (j < m_row) & act
        sel = kk == j
        pd = tl.sum(tl.where(sel, pdv, 0.0), axis=0)  # one term: exact
        qd = tl.sum(tl.where(sel, qdv, 0.0), axis=0)
        if WOR:
            c_j = 1.0 / (1.0 - removed)
        else:
            c_j = tl.full([], 1.0, tl.float64)
        if j > 0:
            D_new = D + c_prev / a
            S = tl.sum(tl.where(sel, Sv, 0.0), axis=0)
            ok = (S > 0) & vj
            D = tl.where(ok, D_new, D)
            a = tl.where(ok, 1.0 / tl.where(ok, S, 1.0), a)
            num = a * tl.maximum(pd - qd - D * qd, 0.0)
        else:
            num = pd
        if ACCEPT:
            if WOR:
                den = c_j * qd
            else:
                den = qd
            acc = tl.where(den > 0, tl.minimum(num / tl.where(den > 0, den, 1.0), 1.0), 1.0)
            hit = (tl.sum(tl.where(sel, coinv, 0.0), axis=0) < acc) & (done == 0) & vj
            out = tl.where(hit, tl.sum(tl.where(sel, x, 0), axis=0), out)
            done = done | hit
        if WOR:
            if j == 0:
                c_prev = tl.where(act, c_j, c_prev)
            else:
                c_prev = tl.where(vj, c_j, c_prev)
            removed = removed + tl.where(vj, qd, 0.0)
        else:
            c_prev = c_j
    return D, a, c_prev, out, done


@triton.jit
def _rrs_partials(
    p_ptr, q_ptr, d_ptr, c_ptr, s_ptr, m_ptr, V, NCH, sp_b, sq_b, R,
    K: tl.constexpr, WOR: tl.constexpr, FINAL: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_V: tl.constexpr,
    BLOCK_C: tl.constexpr, CHUNK: tl.constexpr,
):  # fmt: skip
    """Program ``(b, c)``: after rounds ``0..R-1``, chunk ``c``'s float64 sum of ``(d - D_new q)_+``,
    ``D_new = D + c_prev / a``: round ``R``'s mass (``s[b, R + 1, c]``), or with ``FINAL`` (``R = K``)
    the final residual's and the previous residual's (``s[b, 0, c]``, ``s[b, 1, c]``)."""
    b = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1)
    m_row = tl.load(m_ptr + b)
    D, a, c_prev, out, done = _rrs_replay(p_ptr, q_ptr, d_ptr, c_ptr, s_ptr, b, m_row, R, NCH, sp_b, sq_b, K, WOR, False, BLOCK_K, BLOCK_C)
    D_new = D + c_prev / a
    offs = tl.arange(0, BLOCK_V)
    acc_new = tl.zeros([BLOCK_V], tl.float64)
    acc_old = tl.zeros([BLOCK_V], tl.float64)
    for j in range(0, CHUNK, BLOCK_V):
        idx = c * CHUNK + j + offs
        m = idx < V
        pv = tl.load(p_ptr + b * sp_b + idx, mask=m, other=0.0)
        qv = tl.load(q_ptr + b * sq_b + idx, mask=m, other=0.0)
        acc_new += _weights(pv, qv, -D_new, 3)
        if FINAL:
            acc_old += _fallback(pv, qv, D, 3)
    base = s_ptr + b * (K + 1) * NCH + c
    if FINAL:
        tl.store(base, tl.sum(acc_new, axis=0))
        tl.store(base + NCH, tl.sum(acc_old, axis=0))
    else:
        tl.store(base + (R + 1) * NCH, tl.sum(acc_new, axis=0))


@triton.jit
def _rrs_search(
    p_ptr, q_ptr, d_ptr, c_ptr, u_ptr, s_ptr, m_ptr, tok_ptr, V, NCH, sp_b, sq_b,
    K: tl.constexpr, WOR: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_C: tl.constexpr, CHUNK: tl.constexpr,
):  # fmt: skip
    """Program ``b``: the ``K`` accept tests of row ``b``, else the draw from the final residual
    (rows of mass 0 keep the previous one)."""
    b = tl.program_id(0).to(tl.int64)
    m_row = tl.load(m_ptr + b)
    D, a, c_prev, out, done = _rrs_replay(p_ptr, q_ptr, d_ptr, c_ptr, s_ptr, b, m_row, K, NCH, sp_b, sq_b, K, WOR, True, BLOCK_K, BLOCK_C)
    D_new = D + c_prev / a
    u = tl.load(u_ptr + b)
    part = s_ptr + b * (K + 1) * NCH
    tok = _draw_row(p_ptr + b * sp_b, q_ptr + b * sq_b, part, u, NCH, V, -D_new, D, done == 0, 3, BLOCK_V, BLOCK_C, CHUNK)
    tl.store(tok_ptr + b, tl.where(done, out, tok))


def _contig(*xs):
    return [x if x is None or x.stride(-1) == 1 else x.contiguous() for x in xs]


def _draw(p, q, drafts, coins, u, mode: int, strides: tuple[int, int, int, int], G: int) -> tuple[torch.Tensor, ...]:
    """Launch the (masses,) partials and search kernels of one step; ``(tau, token, index)``, ``[B]``
    long each (views of one ``[3, B]`` allocation; ``index`` 0 for a chain, not written for the single step)."""
    B, V = drafts.shape[0], p.shape[-1]
    block, chunk, nch = layout(V)
    dev = p.device
    out = torch.empty((3, B), dtype=torch.long, device=dev)
    tau, tok, idx = out.unbind(0)
    if B == 0:
        return tau, tok, idx
    part = torch.empty((B, 2, nch), dtype=torch.float64, device=dev)
    w = torch.empty(B, dtype=p.dtype, device=dev) if mode == 1 else part
    z = part
    opts = no_fma()
    bg = pow2(max(G, 1))
    if mode == 1 and G > 1:
        z = torch.empty((B, G - 1, nch), dtype=torch.float64, device=dev)
        _masses[(B, nch)](p, q, drafts, z, G, V, nch, *strides, BLOCK_G=bg, BLOCK_V=block, CHUNK=chunk, **opts)
    bc = pow2(nch)
    _partials[(B, nch)](
        p, q, drafts, coins, z, part, tau, w, G, V, nch, *strides,
        MODE=mode, BLOCK_G=bg, BLOCK_V=block, BLOCK_C=bc, CHUNK=chunk, **opts,
    )  # fmt: skip
    _search[(B,)](p, q, drafts, u, part, tau, w, tok, idx, G, V, nch, *strides, MODE=mode, BLOCK_V=block, BLOCK_C=bc, CHUNK=chunk, **opts)
    return tau, tok, idx


def _dense(x: torch.Tensor) -> torch.Tensor:
    """``x`` itself when contiguous (no dispatcher call), else a contiguous copy."""
    return x if x.is_contiguous() else x.contiguous()


def _f64(u: torch.Tensor) -> torch.Tensor:
    """``u`` as contiguous float64, without a dispatcher call when it already is."""
    return u if u.dtype == torch.float64 and u.is_contiguous() else u.to(torch.float64).contiguous()


def _chain_strides(p: torch.Tensor, q: torch.Tensor) -> tuple[int, int, int, int]:
    return p.stride(0), p.stride(1), q.stride(0), q.stride(1)


def token_chain_step(
    p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, coins: torch.Tensor, u: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Fused twin of :func:`otspec_gpu.verifiers.chain.token_step`: two launches, the draw spread
    over the chunks of ``V``.

    Parameters
    ----------
    p, q : torch.Tensor
        ``[B, gamma + 1, V]`` and ``[B, gamma, V]`` probabilities (last dimension contiguous).
    drafts : torch.Tensor
        ``[B, gamma]`` long drafted tokens.
    coins : torch.Tensor
        ``[B, gamma]`` accept uniforms (dtype of ``p``).
    u : torch.Tensor
        ``[B]`` float64 uniforms of the residual / bonus draw.

    Returns
    -------
    tuple of torch.Tensor
        ``(tau, token, index)``, each ``[B]`` long (``index`` 0: the fields of the chain's ``StepOutput``).
    """
    p, q = _contig(p, q)
    d = _dense(drafts)
    return _draw(p, q, d, _dense(coins), _f64(u), 0, _chain_strides(p, q), d.shape[1])


def block_chain_step(
    p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, coins: torch.Tensor, u: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Fused twin of :func:`otspec_gpu.verifiers.chain.block_step`: three launches (the look-ahead
    masses, then the decisions and the emission weights' chunk sums, then the draw).

    Parameters
    ----------
    p, q : torch.Tensor
        ``[B, gamma + 1, V]`` and ``[B, gamma, V]`` probabilities (last dimension contiguous).
    drafts : torch.Tensor
        ``[B, gamma]`` long drafted tokens.
    coins : torch.Tensor
        ``[B, gamma]`` uniforms, one per position (dtype of ``p``).
    u : torch.Tensor
        ``[B]`` float64 uniforms of the residual / bonus draw.

    Returns
    -------
    tuple of torch.Tensor
        ``(tau, token, index)``, each ``[B]`` long (``index`` 0: the fields of the chain's ``StepOutput``).
    """
    p, q = _contig(p, q)
    d = _dense(drafts)
    return _draw(p, q, d, _dense(coins), _f64(u), 1, _chain_strides(p, q), d.shape[1])


def token_single_step(
    p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, coins: torch.Tensor, u: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Fused twin of :func:`otspec_gpu.verifiers.step.token.step`: two launches; a row that accepts
    its draft reads nothing of its ``[V]`` rows.

    Parameters
    ----------
    p, q : torch.Tensor
        ``[B, V]`` (or ``[1, V]``, shared) target and draft rows.
    drafts : torch.Tensor
        ``[B, 1]`` long drafts.
    coins : torch.Tensor
        ``[B, 1]`` float64 accept coins.
    u : torch.Tensor
        ``[B]`` float64 residual uniforms.

    Returns
    -------
    tuple of torch.Tensor
        ``(accepted, token)``, both ``[B]`` long (accepted 1 where the draft is the output).
    """
    p, q = _contig(p, q)
    strides = (p.stride(0) if p.shape[0] > 1 else 0, 0, q.stride(0) if q.shape[0] > 1 else 0, 0)  # a shared row: stride 0
    return _draw(p, q, _dense(drafts[:, :1]), _dense(coins[:, :1]), _dense(u), 2, strides, 1)[:2]


def rrs_single_step(
    p: torch.Tensor,
    q: torch.Tensor,
    drafts: torch.Tensor,
    coins: torch.Tensor,
    u: torch.Tensor,
    wor: bool,
    count: torch.Tensor | None = None,
) -> torch.Tensor:
    """Fused twin of :func:`otspec_gpu.verifiers.step._recursive.sample_recursive` (RRS, or RSD with
    ``wor``): ``k + 1`` launches, each row spread over the chunks of ``V``: one per round ``1..k-1``
    for its mass (every program replays the earlier rounds from their chunk sums), one for the final
    residual's chunk sums, then one program per row for the accept tests and the draw.

    Parameters
    ----------
    p, q : torch.Tensor
        ``[B, V]`` (or ``[1, V]``, shared; RSD needs per-row rows) target and draft rows.
    drafts : torch.Tensor
        ``[B, k]`` long drafts.
    coins : torch.Tensor
        ``[B, k]`` float64 accept coins.
    u : torch.Tensor
        ``[B]`` float64 residual uniforms.
    wor : bool
        Drafts without replacement (RSD).
    count : torch.Tensor, optional
        ``[B]`` number of real drafts per row (left-aligned; the rest are padding, as
        ``sample_recursive``'s ``valid``); default ``k``.

    Returns
    -------
    torch.Tensor
        ``[B]`` long output tokens.
    """
    p, q = _contig(p, q)
    B, k = drafts.shape
    V = p.shape[-1]
    tok = torch.empty(B, dtype=torch.long, device=p.device)
    if B == 0:
        return tok
    m = torch.full((B,), k, dtype=torch.long, device=p.device) if count is None else count.to(torch.long).contiguous()
    block, chunk, nch = layout(V)
    s = torch.empty((B, k + 1, nch), dtype=torch.float64, device=p.device)
    d, c = drafts.contiguous(), coins.contiguous()
    rows = (V, nch, p.stride(0) if p.shape[0] > 1 else 0, q.stride(0) if q.shape[0] > 1 else 0)
    kw = {"K": k, "WOR": wor, "BLOCK_K": pow2(k), "BLOCK_V": block, "BLOCK_C": pow2(nch), "CHUNK": chunk, **no_fma()}
    for r in range(1, k + 1):  # round r's mass needs rounds < r: one launch per round, then the final residual's
        _rrs_partials[(B, nch)](p, q, d, c, s, m, *rows, r, FINAL=r == k, **kw)
    _rrs_search[(B,)](p, q, d, c, u.contiguous(), s, m, tok, *rows, **kw)
    return tok
