"""The information-agnostic LP: block verification is optimal among lossless verifiers that may
read every conditional (on or off the drafted path); with k paths it is the tree optimum."""

from __future__ import annotations

import numpy as np
import pytest

from otspec import models
from otspec.bounds.block import block_optimum
from otspec.bounds.info_agnostic import info_agnostic_optimum
from otspec.bounds.tree import tree_optimum
from otspec.errors import ProblemTooLargeError


def _models(rng, V):
    pm = models.markov(V, order=1, seed=int(rng.integers(1 << 30)), concentration=0.7)
    qm = models.markov(V, order=1, seed=int(rng.integers(1 << 30)), concentration=0.7)
    return pm, qm


def test_block_verification_toy_is_the_information_agnostic_optimum():
    pm, qm = models.context_free([1 / 3, 2 / 3]), models.context_free([2 / 3, 1 / 3])
    assert info_agnostic_optimum(pm, qm, 1, 2).value == pytest.approx(11 / 9, abs=1e-12)


def test_block_verification_is_optimal_against_off_path_information_on_30_chains():
    """k = 1: the LP over every (drafted path -> emitted block) plan equals sum W (block
    verification) on 30 random context-dependent chains, V <= 3, gamma <= 3."""
    rng = np.random.default_rng(2602)
    for _ in range(30):
        V, gamma = int(rng.integers(2, 4)), int(rng.integers(1, 4))
        if V == 3 and gamma == 3:
            gamma = 2
        pm, qm = _models(rng, V)
        lp = info_agnostic_optimum(pm, qm, 1, gamma)
        assert lp.status == "optimal"
        assert abs(lp.value - block_optimum(pm, qm, gamma).value) <= 1e-9


def test_multi_path_information_agnostic_optimum_is_the_tree_optimum():
    """k = 2: one variable per (draft tuple, output) against the node LP's T*, 6 cases."""
    rng = np.random.default_rng(16961)
    for _ in range(6):
        V, gamma = int(rng.integers(2, 4)), int(rng.integers(1, 3))
        pm, qm = _models(rng, V)
        assert abs(info_agnostic_optimum(pm, qm, 2, gamma).value - tree_optimum(pm, qm, 2, gamma).value) <= 1e-9


def test_refuses_large_problems():
    pm, qm = models.context_free([0.5, 0.5]), models.context_free([0.5, 0.5])
    with pytest.raises(ProblemTooLargeError, match="max_variables"):
        info_agnostic_optimum(pm, qm, 3, 4, max_variables=1000)


def test_optimum_over_iid_draft_blocks_grows_with_the_number_of_drafts():
    """The quantity SpecTr-GBV claims to attain: the best E[tau] of any lossless verifier of k i.i.d.
    draft blocks is nondecreasing in k (k = 1, 2, 3) and starts at block verification's value."""
    rng = np.random.default_rng(42)
    for _ in range(4):
        pm, qm = _models(rng, 2)
        vals = [info_agnostic_optimum(pm, qm, k, 2).value for k in (1, 2, 3)]
        assert abs(vals[0] - block_optimum(pm, qm, 2).value) <= 1e-9
        assert vals[0] <= vals[1] + 1e-12 <= vals[2] + 2e-12
