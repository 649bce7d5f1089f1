r"""Compiled (numba) kernels of the two-level Luce law's double integral
(:func:`otspec.verifiers.step._luce_law.luce_law_quadrature`).

Imported lazily, so ``import otspec`` never imports numba. numba is a core dependency: the
kernels are compiled and the t-nodes split over numba's threads. Where numba cannot be imported
the same code runs as plain Python (100-1000x slower, minutes per evaluation above a few thousand
tokens) and :func:`~otspec.verifiers.step._luce_law.luce_law_quadrature` warns
(:class:`UncompiledLuceWarning`); ``COMPILED`` says which.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "COMPILED",
    "UncompiledLuceWarning",
    "integrate",
    "integrate_chunk",
    "integrate_split",
    "num_threads",
    "side",
    "split_chunk",
    "split_sums",
    "tail_moments",
]


class UncompiledLuceWarning(UserWarning):
    """numba is missing (it is a core dependency): the double integral runs as plain Python,
    100-1000x slower than compiled (minutes per evaluation above a few thousand tokens)."""


try:
    import numba

    njit = numba.njit
    prange = numba.prange
    COMPILED = True
except ImportError:  # the same code runs as plain Python (slow above a few hundred tokens)

    def njit(*args, **kwargs):
        if args and callable(args[0]):
            return args[0]
        return lambda f: f

    prange = range
    COMPILED = False


def num_threads() -> int:
    """Threads the compiled integral may use (1 without numba).

    Returns
    -------
    int
        numba's thread count, or 1.
    """
    return numba.get_num_threads() if COMPILED else 1


@njit(cache=True)
def side(q, b, a, pi, w, idx, E0, F0, k, wgt, s, t, out, out2, out4, m2, coarse, c2, c4, preE, preF):
    """One side (A or H) at one (s, t) node: forward prefixes over tokens ``idx`` starting from the
    product ``(E0, F0)`` of the other tokens' factors, backward suffixes, and the leave-one-out
    combination for every token of ``idx``."""
    n = idx.size
    for m in range(k):
        preE[0, m] = E0[m]
        preF[0, m] = F0[m]
    for i in range(n):
        j = idx[i]
        aj = a[j]
        cj = pi[j] * w[j]
        qa = q[j] * aj
        for m in range(k):
            e = preE[i, m] * aj
            f = preF[i, m] * aj + preE[i, m] * qa
            if m > 0:
                e += preE[i, m - 1] * cj
                f += preF[i, m - 1] * cj
            preE[i + 1, m] = e
            preF[i + 1, m] = f
    sufE = np.zeros(k)
    sufF = np.zeros(k)
    sufE[0] = 1.0
    for i in range(n - 1, -1, -1):
        j = idx[i]
        if b[j] > 0.0:
            coef = 0.0
            for m in range(k):
                coef += preE[i, m] * sufF[k - 1 - m] + preF[i, m] * sufE[k - 1 - m]
            v = wgt * b[j] * s * w[j] * t * pi[j] * coef
            out[j] += v
            m2[j] += v * b[j] * s
            if coarse >= 1:
                out2[j] += c2 * v
            if coarse >= 2:
                out4[j] += c4 * v
        aj = a[j]
        cj = pi[j] * w[j]
        qa = q[j] * aj
        for m in range(k - 1, -1, -1):
            e = sufE[m] * aj
            f = sufF[m] * aj + sufE[m] * qa
            if m > 0:
                e += sufE[m - 1] * cj
                f += sufF[m - 1] * cj
            sufE[m] = e
            sufF[m] = f


@njit(cache=True)
def integrate_chunk(q, b, in_A, k, taus, h_t, W, sigmas, h_s, coarse_t, coarse_s, mult, lo, hi, out, out2, out4, m2):
    """Nodes ``taus[lo:hi]`` x all ``sigmas`` into this chunk's own accumulators."""
    n = q.size
    idxA = np.flatnonzero(in_A)
    idxH = np.flatnonzero(~in_A)
    qA = 0.0
    for j in idxA:
        qA += q[j]
    anyH = False
    for j in idxH:
        if b[j] > 0.0:
            anyH = True
    preE = np.empty((n + 1, k))
    preF = np.empty((n + 1, k))
    a = np.empty(n)
    pi = np.empty(n)
    EH = np.zeros(k)  # product over H of a_j (1 + eps q_j) + pi_j x: s-independent on the A side
    FH = np.zeros(k)
    E0 = np.zeros(k)
    F0 = np.zeros(k)
    for it in range(lo, hi):
        t = math.exp(taus[it])
        for j in range(n):
            a[j] = math.exp(-q[j] * t)
            pi[j] = -math.expm1(-q[j] * t)
        eA = math.exp(-qA * t)
        for m in range(k):
            EH[m] = 0.0
            FH[m] = 0.0
        EH[0] = 1.0
        for j in idxH:
            aj = a[j]
            cj = pi[j]
            qa = q[j] * aj
            for m in range(k - 1, -1, -1):
                e = EH[m] * aj
                f = FH[m] * aj + EH[m] * qa
                if m > 0:
                    e += EH[m - 1] * cj
                    f += FH[m - 1] * cj
                EH[m] = e
                FH[m] = f
        E0[0] = eA
        F0[0] = qA * eA
        for js in range(sigmas.size):
            s = math.exp(sigmas[js])
            wgt = h_t * h_s * mult[js, 0]
            coarse = min(coarse_t[it], coarse_s[js])
            c2 = 4.0 * mult[js, 1] / mult[js, 0]
            c4 = 16.0 * mult[js, 2] / mult[js, 0]
            w = W[js]
            if idxA.size:
                side(q, b, a, pi, w, idxA, EH, FH, k, wgt, s, t, out, out2, out4, m2, coarse, c2, c4, preE, preF)
            if anyH:
                side(q, b, a, pi, w, idxH, E0, F0, k, wgt, s, t, out, out2, out4, m2, coarse, c2, c4, preE, preF)


@njit(cache=True, parallel=True)
def integrate(q, b, in_A, k, taus, h_t, sigmas, h_s, coarse_t, coarse_s, mult, nchunks, acc):
    """All nodes; ``acc[c]`` holds chunk c's (r, T_2h, T_4h, second) sums, chunks run in parallel
    over contiguous ranges of t-nodes."""
    n = q.size
    W = np.empty((sigmas.size, n))
    for js in prange(sigmas.size):
        s = math.exp(sigmas[js])
        for j in range(n):
            W[js, j] = math.exp(-s * b[j])
    nt = taus.size
    for c in prange(nchunks):
        lo = (c * nt) // nchunks
        hi = ((c + 1) * nt) // nchunks
        integrate_chunk(
            q, b, in_A, k, taus, h_t, W, sigmas, h_s, coarse_t, coarse_s, mult, lo, hi, acc[c, 0], acc[c, 1], acc[c, 2], acc[c, 3]
        )


# ------------------------------------------------------------------------------------------------
# The head / tail split: tokens whose clocks ring with small probability over the whole t-range
# (q_j t <= rho) enter through power sums of their rates, so a node costs O(head + k^2), not O(V).


@njit(cache=True)
def _mul(E1, F1, E2, F2, k, E, F):
    """(E, F) = (E1 + eps F1)(E2 + eps F2) truncated at x^(k-1), eps^1 (E may alias neither input)."""
    for n in range(k):
        e = 0.0
        f = 0.0
        for i in range(n + 1):
            e += E1[i] * E2[n - i]
            f += E1[i] * F2[n - i] + F1[i] * E2[n - i]
        E[n] = e
        F[n] = f


@njit(cache=True)
def _tail_series(M, C, tpow, theta, qT, k, N, L0, L1, E, F):
    r"""exp of the tail's log-product: :math:`\prod_T f_j / a_j = \exp(\sum_m (-1)^{m+1} S_m x^m / m
    + \varepsilon (q_T + \sum_m (-1)^m R_m x^m))` truncated, with the power sums
    :math:`S_m = \sum_d C_{m,d} (\theta t)^{m+d} M_{m,d}`, :math:`R_m = \theta \sum_d C_{m,d}
    (\theta t)^{m+d} M_{m,d+1}` from the scaled moments :math:`M_{m,d} = \sum_T (q_j/\theta)^{m+d} w_j^m`."""
    L0[0] = 0.0
    L1[0] = qT
    for m in range(1, k):
        S = 0.0
        R = 0.0
        for d in range(N + 1):
            c = C[m, d] * tpow[m + d]
            S += c * M[m, d]
            R += c * M[m, d + 1]
        sign = 1.0 if m % 2 == 1 else -1.0
        L0[m] = sign * S / m
        L1[m] = -sign * theta * R
    E[0] = 1.0
    for n in range(1, k):
        acc = 0.0
        for i in range(1, n + 1):
            acc += i * L0[i] * E[n - i]
        E[n] = acc / n
    for n in range(k):
        acc = 0.0
        for i in range(n + 1):
            acc += L1[i] * E[n - i]
        F[n] = acc


@njit(cache=True)
def _accumulate_K(K, js, E, F, k, N, ht, t, tpow, coarse):
    """K[level, js, m, d, (0, eps)] += h_t t (theta t)^(m+1+d) [x^(k-1-m)] P on the rules of the node."""
    for m in range(k):
        e = E[k - 1 - m]
        f = F[k - 1 - m]
        for d in range(N + 1):
            c = ht * t * tpow[m + 1 + d]
            for lev in range(coarse + 1):
                K[lev, js, m, d, 0] += c * e
                K[lev, js, m, d, 1] += c * f


@njit(cache=True)
def _product_unweighted(q, a, pi, idx, k, E, F):
    """(E, F) = prod over ``idx`` of a_j (1 + eps q_j) + pi_j x, truncated (w = 1)."""
    for m in range(k):
        E[m] = 0.0
        F[m] = 0.0
    E[0] = 1.0
    for j in idx:
        aj = a[j]
        cj = pi[j]
        qa = q[j] * aj
        for m in range(k - 1, -1, -1):
            e = E[m] * aj
            f = F[m] * aj + E[m] * qa
            if m > 0:
                e += E[m - 1] * cj
                f += F[m - 1] * cj
            E[m] = e
            F[m] = f


# long-function: one (t-chunk) sweep holding the two sides' shared per-node state
@njit(cache=True)
def split_chunk(
    q,
    b,
    in_A,
    k,
    taus,
    h_t,
    W,
    coarse_t,
    coarse_s,
    hA,
    hH,
    tA,
    tH,
    theta,
    C,
    N,
    MA,
    MH,
    MH1,
    lo,
    hi,
    out,
    out2,
    out4,
    m2,
    mult,
    h_s,
    sigmas,
    KA,
    KH,
):
    """Nodes ``taus[lo:hi]`` x all s-nodes with the head / tail split: head tokens by the exact
    recursion (:func:`side`), the tail by its power-sum series; the full products of both sides go
    into this chunk's ``KA``, ``KH`` accumulators for the tail's outputs."""
    n = q.size
    qA = q[in_A].sum()
    qtA = q[tA].sum()
    qtH = q[tH].sum()
    nh = max(hA.size, hH.size)
    preE = np.empty((nh + 1, k))
    preF = np.empty((nh + 1, k))
    a = np.zeros(n)
    pi = np.zeros(n)
    EHh = np.zeros(k)  # head-H tokens with w = 1 (the A side): s-independent
    FHh = np.zeros(k)
    L0 = np.zeros(k)
    L1 = np.zeros(k)
    E1 = np.zeros(k)
    F1 = np.zeros(k)
    E2 = np.zeros(k)
    F2 = np.zeros(k)
    tpow = np.zeros(k + N + 2)
    MT = np.zeros(MA.shape[1:])
    for it in range(lo, hi):
        t = math.exp(taus[it])
        for idx in (hA, hH):
            for j in idx:
                a[j] = math.exp(-q[j] * t)
                pi[j] = -math.expm1(-q[j] * t)
        tp = 1.0
        for i in range(k + N + 2):
            tpow[i] = tp
            tp *= theta * t
        _product_unweighted(q, a, pi, hH, k, EHh, FHh)  # head-H with w = 1: the A side's s-free factor
        eA_all = math.exp(-qA * t)
        etA = math.exp(-qtA * t)
        etH = math.exp(-qtH * t)
        ct = coarse_t[it]
        for js in range(sigmas.size):
            s = math.exp(sigmas[js])
            wgt = h_t * h_s * mult[js, 0]
            coarse = min(ct, coarse_s[js])
            c2 = 4.0 * mult[js, 1] / mult[js, 0]
            c4 = 16.0 * mult[js, 2] / mult[js, 0]
            w = W[js]
            # A side: tail-A (w(s)) and tail-H (w = 1) series, head-H, then the head-A recursion
            for m in range(MT.shape[0]):
                for d in range(MT.shape[1]):
                    MT[m, d] = MA[js, m, d] + MH1[m, d]
            _tail_series(MT, C, tpow, theta, qtA + qtH, k, N, L0, L1, E1, F1)
            for m in range(k):
                E1[m] *= etA * etH
                F1[m] *= etA * etH
            _mul(E1, F1, EHh, FHh, k, E2, F2)
            side(q, b, a, pi, w, hA, E2, F2, k, wgt, s, t, out, out2, out4, m2, coarse, c2, c4, preE, preF)
            _accumulate_K(KA, js, preE[hA.size] if hA.size else E2, preF[hA.size] if hA.size else F2, k, N, h_t, t, tpow, ct)
            # H side: every A token unrung, tail-H series (w(s)), then the head-H recursion
            _tail_series(MH[js], C, tpow, theta, qtH, k, N, L0, L1, E1, F1)
            for m in range(k):
                E2[m] = E1[m] * etH * eA_all
                F2[m] = (F1[m] + qA * E1[m]) * etH * eA_all
            side(q, b, a, pi, w, hH, E2, F2, k, wgt, s, t, out, out2, out4, m2, coarse, c2, c4, preE, preF)
            _accumulate_K(KH, js, preE[hH.size] if hH.size else E2, preF[hH.size] if hH.size else F2, k, N, h_t, t, tpow, ct)


@njit(cache=True)
def _tail_poly(K, C, theta, k, N, G):
    r"""Coefficients in :math:`z = q_y/\theta` of :math:`\sum_d C_{m+1,d} z^d (K^\varepsilon_{m,d} -
    (m+1) \theta z K^0_{m,d})`, per rule level, s-node and m (the tail outputs' Horner polynomials)."""
    for lev in range(K.shape[0]):
        for js in range(K.shape[1]):
            for m in range(k):
                for e in range(N + 2):
                    g = 0.0
                    if e <= N:
                        g += C[m + 1, e] * K[lev, js, m, e, 1]
                    if e >= 1:
                        g -= (m + 1) * theta * C[m + 1, e - 1] * K[lev, js, m, e - 1, 0]
                    G[lev, js, m, e] = g


#: Tokens per vectorised block of the tail outputs.
TAIL_BLOCK = 256


@njit(cache=True)
def _block_degree(x, N, trunc):
    """Smallest D <= N with x^(D+1) e^x / (D+1)! <= trunc: the Taylor remainder bound of
    ((e^z - 1)/z)^m at degree D for k q_y t <= x."""
    D = 0
    term = x * math.exp(x)
    while D < N and term > trunc:
        D += 1
        term *= x / (D + 1)
    return D


@njit(cache=True)
def _alternating_block(G, z, x, N, k, B, base, xp, poly, acc, ab):
    """acc[u] = sum_m (-1)^m x_u^(m+1) G_m(z_u) over a block of tokens (Horner in z, the token loop
    innermost); ab[u] += base |term| per term (the rounding allowance's absolute sums)."""
    for u in range(B):
        xp[u] = x[u]
        acc[u] = 0.0
    for m in range(k):
        sign = 1.0 if m % 2 == 0 else -1.0
        g = G[m]
        for u in range(B):
            poly[u] = g[N + 1]
        for e in range(N, -1, -1):
            ge = g[e]
            for u in range(B):
                poly[u] = poly[u] * z[u] + ge
        for u in range(B):
            term = sign * xp[u] * poly[u]
            acc[u] += term
            ab[u] += base * abs(term)
            xp[u] *= x[u]


# long-function: one blocked sweep whose innermost loops run over tokens (vectorised)
@njit(cache=True, parallel=True)
def _tail_outputs(q, b, idx, theta, G, N, k, W, sigmas, h_s, mult, coarse_s, out, out2, out4, m2, absout, rho, trunc):
    r"""Each tail token's law from its side's Horner polynomials ``G`` (the leave-one-out by the
    geometric series of its own factor), blocks of tokens in parallel; a block's polynomials stop at
    the degree its largest :math:`q_y t \le \rho z_{max}` needs (:func:`_block_degree`)."""
    nb = (idx.size + TAIL_BLOCK - 1) // TAIL_BLOCK
    for ib in prange(nb):
        i0 = ib * TAIL_BLOCK
        B = min(TAIL_BLOCK, idx.size - i0)
        z = np.empty(B)
        by = np.empty(B)
        x = np.empty(B)
        xp = np.empty(B)
        poly = np.empty(B)
        acc = np.empty(B)
        ab = np.zeros(B)
        o = np.zeros(B)
        o2 = np.zeros(B)
        o4 = np.zeros(B)
        om = np.zeros(B)
        zmax = 0.0
        for u in range(B):
            z[u] = q[idx[i0 + u]] / theta
            by[u] = b[idx[i0 + u]]
            zmax = max(zmax, z[u])
        D = _block_degree(k * rho * zmax, N, trunc)
        for js in range(sigmas.size):
            s = math.exp(sigmas[js])
            base = h_s * mult[js, 0] * s
            for lev in range(min(coarse_s[js], 2) + 1):
                for u in range(B):
                    x[u] = W[js, idx[i0 + u]] * z[u]
                _alternating_block(G[lev, js], z, x, D, k, B, abs(base) if lev == 0 else 0.0, xp, poly, acc, ab)
                if lev == 0:
                    for u in range(B):
                        v = base * by[u] * acc[u]
                        o[u] += v
                        om[u] += v * by[u] * s
                elif lev == 1:
                    c2 = 4.0 * mult[js, 1] / mult[js, 0]
                    for u in range(B):
                        o2[u] += c2 * base * by[u] * acc[u]
                else:
                    c4 = 16.0 * mult[js, 2] / mult[js, 0]
                    for u in range(B):
                        o4[u] += c4 * base * by[u] * acc[u]
        for u in range(B):
            y = idx[i0 + u]
            out[y] += o[u]
            out2[y] += o2[u]
            out4[y] += o4[u]
            m2[y] += om[u]
            absout[y] += ab[u] * by[u]


@njit(cache=True, parallel=True, fastmath={"reassoc", "contract"})
def tail_moments(W, lo, hi, z, k, N, rho, trunc):
    """Scaled moments ``M[js, m, d] = sum_{lo <= j < hi} z_j^(m+d) W[js, j]^m`` (m = 1..k-1,
    d = 0..N+1) of a contiguous token range sorted by decreasing z, s-nodes in parallel; blocks of
    :data:`TAIL_BLOCK` tokens (cache-resident), each summed to the degree its largest z needs
    (:func:`_block_degree`: the terms left out are below ``trunc`` relative to the token's first)."""
    ns = W.shape[0]
    nT = hi - lo
    M = np.zeros((ns, k, N + 2))
    nb = (nT + TAIL_BLOCK - 1) // TAIL_BLOCK
    degree = np.empty(nb, dtype=np.int64)
    ZpT = np.empty((N + 2, nT))
    for ib in range(nb):
        j0 = ib * TAIL_BLOCK
        j1 = min(nT, j0 + TAIL_BLOCK)
        zmax = 0.0
        for j in range(j0, j1):
            zmax = max(zmax, z[j])
            zd = 1.0
            for d in range(N + 2):
                ZpT[d, j] = zd
                zd *= z[j]
        degree[ib] = min(N + 1, _block_degree(k * rho * zmax, N, trunc) + 1)
    for js in prange(ns):
        zw = np.empty(TAIL_BLOCK)
        x = np.empty(TAIL_BLOCK)
        for ib in range(nb):
            j0 = ib * TAIL_BLOCK
            B = min(nT, j0 + TAIL_BLOCK) - j0
            for u in range(B):
                zw[u] = z[j0 + u] * W[js, lo + j0 + u]
                x[u] = zw[u]
            for m in range(1, k):
                if m > 1:
                    for u in range(B):
                        x[u] *= zw[u]
                for d in range(degree[ib] + 1):
                    acc = 0.0
                    for u in range(B):
                        acc += x[u] * ZpT[d, j0 + u]
                    M[js, m, d] += acc
    return M


@njit(cache=True, parallel=True)
def integrate_split(
    q,
    b,
    in_A,
    k,
    taus,
    h_t,
    sigmas,
    h_s,
    coarse_t,
    coarse_s,
    mult,
    nchunks,
    acc,
    W,
    hA,
    hH,
    tA,
    tH,
    MA,
    MH,
    MH1,
    theta,
    C,
    N,
    absout,
    rho,
    trunc,
):
    """All nodes with the head / tail split (tail tokens ``tA``, ``tH`` enter by their moments
    ``MA``, ``MH``, ``MH1``; :func:`split_sums` prepares them); ``acc[c]`` holds chunk c's head
    sums, ``acc[0]`` also the tail's, ``absout`` the tail terms' absolute sums."""
    ns = sigmas.size
    KA = np.zeros((nchunks, 3, ns, k, N + 1, 2))
    KH = np.zeros((nchunks, 3, ns, k, N + 1, 2))
    nt = taus.size
    for c in prange(nchunks):
        lo = (c * nt) // nchunks
        hi = ((c + 1) * nt) // nchunks
        split_chunk(
            q,
            b,
            in_A,
            k,
            taus,
            h_t,
            W,
            coarse_t,
            coarse_s,
            hA,
            hH,
            tA,
            tH,
            theta,
            C,
            N,
            MA,
            MH,
            MH1,
            lo,
            hi,
            acc[c, 0],
            acc[c, 1],
            acc[c, 2],
            acc[c, 3],
            mult,
            h_s,
            sigmas,
            KA[c],
            KH[c],
        )
    GA = np.zeros((3, ns, k, N + 2))
    GH = np.zeros((3, ns, k, N + 2))
    _tail_poly(KA.sum(axis=0), C, theta, k, N, GA)
    _tail_poly(KH.sum(axis=0), C, theta, k, N, GH)
    _tail_outputs(q, b, tA, theta, GA, N, k, W, sigmas, h_s, mult, coarse_s, acc[0, 0], acc[0, 1], acc[0, 2], acc[0, 3], absout, rho, trunc)
    _tail_outputs(q, b, tH, theta, GH, N, k, W, sigmas, h_s, mult, coarse_s, acc[0, 0], acc[0, 1], acc[0, 2], acc[0, 3], absout, rho, trunc)


def split_sums(grid, split: tuple, nchunks: int, rho: float, trunc: float) -> tuple[np.ndarray, np.ndarray]:
    """The trapezoid sums of the law with the head / tail split (numpy prepares the weights
    :math:`e^{-s b_j}` and the tail's moments, the compiled kernel does the rest).

    Parameters
    ----------
    grid : QuadratureGrid
        The nodes.
    split : tuple
        ``(is_tail, theta, C, N, delta)`` from :func:`~otspec.verifiers.step._luce_law.tail_split`.
    nchunks : int
        Parallel chunks of t-nodes.
    rho, trunc : float
        The split's bound on :math:`q_j t_{max}` and the series' relative truncation error.

    Returns
    -------
    acc : ndarray, shape (nchunks, 4, n)
        Per chunk the step-h, 2h, 4h sums and the second-moment sum.
    absout : ndarray, shape (n,)
        The tail terms' absolute sums (the rounding allowance).
    """
    is_tail, theta, C, N, _ = split
    k = grid.k
    # tokens reordered: head A, head H, tail A, tail H (tails by decreasing q), so that every
    # group is a contiguous range (contiguous rows of W for the moments and the tail outputs)
    groups = []
    for mask in (grid.in_A & ~is_tail, ~grid.in_A & ~is_tail, grid.in_A & is_tail, ~grid.in_A & is_tail):
        g = np.flatnonzero(mask)
        groups.append(g[np.argsort(-grid.q[g], kind="stable")])
    perm = np.concatenate(groups)
    q, b, in_A = grid.q[perm], grid.b[perm], grid.in_A[perm]
    ends = np.cumsum([0] + [g.size for g in groups])
    hA, hH, tA, tH = (np.arange(ends[i], ends[i + 1]) for i in range(4))
    W = np.exp(-np.exp(grid.sigmas)[:, None] * b[None, :])
    z = q / theta
    MA = tail_moments(W, ends[2], ends[3], z[ends[2] : ends[3]], k, N, rho, trunc)
    MH = tail_moments(W, ends[3], ends[4], z[ends[3] : ends[4]], k, N, rho, trunc)
    MH1 = tail_moments(np.ones((1, q.size)), ends[3], ends[4], z[ends[3] : ends[4]], k, N, rho, trunc)[0]
    acc_p = np.zeros((nchunks, 4, q.size))
    absout_p = np.zeros(q.size)
    h = grid.h
    integrate_split(
        q,
        b,
        in_A,
        k,
        grid.taus,
        h,
        grid.sigmas,
        h,
        grid.coarse_t,
        grid.coarse_s,
        grid.mult,
        nchunks,
        acc_p,
        W,
        hA,
        hH,
        tA,
        tH,
        MA,
        MH,
        MH1,
        theta,
        C,
        N,
        absout_p,
        rho,
        trunc,
    )
    acc = np.empty_like(acc_p)
    acc[:, :, perm] = acc_p
    absout = np.empty_like(absout_p)
    absout[perm] = absout_p
    return acc, absout
