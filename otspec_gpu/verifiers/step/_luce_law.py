r"""Torch twin of the law oracle of ``optimal_wor``'s two-level Luce rule.

The same double integral, on the same nodes (:func:`otspec.verifiers.step._luce_law.quadrature_grid`),
as the numpy/numba oracle :func:`otspec.verifiers.step._luce_law.luce_law_quadrature`. What changes
is the recursion over the tokens: the truncated products
:math:`\prod_j (a_j(1 + \varepsilon q_j) + \pi_j w_j x) \bmod (x^k, \varepsilon^2)` are an
associative scan (the product of two such polynomials is again one), so the prefix and suffix
products of every token are two Hillis-Steele scans of :math:`\lceil \log_2 n \rceil` steps, batched
over a chunk of quadrature nodes -- no sequential loop over the vocabulary. All terms stay
non-negative (no cancellation; the leave-one-out product is prefix x suffix, no deconvolution).
Work :math:`O(N V k^2 \log V)` for N nodes (a factor :math:`k \log V` above the sequential
recursion, traded for parallelism).
"""

from __future__ import annotations

import numpy as np
import torch

from otspec.verifiers.step._luce_law import LuceLaw, law_from_sums, quadrature_grid

__all__ = ["luce_law_quadrature_torch"]

#: Bytes of one (nodes x tokens x k) float64 work tensor per chunk of nodes (the scans hold about
#: ten such tensors at once): CPU, CUDA.
_CHUNK_BYTES = {"cpu": 64 * 1024**2, "cuda": 2 * 1024**3}


def _mul(E1, F1, E2, F2, k: int):
    """Truncated product of ``(E1 + eps F1)(E2 + eps F2)`` as polynomials in x of degree < k (last
    dimension)."""
    E, F = [], []
    for m in range(k):
        e = E1[..., 0] * E2[..., m]
        f = E1[..., 0] * F2[..., m] + F1[..., 0] * E2[..., m]
        for i in range(1, m + 1):
            e = e + E1[..., i] * E2[..., m - i]
            f = f + E1[..., i] * F2[..., m - i] + F1[..., i] * E2[..., m - i]
        E.append(e)
        F.append(f)
    return torch.stack(E, dim=-1), torch.stack(F, dim=-1)


def _scan(E, F, k: int):
    """Inclusive prefix products along dimension -2 (Hillis-Steele)."""
    n = E.shape[-2]
    d = 1
    while d < n:
        e2, f2 = _mul(E[..., :-d, :], F[..., :-d, :], E[..., d:, :], F[..., d:, :], k)
        E = torch.cat([E[..., :d, :], e2], dim=-2)
        F = torch.cat([F[..., :d, :], f2], dim=-2)
        d *= 2
    return E, F


def _exclusive(E, F, k: int, reverse: bool):
    """Exclusive prefix (or suffix) products along dimension -2, identity at the open end."""
    if reverse:
        E, F = E.flip(-2), F.flip(-2)
    E, F = _scan(E, F, k)
    one = torch.zeros_like(E[..., :1, :])
    one[..., 0] = 1.0
    E = torch.cat([one, E[..., :-1, :]], dim=-2)
    F = torch.cat([torch.zeros_like(one), F[..., :-1, :]], dim=-2)
    if reverse:
        E, F = E.flip(-2), F.flip(-2)
    return E, F


def _factors(a, c, qa, k: int):
    """Per-token factor polynomials ``(a + c x, q a)``: E ``(..., n, k)``, F ``(..., n, k)``."""
    E = torch.zeros(a.shape + (k,), dtype=a.dtype, device=a.device)
    E[..., 0] = a
    if k > 1:
        E[..., 1] = c
    F = torch.zeros_like(E)
    F[..., 0] = qa
    return E, F


def _side(q, b, a, pi, w, E0, F0, k: int):
    """Leave-one-out coefficients ``[x^{k-1} eps]`` of one side's tokens at every node, times the
    token's own weight ``b pi w`` (nodes ``(N,)`` by tokens ``(n,)``)."""
    c = pi * w
    E, F = _factors(a, c, q * a, k)
    pE, pF = _exclusive(E, F, k, reverse=False)
    pE, pF = _mul(E0[:, None, :], F0[:, None, :], pE, pF, k)
    sE, sF = _exclusive(E, F, k, reverse=True)
    coef = sum(pE[..., m] * sF[..., k - 1 - m] + pF[..., m] * sE[..., k - 1 - m] for m in range(k))
    return coef * pi * w * b


def luce_law_quadrature_torch(q, b, in_A, k: int, *, h: float = 0.25, device="cpu") -> LuceLaw:
    r"""The law of the two-level Luce rule by the double integral, computed with torch.

    Parameters
    ----------
    q, b : array_like, shape (V,)
        Draft distribution and Luce weights.
    in_A : array_like of bool, shape (V,)
        The upper level A.
    k : int
        Number of drafts.
    h : float
        Step of both trapezoidal rules (as the numpy oracle).
    device : str or torch.device
        Where to compute (float64).

    Returns
    -------
    LuceLaw
        The same law, error estimate and node count as
        :func:`otspec.verifiers.step._luce_law.luce_law_quadrature` (up to rounding).
    """
    # Over 80 lines only through this docstring: the code is one pass over the same nodes as numba.
    g = quadrature_grid(np.asarray(q, dtype=np.float64), np.asarray(b, dtype=np.float64), np.asarray(in_A, dtype=bool), k, h)
    if isinstance(g, LuceLaw):
        return g
    dev = torch.device(device)
    f64 = torch.float64
    qq = torch.as_tensor(g.q, dtype=f64, device=dev)
    bb = torch.as_tensor(g.b, dtype=f64, device=dev)
    A = torch.as_tensor(g.in_A, device=dev)
    idxA, idxH = torch.nonzero(A).flatten(), torch.nonzero(~A).flatten()
    qA = qq[idxA].sum()
    t = torch.exp(torch.as_tensor(g.taus, dtype=f64, device=dev))
    s = torch.exp(torch.as_tensor(g.sigmas, dtype=f64, device=dev))
    mult = torch.as_tensor(g.mult, dtype=f64, device=dev)
    ct = torch.as_tensor(g.coarse_t, device=dev)
    cs = torch.as_tensor(g.coarse_s, device=dev)
    n = qq.numel()
    out = torch.zeros((4, n), dtype=f64, device=dev)
    Ns = s.numel()
    per_t = max(1, int(_CHUNK_BYTES.get(dev.type, _CHUNK_BYTES["cpu"]) // (8 * max(n, 1) * k * Ns)))
    Ws = torch.exp(-s[:, None] * bb[None, :])  # (Ns, n)
    for lo in range(0, t.numel(), per_t):
        tt = t[lo : lo + per_t]
        nt = tt.numel()
        a = torch.exp(-qq[None, :] * tt[:, None])  # (nt, n)
        pi = -torch.expm1(-qq[None, :] * tt[:, None])
        # node batch: (nt * Ns) nodes, t-major
        aN = a.repeat_interleave(Ns, dim=0)
        piN = pi.repeat_interleave(Ns, dim=0)
        wN = Ws.repeat(nt, 1)
        sN = s.repeat(nt)
        tN = tt.repeat_interleave(Ns)
        coarse = torch.minimum(ct[lo : lo + nt].repeat_interleave(Ns), cs.repeat(nt))
        m0, m1, m2 = mult[:, 0].repeat(nt), mult[:, 1].repeat(nt), mult[:, 2].repeat(nt)
        w1 = h * h * m0 * sN * tN
        w2 = 4 * h * h * m1 * sN * tN * (coarse >= 1)
        w4 = 16 * h * h * m2 * sN * tN * (coarse >= 2)
        G = torch.zeros((nt * Ns, n), dtype=f64, device=dev)
        if idxA.numel():
            # the H tokens' product does not depend on s: once per t-node
            EH, FH = _factors(a[:, idxH], pi[:, idxH], qq[idxH] * a[:, idxH], k)
            EH, FH = _scan(EH, FH, k)
            E0 = EH[:, -1, :].repeat_interleave(Ns, dim=0) if idxH.numel() else None
            F0 = FH[:, -1, :].repeat_interleave(Ns, dim=0) if idxH.numel() else None
            if E0 is None:
                E0 = torch.zeros((nt * Ns, k), dtype=f64, device=dev)
                E0[:, 0] = 1.0
                F0 = torch.zeros_like(E0)
            G[:, idxA] = _side(qq[idxA], bb[idxA], aN[:, idxA], piN[:, idxA], wN[:, idxA], E0, F0, k)
        if idxH.numel() and bool((bb[idxH] > 0).any()):
            E0 = torch.zeros((nt * Ns, k), dtype=f64, device=dev)
            F0 = torch.zeros_like(E0)
            eA = torch.exp(-qA * tN)
            E0[:, 0] = eA
            F0[:, 0] = qA * eA
            G[:, idxH] = _side(qq[idxH], bb[idxH], aN[:, idxH], piN[:, idxH], wN[:, idxH], E0, F0, k)
        out[0] += w1 @ G
        out[1] += w2 @ G
        out[2] += w4 @ G
        out[3] += (w1 * sN) @ G * bb
    o = out.cpu().numpy()
    return law_from_sums(g, o[0], o[1], o[2], o[3])
