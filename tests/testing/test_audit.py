"""Every verifier otspec ships passes ``otspec.testing.audit`` (runtime ~20 s)."""

from __future__ import annotations

import pytest

from otspec.testing import audit
from otspec.verifiers import ALL, block, token_chain


@pytest.mark.parametrize("v", list(ALL) + [block, token_chain], ids=[v.name for v in ALL] + ["block", "token_chain"])
def test_shipped_verifier_passes_audit(v):
    # the LP-based verifiers are the slow ones: fewer problems keep this file near 20 s
    n = 30 if getattr(v, "name", "") in ("khisti", "optimal_plan") else 60
    report = audit(v, problems=n, draws=30_000)
    failed = [f"{r.name}: {r.counterexample.message if r.counterexample else r.summary}" for r in report.properties if r.verdict == "fail"]
    assert not failed, failed
    verdicts = {r.name: r.verdict for r in report.properties}
    if getattr(v, "lossless", True):
        assert verdicts["lossless"] == "pass" and verdicts["optimum"] == "pass"
    if v in ALL:
        assert verdicts["kernel"] == verdicts["acceptance"] == verdicts["bad_inputs"] == "pass"
        assert verdicts["sampler"] == "pass"
