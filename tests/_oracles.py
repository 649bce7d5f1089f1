"""Test-only oracles and instance builders shared by the block / tree test files.

Written independently of the library: they restate docs/block.rst, definitions directly.
"""

from otspec import models


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
