r"""The optimal i.i.d. verifier's draw without the threshold tree, entirely in torch (twin of
``otspec.verifiers.step._iid_bridge``; the mathematics and the proof are in
``docs/optimal_verifier.rst``, section "Drawing without the tree").

Per row of ``[B, V]`` laws, with no host round trip and no per-law Python loop:

1. the closed-form selection law :math:`r^*` (one sort of p/q, prefix scans, the optimal cut, the
   two pool constants), the same formulas as the numpy core;
2. super-tokens (runs of equal density :math:`r^*/q` in descending order), their q- and
   :math:`r^*`-masses (segment sums), and compensated (two-sum) suffix scans of both;
3. at the level :math:`G = 1 - s`, the hull edge over the first drafted super-token: coordinates
   anchored at the gap, then a fixed number of alternating-tangent rounds (each: from the right
   end the left point of least slope, from the new left end the right point of largest slope; a
   fixed point is the edge and stays fixed), then a fixed number of rounds that re-check each end
   in coordinates anchored at that end;
4. a uniform draft among those up to the edge's right end, accepted with
   :math:`\min(1, p/r^*)`, else the residual token.

``k = 1`` is token verification (:math:`r^* = q`): the single draft is selected and no edge is
computed. Every per-row quantity is a ``[B, V]`` or ``[B, V + 1]`` tensor (padded where a row has
fewer super-tokens), so the cost is a handful of passes over ``B x V`` (the sort dominates).
"""

from __future__ import annotations

import torch

__all__ = ["ROUNDS", "POLISH_ROUNDS", "BridgeStep", "bridge_step", "selection", "super_tokens"]

#: Alternating-tangent rounds of the edge (each strictly raises the edge until it is found; on
#: LM-shaped pairs 2-4 suffice, and the tests check that the last round changed nothing).
ROUNDS = 12
#: End-anchored re-check rounds (usually the first confirms both ends).
POLISH_ROUNDS = 2


# long-function: one host-sync-free tensor computation with shared intermediates
def selection(p: torch.Tensor, q: torch.Tensor, k: int) -> dict:
    r"""The closed-form selection law :math:`r^*` per row, in ascending p/q order.

    Parameters
    ----------
    p, q : torch.Tensor
        ``[B, V]`` float64 probability rows.
    k : int
        Number of drafts (>= 2).

    Returns
    -------
    dict
        ``order`` ``[B, V]`` (tokens in ascending p/q, tokens with q = 0 last), ``n`` ``[B]``
        (tokens with q > 0), ``ps``, ``qs``, ``rs`` (p, q, :math:`r^*` in that order; 0 past n),
        ``dens`` (:math:`r^*/q` in that order, non-decreasing, +inf past n) and ``r`` ``[B, V]``
        (:math:`r^*` by token).
    """
    # Over 80 lines only through this docstring: the code is the numpy closed form, step for step.
    B, V = p.shape
    dev = p.device
    valid_tok = q > 0
    with torch.no_grad():
        pi = torch.where(valid_tok, p / torch.where(valid_tok, q, 1.0), torch.nan)  # q = 0 sorts last
    pis, order = torch.sort(pi, dim=1, stable=True)
    n = valid_tok.sum(dim=1)
    idx = torch.arange(V, device=dev).expand(B, V)
    valid = idx < n[:, None]
    ps = torch.where(valid, p.gather(1, order), 0.0)
    qs = torch.where(valid, q.gather(1, order), 0.0)
    pis = torch.where(valid, pis, torch.inf)
    zero = ps.new_zeros(B, 1)
    cp = torch.cat([zero, torch.cumsum(ps, 1)], 1)
    cq = torch.clamp(torch.cat([zero, torch.cumsum(qs, 1)], 1), max=1.0)
    g = cp - cq**k
    idx1 = torch.arange(V + 1, device=dev).expand(B, V + 1)
    boundary = torch.ones(B, V + 1, dtype=torch.bool, device=dev)
    boundary[:, 1:V] = pis[:, 1:] != pis[:, :-1]
    boundary &= idx1 <= n[:, None]
    g = torch.where(boundary, g, torch.inf)
    nH = torch.argmin(g, dim=1)  # first minimiser
    h = cq.gather(1, nH[:, None])
    hk = h**k
    inA = valid & (idx >= nH[:, None])
    inH = idx < nH[:, None]
    # --- A: r = min(p, c q), sum = 1 - h^k
    pA = torch.where(inA, ps, 0.0)
    qA = torch.where(inA, qs, 0.0)
    P_lt = torch.cat([zero, torch.cumsum(pA, 1)[:, :-1]], 1)  # p-mass of A tokens before j (the zeros before A keep it exact)
    Q_ge = torch.flip(torch.cumsum(torch.flip(qA, [1]), 1), [1])
    F = torch.where(inA, P_lt + pis * Q_ge, torch.where(inH, -torch.inf, torch.inf))
    target = 1.0 - hk
    jA = torch.searchsorted(F.contiguous(), target.contiguous(), side="left").squeeze(1).clamp(max=V - 1)
    hasA = (nH < n) & (jA < n)
    gA = lambda x: x.gather(1, jA[:, None]).squeeze(1)  # noqa: E731
    c = (target.squeeze(1) - gA(P_lt)) / gA(Q_ge)
    lo = torch.where(jA > nH, pis.gather(1, (jA - 1).clamp(min=0)[:, None]).squeeze(1), 0.0)
    c = torch.minimum(torch.maximum(c, lo), gA(pis))
    c = torch.where(hasA, c, torch.inf)
    rA = torch.where(hasA[:, None] & (idx >= jA[:, None]), c[:, None] * qs, ps)
    # --- H*: r = max(p, c' q), sum = h^k
    pH = torch.where(inH, ps, 0.0)
    Q_le = torch.cumsum(torch.where(inH, qs, 0.0), 1)
    rev = torch.flip(torch.cumsum(torch.flip(pH, [1]), 1), [1])
    P_gt = torch.cat([rev[:, 1:], zero], 1)
    S = torch.where(inH, pis * Q_le + P_gt, torch.inf)
    jH = torch.searchsorted(S.contiguous(), hk.contiguous(), side="left").squeeze(1).clamp(min=1)
    last = (nH - 1).clamp(min=0)
    gH = lambda x, j: x.gather(1, j[:, None]).squeeze(1)  # noqa: E731
    inner = jH <= nH - 1
    jm1 = (jH - 1).clamp(min=0, max=V - 1)
    cp_in = (hk.squeeze(1) - gH(P_gt, jm1)) / gH(Q_le, jm1)
    cp_in = torch.minimum(torch.maximum(cp_in, gH(pis, jm1)), gH(pis, jH.clamp(max=V - 1)))
    cp_out = torch.maximum(hk.squeeze(1) / gH(Q_le, last), gH(pis, last))
    c_prime = torch.where(inner, cp_in, cp_out)
    c_prime = torch.where(nH > 0, c_prime, torch.nan)
    jH_eff = torch.where(inner, jH, nH)
    rH = torch.where(idx < jH_eff[:, None], c_prime[:, None] * qs, ps)
    rs = torch.where(inH, rH, torch.where(valid, rA, 0.0))
    # densities (pools at exactly their constant, p-tokens at exactly p/q), non-decreasing
    is_p = rs == ps
    d = torch.where(inA, torch.where(is_p | ~torch.isfinite(c)[:, None], pis, c[:, None]), pis)
    d = torch.where(inH, torch.where(is_p & (pis >= c_prime[:, None]), pis, c_prime[:, None]), d)
    d = torch.where(valid, d, torch.inf)
    d = torch.cummax(d, dim=1).values
    r = torch.zeros_like(p).scatter_(1, order, rs)
    return {"order": order, "n": n, "ps": ps, "qs": qs, "rs": rs, "dens": d, "r": r}


def _two_sum_scan(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Compensated inclusive scan along dim 1: ``hi + lo`` is the exact prefix sum to ~eps**2
    (correct for any scan order: the term ``t - hi`` absorbs a parallel scan's different rounding)."""
    hi = torch.cumsum(x, 1)
    prev = torch.cat([x.new_zeros(x.shape[0], 1), hi[:, :-1]], 1)
    t = prev + x
    bb = t - prev
    err = (prev - (t - bb)) + (x - bb)
    return hi, torch.cumsum(err + (t - hi), 1)


def super_tokens(sel: dict, k: int) -> dict:
    r"""Super-tokens of each row: their masses and the compensated suffix sums the edge reads.

    Parameters
    ----------
    sel : dict
        From :func:`selection`.
    k : int
        Number of drafts.

    Returns
    -------
    dict
        ``st`` ``[B, V]`` (1-based super-token of each token, descending density; 0 when q = 0),
        ``m`` ``[B]``, and ``Yh, Yl, Sh, Sl`` ``[B, V + 1]``: suffix q-mass and :math:`r^*`-mass
        beyond each boundary ``0..m`` as (hi, lo) pairs (0 past m).
    """
    order, n, d = sel["order"], sel["n"], sel["dens"]
    B, V = order.shape
    dev = order.device
    idx = torch.arange(V, device=dev).expand(B, V)
    valid = idx < n[:, None]
    nxt = torch.cat([d[:, 1:], d.new_full((B, 1), torch.inf)], 1)
    start = valid & ((idx == n[:, None] - 1) | (d != nxt))  # starts a super-token in descending order
    m = start.sum(1)
    # starts at or after each position (1-based super-token index), as m - (starts before it): an
    # integer suffix count without a flipped scan (Inductor 2.11's split scan of a flipped int64 input
    # failed to generate code on CUDA)
    s_int = start.long()
    st_asc = (m[:, None] - torch.cumsum(s_int, 1) + s_int) * valid
    st = torch.zeros_like(order).scatter_(1, order, st_asc)
    w = sel["qs"].new_zeros(B, V + 1).scatter_add_(1, st_asc, sel["qs"])[:, 1:]
    rho = sel["qs"].new_zeros(B, V + 1).scatter_add_(1, st_asc, sel["rs"])[:, 1:]
    w = w / w.sum(1, keepdim=True)
    rho = rho / rho.sum(1, keepdim=True)
    # suffix sums over super-tokens j+1..m at boundary j (w is zero past m)
    Yh, Yl = _two_sum_scan(torch.flip(w, [1]))
    Sh, Sl = _two_sum_scan(torch.flip(rho, [1]))
    z = w.new_zeros(B, 1)
    out = {"st": st, "m": m}
    for name, x in (("Yh", Yh), ("Yl", Yl), ("Sh", Sh), ("Sl", Sl)):
        out[name] = torch.cat([torch.flip(x, [1]), z], 1)
    return out


def _anchored(geo: dict, c: torch.Tensor, G: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Coordinates ``[B, V + 1]`` relative to boundary ``c`` ``[B]`` at levels ``G`` ``[B]``."""
    at = lambda x: x.gather(1, c[:, None])  # noqa: E731
    D = (at(geo["Yh"]) - geo["Yh"]) + (at(geo["Yl"]) - geo["Yl"])
    E = (at(geo["Sh"]) - geo["Sh"]) + (at(geo["Sl"]) - geo["Sl"])
    yc = at(geo["Yh"])
    h = torch.ones_like(D)
    ycp = torch.ones_like(yc)
    for _ in range(k - 1):
        ycp = ycp * yc
        h = h * geo["Yh"] + ycp
    return D, E - G[:, None] * (D * h)


def _pick(score: torch.Tensor, mask: torch.Tensor, last: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Index of the best (largest) masked score per row, ties to the largest index when ``last``
    else the smallest; and the best score."""
    score = torch.where(mask & ~torch.isnan(score), score, -torch.inf)
    top = score.max(dim=1, keepdim=True).values
    hit = mask & (score == top)
    V1 = score.shape[1]
    ar = torch.arange(V1, device=score.device).expand_as(score)
    if last:
        i = torch.where(hit, ar, -1).max(dim=1).values
    else:
        i = torch.where(hit, ar, V1).min(dim=1).values
    return i, top.squeeze(1)


def _edge(geo: dict, j0: torch.Tensor, G: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(a, b, settled)``: the hull edge over super-token ``j0`` ``[B]`` at level ``G``; ``settled``
    says the last tangent round changed nothing (the edge was found within :data:`ROUNDS`)."""
    B, V1 = geo["Yh"].shape
    dev = j0.device
    c = j0 - 1
    ar = torch.arange(V1, device=dev).expand(B, V1)
    inside = ar <= geo["m"][:, None]
    left = inside & (ar <= c[:, None])
    right = inside & (ar > c[:, None])
    D, E = _anchored(geo, c, G, k)
    at = lambda x, i: x.gather(1, i[:, None])  # noqa: E731
    a, b = c, c + 1
    settled = torch.zeros(B, dtype=torch.bool, device=dev)
    for _ in range(ROUNDS):
        # from b: the left point of least slope (ties: nearest the gap)
        na, _ = _pick(-(at(E, b) - E) / (at(D, b) - D), left, last=True)
        nb, _ = _pick((E - at(E, na)) / (D - at(D, na)), right, last=False)
        settled = (na == a) & (nb == b)
        a, b = na, nb
    for _ in range(POLISH_ROUNDS):
        Db, Eb = _anchored(geo, b, G, k)
        gain = (at(Eb, a) * Db - Eb * at(Db, a)) / (Db - at(Db, a))
        nb, top = _pick(gain, right, last=False)
        nb = torch.where(top > 0, nb, b)
        Da, Ea = _anchored(geo, a, G, k)
        gain = (at(Da, nb) * Ea - at(Ea, nb) * Da) / (at(Da, nb) - Da)
        na, top = _pick(gain, left, last=True)
        na = torch.where(top > 0, na, a)
        a, b = na, nb
    return a, b, settled


class BridgeStep(dict):
    """The per-row results of :func:`bridge_step` (a dict: ``tokens``, ``selected``, ``keep``,
    ``block_end``, ``settled``, ``residual``, ``r``)."""


def bridge_step(
    p: torch.Tensor,
    q: torch.Tensor,
    drafts: torch.Tensor,
    s: torch.Tensor,
    u: torch.Tensor,
    coin: torch.Tensor,
    residual_uniform: torch.Tensor,
) -> BridgeStep:
    r"""One draw per row of the optimal i.i.d. verifier, tree-free, from caller-supplied uniforms.

    Parameters
    ----------
    p, q : torch.Tensor
        ``[B, V]`` probability rows, or ``[1, V]`` shared by every row (renormalised in float64
        here).
    drafts : torch.Tensor
        ``[B, k]`` long draft tokens (i.i.d. from q).
    s, u, coin, residual_uniform : torch.Tensor
        ``[B]`` float64 uniforms: the level (:math:`G = 1 - s`), the choice within the block, the
        accept coin and the residual draw.

    Returns
    -------
    BridgeStep
        ``tokens`` ``[B]`` long outputs; ``selected`` the selected drafts; ``keep`` the accept
        decisions; ``block_end`` the edge's right end (super-token boundary); ``settled`` whether
        the edge search converged within :data:`ROUNDS`; ``residual`` ``[B, V]`` the residual
        weights :math:`(p - r^*)_+` (p where they vanish); ``r`` ``[B, V]`` :math:`r^*`.
    """
    from otspec_gpu.sampling import sample_weights

    p64 = p.to(torch.float64)
    q64 = q.to(torch.float64)
    p64 = p64 / p64.sum(-1, keepdim=True)
    q64 = q64 / q64.sum(-1, keepdim=True)
    B, k = drafts.shape
    if k == 1:  # token verification: r* = q, the single draft is selected
        r = q64.expand(B, -1)
        p64 = p64.expand(B, -1)
        y = drafts[:, 0]
        end = torch.zeros_like(y)
        settled = torch.ones_like(y, dtype=torch.bool)
    else:
        sel = selection(p64, q64, k)
        geo = super_tokens(sel, k)
        r = sel["r"]
        if p64.shape[0] == 1 and B > 1:  # one shared law: prepared once, read by every row
            geo = {name: x.expand(B, *x.shape[1:]) for name, x in geo.items()}
            r, p64 = r.expand(B, -1), p64.expand(B, -1)
        stt = geo["st"].gather(1, drafts)
        j0 = stt.min(dim=1).values
        _, end, settled = _edge(geo, j0, 1.0 - s.to(torch.float64), k)
        elig = stt <= end[:, None]
        cnt = elig.sum(dim=1)
        rank = torch.minimum((u * cnt).long(), cnt - 1)
        col = torch.argmax((torch.cumsum(elig.long(), dim=1) > rank[:, None]).to(torch.uint8), dim=1)
        y = drafts.gather(1, col[:, None]).squeeze(1)
    py, ry = p64.gather(1, y[:, None]).squeeze(1), r.gather(1, y[:, None]).squeeze(1)
    acc = torch.where(ry > 0, torch.minimum(torch.ones_like(py), py / torch.where(ry > 0, ry, 1.0)), 1.0)
    keep = coin < acc
    res = torch.clamp(p64 - r, min=0.0)
    res = torch.where(res.sum(-1, keepdim=True) > 0, res, p64)
    out = torch.where(keep, y, sample_weights(res, residual_uniform))
    return BridgeStep(tokens=out, selected=y, keep=keep, block_end=end, settled=settled, residual=res, r=r)
