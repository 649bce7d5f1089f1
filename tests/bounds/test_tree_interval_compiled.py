"""The tree interval's compiled per-node passes against the numpy reference: the same explored
tree and the same interval bit for bit (the bucket LP gets the same data), containing the exact
tree optimum, with the same refusals of bad rows."""

from __future__ import annotations

import numpy as np
import pytest

from otspec import tree_interval, tree_optimum
from otspec.bounds import jit_policy
from otspec.errors import InvalidDistributionError

pytest.importorskip("numba")

from tests.bounds.test_tree_interval import CASES, _good, _Round  # noqa: E402


@pytest.fixture
def engine(monkeypatch):
    """Set the engine for problems of every size (the compiled path normally starts at 4 096 tokens)."""
    monkeypatch.setattr(jit_policy, "COMPILED_FROM_V", 1)

    def use(name: str) -> None:
        monkeypatch.setattr(jit_policy, "ENGINE", name)

    return use


def test_compiled_interval_is_the_reference_bit_for_bit_and_contains_the_optimum(engine):
    for V, gamma, k, K, levels, seed in CASES[:10]:
        rnd = _Round(V, gamma, k, seed, seed % 2)
        engine("numpy")
        ref = tree_interval(rnd.X, rnd.P, rnd.Q, top_k=K, levels=levels, expand=rnd.expand)
        engine("compiled")
        got = tree_interval(rnd.X, rnd.P, rnd.Q, top_k=K, levels=levels, expand=rnd.expand)
        T = tree_optimum(rnd.p, rnd.q, k, gamma).value
        assert got.nodes == ref.nodes
        assert (got.lower, got.upper, got.checks) == (ref.lower, ref.upper, ref.checks)
        assert got.lower <= T + 1e-9 <= got.upper + 2e-9
        assert got.checks["membership"] <= 1e-12


def test_compiled_rows_check_refuses_what_the_reference_refuses(engine):
    engine("compiled")
    X, P, Q = _good()
    for bad, words in (
        (np.where(Q.max() == Q, np.nan, Q), "finite"),
        (np.where(Q.max() == Q, -Q, Q), "non-negative"),
        (Q * 0.9, "sum to 1"),
    ):
        with pytest.raises(InvalidDistributionError, match=words):
            tree_interval(X, P, bad)


def test_pairwise_sum_is_numpys_sum():
    from otspec.bounds.tree_interval_kernels import pairwise_sum

    rng = np.random.default_rng(7)
    for n in [*range(0, 300), 1000, 1031, 4099, 49152]:
        a = rng.random(n) * rng.choice([1.0, 1e-12, 1e12], n)
        buf = np.zeros(n + 3)
        buf[:n] = a
        assert pairwise_sum(buf, n) == a.sum()


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf, -1e-300])
@pytest.mark.parametrize("where", [0, 1, 2, 3, 9])  # each of the four running lanes, and the tail
def test_rows_check_kernel_flags_every_bad_entry(bad, where):
    from otspec.bounds.tree_interval_kernels import check_rows

    rows = np.full((3, 10), 0.1)
    sums = np.empty(3)
    assert check_rows(rows, sums) and np.abs(sums - 1.0).max() <= 1e-15  # four running sums, not numpy's order
    rows[1, where] = bad
    assert not check_rows(rows, sums)
