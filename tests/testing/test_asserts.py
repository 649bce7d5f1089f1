"""otspec.testing's assertions and adapters, on cases whose numbers are derived by hand here."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

import otspec
from otspec import models
from otspec._tolerances import EXACT_ATOL, FLOAT64_ATOL
from otspec.errors import InvalidVerifierError, UnsupportedMethodError
from otspec.testing import (
    VerifierAssertionError,
    acceptance_ratio,
    as_verifier,
    assert_acceptance_matches_kernel,
    assert_chain_lossless,
    assert_chain_within_optimum,
    assert_lossless,
    assert_sampler_lossless,
    assert_sampler_matches,
    assert_within_optimum,
    load_object,
)
from otspec.testing.adapters import object_spec
from otspec.testing.chain_forms import ChainVerifier
from otspec.testing.forms import ConditionalVerifier, SamplerVerifier, VerifierOutputError
from otspec.verifiers import ALL, block, khisti, kseq, rrs, token, token_chain
from tests._tolerances import BISECTION_ATOL, EXACT_RTOL, FALSE_ALARM, FLOAT64_ULPS_ATOL
from tests.testing import broken_designs as bd

P5 = np.array([0.3, 0.3, 0.1, 0.3, 0.0])
Q5 = np.array([0.4, 0.2, 0.3, 0.0, 0.1])


def keep_first(p, q, drafts):
    out = np.zeros(len(p))
    out[drafts[0]] = 1.0
    return out


def test_every_lossless_verifier_passes_assert_lossless():
    laws = [
        otspec.iid(Q5, 1),
        otspec.iid(Q5, 2),
        otspec.without_replacement(Q5, 2),
        otspec.greedy(Q5, 2),
        otspec.product([Q5, P5]),
        otspec.explicit([[0, 1], [3, 3]], [0.5, 0.5], vocab_size=5),
    ]
    for v in ALL:
        for law in laws:
            if v.applies_to(law) and v.lossless:
                assert_lossless(v, P5, law, atol=FLOAT64_ATOL)


def test_lossless_failure_names_token_masses_and_contributing_tuples():
    # keep_first on k = 1 outputs the draft: output law = q = (0.75, 0.25) against p = (0.5, 0.5).
    # Token 0 has error +0.25 = Q(0) (1 - 0.5) + Q(1) (0 - 0.5) = 0.375 - 0.125.
    with pytest.raises(VerifierAssertionError) as info:
        assert_lossless(keep_first, [0.5, 0.5], otspec.iid([0.75, 0.25], 1))
    msg = str(info.value)
    assert "token 0 gets output mass 0.75 but p[0] = 0.5" in msg
    assert "x = (0): Q(x) = 0.75, pi(0|x) = 1, contribution +0.375" in msg
    d = info.value.details
    assert d["token"] == 0 and d["expected"] == 0.5 and d["actual"] == pytest.approx(0.75, abs=FLOAT64_ULPS_ATOL)
    assert d["tuples"][0] == [0] and sum(d["contributions"]) == pytest.approx(0.25, abs=FLOAT64_ULPS_ATOL)


def test_lossless_failure_reports_rows_that_are_not_distributions():
    # unnormalised residual, p = (1/2, 1/2), q = (0, 1): draft 1 is kept w.p. 1/2 and the residual
    # (p - q)_+ = (1/2, 0) is used unnormalised, so pi(.|1) = (1/4, 1/2) sums to 3/4.
    with pytest.raises(VerifierAssertionError) as info:
        assert_lossless(bd.unnormalised_residual, [0.5, 0.5], otspec.iid([0.0, 1.0], 1))
    assert "token 0 gets output mass 0.25 but p[0] = 0.5" in str(info.value)
    assert "x = (1) sums to 0.75" in str(info.value)


def test_within_optimum_and_ratio_by_hand():
    # iid k = 2, p = (1/2, 1/2), q = (0.9, 0.1): alpha* = 1 + min_H [p(H) - q(H)^2] = 1 + (0.5 - 0.81) = 0.69;
    # RRS: 1 - P(both rounds reject) = 1 - (1 - 0.6) * (1 - beta_2) with beta_2 = 0.1 ... = 0.64.
    law = otspec.iid([0.9, 0.1], 2)
    r = acceptance_ratio(rrs, [0.5, 0.5], law)
    assert r.acceptance == pytest.approx(0.64, abs=FLOAT64_ATOL) and r.optimum == pytest.approx(0.69, abs=FLOAT64_ATOL)
    assert r.ratio == pytest.approx(0.64 / 0.69, abs=FLOAT64_ATOL) and float(r) == r.ratio and r.how == "closed_form"
    assert assert_within_optimum(khisti, [0.5, 0.5], law, at_least=1.0).ratio == pytest.approx(1.0, abs=EXACT_ATOL)
    with pytest.raises(VerifierAssertionError, match="below 1 x the optimum"):
        assert_within_optimum(rrs, [0.5, 0.5], law, at_least=1.0)
    # K-SEQ at rho = 1 with q = (0, 1): both drafts are token 1, each kept w.p. p(1)/q(1) = 1/2, so it
    # accepts 3/4 while no lossless rule can output token 1 more often than p(1) = 1/2.
    with pytest.raises(VerifierAssertionError, match=r"accepts 0.75 .* above the optimum 0.5"):
        assert_within_optimum(bd.kseq_rho_one, [0.5, 0.5], otspec.iid([0.0, 1.0], 2))


def test_sampler_matches_passes_correct_and_catches_coin_reuse():
    law = otspec.iid(Q5, 1)
    chk = assert_sampler_matches(token, P5, law, n=60_000, rng=np.random.default_rng(1))
    assert chk.cells == 4 and chk.n == 60_000 and chk.false_alarm == FALSE_ALARM and chk.min_p_value > FALSE_ALARM / 4
    with pytest.raises(VerifierAssertionError, match="disagrees with its kernel") as info:
        assert_sampler_matches(bd.ReusedUniformToken(), P5, law, n=60_000, rng=np.random.default_rng(1))
    assert info.value.details["property"] == "sampler" and len(info.value.details["tuples"]) == 1


def test_sampler_power_statement_is_the_noncentral_chi_square_bound():
    chk = assert_sampler_matches(token, P5, otspec.iid(Q5, 1), n=40_000, tv=0.05, rng=np.random.default_rng(2))
    # recompute independently for the worst-powered tuple: df = (cells - 1), alpha = 1e-6 / 4,
    # non-centrality 4 * (n / M) * tv^2; tuple x = 3 never occurs (q = 0), x = 4 is always rejected
    # onto the residual (1 cell of p's support excluded) -> the smallest df is that of a 4-cell row.
    per = 10_000
    dfs = []
    K = token.kernel(P5, otspec.iid(Q5, 1))
    for row in K.pi:
        dfs.append(int(np.count_nonzero(row > 0)) - 1)
    powers = [stats.ncx2.sf(stats.chi2.isf(FALSE_ALARM / 4, df), df, 4 * per * 0.05**2) for df in dfs if df > 0]
    assert chk.power == pytest.approx(min(powers), rel=EXACT_RTOL)
    # at the detectable TV the power is 0.99 for the least powerful df
    worst_df = max(df for df in dfs if df > 0)
    assert stats.ncx2.sf(stats.chi2.isf(FALSE_ALARM / 4, worst_df), worst_df, 4 * per * chk.detectable_tv**2) == pytest.approx(
        0.99, abs=BISECTION_ATOL
    )


def test_sampler_lossless_catches_reused_uniform_and_passes_fresh():
    p, law = np.array([1, 4, 5]) / 10, otspec.iid(np.array([0, 1, 2]) / 3, 1)
    # the residual (p - q)_+ = (0.1, 0.067, 0) is drawn at u >= the accept probability, i.e. from its
    # upper tail only: token 0 (the first in CDF order) is never output, although p[0] = 0.1
    with pytest.raises(VerifierAssertionError, match="token 0 has output frequency 0 but p\\[0\\] = 0.1"):
        assert_sampler_lossless(bd.reused_uniform, p, law, n=20_000)
    chk = assert_sampler_lossless(bd.fresh_uniform, p, law, n=20_000)
    assert chk.cells == 1 and chk.detectable_tv < 0.03  # n = 20 000, df = 1: TV 0.027 caught w.p. 0.99


def test_sampler_only_verifier_has_no_kernel_and_a_monte_carlo_acceptance():
    law = otspec.iid([0.75, 0.25], 1)
    with pytest.raises(UnsupportedMethodError, match="sampler"):
        bd.fresh_uniform.kernel([0.5, 0.5], law)
    with pytest.raises(UnsupportedMethodError, match="assert_sampler_lossless"):
        assert_lossless(bd.fresh_uniform, [0.5, 0.5], law)
    est = bd.fresh_uniform.acceptance([0.5, 0.5], law, n_samples=20_000, rng=np.random.default_rng(3))
    assert est.how == "monte_carlo" and est.ci_low <= 0.75 <= est.ci_high  # exact value 1 - TV = 0.75


def test_chain_assertions():
    p, q = models.context_free([1 / 3, 2 / 3]), models.context_free([2 / 3, 1 / 3])
    assert_chain_lossless(block, p, q, 2)
    assert_chain_lossless(token_chain, p, q, 3)
    assert_chain_lossless(bd.block_backward_pass, p, q, 3)
    r = assert_chain_within_optimum(block, p, q, 2)
    assert r.acceptance == pytest.approx(11 / 9, abs=FLOAT64_ATOL) and r.ratio == pytest.approx(1.0, abs=FLOAT64_ATOL)  # the 2-token toy
    with pytest.raises(VerifierAssertionError, match="not lossless"):
        assert_chain_lossless(bd.block_off_by_one, p, q, 2)
    # the enumeration of ChainVerifier against otspec's own block kernel on a context-dependent pair
    pm, qm = models.dirichlet(3, seed=4, zero_prob=0.3), models.dirichlet(3, seed=5, zero_prob=0.3)
    assert ChainVerifier(block.conditional_law).expected_accepted(pm, qm, 3) == pytest.approx(
        block.expected_accepted(pm, qm, 3), abs=FLOAT64_ATOL
    )
    assert bd.block_backward_pass.expected_accepted(pm, qm, 3) == pytest.approx(block.expected_accepted(pm, qm, 3), abs=FLOAT64_ATOL)


def test_as_verifier_recognises_every_form():
    assert as_verifier(kseq) is kseq
    assert isinstance(as_verifier(keep_first), ConditionalVerifier)
    assert as_verifier(keep_first).second == "q"
    assert as_verifier(lambda p, law, drafts: p).second == "law"
    assert isinstance(as_verifier(lambda p, law, drafts, rng: 0), SamplerVerifier)
    assert isinstance(as_verifier(block), ChainVerifier)
    assert isinstance(as_verifier(bd.ReusedUniformToken), bd.ReusedUniformToken)
    for bad in (3, "kseq", lambda p: p, otspec):
        with pytest.raises(InvalidVerifierError):
            as_verifier(bad)
    with pytest.raises(InvalidVerifierError, match="already a verifier"):
        as_verifier(kseq, k=2)
    with pytest.raises(InvalidVerifierError, match="kinds"):
        as_verifier(keep_first, kinds="iidd")


def test_declared_kinds_and_k_limit_the_laws():
    v = as_verifier(keep_first, kinds="iid", k=1)
    assert v.applies_to(otspec.iid(Q5, 1)) and not v.applies_to(otspec.iid(Q5, 2)) and not v.applies_to(otspec.product([Q5]))
    with pytest.raises(UnsupportedMethodError, match="keep_first"):
        v.kernel(P5, otspec.iid(Q5, 2))
    # a function of q cannot run on laws without one q
    assert not as_verifier(keep_first).applies_to(otspec.explicit([[0]], [1.0], vocab_size=5))


def test_bad_user_output_is_reported():
    with pytest.raises(VerifierOutputError, match="shape"):
        as_verifier(lambda p, q, drafts: p[:-1]).kernel(P5, otspec.iid(Q5, 1))
    with pytest.raises(VerifierOutputError, match="token id"):
        as_verifier(lambda p, q, drafts, rng: 7).sample(P5, otspec.iid(Q5, 1), [0], rng=np.random.default_rng(0))


def test_load_object_and_object_spec(tmp_path):
    assert load_object("otspec.verifiers:kseq") is kseq
    assert load_object("otspec.verifiers.block") is block
    f = tmp_path / "my_rules.py"
    f.write_text("def rule(p, q, drafts):\n    return p\n")
    assert load_object(f"{f}:rule").__name__ == "rule"
    for bad in ("", ":x", "no_such_module_xyz:f", "otspec.verifiers:nope", f"{tmp_path}/missing.py:f"):
        with pytest.raises(InvalidVerifierError):
            load_object(bad)
    assert object_spec(kseq) == "otspec.verifiers:kseq"
    assert object_spec(bd.kseq_rho_one) == "tests.testing.broken_designs:kseq_rho_one"


def test_acceptance_matches_kernel():
    est = assert_acceptance_matches_kernel(rrs, P5, otspec.iid(Q5, 2), method="closed_form", atol=FLOAT64_ATOL)
    assert est.how == "closed_form"

    class WrongClosedForm(type(token)):
        name = "wrong_closed_form"

        def _closed_form(self, p, law):  # 1 - TV plus a bit: the kernel says otherwise
            return float(np.minimum(p, law.q).sum()) + 0.01, {}

    with pytest.raises(VerifierAssertionError, match="its kernel gives"):
        assert_acceptance_matches_kernel(WrongClosedForm(), P5, otspec.iid(Q5, 1))
    report_row = __import__("otspec.testing", fromlist=["audit"]).audit(WrongClosedForm(), problems=15, draws=10_000)["acceptance"]
    assert report_row.verdict == "fail" and "assert_acceptance_matches_kernel" in report_row.counterexample.snippet


def test_kernel_valid_checks_shapes_weights_and_rows():
    from otspec.testing import assert_kernel_valid

    law = otspec.iid(Q5, 2)
    K = assert_kernel_valid(kseq, P5, law, atol=FLOAT64_ATOL)
    assert K.pi.shape == (16, 5)  # 4 tokens of positive q, two drafts
    with pytest.raises(VerifierAssertionError, match=r"x = \(1\) .* sums to 0.75"):
        assert_kernel_valid(bd.unnormalised_residual, [0.5, 0.5], otspec.iid([0.0, 1.0], 1))

    class HalfWeights(type(token)):
        name = "half_weights"

        def kernel(self, p, law, **kw):
            K = super().kernel(p, law, **kw)
            return type(K)(tuples=K.tuples, weights=K.weights / 2, pi=K.pi, verifier=self.name)

    with pytest.raises(VerifierAssertionError, match="does not list the law's draft tuples"):
        assert_kernel_valid(HalfWeights(), P5, otspec.iid(Q5, 1))


def test_optimum_can_come_from_the_caller():
    law = otspec.iid([0.9, 0.1], 2)
    lp = otspec.optimal_acceptance([0.5, 0.5], law, method="lp").value
    assert acceptance_ratio(rrs, [0.5, 0.5], law, optimum=lp).optimum == lp
    with pytest.raises(VerifierAssertionError, match="above the optimum 0.6"):
        assert_within_optimum(rrs, [0.5, 0.5], law, optimum=0.6)  # a wrong "optimum" below RRS's 0.64


def test_joint_sampler_test_has_the_stated_power_and_catches_coin_reuse():
    law = otspec.iid(Q5, 1)
    chk = assert_sampler_matches(token, P5, law, n=300_000, false_alarm=FALSE_ALARM, tv=0.02, per_tuple=False)
    # joint cells of positive mass: x in {0, 1, 2, 4} with their outputs; df = cells - 1, recomputed here
    K = token.kernel(P5, law)
    df = int(np.count_nonzero(K.weights[:, None] * K.pi > 0)) - 1
    assert chk.power == pytest.approx(stats.ncx2.sf(stats.chi2.isf(FALSE_ALARM, df), df, 4 * 300_000 * 0.02**2), rel=EXACT_RTOL)
    assert chk.power >= 0.99 and chk.pooled == 0  # every joint cell of positive mass has >= 5 expected draws
    with pytest.raises(VerifierAssertionError, match="joint chi-square"):
        assert_sampler_matches(bd.ReusedUniformToken(), P5, law, n=300_000, per_tuple=False)
