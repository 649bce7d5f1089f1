"""Token-level (Algorithm 1) and block (Algorithm 2) verification of a drafted chain.

Oracles used here are derived independently of the library code: the losslessness criterion of
docs/block.rst, losslessness criterion is re-implemented below, the toy example is recomputed with an exact-rational twin
that follows the pseudo-code of docs/block.rst, token and block verification line by line, and p_i is recomputed from its
closed form R_i / max_j R_j.
"""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy.stats import chi2, ncx2

from otspec import models, prefixes
from otspec._tolerances import EXACT_ATOL, FLOAT64_ATOL
from otspec.errors import (
    InvalidDistributionError,
    InvalidDraftsError,
    ProblemTooLargeError,
    ShapeMismatchError,
    UnsupportedMethodError,
)
from otspec.verifiers import block as bv
from otspec.verifiers import token_chain as tc
from tests._oracles import criterion_violation, make_pair
from tests._tolerances import CLEAR_DIFFERENCE, FALSE_ALARM, FLOAT64_ULPS_ATOL

VERIFIERS = {"token": tc, "block": bv}


# ---------------------------------------------------------------------------------------------
# Instances (the block / tree tests' make_pair: a close draft, or independent sparse models)


instances = st.builds(make_pair, st.integers(0, 10_000), st.integers(2, 3), st.sampled_from([0.3, 1.0, 3.0]), st.booleans())


# ---------------------------------------------------------------------------------------------
# Losslessness (exact)


@pytest.mark.parametrize("name", ["token", "block"])
@given(inst=instances, gamma=st.integers(1, 3))
def test_lossless_by_criterion(name, inst, gamma):
    p, q = inst
    K = VERIFIERS[name].kernel(p, q, gamma)
    assert criterion_violation(K.output_law(), p, p.V) <= EXACT_ATOL
    # each drafted path's (tau, y) law is a probability distribution
    assert np.allclose(K.law.sum(axis=(1, 2)), 1.0, atol=EXACT_ATOL)
    assert K.law.min() >= 0


def test_criterion_catches_a_broken_residual():
    """Control: token verification with the residual replaced by the target must fail the check."""
    p, q = make_pair(3, 3, 1.0, False)
    K = tc.kernel(p, q, 2)
    broken = {}
    for path, w, lw in zip(K.paths, K.weights, K.law, strict=False):
        for t in range(3):
            mass = lw[t].sum()
            row = mass * p(tuple(int(v) for v in path[:t])) if t < 2 else lw[t]
            for y in range(3):
                key = tuple(int(v) for v in path[:t]) + (y,)
                broken[key] = broken.get(key, 0.0) + w * row[y]
    assert criterion_violation(broken, p, 3) > CLEAR_DIFFERENCE


def test_criterion_catches_unweighted_block_residual():
    """Control: block verification with the plain residual (p_tau dropped) is not lossless."""
    p, q = make_pair(5, 3, 1.0, False)
    K = bv.kernel(p, q, 3)
    broken = {}
    for path, w, lw in zip(K.paths, K.weights, K.law, strict=False):
        for t in range(4):
            head = tuple(int(v) for v in path[:t])
            row = lw[t]
            if t < 3 and row.sum() > 0:
                res = np.maximum(p(head) - q(head), 0.0)
                row = row.sum() * res / res.sum()
            for y in range(3):
                broken[head + (y,)] = broken.get(head + (y,), 0.0) + w * row[y]
    assert criterion_violation(broken, p, 3) > CLEAR_DIFFERENCE


# ---------------------------------------------------------------------------------------------
# The toy example of Sun et al. (Lemma 1), exactly


def exact_twin(Mb, Ms, gamma, rule):
    """E[tau] of Algorithm 1 ('token') or 2 ('block') with Fractions, following the pseudo-code.

    Context-free models ``Mb``, ``Ms`` (lists of Fractions); every coin is integrated out exactly
    (P(eta <= h) = h), tau = first failure (token) / last pass (block)."""
    V = len(Mb)
    total = Fraction(0)
    for x in itertools.product(range(V), repeat=gamma):
        w = Fraction(1)
        for v in x:
            w *= Ms[v]
        if w == 0:
            continue
        r = [Mb[v] / Ms[v] for v in x]
        if rule == "token":
            reach, e = Fraction(1), Fraction(0)
            for ri in r:
                reach *= min(Fraction(1), ri)
                e += reach
        else:
            p_prev, h = Fraction(1), []
            for i in range(1, gamma + 1):
                pi = min(p_prev * r[i - 1], Fraction(1))
                if i < gamma:
                    z = sum(max(pi * Mb[v] - Ms[v], Fraction(0)) for v in range(V))
                    den = z + 1 - pi
                    h.append(z / den if den != 0 else Fraction(1))
                else:
                    h.append(pi)
                p_prev = pi
            # P(tau >= i) = 1 - prod_{j >= i} (1 - h_j)
            e = Fraction(0)
            for i in range(gamma):
                fail = Fraction(1)
                for hj in h[i:]:
                    fail *= 1 - hj
                e += 1 - fail
        total += w * e
    return total


def exact_naive(Mb, Ms, gamma):
    total = Fraction(0)
    for i in range(1, gamma + 1):
        for x in itertools.product(range(len(Mb)), repeat=i):
            a = b = Fraction(1)
            for v in x:
                a *= Mb[v]
                b *= Ms[v]
            total += min(a, b)
    return total


def test_toy_exact_fractions():
    Mb = [Fraction(1, 3), Fraction(2, 3)]
    Ms = [Fraction(2, 3), Fraction(1, 3)]
    tok, blk, naive = exact_twin(Mb, Ms, 2, "token"), exact_twin(Mb, Ms, 2, "block"), exact_naive(Mb, Ms, 2)
    # the paper's Lemma 1 values, re-derived by the exact twin
    assert (tok, blk, naive) == (Fraction(10, 9), Fraction(11, 9), Fraction(12, 9))
    p, q = models.context_free([1 / 3, 2 / 3]), models.context_free([2 / 3, 1 / 3])
    for got, exact in (
        (tc.expected_accepted(p, q, 2), tok),
        (tc.expected_accepted(p, q, 2, method="kernel"), tok),
        (bv.expected_accepted(p, q, 2), blk),
        (bv.expected_accepted(p, q, 2, method="kernel"), blk),
    ):
        assert abs(Fraction(got) - exact) < Fraction(1, 10**14)
        assert Fraction(got).limit_denominator(100) == exact


def test_prefix_weights_run_on_fractions():
    """The closed-form code path itself evaluated in exact rationals (object arrays)."""
    Mb = np.array([Fraction(1, 3), Fraction(2, 3)], dtype=object)
    Ms = np.array([Fraction(2, 3), Fraction(1, 3)], dtype=object)
    gamma, V = 2, 2
    p_cond = tuple(np.tile(Mb, (V**i, 1)) for i in range(gamma + 1))
    q_cond = tuple(np.tile(Ms, (V**i, 1)) for i in range(gamma))
    pj, qj = [np.array([Fraction(1)], dtype=object)], [np.array([Fraction(1)], dtype=object)]
    for i in range(1, gamma + 1):
        pj.append((pj[-1][:, None] * p_cond[i - 1]).ravel())
        qj.append((qj[-1][:, None] * q_cond[i - 1]).ravel())
    table = prefixes.PrefixTable(V=V, gamma=gamma, p_cond=p_cond, q_cond=q_cond, p_joint=tuple(pj), q_joint=tuple(qj))
    W = prefixes.prefix_weights(table)
    T = tc.token_prefix_mass(table)
    assert sum(w.sum() for w in W[1:]) == exact_twin(list(Mb), list(Ms), 2, "block") == Fraction(11, 9)
    assert sum(t.sum() for t in T[1:]) == exact_twin(list(Mb), list(Ms), 2, "token") == Fraction(10, 9)


@given(seed=st.integers(0, 10_000), gamma=st.integers(1, 3))
def test_twin_agrees_on_random_context_free(seed, gamma):
    rng = np.random.default_rng(seed)
    a = [Fraction(int(v), 12) for v in rng.multinomial(12, [1 / 3] * 3)]
    b = [Fraction(int(v), 12) for v in rng.multinomial(12, [1 / 3] * 3)]
    p, q = models.context_free([float(v) for v in a]), models.context_free([float(v) for v in b])
    assert abs(bv.expected_accepted(p, q, gamma) - float(exact_twin(a, b, gamma, "block"))) < FLOAT64_ATOL
    assert abs(tc.expected_accepted(p, q, gamma) - float(exact_twin(a, b, gamma, "token"))) < FLOAT64_ATOL


# ---------------------------------------------------------------------------------------------
# Identities


@given(inst=instances, gamma=st.integers(1, 3))
def test_closed_form_equals_kernel_and_dominance(inst, gamma):
    p, q = inst
    t_cf, t_k = tc.expected_accepted(p, q, gamma), tc.expected_accepted(p, q, gamma, method="kernel")
    b_cf, b_k = bv.expected_accepted(p, q, gamma), bv.expected_accepted(p, q, gamma, method="kernel")
    assert abs(t_cf - t_k) <= EXACT_ATOL
    assert abs(b_cf - b_k) <= EXACT_ATOL
    assert t_cf <= b_cf + EXACT_ATOL
    if gamma == 1:
        assert abs(t_cf - b_cf) <= EXACT_ATOL


def test_block_strictly_better_somewhere():
    gains = [
        bv.expected_accepted(*make_pair(s, 3, 1.0, False), 3) - tc.expected_accepted(*make_pair(s, 3, 1.0, False), 3) for s in range(5)
    ]
    assert max(gains) > CLEAR_DIFFERENCE


@pytest.mark.parametrize("gamma", [1, 2, 3])
def test_draft_equals_target(gamma):
    p = models.dirichlet(3, seed=11, concentration=0.5, zero_prob=0.2)
    assert abs(tc.expected_accepted(p, p, gamma) - gamma) <= EXACT_ATOL
    assert abs(bv.expected_accepted(p, p, gamma) - gamma) <= EXACT_ATOL


def _p_i_closed_form(p, q, path):
    """p_i = R_i / max_{j <= i} R_j with R the cumulative likelihood ratio (docs/block.rst, key identity 3)."""
    R, best, out = 1.0, 1.0, []
    for i, x in enumerate(path):
        R *= p(path[:i])[x] / q(path[:i])[x]
        best = max(best, R)
        out.append(R / best)
    return out


@given(inst=instances, gamma=st.integers(1, 3))
def test_p_i_is_acceptance_probability_given_prefix(inst, gamma):
    """P(tau >= i | X^i) = p_i and P(tau = i | X^i) = Z_{i+1} (docs/block.rst, key identities 1-2)."""
    p, q = inst
    K = bv.kernel(p, q, gamma)
    tau = K.tau_law()
    for i in range(1, gamma + 1):
        groups: dict = {}
        for path, w, tl in zip(K.paths, K.weights, tau, strict=False):
            key = tuple(int(v) for v in path[:i])
            g = groups.setdefault(key, [0.0, 0.0, 0.0])
            g[0] += w
            g[1] += w * tl[i:].sum()
            g[2] += w * tl[i]
        for key, (w, ge, eq) in groups.items():
            p_i = _p_i_closed_form(p, q, key)[-1]
            assert abs(ge / w - p_i) <= EXACT_ATOL
            if i < gamma:
                z = np.maximum(p_i * p(key) - q(key), 0.0).sum()
                assert abs(eq / w - z) <= EXACT_ATOL
        # the running ratio computed in log space agrees with the closed form
        for path in K.paths[:5]:
            path = tuple(int(v) for v in path)
            P = models.conditionals_along(p, path)
            Qc = models.conditionals_along(q, path, include_last=False)
            got = np.exp(bv.running_ratio(P, Qc, path))
            assert np.allclose(got, _p_i_closed_form(p, q, path), atol=FLOAT64_ATOL)


# ---------------------------------------------------------------------------------------------
# Per-path conditional expectation


@pytest.mark.parametrize("name", ["token", "block"])
@given(inst=instances, gamma=st.integers(1, 3))
def test_per_path_expectation_averages_to_expected_accepted(name, inst, gamma):
    p, q = inst
    mod = VERIFIERS[name]
    K = mod.kernel(p, q, gamma)
    per_path = []
    for path in K.paths:
        path = tuple(int(v) for v in path)
        P = models.conditionals_along(p, path)
        Qc = models.conditionals_along(q, path, include_last=False)
        per_path.append(mod.expected_accepted_given_path(P, Qc, path))
        # the bonus row is optional
        assert mod.expected_accepted_given_path(P[:-1], Qc, path) == per_path[-1]
    per_path = np.array(per_path)
    assert np.allclose(per_path, K.tau_law() @ np.arange(gamma + 1), atol=FLOAT64_ATOL)
    assert abs(float(K.weights @ per_path) - mod.expected_accepted(p, q, gamma)) <= EXACT_ATOL


def test_block_per_path_naive_loop_agrees_at_large_vocab():
    """Vectorised estimator vs a straightforward per-position loop (no log space) at V = 4096."""
    rng = np.random.default_rng(7)
    gamma, V = 6, 4096
    P = rng.dirichlet(np.full(V, 0.1), size=gamma + 1)
    Qc = 0.6 * P[:gamma] + 0.4 * rng.dirichlet(np.full(V, 0.1), size=gamma)
    x = np.array([rng.choice(V, p=Qc[i]) for i in range(gamma)])
    pi, hs = 1.0, []
    for i in range(1, gamma + 1):
        pi = min(pi * P[i - 1, x[i - 1]] / Qc[i - 1, x[i - 1]], 1.0)
        if i < gamma:
            z = sum(max(pi * P[i, v] - Qc[i, v], 0.0) for v in range(V))
            hs.append(z / (z + 1 - pi) if z + 1 - pi > 0 else 1.0)
        else:
            hs.append(pi)
    expect = sum(1 - np.prod([1 - h for h in hs[i:]]) for i in range(gamma))
    assert abs(bv.expected_accepted_given_path(P, Qc, x) - expect) < FLOAT64_ATOL


def test_per_path_long_block_log_space():
    """gamma = 400 with ratios ~ e^{+-3}: products of ratios overflow/underflow, log space does not."""
    rng = np.random.default_rng(1)
    gamma, V = 400, 8
    P = rng.dirichlet(np.full(V, 0.05), size=gamma + 1)
    Qc = rng.dirichlet(np.full(V, 0.05), size=gamma)
    x = np.array([rng.choice(V, p=Qc[i]) for i in range(gamma)])
    logp = bv.running_ratio(P, Qc, x)
    assert np.all(logp <= 0) and np.all(np.isfinite(logp) | (logp == -np.inf))
    e = bv.expected_accepted_given_path(P, Qc, x)
    assert 0.0 <= e <= gamma
    prof = bv.acceptance_profile_given_path(P, Qc, x)
    assert np.all(np.diff(prof) <= FLOAT64_ULPS_ATOL) and abs(prof.sum() - e) < EXACT_ATOL


def test_per_path_validation():
    P = [[0.5, 0.5], [0.5, 0.5]]
    with pytest.raises(ShapeMismatchError):
        bv.expected_accepted_given_path(P, [[0.5, 0.5]], [0, 1])
    with pytest.raises(ShapeMismatchError):
        tc.expected_accepted_given_path([[0.5, 0.5]] * 4, [[0.5, 0.5]] * 2, [0, 1])
    with pytest.raises(InvalidDistributionError):
        bv.expected_accepted_given_path([[0.5, 0.6], [0.5, 0.5]], [[0.5, 0.5]] * 2, [0, 1])
    with pytest.raises(InvalidDraftsError):
        bv.expected_accepted_given_path(P, [[1.0, 0.0], [0.5, 0.5]], [1, 1])
    with pytest.raises(InvalidDraftsError):
        tc.expected_accepted_given_path(P, P, [0, 5])


# ---------------------------------------------------------------------------------------------
# Sampler vs kernel


N_SAMPLES = 60_000


def chi_square_pvalue(counts: np.ndarray, probs: np.ndarray) -> tuple[float, int]:
    """Pearson chi-square p-value; cells with expected count < 5 are pooled into one."""
    n = counts.sum()
    exp = probs * n
    assert counts[probs == 0].sum() == 0, "sampler produced an outcome of probability 0"
    big = exp >= 5
    obs_c = np.append(counts[big], counts[~big].sum())
    exp_c = np.append(exp[big], exp[~big].sum())
    keep = exp_c > 0
    obs_c, exp_c = obs_c[keep], exp_c[keep]
    stat = float(((obs_c - exp_c) ** 2 / exp_c).sum())
    df = obs_c.size - 1
    return float(chi2.sf(stat, df)), df


def test_sample_size_detects_tv_002():
    """N = 60 000 has power >= 0.999 against any TV error of 0.02 at false-alarm rate 1e-6.

    A TV error d implies a chi-square noncentrality >= N (sum |Delta|)^2 / sum p = 4 N d^2
    (Cauchy-Schwarz), i.e. >= 96 here; the (gamma+1) V - 1 <= 15 degrees of freedom used below
    give power ncx2.sf(chi2.isf(1e-6, df), df, 96) >= 0.999."""
    for df in range(1, 16):
        assert ncx2.sf(chi2.isf(FALSE_ALARM, df), df, 4 * N_SAMPLES * 0.02**2) >= 0.999


@pytest.mark.parametrize("name, seed, path", [("token", 2, (0, 1, 2)), ("block", 2, (0, 1, 2)), ("block", 4, (1, 1, 0))])
def test_sampler_matches_kernel(name, seed, path):
    """Chi-square of N = 60 000 samples against the exact (tau, y) law of one drafted path.

    False-alarm rate 1e-6 per test (fixed seeds make it deterministic); N detects a TV error of
    0.02 with power >= 0.999 (see test_sample_size_detects_tv_002)."""
    p, q = make_pair(seed, 3, 1.0, False)
    mod = VERIFIERS[name]
    law = mod.conditional_law(p, q, path)
    assert np.allclose(law.sum(), 1.0)
    rng = np.random.default_rng(1234 + seed)
    counts = np.zeros_like(law)
    for _ in range(N_SAMPLES):
        t, y = mod.sample(p, q, path, rng=rng)
        counts[t, y] += 1
    pval, _ = chi_square_pvalue(counts.ravel(), law.ravel())
    assert pval > FALSE_ALARM


def test_sampler_shared_uniform_control():
    """Control: a block sampler that reuses the accept coin for the residual draw is caught."""
    p, q = make_pair(2, 3, 1.0, False)
    path = (0, 1, 2)
    law = bv.conditional_law(p, q, path)
    rng = np.random.default_rng(99)
    counts = np.zeros_like(law)
    for _ in range(N_SAMPLES // 4):
        # same sampler, but the residual is drawn by inverse-CDF from the *last* accept coin
        child = rng.spawn(1)[0]
        t, _ = bv.sample(p, q, path, rng=child)
        u = rng.random()
        row = law[t] / law[t].sum()
        y = int(np.searchsorted(np.cumsum(row), u * u))  # a biased draw
        counts[t, min(y, 2)] += 1
    pval, _ = chi_square_pvalue(counts.ravel(), law.ravel())
    assert pval < FALSE_ALARM


# ---------------------------------------------------------------------------------------------
# Input handling


def test_bad_inputs():
    p, q = make_pair(0, 3, 1.0, False)
    with pytest.raises(UnsupportedMethodError):
        bv.expected_accepted(p, q, 2, method="magic")
    with pytest.raises(UnsupportedMethodError):
        tc.expected_accepted(p, q, 2, method="magic")
    with pytest.raises(ProblemTooLargeError, match="prefixes"):
        bv.expected_accepted(models.dirichlet(262_144), models.dirichlet(262_144, seed=1), 2)
    with pytest.raises(ProblemTooLargeError, match="memory cap"):
        tc.kernel(p, q, 3, memory_cap=1000)
    with pytest.raises(TypeError):
        bv.sample(p, q, (0, 1), rng=0)
    sparse_q = models.tabulated({(): [1.0, 0.0, 0.0]}, default=[1 / 3] * 3)
    with pytest.raises(InvalidDraftsError):
        bv.sample(p, sparse_q, (1, 0), rng=np.random.default_rng(0))
    with pytest.raises(InvalidDraftsError):
        tc.sample(p, sparse_q, (1, 0), rng=np.random.default_rng(0))
    with pytest.raises(InvalidDraftsError):
        bv.conditional_law(p, q, (0, 3))


def test_kernel_repr_and_shapes():
    p, q = make_pair(1, 3, 0.7, True)
    K = bv.kernel(p, q, 2)
    assert "ChainKernel(verifier='block'" in repr(K)
    assert K.law.shape == (K.paths.shape[0], 3, 3) and np.all(K.weights > 0)
    assert abs(K.weights.sum() - 1.0) <= EXACT_ATOL
    with pytest.raises(ValueError):
        K.law[0, 0, 0] = 1.0  # read-only
