"""otspec.testing reports every known-broken design as lossy with a counterexample, and passes its fix.

Runtime: ~15 s (the sampler-only designs run their Python sampler ~100 000 times each).
"""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

from otspec.testing import VerifierAssertionError, audit
from tests.testing import broken_designs as bd

SPEC = str(Path(bd.__file__).resolve()) + ":{}"

#: the property each design must fail (a lossless claim; for the subclass, its sampler)
EXPECTED = {
    "reused_uniform": "lossless",
    "reused_uniform_token": "sampler",
    "unnormalised_residual": "lossless",
    "kseq_rho_one": "lossless",
    "rrs_stale_residual": "lossless",
    "block_off_by_one": "lossless",
}


@pytest.mark.parametrize("name", sorted(bd.BROKEN))
def test_broken_design_is_reported_with_a_reproducible_counterexample(name, tmp_path):
    attr = name if name != "reused_uniform_token" else "ReusedUniformToken"
    report = audit(bd.BROKEN[name], problems=40, draws=20_000, spec=SPEC.format(attr))
    assert not report.ok and report.exit_code == 1
    prop = report[EXPECTED[name]]
    assert prop.verdict == "fail"
    cx = prop.counterexample
    assert cx is not None and cx.problem and cx.message
    # the snippet re-raises the failure on its own
    path = tmp_path / "snippet.py"
    path.write_text(cx.snippet)
    with pytest.raises(VerifierAssertionError):
        runpy.run_path(str(path), run_name="__main__")


def test_counterexamples_are_shrunk_to_the_smallest_problem():
    # K-SEQ at rho = 1 is exact for k = 1 and fails first at k = 2; the smallest failing problem has
    # two tokens (p = (1/2, 1/2), q = (0, 1): both drafts are token 1, accepted 3/4 > p(1))
    cx = audit(bd.kseq_rho_one, problems=40, draws=20_000)["lossless"].counterexample
    assert cx.problem == "p = np.array([1, 1]) / 2\nlaw = otspec.iid(np.array([0, 1], dtype=float), 2)"
    assert "x = (1, 1)" in cx.message
    cx = audit(bd.rrs_stale_residual, problems=40, draws=20_000)["lossless"].counterexample
    assert "otspec.iid(" in cx.problem and ", 2)" in cx.problem and "np.array([1, 1]) / 2" in cx.problem


@pytest.mark.parametrize("name", sorted(k for k, v in bd.FIXED.items() if v is not None))
def test_fixed_design_passes(name):
    report = audit(bd.FIXED[name], problems=40, draws=10_000)
    assert report.ok, report
    assert report["lossless"].verdict == "pass"
