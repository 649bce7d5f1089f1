"""Test-only oracles and instance builders shared by the block / tree test files.

Written independently of the library: they restate docs/block.rst, definitions directly; the
reference quadrature of the without-replacement dual (:func:`reference_prefix_values`); the
coupling check of an optimal plan (:func:`check_plan_is_coupling`); the awkward random pairs
and kernel check of the optimal i.i.d. rule (:func:`awkward_pair`, :func:`check_iid_rule_kernel`);
and the small instances and sampler check of the rules for drafts without replacement
(:func:`small_wor_cases`, :func:`check_wor_sampler`).
"""

import numpy as np

import otspec
from otspec import models
from otspec._tolerances import EXACT_ATOL
from otspec.testing import assert_sampler_matches
from tests._tolerances import FALSE_ALARM


def criterion_violation(block_law: dict, p_model, V: int) -> float:
    """max |Q(x^i y) - C(x^i) M_b(y | x^i)| over all i, x^i, y (docs/block.rst, losslessness criterion), plus |1 - total|.

    ``block_law`` maps each emitted block (a tuple of tokens, length >= 1) to its probability;
    ``Q(x^i) = P(|O| >= i, O^i = x^i)`` and ``C(x^i) = P(|O| > i, O^i = x^i)``.
    """
    Q, C = {}, {}
    for o, w in block_law.items():
        for i in range(len(o)):
            C[o[:i]] = C.get(o[:i], 0.0) + w
            Q[o[: i + 1]] = Q.get(o[: i + 1], 0.0) + w
    worst = abs(1.0 - sum(block_law.values()))
    for h in set(C) | {k[:-1] for k in Q}:
        c, pb = C.get(h, 0.0), p_model(h)
        for y in range(V):
            worst = max(worst, abs(Q.get(h + (y,), 0.0) - c * pb[y]))
    return worst


def make_pair(seed, V, a, sparse):
    """A (target, draft) model pair: independent sparse Dirichlet models, or a close draft."""
    if sparse:
        return (
            models.dirichlet(V, concentration=a, seed=seed, zero_prob=0.3),
            models.dirichlet(V, concentration=a, seed=seed + 1000, zero_prob=0.3),
        )
    p = models.dirichlet(V, concentration=a, seed=seed)
    return p, models.close_draft(p, noise=0.5, temperature=1.3, seed=seed + 1)


# -- reference implementation of the without-replacement race integral (baseline and oracle) --
def _legendre_nodes(s_lo: float, s_hi: float, n: int) -> tuple[np.ndarray, np.ndarray]:
    x, w = np.polynomial.legendre.leggauss(n)
    half = 0.5 * (s_hi - s_lo)
    s = s_lo + half * (x + 1.0)
    t = np.exp(s)
    return t, w * half * t  # dt = t ds


def reference_prefix_values(
    q_sorted: np.ndarray, k: int, *, n_nodes: int = 400, s_lo: float = -30.0, s_hi: float | None = None
) -> np.ndarray:
    r"""Reference :math:`Q(H_i^k)`, i = 0..V: a Python loop over tokens carrying the
    Poisson-binomial DP of :math:`P(N = j), j < k`, at ``n_nodes`` Gauss-Legendre nodes in
    :math:`s = \log t` on ``[s_lo, s_hi]`` (default ``s_hi = log(40 / lambda_min) + 1``).

    This is the original slow implementation of :mod:`otspec._race`, kept as the named baseline of
    ``experiments/bench/bench_wor.py`` and as an independent oracle in the tests. It has no error
    control: accuracy depends on the node count and range (:doc:`wor_integral`, error bound).
    """
    q_sorted = np.asarray(q_sorted, dtype=np.float64)
    V = q_sorted.size
    lam = np.concatenate([np.cumsum(q_sorted[::-1])[::-1], [0.0]])
    if s_hi is None:
        pos = lam[lam > 0]
        lam_min = float(pos.min()) if pos.size else 1.0
        s_hi = float(np.log(40.0 / lam_min)) + 1.0
    t, wt = _legendre_nodes(s_lo, s_hi, n_nodes)
    out = np.empty(V + 1)
    out[0] = 0.0
    P = np.zeros((t.size, k))  # P[:, j] = P(N = j) for the current prefix, j < k
    P[:, 0] = 1.0
    for i in range(V):
        a = np.exp(-q_sorted[i] * t)
        b = -np.expm1(-q_sorted[i] * t)
        P[:, 1:] = P[:, 1:] * a[:, None] + P[:, :-1] * b[:, None]
        P[:, 0] *= a
        tail = np.clip(1.0 - P.sum(axis=1), 0.0, 1.0)  # P(N >= k)
        li = lam[i + 1]
        out[i + 1] = float(np.sum(wt * li * np.exp(-li * t) * tail)) if li > 0 else 1.0
    return np.minimum(out, 1.0)


def check_plan_is_coupling(p, law, result, atol: float = EXACT_ATOL) -> None:
    """Assert that ``result.plan`` (an ``optimal_acceptance`` answer on an enumerable ``law``) gives
    a Markov kernel on every enumerated tuple whose output law is ``p`` and whose acceptance is
    ``result.value``, all within ``atol``."""
    tuples, w = law.enumerate()
    K = result.plan.kernel(tuples)
    assert np.all(-atol <= K)
    np.testing.assert_allclose(K.sum(axis=1), 1.0, atol=atol)
    np.testing.assert_allclose(w @ K, p, atol=atol)
    member = np.array([K[i, np.unique(t)].sum() for i, t in enumerate(tuples)])
    assert abs(w @ member - result.value) <= atol


def awkward_pair(rng, V):
    """A random (p, q) over ``V`` tokens drawn from ``rng``, often awkward: a zero in each, a ratio
    tie ``p/q`` between two tokens, ``q = p``, or a one-token ``q`` (the edge cases of the optimal
    i.i.d. rule)."""
    p = rng.dirichlet(np.full(V, 0.7))
    q = rng.dirichlet(np.full(V, 0.7))
    u = rng.random()
    if u < 0.25:
        p[rng.integers(V)] = 0.0
        q[rng.integers(V)] = 0.0
    elif u < 0.45:
        i, j = rng.choice(V, 2, replace=False)
        p[j] = p[i] * q[j] / q[i]
    elif u < 0.55:
        q = p.copy()
    elif u < 0.62:
        q = np.eye(V)[rng.integers(V)]
    return p / p.sum(), q / q.sum()


def check_iid_rule_kernel(p, q, k, st, tuples, beta, atol: float) -> None:
    """Assert that the optimal i.i.d. rule of state ``st`` with selection rows ``beta`` (one per row
    of ``tuples``, every drafted k-tuple of ``q``) is a kernel (rows sum to 1), lossless (output law
    ``p``) and attains the subsets optimum of ``iid(q, k)``, all within ``atol``: the accept step
    keeps y with ``st.accept[y]`` and otherwise draws from ``norm((p - st.r)_+)``."""
    Q = np.prod(q[tuples], axis=1)
    np.testing.assert_allclose(beta.sum(axis=1), 1.0, rtol=0, atol=atol)
    acc = beta * st.accept[None, :]
    res = np.maximum(p - st.r, 0.0)
    res = res / res.sum() if res.sum() > 0 else p
    pi = acc + (1.0 - acc.sum(axis=1))[:, None] * res[None, :]
    np.testing.assert_allclose(Q @ pi, p, rtol=0, atol=atol)
    drafted = np.zeros_like(pi, dtype=bool)
    drafted[np.repeat(np.arange(len(tuples)), k), tuples.ravel()] = True
    acceptance = float(Q @ np.where(drafted, pi, 0.0).sum(axis=1))
    oracle = otspec.optimal_acceptance(p, otspec.iid(q, k), method="subsets").value
    assert abs(acceptance - oracle) <= atol, (p, q, k)


def small_wor_cases(seed: int, n: int):
    """``n`` instances ``(p, q, k)`` small enough to enumerate every draft tuple without replacement:
    V in 2..6, k in 1..min(V, 4), Dirichlet(0.7) pairs, and the awkward ones: every third case
    integer masses (ratio ties and repeated masses: degenerate faces), the next one a token q never
    drafts and one p never emits (when k < V), every seventh p = q (every rule accepts everything)."""
    rng = np.random.default_rng(seed)
    for i in range(n):
        V = int(rng.integers(2, 7))
        k = int(rng.integers(1, min(V, 4) + 1))
        if i % 3 == 0:
            q = rng.integers(1, 3, V).astype(float)
            p = rng.integers(0, 3, V).astype(float)
            p[0] += 1.0
        else:
            q, p = rng.dirichlet(np.full(V, 0.7)), rng.dirichlet(np.full(V, 0.7))
        if i % 3 == 1 and k < V:
            q[int(rng.integers(V))] = 0.0
            p[int(rng.integers(V))] = 0.0
        if i % 7 == 3:
            p = q.copy()
        yield p / p.sum(), q / q.sum(), k


def check_wor_sampler(verifier, rng: np.random.Generator) -> None:
    """Joint chi-square of ``verifier.sample_batch`` against its kernel on one pair with a zero in p
    and in q, drafts without replacement (k = 3): N = 200 000, false-alarm rate ``FALSE_ALARM``,
    power >= 0.99 against a TV error of 0.02 of the joint law."""
    p = np.array([0.3, 0.3, 0.1, 0.3, 0.0])
    q = np.array([0.4, 0.2, 0.3, 0.0, 0.1])
    law = otspec.without_replacement(q, 3)
    chk = assert_sampler_matches(verifier, p, law, n=200_000, false_alarm=FALSE_ALARM, tv=0.02, rng=rng, per_tuple=False)
    assert chk.power >= 0.99, chk
