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
from otspec.verifiers.step._wor_selection import wor_selection
from otspec.verifiers.step.wor_transport import gale_transport, wor_transport
from tests._oracles import check_wor_sampler, small_wor_cases

EXACT = 1e-12


@pytest.mark.parametrize("seed", [0, 1])
def test_plan_margins(seed):
    for p, q, k in small_wor_cases(seed, 30):
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
    for p, q, k in small_wor_cases(seed, 30):
        law = otspec.without_replacement(q, k)
        K = wor_transport.kernel(p, law)
        np.testing.assert_allclose(K.output_law(), p, atol=EXACT)
        brute = otspec.optimal_acceptance(p, law, method="subsets").value
        assert K.acceptance() == pytest.approx(brute, abs=EXACT), (p, q, k)


def test_sampler_matches_kernel():
    """Joint chi-square of sample_batch against the kernel (:func:`tests._oracles.check_wor_sampler`)."""
    check_wor_sampler(wor_transport, np.random.default_rng(3))


def test_refuses_laws_with_too_many_sets(monkeypatch):
    import otspec.verifiers.step.wor_transport as mod

    monkeypatch.setattr(mod, "MAX_SETS", 5)
    q = np.array([0.4, 0.3, 0.2, 0.1])
    with pytest.raises(otspec.errors.ProblemTooLargeError, match="wor_transport"):
        mod.WorTransportVerifier().kernel(q, otspec.without_replacement(q, 2))  # 6 sets
