"""A lossy rule's declared TV budget: assert_within_tv_budget, the audit's tv_budget row, ``--tv-budget``.

Exact checks: the frontier rule ``lossy_optimal`` (TV exactly min(eps, 1 - alpha*)) keeps its own
budget and fails a smaller one; an acceptance above min(1, alpha* + eps) is reported. One sampled
check (a rule known only by its sampler, mixing p with its first draft, TV = 0.1 * TV(point mass, p)):
passes its budget and fails a smaller one, at the stated false alarm 1e-3 and power 0.999 at
delta = 0.05 (about 10 600 draws each).
"""

from __future__ import annotations

import numpy as np
import pytest

import otspec
from otspec.cli import main
from otspec.errors import InvalidOptionError
from otspec.testing import VerifierAssertionError, assert_within_tv_budget, audit
from otspec.testing.budget import frontier_finding
from otspec.testing.forms import ConditionalVerifier, SamplerVerifier
from otspec.verifiers.kernel import AcceptanceEstimate
from otspec.verifiers.step.lossy_optimal import LossyOptimalVerifier

P = np.array([0.7, 0.2, 0.1])
LAW = otspec.iid(np.array([0.1, 0.2, 0.7]), 1)  # alpha* = 1 - TV = 0.4


def test_frontier_rule_keeps_its_budget_and_fails_a_smaller_one():
    rule = LossyOptimalVerifier(0.05)
    check = assert_within_tv_budget(rule, P, LAW, 0.05)
    assert check.method == "exact" and abs(check.tv - 0.05) <= 1e-12  # 1 - alpha* = 0.6 > eps: TV = eps
    with pytest.raises(VerifierAssertionError, match="declares TV <= 0.04"):
        assert_within_tv_budget(rule, P, LAW, 0.04)
    with pytest.raises(InvalidOptionError, match="tv_budget"):
        assert_within_tv_budget(rule, P, LAW, 1.5)


def test_an_acceptance_above_the_frontier_is_reported():
    est = AcceptanceEstimate(0.5, "kernel", 0.5, 0.5, 0, {})
    assert frontier_finding("r", est, 0.4, LAW, 0.1) is None  # on the frontier 0.4 + 0.1
    err = frontier_finding("r", est, 0.4, LAW, 0.05)
    assert err is not None and "above the lossy frontier" in str(err)


def _mix_first_draft(p, law, drafts, rng):
    """Output the first draft with probability 0.1, else a draw from p."""
    if rng.random() < 0.1:
        return int(drafts[0])
    return int(rng.choice(len(p), p=p))


def test_a_sampler_is_tested_against_its_budget_with_stated_power():
    v = SamplerVerifier(_mix_first_draft, name="mix", lossless=False)
    tv = 0.1 * 0.5 * float(np.abs(LAW.q - P).sum())  # output law 0.9 p + 0.1 q: TV 0.06
    check = assert_within_tv_budget(v, P, LAW, 0.07, delta=0.05, rng=np.random.default_rng(1))
    assert check.method == "sampling" and "0.07 + 0.05" in check.statement and abs(check.tv - tv) < 0.03
    with pytest.raises(VerifierAssertionError, match="TV"):
        assert_within_tv_budget(v, P, LAW, 0.0, delta=0.05, rng=np.random.default_rng(1))


def _keep_first_tenth(p, q, drafts):
    """Keep the first draft with probability 0.1, else the target's law: TV <= 0.1."""
    out = 0.9 * np.asarray(p, dtype=float)
    out[drafts[0]] += 0.1
    return out


def test_audit_reports_the_budget_row():
    v = ConditionalVerifier(_keep_first_tenth, lossless=False, kinds="iid", k=1)
    ok = audit(v, problems=6, draws=2_000, tv_budget=0.1)
    assert ok["tv_budget"].verdict == "pass" and ok["optimum"].verdict == "pass" and "frontier" in ok["optimum"].summary
    bad = audit(v, problems=6, draws=2_000, tv_budget=0.02)
    assert bad["tv_budget"].verdict == "fail" and "declares TV <= 0.02" in bad["tv_budget"].summary
    assert "assert_within_tv_budget" in bad["tv_budget"].counterexample.snippet
    assert "tv_budget" not in [r.name for r in audit(v, problems=6, draws=2_000).properties]


def test_cli_refuses_a_budget_outside_the_unit_interval(capsys):
    assert main(["audit", "otspec.verifiers:lossy_optimal", "--tv-budget", "1.5"]) == 2
    assert "--tv-budget must be in [0, 1)" in capsys.readouterr().err
