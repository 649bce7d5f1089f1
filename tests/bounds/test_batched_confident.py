"""otspec.bounds.batched's greedy optima for confident drafts: the draft's rest off its
top k-1 tokens is ~1e-16..1e-10, so it must be summed over the tokens off G, not taken as
``1 - q(G)`` (rounding, or a draft summing to 1 within SIMPLEX_SUM_ATOL only, made that a wrong
denominator). The truth is computed in exact rationals from the same float64 arrays, with the
convention of :class:`otspec.laws.GreedyLaw` (the last draft's law is q off G over its own sum)."""

from fractions import Fraction

import numpy as np

from otspec.bounds.batched import all_optima, greedy_optima

#: a few sums of ~V terms in float64 against the exact value
ATOL = 1e-12


def _greedy_exact(p, q, k):
    P = [Fraction(float(x)) for x in p]
    Q = [Fraction(float(x)) for x in q]
    G = set(sorted(range(len(Q)), key=lambda i: (-Q[i], i))[: k - 1])
    rest = sum((Q[i] for i in range(len(Q)) if i not in G), Fraction(0))
    return float(sum((P[i] for i in G), Fraction(0)) + sum((min(P[i], Q[i] / rest) for i in range(len(Q)) if i not in G), Fraction(0)))


def _confident(rng, V, k, r, scale=1.0):
    p = rng.dirichlet(np.full(V, 0.5))
    q = np.zeros(V)
    top = rng.permutation(V)[: k - 1]
    q[top] = rng.dirichlet(np.full(k - 1, 3.0)) * (1 - r) if k > 2 else 1 - r
    off = np.setdiff1d(np.arange(V), top)
    q[off] = rng.dirichlet(np.full(off.size, 0.7)) * r
    return p, q * scale


def test_the_issue_31_draft():
    """q(off G) = 3e-16 (true optimum 0.95): 1 - q(G) = 3.33e-16 gave 0.915."""
    p = np.array([0.3, 0.3, 0.4])
    q = np.array([1 - 3e-16, 1.95e-16, 1.05e-16])
    truth = _greedy_exact(p, q, 2)
    assert abs(truth - 0.95) < 1e-15
    assert abs(greedy_optima(p, q, [2])[2] - truth) <= ATOL
    assert abs(all_optima(p, q, [], [2])[2][2] - truth) <= ATOL


def test_confident_drafts_match_the_exact_optimum():
    """200 drafts (seed 31) with rest 1e-16..1e-10, some summing to 1 - 5e-10 (a distribution the
    library accepts: SIMPLEX_SUM_ATOL is 1e-9); both entry points, several k at once."""
    rng = np.random.default_rng(31)
    for i in range(200):
        V = int(rng.integers(3, 300))
        ks = [k for k in (2, 3, 5) if k - 1 < V]
        r = 10.0 ** rng.uniform(-16, -10)
        p, q = _confident(rng, V, max(ks), r, scale=1 - 5e-10 if i % 2 else 1.0)
        direct = greedy_optima(p, q, ks)
        binned = all_optima(p, q, [], ks)[2]
        for k in ks:
            truth = _greedy_exact(p, q, k)
            assert abs(direct[k] - truth) <= ATOL, (i, k, direct[k], truth)
            assert abs(binned[k] - truth) <= ATOL, (i, k, binned[k], truth)
