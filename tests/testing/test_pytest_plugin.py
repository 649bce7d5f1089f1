"""The pytest plugin (entry point pytest11): the marker and the fixtures pass a lossless verifier,
fail a planted fault with a counterexample, and leave tests that do not use them alone. Each case
runs a small pytest session in a temporary folder (pytester, in process)."""

from __future__ import annotations

import importlib.metadata

pytest_plugins = ["pytester"]

_VERIFIERS = """
import numpy as np
import pytest
from otspec.testing.batched import batched_sampler, batched_conditional

@batched_sampler(k=1)
def speculative(p, q, drafts, rng):           # lossless: accept x w.p. min(1, p/q), else residual
    coin, res = rng.spawn(2)
    x = drafts[:, 0]
    acc = coin.random(len(x)) < np.minimum(1.0, p[x] / q[x])
    r = np.maximum(p - q, 0.0)
    r = r / r.sum() if r.sum() > 0 else p
    return np.where(acc, x, res.choice(len(p), size=len(x), p=r))

@batched_sampler(k=1)
def raw_q_residual(p, q, drafts, rng):        # planted: residual from p instead of (p - q)+
    coin, res = rng.spawn(2)
    x = drafts[:, 0]
    acc = coin.random(len(x)) < np.minimum(1.0, p[x] / q[x])
    return np.where(acc, x, res.choice(len(p), size=len(x), p=p))

@batched_conditional(k=1)
def keep_always(p, q, drafts):                 # planted: outputs the draft, law q
    out = np.zeros((len(drafts), len(p)))
    out[np.arange(len(drafts)), drafts[:, 0]] = 1.0
    return out
"""


def test_entry_point_is_declared():
    eps = importlib.metadata.entry_points(group="pytest11")
    assert any(ep.name == "otspec" and ep.value == "otspec.testing.pytest_plugin" for ep in eps)


def test_marker_passes_a_lossless_sampler_and_fails_a_planted_fault(pytester):
    pytester.makepyfile(verifiers=_VERIFIERS)
    pytester.makepyfile(
        test_engine="""
import pytest
from verifiers import speculative, raw_q_residual

@pytest.mark.otspec_verifier(speculative, delta=0.05, problems=3)
def test_good():
    pass

@pytest.mark.otspec_verifier(raw_q_residual, delta=0.05, problems=3)
def test_bad():
    pass

def test_untouched():
    assert True
"""
    )
    r = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--strict-markers")
    r.assert_outcomes(passed=2, failed=1)
    out = r.stdout.str()
    assert "test_bad" in out and "otspec: verifier is not lossless" in out
    assert "counterexample:" in out and "p = np.array(" in out and "replay:" in out


def test_fixture_exact_kernel_and_options(pytester):
    pytester.makepyfile(verifiers=_VERIFIERS)
    pytester.makepyfile(
        test_fix="""
from verifiers import keep_always, speculative

def test_exact_fails(otspec_check):
    otspec_check(keep_always)

def test_statement(otspec_check):
    r = otspec_check(speculative, problems=2)
    assert r.method == "sampling" and r.problems == 2
    assert r.statement.startswith("detects any output law at TV >= 0.2 from p with probability >= 0.9")

def test_battery(otspec_battery):
    assert len(otspec_battery) > 20
    p, law = otspec_battery[0]
    assert abs(p.sum() - 1) < 1e-12
"""
    )
    r = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--otspec-delta=0.2", "--otspec-beta=0.1")
    r.assert_outcomes(passed=2, failed=1)
    out = r.stdout.str()
    assert "exact output law" in out and "keep_always" in out


def test_marker_with_a_wrong_signature_is_a_clear_failure(pytester):
    pytester.makepyfile(
        test_m="""
import pytest

@pytest.mark.otspec_verifier()
def test_no_verifier():
    pass
"""
    )
    r = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    r.assert_outcomes(failed=1)
    assert "takes one verifier" in r.stdout.str()
