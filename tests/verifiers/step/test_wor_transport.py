"""``wor_transport``: the optimal verifier for drafts without replacement by a max-flow Gale transport.

Exhaustive on small vocabularies (every draft set enumerated): the plan's margins are the set
probabilities and r*; the kernel is lossless; the acceptance equals alpha*_WOR from brute force over
all 2^V cuts (not the prefix closed form the selection law comes from), including ties, p = q and
zeros. Statistical check (fixed seed) for the sampler.
"""

from __future__ import annotations

import numpy as np
import pytest

import otspec
from otspec.testing import assert_sampler_matches
from otspec.verifiers.step._wor_selection import wor_selection
from otspec.verifiers.step.wor_transport import gale_transport, wor_transport
from tests._tolerances import FALSE_ALARM

EXACT = 1e-12


def _cases(seed, n):
    rng = np.random.default_rng(seed)
    for i in range(n):
        V = int(rng.integers(2, 7))
        k = int(rng.integers(1, min(V, 4) + 1))
        if i % 3 == 0:  # ratio ties and repeated masses (degenerate faces)
            q = rng.integers(1, 3, V).astype(float)
            p = rng.integers(0, 3, V).astype(float)
            p[0] += 1.0
        else:
            q, p = rng.dirichlet(np.ones(V)), rng.dirichlet(np.ones(V))
        if i % 5 == 2 and k < V:
            q[int(rng.integers(V))] = 0.0
        if i % 7 == 0:
            p = q.copy()
        yield p / p.sum(), q / q.sum(), k


@pytest.mark.parametrize("seed", [0, 1])
def test_plan_margins(seed):
    for p, q, k in _cases(seed, 30):
        law = otspec.without_replacement(q, k)
        sets, w = law.enumerate_sets()
        r = wor_selection(p, q, k).r
        tr = gale_transport(r, sets, w)
        assert tr.flow == pytest.approx(1.0, abs=EXACT)
        np.testing.assert_allclose(tr.plan.sum(axis=1), w, atol=EXACT)
        np.testing.assert_allclose(tr.plan.sum(axis=0), r, atol=EXACT)
        off = np.ones_like(tr.plan, dtype=bool)
        for i, s in enumerate(sets):
            off[i, s[s >= 0]] = False
        assert np.all(tr.plan[off] == 0.0)  # a set sends mass only to its own tokens


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_lossless_and_optimal(seed):
    for p, q, k in _cases(seed, 30):
        law = otspec.without_replacement(q, k)
        K = wor_transport.kernel(p, law)
        np.testing.assert_allclose(K.output_law(), p, atol=EXACT)
        brute = otspec.optimal_acceptance(p, law, method="subsets").value
        assert K.acceptance() == pytest.approx(brute, abs=EXACT), (p, q, k)


def test_sampler_matches_kernel():
    """Joint chi-square of sample_batch against the kernel (N = 200 000, fixed seed, false-alarm
    rate 1e-6, power >= 0.99 against a TV error of 0.02 of the joint law)."""
    p = np.array([0.3, 0.3, 0.1, 0.3, 0.0])
    q = np.array([0.4, 0.2, 0.3, 0.0, 0.1])
    chk = assert_sampler_matches(
        wor_transport,
        p,
        otspec.without_replacement(q, 3),
        n=200_000,
        false_alarm=FALSE_ALARM,
        tv=0.02,
        rng=np.random.default_rng(3),
        per_tuple=False,
    )
    assert chk.power >= 0.99, chk


def test_refuses_laws_with_too_many_sets(monkeypatch):
    import otspec.verifiers.step.wor_transport as mod

    monkeypatch.setattr(mod, "MAX_SETS", 5)
    q = np.array([0.4, 0.3, 0.2, 0.1])
    with pytest.raises(otspec.errors.ProblemTooLargeError, match="wor_transport"):
        mod.WorTransportVerifier().kernel(q, otspec.without_replacement(q, 2))  # 6 sets
