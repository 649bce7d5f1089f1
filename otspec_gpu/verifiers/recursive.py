"""The round-by-round recursive rejection sampler shared by :mod:`~otspec_gpu.verifiers.step.rrs`
(drafts with replacement), :mod:`~otspec_gpu.verifiers.step.rrs_wor` (without replacement) and the
node walk of :mod:`~otspec_gpu.verifiers.tree`."""

from __future__ import annotations

import torch

from otspec_gpu._scratch import host_shortcuts, scratch, to_float64
from otspec_gpu.sampling import search_cdf
from otspec_gpu.verifiers.schedule import accept_ratio, gather

__all__ = ["sample_recursive"]


# long-function: one host-sync-free step over the draft rounds; splitting would pass every buffer around
def sample_recursive(
    p: torch.Tensor,
    q: torch.Tensor,
    drafts: torch.Tensor,
    coins: torch.Tensor,
    u: torch.Tensor,
    wor: bool = False,
    valid: torch.Tensor | None = None,
) -> torch.Tensor:
    r"""RRS sampler (with replacement, or RSD with ``wor``), round by round, building only what the rows reach.

    The residual chain has a closed form: with :math:`d = p - q` (exact in float64 for float32
    inputs), :math:`p_j = a_j (d - D_j q)_+` where :math:`(D_0, a_0) = (-1, 1)` (that is
    :math:`p_0 = p`), :math:`D_j = D_{j-1} + 1/a_{j-1}` and :math:`a_j = 1/\sum_y (d - D_j q)_+(y)`;
    a row whose sum is 0 keeps :math:`(D_{j-1}, a_{j-1})` (the residual stays :math:`p_{j-1}`, the
    numpy rule). Induction: :math:`(a(d - Dq)_+ - q)_+ = a(d - (D + 1/a) q)_+` (both sides vanish
    where :math:`d \le Dq`). So round j costs one pass over ``[B, V]`` (the sum for :math:`a_{j-1}`),
    made only while some row is still undecided (on CPU in eager mode; on CUDA and under
    ``torch.compile`` every round is computed, with masks and no host synchronisation), and the
    final residual is drawn from the unnormalised weights :math:`(d - D_k q)_+`. The uniforms are
    those :func:`~otspec_gpu.verifiers.schedule.round_uniforms` draws.

    Without replacement (``wor``, per-row laws: ``p`` has one row per row of drafts), round j
    tests against :math:`q_j = c_j q` with :math:`c_j = 1/(1 - \sum_{i<j} q(x_i))` (q renormalised
    off the earlier, distinct drafts) and the residual step subtracts :math:`q_j`:
    :math:`D_j = D_{j-1} + c_j/a_{j-1}` (the closed form of :func:`otspec_gpu.verifiers.step.rrs_wor.shared_wor`, kept relative to
    :math:`d = p - q` for precision).

    The body is one loop over the draft rounds with the closed-form update inline (a comment per
    step); splitting it would pass seven running tensors between helpers. Over 80 lines on purpose.

    Parameters
    ----------
    p, q : torch.Tensor
        ``[B, V]`` (or ``[1, V]`` with replacement) validated target and draft rows.
    drafts : torch.Tensor
        ``[B, k]`` long drafts.
    coins : torch.Tensor
        ``[B, k]`` float64 accept coins.
    u : torch.Tensor
        ``[B]`` float64 residual uniforms.
    wor : bool
        Drafts without replacement (RSD).
    valid : torch.Tensor, optional
        ``[B, k]`` bool, left-aligned: row ``b`` has ``valid[b].sum() >= 1`` drafts, the rest are
        padding (their rounds are skipped: no accept, no residual update). Lets rows with different
        numbers of drafts share one call with no host synchronisation (the tree walk on CUDA).

    Returns
    -------
    torch.Tensor
        ``[B]`` long output tokens.
    """
    # Over 80 lines only through this docstring: the code is the round loop of the closed-form chain.
    B, k = drafts.shape
    dev = p.device
    cpu = host_shortcuts(p)
    Bp, V = p.shape
    D = torch.full((Bp,), -1.0, dtype=torch.float64, device=dev)
    a = torch.ones_like(D)
    d = None
    out = torch.zeros(B, dtype=torch.long, device=dev)
    done = torch.zeros(B, dtype=torch.bool, device=dev)
    pd, qd = gather(p, drafts).double(), gather(q, drafts).double()

    def weights(D: torch.Tensor) -> torch.Tensor:
        w = torch.addcmul(d, q, -D[:, None], out=scratch("rrs_w", (Bp, V), dev))
        return w.clamp_(min=0.0)

    removed = torch.zeros(B, dtype=torch.float64, device=dev)
    c_prev = c_j = None
    for j in range(k):  # loop over draft rounds only
        c_j = 1.0 / (1.0 - removed) if wor else 1.0
        vj = None if valid is None else valid[:, j]
        if j:
            if d is None:
                d = to_float64(p, "rrs_d").sub_(q)
            D_new = D + c_prev / a
            S = weights(D_new).sum(-1)
            ok = S > 0 if vj is None else (S > 0) & vj
            D = torch.where(ok, D_new, D)
            a = torch.where(ok, 1.0 / torch.where(ok, S, torch.ones_like(S)), a)
        # p_{j}(x) = a (p(x) - q(x) - D q(x))_+ ; round 0 is p itself (D = -1, a = 1)
        num = a[:, None] * torch.clamp(pd[:, j : j + 1] - qd[:, j : j + 1] - D[:, None] * qd[:, j : j + 1], min=0.0) if j else pd[:, :1]
        acc = accept_ratio(num, (c_j * qd[:, j])[:, None] if wor else qd[:, j : j + 1]).squeeze(1)
        hit = (coins[:, j] < acc) & ~done
        if vj is not None:
            hit = hit & vj
        out = torch.where(hit, drafts[:, j], out)
        done = done | hit
        if cpu and bool(done.all()):
            return out
        if vj is None or not wor:
            c_prev = c_j
            if wor:
                removed = removed + qd[:, j]
        else:  # padding rounds leave the chain where the row's last draft left it
            c_prev = c_j if j == 0 else torch.where(vj, c_j, c_prev)
            removed = removed + torch.where(vj, qd[:, j], torch.zeros_like(removed))
    if d is None:
        d = to_float64(p, "rrs_d").sub_(q)
    D_new = D + c_prev / a
    w = weights(D_new)
    S = w.sum(-1)
    if not cpu or not bool((S > 0).all()):  # rows of mass 0 keep the previous residual
        w = torch.where((S > 0)[:, None], w, torch.clamp(d - D[:, None] * q, min=0.0))
    res_tok = search_cdf(w.cumsum_(dim=-1), u)
    return torch.where(done, out, res_tok)
