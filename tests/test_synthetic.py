"""Synthetic families are seeded, normalised and respond to their knobs as documented."""

import numpy as np

from otspec._tolerances import FLOAT64_ATOL
from otspec.synthetic import synthetic_pair


def test_seeded_and_normalised():
    a = synthetic_pair(1000, seed=3)
    b = synthetic_pair(1000, seed=3)
    c = synthetic_pair(1000, seed=4)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=False))
    assert not np.array_equal(a[0], c[0])
    for fam in ("zipf", "dirichlet"):
        p, q = synthetic_pair(500, family=fam, seed=1)
        assert abs(p.sum() - 1) < FLOAT64_ATOL and abs(q.sum() - 1) < FLOAT64_ATOL and p.min() >= 0


def test_draft_noise_and_temperature_move_tv():
    tv = lambda pq: 0.5 * np.abs(pq[0] - pq[1]).sum()
    assert tv(synthetic_pair(2000, draft_noise=0.1)) < tv(synthetic_pair(2000, draft_noise=1.0))
    # higher temperature flattens p: its max probability drops
    assert synthetic_pair(2000, temperature=2.0)[0].max() < synthetic_pair(2000, temperature=1.0)[0].max()
