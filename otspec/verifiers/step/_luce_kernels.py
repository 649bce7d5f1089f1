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

__all__ = ["COMPILED", "UncompiledLuceWarning", "integrate", "integrate_chunk", "num_threads", "side"]


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
