"""otspec.testing.power and .battery: the stated sample size is the formula's smallest n, the sampling
check's false-alarm and detection rates meet the statement on planted faults of exactly known TV,
exact kernels are checked exactly, and bad options are refused.

Statistical tests: fixed seeds; each states N and its own false-alarm rate (binomial quantiles at
1e-6, so a correct implementation fails one of them with probability below 1e-5)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

import otspec
from otspec.errors import InvalidDraftCountError, InvalidOptionError, OtspecTypeError, UnsupportedMethodError
from otspec.testing import VerifierAssertionError
from otspec.testing.batched import batched_conditional, batched_sampler
from otspec.testing.battery import battery_problems, check_battery
from otspec.testing.power import assert_output_law, detectable_tv, rejection_threshold, sample_size
from otspec.verifiers import kseq, rrs

P = np.array([0.4, 0.3, 0.2, 0.1])
LAW = otspec.iid(np.array([0.1, 0.2, 0.3, 0.4]), 1)


def mixture_fault(eps: float, token: int = 3):
    """Outputs y ~ p, except w.p. eps the fixed token: output law (1 - eps) p + eps e_token,
    TV = eps (1 - p[token]) exactly."""

    @batched_sampler(k=1, name=f"mix{eps:g}")
    def sample(p, q, drafts, rng):
        a, b = rng.spawn(2)
        y = a.choice(p.size, size=len(drafts), p=p)
        return np.where(b.random(len(drafts)) < eps, token, y)

    return sample


def test_sample_size_is_the_smallest_n_of_the_bound():
    for delta, a, b, V in [(0.1, 0.05, 0.05, 4), (0.01, 1e-3, 1e-3, 5), (0.003, 1e-6, 0.1, 2)]:
        n = sample_size(delta, alpha=a, beta=b, V=V)
        c = math.sqrt(V - 1) + math.sqrt(math.log(1 / a) / 2) + math.sqrt(math.log(1 / b) / 2)
        assert c / math.sqrt(n) <= delta < c / math.sqrt(n - 1)
        assert detectable_tv(n, alpha=a, beta=b, V=V) <= delta
        # at n, the detection condition of the proof: delta - (tail of TV(P_hat, r)) >= threshold
        assert delta - (0.5 * math.sqrt((V - 1) / n) + math.sqrt(math.log(1 / b) / (2 * n))) >= rejection_threshold(n, alpha=a, V=V) - 1e-15


def test_false_alarm_rate_of_a_correct_sampler():
    alpha, runs = 0.2, 200
    fa = 0
    for s in range(runs):
        try:
            assert_output_law(mixture_fault(0.0), P, LAW, delta=0.1, alpha=alpha, beta=0.2, method="sampling", rng=np.random.default_rng(s))
        except VerifierAssertionError:
            fa += 1
    assert fa <= stats.binom.ppf(1 - 1e-6, runs, alpha)


@pytest.mark.parametrize("tv", [0.1, 0.03])
def test_planted_fault_at_delta_is_detected_at_the_stated_rate(tv):
    beta, runs = 0.2, 60 if tv > 0.05 else 20
    eps = tv / (1 - P[3])
    hits = 0
    for s in range(runs):
        try:
            assert_output_law(mixture_fault(eps), P, LAW, delta=tv, alpha=0.05, beta=beta, method="sampling", rng=np.random.default_rng(s))
        except VerifierAssertionError as exc:
            hits += 1
            assert exc.details["token"] in (0, 3) and exc.details["tv"] > 0
    assert hits >= stats.binom.ppf(1e-6, runs, 1 - beta)


def test_exact_check_finds_a_tiny_planted_tv():
    def planted(eps):
        @batched_conditional(k=1)
        def pi(p, q, drafts):
            return np.tile((1 - eps) * p + eps * np.eye(p.size)[3], (len(drafts), 1))

        return pi

    assert assert_output_law(planted(0.0), P, LAW).tv == 0.0
    with pytest.raises(VerifierAssertionError, match="exact output law") as info:
        assert_output_law(planted(1e-6), P, LAW)
    assert info.value.details["tv"] == pytest.approx(1e-6 * 0.9, rel=1e-6)
    assert assert_output_law(rrs, P, otspec.iid(P[::-1].copy(), 2)).method == "exact"


def test_battery_passes_library_verifiers_and_fails_with_a_shrunk_counterexample():
    r = check_battery(kseq)
    assert r.method == "exact" and r.problems == len(battery_problems(kseq)) and r.largest_tv < 1e-12

    @batched_conditional
    def keep_first(p, q, drafts):
        out = np.zeros((len(drafts), len(p)))
        out[np.arange(len(drafts)), drafts[:, 0]] = 1.0
        return out

    with pytest.raises(VerifierAssertionError, match="counterexample") as info:
        check_battery(keep_first)
    msg = str(info.value)
    assert "replay:" in msg and "assert_output_law" in msg
    # shrunk: the smallest failing problem has two tokens and one draft
    assert "np.array([" in info.value.details["problem"] and ", 1)" in info.value.details["problem"]


def test_battery_sampling_statement():
    r = check_battery(mixture_fault(0.0), delta=0.1, alpha=0.01, beta=0.01, problems=3)
    assert r.method == "sampling" and r.problems == 3
    assert r.statement.startswith("detects any output law at TV >= 0.1 from p with probability >= 0.99")


@pytest.mark.parametrize(
    "call, err, words",
    [
        (lambda: sample_size(0.0, V=4), InvalidOptionError, "delta"),
        (lambda: sample_size(0.1, alpha=1.5, V=4), InvalidOptionError, "alpha"),
        (lambda: sample_size(0.1, beta="x", V=4), InvalidOptionError, "beta"),
        (lambda: sample_size(0.1, V=1), InvalidDraftCountError, "V"),
        (lambda: rejection_threshold(0, alpha=0.1, V=3), InvalidDraftCountError, "n"),
        (lambda: assert_output_law(rrs, P, LAW, method="nope"), InvalidOptionError, "method"),
        (lambda: assert_output_law(mixture_fault(0.0), P, LAW, method="exact"), UnsupportedMethodError, "no kernel"),
        (lambda: assert_output_law(mixture_fault(0.0), P, LAW, delta=1e-4, max_draws=1000), InvalidOptionError, "max_draws"),
        (lambda: assert_output_law(mixture_fault(0.0), P, LAW, rng=3), OtspecTypeError, "Generator"),
        (lambda: check_battery(kseq, problems=0), InvalidDraftCountError, "problems"),
        (lambda: check_battery(batched_sampler(lambda p, q, d, rng: d[:, 0], kinds="iid", k=7)), InvalidOptionError, "none of"),
    ],
)
def test_bad_options_are_refused(call, err, words):
    with pytest.raises(err, match=words):
        call()


def test_batched_sampler_output_is_checked():
    bad = batched_sampler(lambda p, q, drafts, rng: np.zeros(len(drafts) + 1, dtype=int), k=1, name="bad")
    with pytest.raises(AssertionError, match="token ids"):
        assert_output_law(bad, P, LAW, delta=0.2)


def test_battery_runs_a_batched_torch_verifier_exactly_and_by_sampling():
    pytest.importorskip("torch")
    from otspec_gpu.verifiers import by_name

    v = by_name("token")
    exact = check_battery(v)
    assert exact.method == "exact" and exact.largest_tv < 1e-9
    sampled = check_battery(v, method="sampling", delta=0.1, alpha=0.01, beta=0.01, problems=2)
    assert sampled.method == "sampling" and sampled.problems == 2 and sampled.draws > 0
