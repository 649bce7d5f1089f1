"""``otspec.testing.audit`` fails closed: exits and interrupts from the verifier's code, time limits,
rare tokens, and problems beyond the catalogue (all exact checks; no statistical test here)."""

from __future__ import annotations

import sys
import time

import numpy as np
import pytest

from otspec.testing import audit, conditional_verifier
from otspec.testing._problems import SUBNORMAL_ADJACENT, random_problems, step_problems, wide_range_problems
from otspec.verifiers import Verifier, token


class _ExitsIn(Verifier):
    """The token verifier, except that one method calls sys.exit(0)."""

    where = ""

    def __init__(self):
        if self.where == "init":
            sys.exit(0)
        self.name = f"exits_in_{self.where}"

    def applies_to(self, law):
        if self.where == "applies_to":
            sys.exit(0)
        return token.applies_to(law)

    def _rows(self, p, law, tuples):
        if self.where == "rows":
            raise KeyboardInterrupt
        return token._rows(p, law, tuples)

    def _sample_rows(self, p, law, tuples, coin_rng, res_rng):
        return token._sample_rows(p, law, tuples, coin_rng, res_rng)


@pytest.mark.parametrize("where", ["init", "applies_to", "rows"])
def test_an_exit_anywhere_in_the_verifier_never_reads_as_all_properties_hold(where):
    cls = type(f"Exits_{where}", (_ExitsIn,), {"where": where})
    report = audit(cls, problems=10, draws=1_000)
    assert not report.ok and report.exit_code == 1
    failed = [r for r in report.properties if r.verdict == "fail"]
    assert failed and ("sys.exit(0)" in failed[0].summary or "KeyboardInterrupt" in failed[0].summary), failed


def test_a_check_past_the_time_limit_fails_with_the_limit_in_its_message():
    @conditional_verifier(k=1, kinds="iid")
    def sleepy(p, q, drafts):
        time.sleep(2)
        return p

    started = time.perf_counter()
    report = audit(sleepy, problems=1, draws=1_000, timeout=0.1)
    assert report["kernel"].verdict == "fail" and "time limit of one check (0.1 s)" in report["kernel"].summary
    assert time.perf_counter() - started < 30  # every later check is cut at 0.1 s too


def test_the_wide_range_problems_reach_1e_12_and_the_subnormal_boundary():
    smallest = [min(x for x in pr.build()[0] if x > 0) for pr in wide_range_problems(64)]
    assert min(smallest) == pytest.approx(1 / SUBNORMAL_ADJACENT) and min(smallest) >= np.finfo(float).tiny
    assert any(1e-13 < s < 1e-11 for s in smallest) and any(1e-4 < s < 1e-3 for s in smallest)
    kinds = {pr.kind for pr in wide_range_problems(64)}
    assert kinds == {"iid", "without_replacement", "greedy", "product", "explicit", "top_k"}


def test_extra_random_problems_leave_the_catalogue_unchanged():
    """The catalogue is drawn first from the seeded generator; the extra problems come after."""
    a = np.random.default_rng(7)
    catalogue = step_problems(a, 40, 64)
    extra = random_problems(a, 50, 64)
    b = np.random.default_rng(7)
    assert step_problems(b, 40, 64) == catalogue and len(extra) == 50
    assert all(pr.valid() for pr in extra)


def test_a_rare_token_bias_fails_the_library_audit():
    @conditional_verifier(k=1)
    def rare_keep(p, q, drafts):  # keeps a draft with 0 < p < 1e-3 always: lossy
        x = drafts[0]
        if 0 < p[x] < 1e-3:
            return np.eye(len(p))[x]
        a = min(1.0, p[x] / q[x])
        r = np.maximum(p - q, 0.0)
        out = (1 - a) * (r / r.sum() if r.sum() > 0 else p)
        out[x] += a
        return out

    report = audit(rare_keep, problems=30, draws=5_000)
    assert report["lossless"].verdict == "fail"
    assert report["lossless"].counterexample.problem.startswith("p = ")
    # on the catalogue's problems alone (all the audit ran before) the rule is exact
    for pr in step_problems(np.random.default_rng(0), 40, 64):
        if pr.kind == "iid" and pr.k == 1:
            p, law = pr.build()
            assert np.allclose(rare_keep.kernel(p, law).output_law(), p, atol=1e-9)


def test_auditing_a_numpy_rule_never_imports_torch():
    """The torch adapter is a plug-in: only an object no core form matches is offered to it."""
    import subprocess

    code = (
        "import sys\n"
        "from otspec.testing import audit\n"
        "report = audit(lambda p, q, drafts: p, problems=5, draws=1000)\n"
        "assert report.ok\n"
        "print('torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
