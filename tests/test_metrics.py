"""otspec.metrics: every converter against an independent computation from an explicit law of tau,
engine counters simulated round by round, and the docs page listing the whole dictionary."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from otspec import metrics
from otspec.errors import InvalidDraftCountError, InvalidOptionError

ROOT = Path(__file__).resolve().parents[1]


def _tau_law(rng, gamma):
    w = rng.random(gamma + 1) ** 3  # uneven, some near 0
    return w / w.sum()


@pytest.mark.parametrize("gamma", [1, 2, 5, 8])
def test_converters_agree_with_an_explicit_law_of_tau(gamma):
    rng = np.random.default_rng(gamma)
    for _ in range(20):
        law = _tau_law(rng, gamma)
        e_tau = float(np.dot(np.arange(gamma + 1), law))
        cum = np.array([law[i:].sum() for i in range(1, gamma + 1)])  # P(tau >= i), by definition
        cond = np.array([law[i:].sum() / law[i - 1 :].sum() for i in range(1, gamma + 1)])
        assert metrics.expected_accepted_from_cumulative(cum) == pytest.approx(e_tau, abs=1e-14)
        np.testing.assert_allclose(metrics.cumulative_from_conditional(cond), cum, rtol=1e-13, atol=1e-15)
        np.testing.assert_allclose(metrics.conditional_from_cumulative(cum), cond, rtol=1e-12)
        np.testing.assert_allclose(metrics.tau_distribution_from_cumulative(cum), law, atol=1e-15)
        L = metrics.acceptance_length_from_expected_accepted(e_tau)
        assert 1.0 + e_tau == L
        assert metrics.expected_accepted_from_acceptance_length(L) == pytest.approx(e_tau, abs=1e-15)
        alpha = metrics.constant_acceptance_equivalent(e_tau, gamma)
        assert sum(alpha**i for i in range(1, gamma + 1)) == pytest.approx(e_tau, abs=1e-12)


def test_constant_acceptance_closed_form():
    for alpha in (0.0, 0.3, 0.9, 1.0):
        for gamma in (1, 4, 7):
            closed = gamma * 1.0 if alpha == 1 else alpha * (1 - alpha**gamma) / (1 - alpha)
            assert metrics.expected_accepted_constant(alpha, gamma) == pytest.approx(closed, abs=1e-14)
            assert metrics.constant_acceptance_equivalent(closed, gamma) == pytest.approx(alpha, abs=1e-9)


def test_constant_formula_overstates_a_decaying_chain():
    # beta_1 = 0.9 then 0.5 at every later position: the constant formula at alpha = beta_1 is too high
    cond = [0.9, 0.5, 0.5, 0.5]
    true = metrics.expected_accepted_from_cumulative(metrics.cumulative_from_conditional(cond))
    assert metrics.expected_accepted_constant(0.9, 4) > true + 1.0


def test_engine_counts_from_simulated_rounds():
    rng = np.random.default_rng(7)
    gamma, rounds = 4, 5000
    law = _tau_law(rng, gamma)
    taus = rng.choice(gamma + 1, size=rounds, p=law)
    per_pos = [int(np.sum(taus >= i)) for i in range(1, gamma + 1)]  # position i accepted iff tau >= i
    m = metrics.from_engine_counts(
        num_drafts=rounds, num_draft_tokens=gamma * rounds, num_accepted_tokens=int(taus.sum()), accepted_per_position=per_pos
    )
    assert m.gamma == gamma and m.rounds == rounds
    assert m.expected_accepted == taus.mean()
    assert m.mean_acceptance_length == 1 + taus.mean() == m.block_efficiency
    assert m.draft_acceptance_rate == taus.sum() / (gamma * rounds)
    assert m.cumulative_acceptance == tuple(np.array(per_pos) / rounds)
    emp_cond = [np.mean(taus[taus >= i - 1] >= i) for i in range(1, gamma + 1)]
    np.testing.assert_allclose(m.conditional_acceptance, emp_cond, rtol=1e-12)


def test_unreached_position_has_nan_conditional_rate():
    out = metrics.conditional_from_cumulative([0.5, 0.0, 0.0])
    assert out[0] == 0.5 and out[1] == 0.0 and math.isnan(out[2])


@pytest.mark.parametrize(
    "call, err, words",
    [
        (lambda: metrics.expected_accepted_from_acceptance_length(0.7), InvalidOptionError, "a rate"),
        (lambda: metrics.expected_accepted_from_acceptance_length(float("nan")), InvalidOptionError, "finite"),
        (lambda: metrics.expected_accepted_from_acceptance_length("3"), InvalidOptionError, "number"),
        (lambda: metrics.expected_accepted_from_acceptance_length("x"), InvalidOptionError, "number"),
        (lambda: metrics.acceptance_length_from_expected_accepted(-0.1), InvalidOptionError, ">= 0"),
        (lambda: metrics.expected_accepted_from_draft_acceptance_rate(3.2, 4), InvalidOptionError, "acceptance length"),
        (lambda: metrics.expected_accepted_from_draft_acceptance_rate(0.5, 0), InvalidDraftCountError, "gamma"),
        (lambda: metrics.cumulative_from_conditional([0.5, 55.0]), InvalidOptionError, "percentages"),
        (lambda: metrics.cumulative_from_conditional([]), InvalidOptionError, "non-empty"),
        (lambda: metrics.conditional_from_cumulative([0.5, 0.9]), InvalidOptionError, "non-increasing"),
        (lambda: metrics.constant_acceptance_equivalent(3.5, 3), InvalidOptionError, "subtract 1"),
        (lambda: metrics.from_engine_counts(num_drafts=3, num_draft_tokens=10, num_accepted_tokens=2), InvalidOptionError, "multiple"),
        (lambda: metrics.from_engine_counts(num_drafts=2, num_draft_tokens=4, num_accepted_tokens=5), InvalidOptionError, "exceeds"),
        (
            lambda: metrics.from_engine_counts(num_drafts=2, num_draft_tokens=4, num_accepted_tokens=3, accepted_per_position=[2, 2]),
            InvalidOptionError,
            "sums to",
        ),
        (
            lambda: metrics.from_engine_counts(num_drafts=2, num_draft_tokens=4, num_accepted_tokens=3, accepted_per_position=[1, 2]),
            InvalidOptionError,
            "non-increasing",
        ),
        (
            lambda: metrics.from_engine_counts(num_drafts=2, num_draft_tokens=4, num_accepted_tokens=3, accepted_per_position=[3]),
            InvalidOptionError,
            "gamma = 2",
        ),
    ],
)
def test_bad_inputs_are_refused_with_the_fix(call, err, words):
    with pytest.raises(err, match=words):
        call()


def test_docs_page_defines_every_metric():
    page = (ROOT / "docs" / "metrics.rst").read_text()
    for name, m in metrics.METRICS.items():
        assert f"``{name}``" in page, name
        assert name == m.name
