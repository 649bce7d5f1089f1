r"""Triton kernels of the token chain, the block chain's emission and look-ahead masses, and the
single-step token rule: one program per row, reading only the rows the step needs.

``verify_emit`` (one launch) does for row ``b``:

* token chain (``MODE = 0``): the ``gamma`` accept tests :math:`\eta_i < \min(1, p(x_i)/q(x_i))`
  (in ``p``'s dtype, as :func:`otspec_gpu.verifiers.chain.token_step`), :math:`\tau` the first
  rejection, then one inverse-CDF draw from :math:`(p_\tau - q_\tau)_+` (or the bonus row
  :math:`p_\gamma`; a residual of mass 0 falls back to :math:`p_\tau`);
* block chain emission (``MODE = 1``): :math:`\tau` and the weight :math:`p_\tau` are given (the
  ``[B, gamma]`` scalar work stays in torch), the draw is from :math:`(p_\tau\, p_\tau(\cdot) - q_\tau)_+`;
* single-step token (``MODE = 2``): the float64 accept ratio of
  :func:`otspec_gpu.verifiers.schedule.accept_ratio`, the draft when accepted, else a draw from the
  float64 residual :math:`(p - q)_+` (fallback ``p``).

The draw makes two passes over one ``[V]`` row: a float64 block scan for the total :math:`S`, then the
same scan again to find the first index whose cumulative weight exceeds :math:`\min(uS, S^-)` (the
rule of :func:`otspec_gpu.sampling.search_cdf`; both passes use the same summation order, so the
index found always carries positive weight). ``block_masses`` computes the look-ahead masses
:math:`Z_{i+1} = \sum_y (p_i\, p[:, i](y) - q[:, i](y))_+` of block verification, one program per
``(row, position)``.

Kernels are jitted on first use (so ``TRITON_INTERPRET`` is read then, not at import).
"""

import functools
import os

import torch
import triton
import triton.language as tl

__all__ = ["block_masses", "block_step", "rrs_single_step", "token_chain_step", "token_single_step"]

_BLOCK_V = 1024


def _verify_emit_src(
    p_ptr, q_ptr, d_ptr, c_ptr, u_ptr, w_ptr, tin_ptr, tau_ptr, tok_ptr,
    G, V, sp_b, sp_t, sq_b, sq_t,
    MODE: tl.constexpr, BLOCK_G: tl.constexpr, BLOCK_V: tl.constexpr,
):  # fmt: skip
    # One Triton program per row, kept whole on purpose (over 80 lines): splitting it would add launches.
    b = tl.program_id(0).to(tl.int64)
    gi = tl.arange(0, BLOCK_G)
    gm = gi < G
    if MODE == 1:
        tau = tl.load(tin_ptr + b).to(tl.int32)
        scale = tl.load(w_ptr + b)
        accepted_draft = tau < 0  # never
        x0 = tau
        t_row = tau
    else:
        x = tl.load(d_ptr + b * G + gi, mask=gm, other=0)
        px = tl.load(p_ptr + b * sp_b + gi * sp_t + x, mask=gm, other=1.0)
        qx = tl.load(q_ptr + b * sq_b + gi * sq_t + x, mask=gm, other=1.0)
        coin = tl.load(c_ptr + b * G + gi, mask=gm, other=0.0)
        if MODE == 2:
            px = px.to(tl.float64)
            qx = qx.to(tl.float64)
            a = tl.where(qx > 0, tl.minimum(px / tl.where(qx > 0, qx, 1.0), 1.0), 1.0)
        else:
            ok = px >= qx
            den = tl.where(ok, 1.0, qx).to(px.dtype)
            if px.dtype == tl.float32:  # IEEE division, as torch (Triton's float32 "/" is approximate)
                a = tl.where(ok, 1.0, tl.math.div_rn(px, den))
            else:
                a = tl.where(ok, 1.0, px / den)
        rej = (coin >= a) & gm
        tau = tl.min(tl.where(rej, gi, G), axis=0)
        x0 = tl.sum(tl.where(gi == 0, x, 0), axis=0).to(tl.int32)
        scale = 1.0
        if MODE == 2:
            accepted_draft = tau == G
            t_row = 0
        else:
            accepted_draft = tau < 0  # never: a chain emits the correction or the bonus
            t_row = tau
    is_res = tau < G
    prow = p_ptr + b * sp_b + t_row * sp_t
    qrow = q_ptr + b * sq_b + tl.minimum(tau, G - 1) * sq_t
    offs = tl.arange(0, BLOCK_V)
    # pass 1: residual total (float64 block scan) and the fallback row's total
    s_res = tl.zeros([], tl.float64)
    s_p = tl.zeros([], tl.float64)
    for start in range(0, V, BLOCK_V):
        m = start + offs < V
        pv = tl.load(prow + start + offs, mask=m, other=0.0)
        qv = tl.load(qrow + start + offs, mask=m, other=0.0)
        if MODE == 2:
            r = tl.maximum(pv.to(tl.float64) - qv.to(tl.float64), 0.0)
        elif MODE == 1:
            r = tl.maximum(pv * scale - qv, 0.0).to(tl.float64)
        else:
            r = tl.maximum(pv - qv, 0.0).to(tl.float64)
        s_res = tl.max(tl.where(m, s_res + tl.cumsum(r, axis=0), s_res), axis=0)
        s_p = tl.max(tl.where(m, s_p + tl.cumsum(pv.to(tl.float64), axis=0), s_p), axis=0)
    use_res = is_res & (s_res > 0)
    S = tl.where(use_res, s_res, s_p)
    u = tl.load(u_ptr + b)
    prev = tl.where(S > 0, (S.to(tl.int64, bitcast=True) - 1).to(tl.float64, bitcast=True), 0.0)
    xq = tl.minimum(u * S, prev)
    # pass 2: the same scan, the first index whose running sum exceeds xq
    run = tl.zeros([], tl.float64)
    res = tl.zeros([], tl.int32) + (V - 1)
    found = tl.zeros([], tl.int1)
    for start in range(0, V, BLOCK_V):
        m = start + offs < V
        pv = tl.load(prow + start + offs, mask=m, other=0.0)
        qv = tl.load(qrow + start + offs, mask=m, other=0.0)
        if MODE == 2:
            r = tl.maximum(pv.to(tl.float64) - qv.to(tl.float64), 0.0)
        elif MODE == 1:
            r = tl.maximum(pv * scale - qv, 0.0).to(tl.float64)
        else:
            r = tl.maximum(pv - qv, 0.0).to(tl.float64)
        w = tl.where(use_res, r, pv.to(tl.float64))
        c = run + tl.cumsum(w, axis=0)
        below = tl.sum(((c <= xq) & m).to(tl.int32), axis=0)
        n_in = tl.minimum(V - start, BLOCK_V)
        hit = (below < n_in) & (found == 0)
        res = tl.where(hit, start + below, res)
        found = found | hit
        run = tl.max(tl.where(m, c, run), axis=0)
    tok = tl.where(accepted_draft, x0, res)
    if MODE == 2:
        tau = tl.where(accepted_draft, 1, 0)
    tl.store(tau_ptr + b, tau.to(tl.int64))
    tl.store(tok_ptr + b, tok.to(tl.int64))


def _block_masses_src(p_ptr, q_ptr, pr_ptr, z_ptr, G, V, sp_b, sp_t, sq_b, sq_t, BLOCK_V: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    i = tl.program_id(1) + 1  # positions 1..G-1: Z_{i+1} = sum (p_i p[:, i] - q[:, i])_+
    w = tl.load(pr_ptr + b * G + i - 1)
    offs = tl.arange(0, BLOCK_V)
    acc = tl.zeros([BLOCK_V], tl.float64)
    for start in range(0, V, BLOCK_V):
        m = start + offs < V
        pv = tl.load(p_ptr + b * sp_b + i * sp_t + start + offs, mask=m, other=0.0)
        qv = tl.load(q_ptr + b * sq_b + i * sq_t + start + offs, mask=m, other=0.0)
        acc += tl.maximum(pv * w - qv, 0.0).to(tl.float64)
    tl.store(z_ptr + b * (G - 1) + i - 1, tl.sum(acc, axis=0).to(z_ptr.dtype.element_ty))


def _rrs_src(p_ptr, q_ptr, d_ptr, c_ptr, u_ptr, m_ptr, tok_ptr, V, sp_b, sq_b, K: tl.constexpr, WOR: tl.constexpr, BLOCK_V: tl.constexpr):
    # RRS / RSD of one row, round by round on the closed form p_j = a_j (d - D_j q)_+, d = p - q
    # (otspec_gpu.verifiers.step._recursive.sample_recursive, same arithmetic, float64); the row has
    # m <= K drafts (left-aligned): rounds j >= m are padding (no accept, no residual update)
    # One Triton program per row, kept whole on purpose (over 80 lines): splitting it would add launches.
    b = tl.program_id(0).to(tl.int64)
    m_row = tl.load(m_ptr + b)
    prow = p_ptr + b * sp_b
    qrow = q_ptr + b * sq_b
    offs = tl.arange(0, BLOCK_V)
    D = tl.full([], -1.0, tl.float64)
    a = tl.full([], 1.0, tl.float64)
    c_prev = tl.full([], 1.0, tl.float64)
    removed = tl.zeros([], tl.float64)
    out = tl.zeros([], tl.int64)
    done = tl.zeros([], tl.int1)
    for j in tl.static_range(K):
        vj = j < m_row
        x = tl.load(d_ptr + b * K + j)
        pd = tl.load(prow + x).to(tl.float64)
        qd = tl.load(qrow + x).to(tl.float64)
        if WOR:
            c_j = 1.0 / (1.0 - removed)
        else:
            c_j = tl.full([], 1.0, tl.float64)
        if j > 0:
            D_new = D + c_prev / a
            S = tl.zeros([], tl.float64)
            for start in range(0, V, BLOCK_V):
                m = start + offs < V
                pv = tl.load(prow + start + offs, mask=m, other=0.0).to(tl.float64)
                qv = tl.load(qrow + start + offs, mask=m, other=0.0).to(tl.float64)
                S += tl.sum(tl.maximum((pv - qv) + qv * (-D_new), 0.0), axis=0)
            ok = (S > 0) & vj
            D = tl.where(ok, D_new, D)
            a = tl.where(ok, 1.0 / tl.where(ok, S, 1.0), a)
            num = a * tl.maximum(pd - qd - D * qd, 0.0)
        else:
            num = pd
        if WOR:
            den = c_j * qd
        else:
            den = qd
        acc = tl.where(den > 0, tl.minimum(num / tl.where(den > 0, den, 1.0), 1.0), 1.0)
        coin = tl.load(c_ptr + b * K + j)
        hit = (coin < acc) & (done == 0) & vj
        out = tl.where(hit, x, out)
        done = done | hit
        if WOR:
            if j == 0:
                c_prev = c_j
            else:
                c_prev = tl.where(vj, c_j, c_prev)
            removed = removed + tl.where(vj, qd, 0.0)
        else:
            c_prev = c_j
    # the final residual (d - D_k q)_+, D_k = D + c_prev / a; rows of mass 0 keep the previous one
    D_new = D + c_prev / a
    s_new = tl.zeros([], tl.float64)
    s_old = tl.zeros([], tl.float64)
    for start in range(0, V, BLOCK_V):
        m = start + offs < V
        pv = tl.load(prow + start + offs, mask=m, other=0.0).to(tl.float64)
        qv = tl.load(qrow + start + offs, mask=m, other=0.0).to(tl.float64)
        w_new = tl.maximum((pv - qv) + qv * (-D_new), 0.0)
        w_old = tl.maximum((pv - qv) - D * qv, 0.0)
        s_new = tl.max(tl.where(m, s_new + tl.cumsum(w_new, axis=0), s_new), axis=0)
        s_old = tl.max(tl.where(m, s_old + tl.cumsum(w_old, axis=0), s_old), axis=0)
    use_new = s_new > 0
    Dr = tl.where(use_new, -D_new, -D)
    S = tl.where(use_new, s_new, s_old)
    u = tl.load(u_ptr + b)
    prev = tl.where(S > 0, (S.to(tl.int64, bitcast=True) - 1).to(tl.float64, bitcast=True), 0.0)
    xq = tl.minimum(u * S, prev)
    run = tl.zeros([], tl.float64)
    res = tl.zeros([], tl.int32) + (V - 1)
    found = tl.zeros([], tl.int1)
    for start in range(0, V, BLOCK_V):
        m = start + offs < V
        pv = tl.load(prow + start + offs, mask=m, other=0.0).to(tl.float64)
        qv = tl.load(qrow + start + offs, mask=m, other=0.0).to(tl.float64)
        if_new = tl.maximum((pv - qv) + qv * Dr, 0.0)
        if_old = tl.maximum((pv - qv) + Dr * qv, 0.0)
        w = tl.where(use_new, if_new, if_old)
        c = run + tl.cumsum(w, axis=0)
        below = tl.sum(((c <= xq) & m).to(tl.int32), axis=0)
        hit = (below < tl.minimum(V - start, BLOCK_V)) & (found == 0)
        res = tl.where(hit, start + below, res)
        found = found | hit
        run = tl.max(tl.where(m, c, run), axis=0)
    tl.store(tok_ptr + b, tl.where(done, out, res.to(tl.int64)))


@functools.cache
def _jit(name: str, interpret: bool):
    """The jitted kernel ``name`` (cached per ``TRITON_INTERPRET`` setting)."""
    del interpret  # part of the cache key only: triton.jit reads TRITON_INTERPRET when it wraps
    return triton.jit({"emit": _verify_emit_src, "masses": _block_masses_src, "rrs": _rrs_src}[name])


def _kernel(name: str):
    return _jit(name, os.environ.get("TRITON_INTERPRET", "0") == "1")


def _no_fma() -> dict:
    """Launch options that keep ``a * b - c`` two roundings, as torch computes it (the compiler
    would otherwise contract it into one fused multiply-add); the interpreter takes none."""
    return {} if os.environ.get("TRITON_INTERPRET", "0") == "1" else {"enable_fp_fusion": False}


def _pow2(n: int) -> int:
    return 1 << max(int(n) - 1, 0).bit_length()


def _emit(p, q, drafts, coins, u, w, tau_in, mode: int, single: bool) -> tuple[torch.Tensor, torch.Tensor]:
    B = drafts.shape[0]
    V = p.shape[-1]
    G = drafts.shape[1] if mode != 1 else q.shape[1]
    if single:  # [B or 1, V] rows: position stride 0, row stride 0 when shared
        sp_b, sp_t = (p.stride(0) if p.shape[0] > 1 else 0), 0
        sq_b, sq_t = (q.stride(0) if q.shape[0] > 1 else 0), 0
    else:
        sp_b, sp_t, sq_b, sq_t = p.stride(0), p.stride(1), q.stride(0), q.stride(1)
    tau = torch.empty(B, dtype=torch.long, device=p.device)
    tok = torch.empty(B, dtype=torch.long, device=p.device)
    dummy = u
    _kernel("emit")[(B,)](
        p, q,
        drafts if drafts is not None else dummy, coins if coins is not None else dummy, u,
        w if w is not None else dummy, tau_in if tau_in is not None else tau,
        tau, tok, G, V, sp_b, sp_t, sq_b, sq_t,
        MODE=mode, BLOCK_G=_pow2(max(G, 1)), BLOCK_V=min(_BLOCK_V, _pow2(V)), **_no_fma(),
    )  # fmt: skip
    return tau, tok


def _contig(*xs):
    return [x if x is None or x.stride(-1) == 1 else x.contiguous() for x in xs]


def token_chain_step(
    p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, coins: torch.Tensor, u: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Fused twin of :func:`otspec_gpu.verifiers.chain.token_step`: one launch, one program per row.

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
        ``(tau, token)``, both ``[B]`` long.
    """
    p, q = _contig(p, q)
    return _emit(p, q, drafts.contiguous(), coins.contiguous(), u.to(torch.float64).contiguous(), None, None, 0, False)


def token_single_step(
    p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, coins: torch.Tensor, u: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Fused twin of :func:`otspec_gpu.verifiers.step.token.step`: one launch, one program per row.

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
    return _emit(p, q, drafts[:, :1].contiguous(), coins[:, :1].contiguous(), u.contiguous(), None, None, 2, True)


def block_masses(p: torch.Tensor, q: torch.Tensor, pr: torch.Tensor) -> torch.Tensor:
    r"""Block verification's look-ahead masses :math:`Z_{i+1} = \sum_y (p_i\, p[:, i](y) - q[:, i](y))_+`,
    ``i = 1..gamma-1``, one program per ``(row, position)`` (float64 accumulation).

    Parameters
    ----------
    p, q : torch.Tensor
        ``[B, gamma + 1, V]`` and ``[B, gamma, V]`` probabilities.
    pr : torch.Tensor
        ``[B, gamma]`` running ratios :math:`p_i` (dtype of ``p``).

    Returns
    -------
    torch.Tensor
        ``[B, gamma - 1]`` masses, dtype of ``p``.
    """
    p, q = _contig(p, q)
    B, G = pr.shape
    Z = torch.empty((B, max(G - 1, 0)), dtype=p.dtype, device=p.device)
    if B and G > 1:
        V = p.shape[-1]
        _kernel("masses")[(B, G - 1)](
            p, q, pr.contiguous(), Z, G, V, p.stride(0), p.stride(1), q.stride(0), q.stride(1), BLOCK_V=min(_BLOCK_V, _pow2(V)), **_no_fma()
        )
    return Z


def block_step(p: torch.Tensor, q: torch.Tensor, tau: torch.Tensor, weight: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    r"""Block verification's emission: one draw per row from :math:`(w\, p_\tau(\cdot) - q_\tau(\cdot))_+`
    (``tau < gamma``) or the bonus row :math:`p_\gamma`, a residual of mass 0 falling back to :math:`p_\tau`.

    Parameters
    ----------
    p, q : torch.Tensor
        ``[B, gamma + 1, V]`` and ``[B, gamma, V]`` probabilities.
    tau : torch.Tensor
        ``[B]`` long accepted lengths.
    weight : torch.Tensor
        ``[B]`` running ratio :math:`p_\tau` (dtype of ``p``).
    u : torch.Tensor
        ``[B]`` float64 uniforms.

    Returns
    -------
    torch.Tensor
        ``[B]`` long emitted tokens.
    """
    p, q = _contig(p, q)
    B = tau.shape[0]
    stub = torch.zeros((B, q.shape[1]), dtype=torch.long, device=p.device)  # only its shape is read (gamma)
    return _emit(p, q, stub, None, u.to(torch.float64).contiguous(), weight.contiguous(), tau.contiguous(), 1, False)[1]


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
    ``wor``): one launch, one program per row making ``k + 2`` passes over its ``[V]`` row.

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
    m = torch.full((B,), k, dtype=torch.long, device=p.device) if count is None else count.to(torch.long).contiguous()
    if B:
        _kernel("rrs")[(B,)](
            p, q, drafts.contiguous(), coins.contiguous(), u.contiguous(), m, tok, V,
            p.stride(0) if p.shape[0] > 1 else 0, q.stride(0) if q.shape[0] > 1 else 0,
            K=k, WOR=wor, BLOCK_V=min(_BLOCK_V, _pow2(V)), **_no_fma(),
        )  # fmt: skip
    return tok
