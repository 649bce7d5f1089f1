"""The rules engines run (exact_match, one_hot, typical, fuzzy, lossy_optimal): each exact kernel
against an independent brute-force enumeration of the rule's definition, written here loop by loop
over draft tuples without the library's rule code (lossless rules: output law == p to 1e-12; lossy
rules: output law, TV, KL and acceptance equal the enumeration), the optimality relations of MATH §16
on deterministic drafts, and efficiency <= 1."""

from __future__ import annotations

import math

import numpy as np
import pytest

import otspec
from otspec._tolerances import FLOAT64_ATOL
from otspec.errors import InvalidOptionError
from otspec.testing import assert_lossless
from otspec.verifiers import exact_match, fuzzy, lossy_optimal, one_hot, typical
from otspec.verifiers.lossy import efficiency
from otspec.verifiers.step.fuzzy import FuzzyVerifier
from otspec.verifiers.step.lossy_optimal import LossyOptimalVerifier
from otspec.verifiers.step.one_hot import is_deterministic
from otspec.verifiers.step.typical import TypicalVerifier
from tests._tolerances import CLEAR_DIFFERENCE, LP_ATOL
from tests.conftest import random_simplex

N_CASES = 120


def _laws(rng, V, k, q):
    laws = [otspec.iid(q, k), otspec.product([random_simplex(rng, V, zeros=int(rng.integers(0, 2))) for _ in range(k)])]
    if k <= np.count_nonzero(q):
        laws += [otspec.without_replacement(q, k), otspec.greedy(q, k)]
    return laws


def _cases(seed, n=N_CASES, kmax=3):
    rng = np.random.default_rng(seed)
    for _ in range(n):
        V, k = int(rng.integers(2, 6)), int(rng.integers(1, kmax + 1))
        p = random_simplex(rng, V, zeros=int(rng.integers(0, 2)), alpha=float(rng.choice([0.3, 1.0])))
        q = random_simplex(rng, V, zeros=int(rng.integers(0, 2)), alpha=float(rng.choice([0.3, 1.0])))
        for law in _laws(rng, V, k, q):
            yield p, q, law


def _entropy(p):
    return -sum(x * math.log(x) for x in p if x > 0)


def _tv(a, b):
    return 0.5 * sum(abs(x - y) for x, y in zip(a, b, strict=True))


def _kl(a, b):
    return sum(x * math.log(x / y) for x, y in zip(a, b, strict=True) if x > 0)


def _enumerate_rule(row_of, p, law):
    """Output law and membership acceptance of a rule given as ``row_of(tuple) -> output law``."""
    V = len(p)
    out, acc = [0.0] * V, 0.0
    tuples, weights = law.enumerate()
    for t, w in zip(tuples.tolist(), weights.tolist(), strict=True):
        row = row_of(t)
        assert abs(sum(row) - 1.0) < 1e-12
        for y in range(V):
            out[y] += w * row[y]
        acc += w * sum(row[y] for y in set(t))
    return out, acc


# -- exact match ---------------------------------------------------------------------------------
def test_exact_match_kernel_and_acceptance_by_enumeration():
    for p, _, law in _cases(1, n=60):
        K = exact_match.kernel(p, law)
        assert np.abs(K.pi - p[None, :]).max() <= FLOAT64_ATOL  # every row is a fresh draw from p
        assert_lossless(exact_match, p, law, atol=FLOAT64_ATOL)
        _, acc = _enumerate_rule(lambda t, p=p: list(p), p, law)  # accept iff Y ~ p is among the drafts
        assert exact_match.acceptance(p, law).value == pytest.approx(acc, abs=FLOAT64_ATOL)


def test_exact_match_single_draft_is_sum_pq_and_collapses_to_sum_p_squared():
    rng = np.random.default_rng(2)
    for _ in range(50):
        V = int(rng.integers(2, 8))
        p, q = random_simplex(rng, V), random_simplex(rng, V)
        assert exact_match.acceptance(p, otspec.iid(q, 1)).value == pytest.approx(float(np.dot(p, q)), abs=FLOAT64_ATOL)
        a_same = exact_match.acceptance(p, otspec.iid(p, 1)).value
        assert a_same == pytest.approx(float(np.sum(p**2)), abs=FLOAT64_ATOL)
        # speculative sampling with q = p accepts everything; exact match only sum p^2
        assert otspec.verifiers.token.acceptance(p, otspec.iid(p, 1)).value == pytest.approx(1.0)
        assert a_same < 1.0 - CLEAR_DIFFERENCE


# -- deterministic drafts: one_hot and exact_match are lossless and optimal ----------------------
def _deterministic_laws(rng, V):
    x = int(rng.integers(0, V))
    onehot = np.zeros(V)
    onehot[x] = 1.0
    yield otspec.iid(onehot, 1)
    yield otspec.iid(onehot, 3)  # the same token three times
    for k in (1, 2, 3):
        t = rng.integers(0, V, size=k)
        yield otspec.explicit([t.tolist()], [1.0], vocab_size=V)


def test_one_hot_is_lossless_and_attains_p_of_the_drafted_set():
    rng = np.random.default_rng(3)
    for _ in range(60):
        V = int(rng.integers(2, 7))
        p = random_simplex(rng, V, zeros=int(rng.integers(0, 3)))
        for law in _deterministic_laws(rng, V):
            assert is_deterministic(law)
            (t,), _ = law.enumerate()
            pS = float(sum(p[y] for y in set(t.tolist())))
            K = one_hot.kernel(p, law)
            assert np.abs(K.pi[0] - p).max() <= FLOAT64_ATOL  # lossless: the one row is p itself
            assert one_hot.acceptance(p, law).value == pytest.approx(pS, abs=FLOAT64_ATOL)
            assert K.acceptance() == pytest.approx(pS, abs=FLOAT64_ATOL)
            opt = otspec.optimal_acceptance(p, law, method="lp").value  # no lossless rule beats p(S)
            assert opt == pytest.approx(pS, abs=LP_ATOL)
            assert exact_match.acceptance(p, law).value == pytest.approx(pS, abs=FLOAT64_ATOL)  # sample-and-match too


def test_one_hot_on_sampled_drafts_is_lossless_but_only_as_good_as_exact_match():
    """Given any drafted tuple the one-hot rule outputs p (the residual is p off the drafted set), so it
    is lossless on every law, and accepts E_Q[p(S)] -- exact match's value, not the optimum."""
    for p, _, law in _cases(13, n=60):
        K = one_hot.kernel(p, law)
        assert np.abs(K.pi - p[None, :]).max() <= FLOAT64_ATOL
        assert one_hot.acceptance(p, law).value == pytest.approx(exact_match.acceptance(p, law).value, abs=FLOAT64_ATOL)
        assert K.acceptance() == pytest.approx(exact_match.acceptance(p, law).value, abs=FLOAT64_ATOL)
    # the pitfall it avoids: an argmax draft x = 1 verified with min(1, p/q) and the residual (p - q)_+
    p, q = np.array([0.2, 0.5, 0.3]), np.array([0.1, 0.6, 0.3])
    x = int(np.argmax(q))
    a = min(1.0, p[x] / q[x])
    res = np.maximum(p - q, 0.0) / np.maximum(p - q, 0.0).sum()
    out = (1 - a) * res
    out[x] += a
    assert _tv(out, p) > CLEAR_DIFFERENCE
    assert not is_deterministic(otspec.iid(q, 1))


# -- typical acceptance --------------------------------------------------------------------------
def _typical_row(p, t, thr, alpha, on_reject):
    tau = min(thr, alpha * math.exp(-_entropy(p)))
    best = None
    for x in t:  # the passing draft of largest p, first in draft order among ties
        if p[x] > tau and (best is None or p[x] > p[best]):
            best = x
    if best is not None:
        return [1.0 if y == best else 0.0 for y in range(len(p))]
    if on_reject == "sample":
        return list(p)
    top = max(range(len(p)), key=lambda y: (p[y], -y))
    return [1.0 if y == top else 0.0 for y in range(len(p))]


@pytest.mark.parametrize("on_reject", ["sample", "argmax"])
def test_typical_exact_law_tv_kl_and_acceptance_by_enumeration(on_reject):
    rng = np.random.default_rng(4)
    n_rejecting = 0
    for p, _, law in _cases(5, n=60):
        thr, alpha = float(rng.choice([0.09, 0.2, 0.4])), float(rng.choice([0.3, 0.6, 1.0]))
        v = TypicalVerifier(thr, alpha, on_reject=on_reject)
        out, acc = _enumerate_rule(lambda t, p=p, thr=thr, alpha=alpha: _typical_row(p, t, thr, alpha, on_reject), p, law)
        K = v.kernel(p, law)
        for m, t in enumerate(K.tuples.tolist()):
            assert np.abs(K.pi[m] - _typical_row(p, t, thr, alpha, on_reject)).max() == 0.0
        assert np.abs(v.output_law(p, law) - out).max() <= FLOAT64_ATOL
        assert v.tv_to_target(p, law) == pytest.approx(_tv(out, p), abs=FLOAT64_ATOL)
        kl = v.kl_to_target(p, law)
        assert (
            kl == pytest.approx(_kl(out, p), abs=1e-10)
            if math.isfinite(kl)
            else any(o > 0 and q_ == 0 for o, q_ in zip(out, p, strict=True))
        )
        assert v.acceptance(p, law).value == pytest.approx(acc, abs=FLOAT64_ATOL)
        n_rejecting += int(acc < 1.0 - CLEAR_DIFFERENCE)
    assert n_rejecting > 20  # the cases exercise the rejection branch


def test_typical_defaults_are_vllms_and_a_peaked_target_rejects_unlikely_drafts():
    assert (typical.posterior_threshold, typical.posterior_alpha, typical.on_reject) == (0.09, 0.3, "sample")
    p = np.array([0.9, 0.05, 0.05])  # H = 0.394: tau = min(0.09, 0.3 * 0.674) = 0.09
    law = otspec.iid([0.0, 0.5, 0.5], 1)
    assert typical.acceptance(p, law).value == pytest.approx(0.05)  # only by the fresh draw from p
    assert typical.tv_to_target(p, law) == pytest.approx(0.0)  # every draft rejected: output ~ p


# -- fuzzy -------------------------------------------------------------------------------------
def _js(a, b):
    m = [(x + y) / 2 for x, y in zip(a, b, strict=True)]
    return 0.5 * _kl(a, m) + 0.5 * _kl(b, m)


@pytest.mark.parametrize("divergence", ["js", "tv"])
def test_fuzzy_exact_law_tv_and_acceptance_by_enumeration(divergence):
    rng = np.random.default_rng(6)
    fired = total = 0
    for p, q, law in _cases(7, n=80, kmax=1):
        if law.iid_q is None:
            continue
        total += 1
        T = float(rng.uniform(0.0, 0.2 if divergence == "js" else 0.6))
        v = FuzzyVerifier(T, divergence=divergence)
        d = _js(p, q) if divergence == "js" else _tv(p, q)

        def row(t, p=p, q=q, d=d, T=T):
            x = t[0]
            if d <= T:
                return [1.0 if y == x else 0.0 for y in range(len(p))]
            a = min(1.0, p[x] / q[x])
            res = [max(p[y] - q[y], 0.0) for y in range(len(p))]
            s = sum(res)
            return [(a if y == x else 0.0) + (1 - a) * (res[y] / s if s > 0 else p[y]) for y in range(len(p))]

        out, acc = _enumerate_rule(row, p, law)
        assert np.abs(v.output_law(p, law) - out).max() <= FLOAT64_ATOL
        assert np.abs(v.kernel(p, law).output_law() - out).max() <= FLOAT64_ATOL
        assert v.tv_to_target(p, law) == pytest.approx(_tv(out, p), abs=FLOAT64_ATOL)
        assert v.acceptance(p, law).value == pytest.approx(acc, abs=FLOAT64_ATOL)
        fired += int(d <= T)
    assert 10 < fired < total - 10  # both branches exercised


def test_fuzzy_threshold_zero_is_lossless():
    for p, q, _ in _cases(8, n=40, kmax=1):
        assert_lossless(FuzzyVerifier(0.0), p, otspec.iid(q, 1), atol=FLOAT64_ATOL)


# -- lossy_optimal and efficiency ----------------------------------------------------------------
def test_lossy_optimal_attains_the_frontier_within_its_budget():
    rng = np.random.default_rng(9)
    for p, _, law in _cases(10, n=40):
        eps = float(rng.choice([0.0, 0.01, 0.05, 0.2, 0.7]))
        v = LossyOptimalVerifier(eps)
        alpha = otspec.optimal_acceptance(p, law, method="lp").value
        K = v.kernel(p, law)
        assert K.acceptance() == pytest.approx(min(1.0, alpha + eps), abs=LP_ATOL)
        assert v.acceptance(p, law).value == pytest.approx(K.acceptance(), abs=FLOAT64_ATOL)
        assert _tv(K.output_law(), p) <= eps + LP_ATOL
        if eps == 0.0:
            assert_lossless(v, p, law, atol=1e-9)


def test_efficiency_is_at_most_one_and_one_on_the_frontier():
    rng = np.random.default_rng(11)
    seen = {"typical": 0, "fuzzy": 0, "lossy_optimal": 0, "approximate": 0}
    for p, _, law in _cases(12, n=50):
        rules = [("typical", typical), ("lossy_optimal", LossyOptimalVerifier(float(rng.uniform(0.01, 0.3))))]
        if law.k == 1:
            rules += [
                ("fuzzy", FuzzyVerifier(0.2)),
                ("approximate", otspec.verifiers.step.approximate.ApproximateVerifier(rng.random(law.V))),
            ]
        for name, v in rules:
            e = efficiency(v, p, law)
            if math.isnan(e):
                continue
            seen[name] += 1
            assert e <= 1.0 + 1e-7, (name, e)
            if name in ("lossy_optimal", "fuzzy"):
                assert e == pytest.approx(1.0, abs=1e-7), (name, e)  # on the frontier whenever it distorts
    assert min(seen.values()) >= 5, seen


def test_efficiency_is_nan_for_a_lossless_rule():
    assert math.isnan(efficiency(otspec.verifiers.token, [0.5, 0.5], otspec.iid([0.9, 0.1], 1)))


@pytest.mark.parametrize(
    "build",
    [
        lambda: LossyOptimalVerifier(-0.1),
        lambda: LossyOptimalVerifier(1.5),
        lambda: LossyOptimalVerifier(float("nan")),
        lambda: TypicalVerifier(-1.0),
        lambda: TypicalVerifier(0.09, float("inf")),
        lambda: TypicalVerifier(on_reject="greedy"),
        lambda: FuzzyVerifier(1.0),  # JS is at most log 2
        lambda: FuzzyVerifier(0.1, divergence="kl"),
    ],
)
def test_bad_options_raise_invalid_option_error(build):
    with pytest.raises(InvalidOptionError, match="must be"):
        build()


def test_registry_lists_the_engine_rules_and_which_are_lossy():
    names = {v.name: v for v in otspec.verifiers.ALL}
    for n in ("exact_match", "one_hot", "typical", "fuzzy", "lossy_optimal"):
        assert otspec.verifiers.by_name(n) is names[n]
    assert exact_match.lossless and one_hot.lossless
    assert not (typical.lossless or fuzzy.lossless or lossy_optimal.lossless)
