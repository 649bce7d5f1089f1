"""otspec.speedup: the renewal recursion against brute-force enumeration of every acceptance
outcome, the constant-acceptance formula against it (where it holds and where it fails, with the
exact values derived by hand), the round cost, the best configuration, and bad input."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from otspec.errors import InvalidOptionError
from otspec.speedup import (
    CostModel,
    affine_verify,
    best_configurations,
    constant_acceptance_tokens,
    expected_rounds,
    measured_verify,
    predict,
    predict_from_cumulative,
    tokens_per_round,
    tree_size,
)


def _rounds_by_enumeration(alpha, gamma, lengths):
    """E[rounds] by enumerating every coin vector: position t's draft is accepted iff coin t is 1
    (each position is drafted at most once: a rejected one is emitted by the target)."""
    n = len(alpha)
    ends = np.repeat(np.cumsum(lengths), lengths)
    total = 0.0
    for coins in itertools.product((0, 1), repeat=n):
        pr = np.prod([a if c else 1 - a for a, c in zip(alpha, coins, strict=True)])
        rounds, t = 0, 0
        while t < n:
            end = ends[t]
            g = min(gamma, end - t - 1)
            tau = 0
            while tau < g and coins[t + tau]:
                tau += 1
            rounds += 1
            t += tau + 1
        total += pr * rounds
    return total


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("gamma", [1, 2, 3])
def test_expected_rounds_equals_enumeration(seed, gamma):
    rng = np.random.default_rng(seed)
    lengths = [3, 4] if seed % 2 else [7]
    alpha = rng.uniform(size=7)
    alpha[rng.integers(0, 7)] = 1.0  # certain acceptances and rejections included
    alpha[rng.integers(0, 7)] = 0.0
    want = _rounds_by_enumeration(alpha, gamma, lengths)
    assert expected_rounds(alpha, gamma, lengths=lengths) == pytest.approx(want, rel=1e-12)


def test_documents_are_separate():
    rng = np.random.default_rng(1)
    a, b = rng.uniform(size=9), rng.uniform(size=5)
    both = expected_rounds(np.r_[a, b], 3, lengths=[9, 5])
    assert both == pytest.approx(expected_rounds(a, 3) + expected_rounds(b, 3), rel=1e-14)


@pytest.mark.parametrize("alpha", [0.3, 0.7, 0.95])
@pytest.mark.parametrize("gamma", [1, 4, 8])
def test_constant_acceptance_formula_holds_for_constant_acceptance(alpha, gamma):
    # Wald: rounds are i.i.d. with mean mu (the formula) until the text is within gamma of its end;
    # the first round M with S_M >= N - gamma has N - gamma <= S_M <= N, and at most gamma rounds
    # follow, so (N - gamma) / mu <= E[R] <= N / mu + gamma.
    n = 4000
    mu = constant_acceptance_tokens(alpha, gamma)
    assert mu == pytest.approx(sum(alpha**i for i in range(gamma + 1)), rel=1e-14)
    r = expected_rounds(np.full(n, alpha), gamma)
    assert (n - gamma) / mu <= r <= n / mu + gamma


def test_constant_formula_overstates_runs_of_easy_and_hard_text():
    # ten certain acceptances then ten certain rejections, gamma = 4: rounds at 0 and 5 emit 5
    # tokens each, then ten rounds of 1 token: 20 tokens in 12 rounds; the formula at the mean
    # 1/2 gives 1 + 1/2 + 1/4 + 1/8 + 1/16 = 1.9375.
    alpha = np.r_[np.ones(10), np.zeros(10)]
    assert expected_rounds(alpha, 4) == 12
    assert tokens_per_round(alpha, 4) == pytest.approx(20 / 12, rel=1e-15)
    assert constant_acceptance_tokens(alpha.mean(), 4) == 1.9375


def test_constant_formula_understates_alternating_acceptance():
    # 1, 0, 1, 0, ... with gamma = 2: every round accepts its first draft and is rejected on the
    # second, so it emits exactly 2 tokens; the formula at the mean 1/2 gives 1.75.
    alpha = np.tile([1.0, 0.0], 10)
    assert tokens_per_round(alpha, 2) == pytest.approx(2.0, rel=1e-15)
    assert constant_acceptance_tokens(0.5, 2) == 1.75


def test_more_acceptance_never_gives_fewer_tokens():
    rng = np.random.default_rng(3)
    for _ in range(20):
        a = rng.uniform(size=30)
        b = np.minimum(1.0, a + rng.uniform(0, 0.3, size=30))
        for g in (1, 3, 6):
            assert tokens_per_round(b, g) >= tokens_per_round(a, g) - 1e-12


def test_round_cost_by_hand():
    cost = CostModel(draft_cost=0.01, verify=affine_verify(0.05, 0.01), batch=2)
    # chain gamma 3: 3 draft tokens x 2 sequences x 0.01 + (0.05 + 0.01 x 2 x 4 positions)
    assert cost.round_seconds(3, 1) == pytest.approx(0.06 + 0.13, rel=1e-14)
    one = CostModel(draft_cost=0.01, verify=affine_verify(0.05, 0.01))
    # tree gamma 2, k 3: 1 + 3 non-leaf nodes drafted from, 1 + 3 + 9 positions scored
    assert one.round_seconds(2, 3) == pytest.approx(0.04 + 0.05 + 0.13, rel=1e-14)
    assert tree_size(2, 3) == 12 and tree_size(5, 1) == 5
    assert one.autoregressive_tokens_per_s() == pytest.approx(1 / 0.06, rel=1e-14)


def test_prediction_and_speedup_by_hand():
    cost = CostModel(draft_cost=0.0, verify=affine_verify(0.05, 0.01))
    p = predict(np.ones(9), cost, gamma=2)  # 3 rounds of 3 tokens, 0.08 s each
    assert p.tokens_per_round == 3 and p.round_seconds == pytest.approx(0.08, rel=1e-14)
    assert p.tokens_per_s == pytest.approx(3 / 0.08, rel=1e-14)
    assert p.speedup == pytest.approx((3 / 0.08) * 0.06, rel=1e-14)
    c = predict_from_cumulative([0.8, 0.8 * 0.5], cost)
    assert c.tokens_per_round == pytest.approx(1 + 0.8 + 0.4, rel=1e-14) and c.gamma == 2


def test_best_configuration_is_the_argmax_and_depends_on_cost():
    rng = np.random.default_rng(5)
    acc = {"optimum": {1: rng.uniform(0.6, 1, 200), 2: rng.uniform(0.8, 1, 200)}, "token": {1: rng.uniform(0.3, 0.9, 200)}}
    cheap = CostModel(0.0, affine_verify(0.05, 0.0005))
    best = best_configurations(acc, cheap, gammas=[1, 2, 4, 6])
    for name, rows in best.items():
        assert len(rows) == 4 * len(acc[name])
        direct = [predict(a, cheap, gamma=g, k=k).tokens_per_s for k, a in acc[name].items() for g in (1, 2, 4, 6)]
        assert rows[0].tokens_per_s == max(direct)
    # a per-position cost as large as the forward's fixed cost makes deep trees lose to chains
    dear = CostModel(0.0, affine_verify(0.05, 0.05))
    assert best_configurations(acc, dear, gammas=[1, 2, 4, 6])["optimum"][0].tree_size <= best["optimum"][0].tree_size


def test_measured_verify_interpolates_and_extends():
    f = measured_verify([1, 5, 9], [0.05, 0.09, 0.13])
    assert f(1) == pytest.approx(0.05) and f(3) == pytest.approx(0.07) and f(13) == pytest.approx(0.17)
    assert measured_verify([2, 5], [0.053, 0.083])(1) == 0.053  # never below the smallest forward measured


@pytest.mark.parametrize(
    "call, fragment",
    [
        (lambda: expected_rounds([0.5, 1.2], 2), "acceptance[1] = 1.2 is not a probability"),
        (lambda: expected_rounds([], 2), "non-empty 1-D array"),
        (lambda: expected_rounds([0.5, 0.5], 2, lengths=[1, 2]), "summing to the number of positions 2"),
        (lambda: measured_verify([5, 1], [0.1, 0.2]), "strictly increasing"),
        (lambda: measured_verify([1, 5], [0.1, -0.2]), "finite and > 0"),
        (lambda: affine_verify(-1, 0.1), "a, b >= 0"),
        (lambda: CostModel(-0.1, affine_verify(0.05, 0.01)), "draft_cost must be finite and >= 0"),
        (lambda: best_configurations({}, CostModel(0.0, affine_verify(0.05, 0.01))), "acceptance is empty"),
    ],
)
def test_bad_input_is_refused_with_the_rule(call, fragment):
    with pytest.raises(InvalidOptionError, match=fragment.replace("[", r"\[").replace("]", r"\]")):
        call()


def test_plot_writes_an_image(tmp_path):
    pytest.importorskip("matplotlib")
    from otspec.speedup import plot_speedup

    best = best_configurations({"opt": {1: [0.8] * 20, 2: [0.9] * 20}}, CostModel(0.0, affine_verify(0.05, 0.01)), gammas=[1, 2])
    plot_speedup(best, tmp_path / "s.png")
    assert (tmp_path / "s.png").stat().st_size > 1000
