"""``wor_iid``: drafts without replacement verified by the optimal i.i.d. rule on the rebuilt hit stream.

Exhaustive checks on small vocabularies (every ordered draft tuple enumerated, exact in float64):
the hit patterns rebuilt from the drafts make the first k hits exactly i.i.d. from q; the kernel is
lossless; the kept selections accept exactly alpha*_iid (their law is r*_iid); the membership
acceptance lies in [alpha*_iid, alpha*_WOR]. Statistical checks (fixed seeds) for the samplers.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import otspec
from otspec.verifiers import wor_iid
from otspec.verifiers.step.optimal_iid import selection_law
from otspec.verifiers.step.wor_iid import hit_string_weights, hit_strings, rebuild_hits
from tests._oracles import check_wor_sampler, small_wor_cases
from tests._tolerances import FALSE_ALARM

EXACT = 1e-12


def test_hit_strings_are_restricted_growth_strings():
    bell = [1, 1, 2, 5, 15, 52, 203]
    for k in range(1, 7):
        h = hit_strings(k)
        assert h.shape == (bell[k], k)
        assert np.all(h[:, 0] == 0)
        assert np.all(h[:, 1:] <= np.maximum.accumulate(h, axis=1)[:, :-1] + 1)
        assert len({tuple(r) for r in h}) == h.shape[0]


@pytest.mark.parametrize("seed", [0, 1])
def test_rebuilt_hits_are_iid_from_q(seed):
    """sum over ordered WOR tuples d of P(d) P(h | d) = q(h_1) ... q(h_k) for every hit tuple h (exact)."""
    for _p, q, k in small_wor_cases(seed, 25):
        law = otspec.without_replacement(q, k)
        tuples, weights = law.enumerate()
        pats = hit_strings(k)
        w = hit_string_weights(q[tuples], pats)
        np.testing.assert_allclose(w.sum(axis=1), 1.0, atol=EXACT)
        got = {}
        for t, wt, row in zip(tuples, weights, w, strict=True):
            for pat, x in zip(pats, row, strict=True):
                key = tuple(t[pat])
                got[key] = got.get(key, 0.0) + wt * x
        V = q.size
        for h in itertools.product(range(V), repeat=k):
            assert abs(got.get(h, 0.0) - np.prod(q[list(h)])) < EXACT, (q, k, h)


def test_rebuild_hits_samples_the_pattern_law():
    """Chi-square of rebuild_hits' patterns against hit_string_weights (k = 4, 15 cells), N = 200 000,
    fixed seed, level 1e-6 (the chi-square quantile with 14 df)."""
    from scipy.stats import chi2

    qd = np.array([[0.3, 0.25, 0.05, 0.1]])
    pats = hit_strings(4)
    expected = hit_string_weights(qd, pats)[0]
    n = 200_000
    pos = rebuild_hits(np.repeat(qd, n, axis=0), np.random.default_rng(5).random((n, 3)))
    index = {tuple(r): i for i, r in enumerate(pats)}
    counts = np.bincount([index[tuple(r)] for r in pos], minlength=pats.shape[0])
    stat = np.sum((counts - n * expected) ** 2 / (n * expected))
    assert stat < chi2.isf(FALSE_ALARM, pats.shape[0] - 1), (stat, counts, n * expected)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_kernel_lossless_and_acceptance_between_the_optima(seed):
    for p, q, k in small_wor_cases(seed, 30):
        law = otspec.without_replacement(q, k)
        K = wor_iid.kernel(p, law)
        np.testing.assert_allclose(K.output_law(), p, atol=EXACT)
        a_iid = otspec.optimal_acceptance(p, otspec.iid(q, k)).value
        a_wor = otspec.optimal_acceptance(p, law).value
        a = wor_iid.acceptance(p, law).value
        assert a == pytest.approx(K.acceptance(), abs=EXACT)
        assert a_iid - EXACT <= a <= a_wor + EXACT, (a_iid, a, a_wor)
        # the selection step alone: its law is r*_iid, its kept mass is exactly alpha*_iid
        stt = wor_iid.state(p, law)
        beta = wor_iid._selection(p, law, K.tuples)
        r = K.weights @ beta
        np.testing.assert_allclose(r, selection_law(p, q, k), atol=EXACT)
        assert float(K.weights @ (beta @ stt.accept)) == pytest.approx(a_iid, abs=EXACT)
        assert np.all(beta[~otspec.verifiers.tuples.membership_mask(K.tuples, q.size)] == 0.0)  # selects drafts only


def test_residual_on_unhit_drafts_lifts_acceptance_above_the_iid_optimum():
    """The membership acceptance counts a residual draw that lands on a draft no hit reached: strictly
    above alpha*_iid on this pair (so the bounds above are not both equalities by construction)."""
    p, q = np.array([0.5, 0.3, 0.2]), np.array([0.1, 0.2, 0.7])
    law = otspec.without_replacement(q, 2)
    a = wor_iid.acceptance(p, law).value
    a_iid = otspec.optimal_acceptance(p, otspec.iid(q, 2)).value
    assert a > a_iid + 1e-3


def test_sampler_matches_kernel():
    """Joint chi-square of sample_batch against the kernel (:func:`tests._oracles.check_wor_sampler`)."""
    check_wor_sampler(wor_iid, np.random.default_rng(7))


def test_sample_is_sample_batch_of_one():
    p, q = np.array([0.3, 0.3, 0.1, 0.3]), np.array([0.4, 0.2, 0.3, 0.1])
    law = otspec.without_replacement(q, 3)
    for seed in range(5):
        d = law.sample(np.random.default_rng(seed), 1)[0]
        y = wor_iid.sample(p, law, d, rng=np.random.default_rng(seed))
        assert isinstance(y, int)
        assert y == wor_iid.sample_batch(p, law, d[None, :], rng=np.random.default_rng(seed))[0]


def test_monte_carlo_brackets_the_exact_value():
    p, q = np.array([0.35, 0.05, 0.3, 0.1, 0.2]), np.array([0.1, 0.3, 0.2, 0.25, 0.15])
    law = otspec.without_replacement(q, 3)
    exact = wor_iid.acceptance(p, law, method="kernel").value
    mc = wor_iid.acceptance(p, law, method="monte_carlo", n_samples=20_000, rng=np.random.default_rng(3))
    assert mc.how == "monte_carlo" and mc.ci_low <= exact <= mc.ci_high, (mc, exact)
    assert mc.extras["alpha_iid"] == pytest.approx(otspec.optimal_acceptance(p, otspec.iid(q, 3)).value, abs=EXACT)


def test_large_vocabulary_between_the_optima():
    rng = np.random.default_rng(4)
    V, k = 3000, 4
    q = rng.dirichlet(np.full(V, 0.1))
    p = 0.7 * q + 0.3 * rng.dirichlet(np.full(V, 0.1))
    law = otspec.without_replacement(q, k)
    est = wor_iid.acceptance(p, law, n_samples=4000)
    a_iid = otspec.optimal_acceptance(p, otspec.iid(q, k)).value
    a_wor = otspec.optimal_acceptance(p, law).value
    assert est.how == "monte_carlo"
    assert est.ci_low <= a_wor + 1e-9 and est.ci_high >= a_iid - 1e-9, (est, a_iid, a_wor)
    ys = wor_iid.sample_batch(p, law, law.sample(rng, 100), rng=np.random.default_rng(0))
    assert ys.shape == (100,) and ys.min() >= 0 and ys.max() < V


def test_refuses_other_laws():
    q = np.array([0.4, 0.3, 0.3])
    with pytest.raises(otspec.errors.UnsupportedMethodError, match="wor_iid"):
        wor_iid.acceptance(q, otspec.iid(q, 2))


def test_bound_cli_prints_the_certified_shortfall(capsys):
    """``otspec bound --verifiers`` on a large WOR law: wor_iid's row is its certified interval
    [alpha*_iid, alpha*_WOR]; with ``--fit-wor`` it is the Monte Carlo estimate and, below the
    table, its certified lower bound alpha*_iid and the shortfall bound alpha*_WOR - alpha*_iid."""
    from otspec.cli import main

    base = ["bound", "--vocab", "60", "--drafts", "4", "--seed", "2", "--law", "without_replacement", "--verifiers"]
    assert main(base) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "wor_iid: its acceptance at this V is a Monte Carlo estimate" in out
    assert "(certified), so its shortfall is <=" not in out
    assert main([*base, "--fit-wor"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "wor_iid: acceptance >= " in out and "(certified), so its shortfall is <=" in out


def test_kernel_rows_do_not_depend_on_the_chunk_size(monkeypatch):
    """The selection rows are built in chunks of tuples (Bell(k) hit patterns each): one tuple per
    chunk gives the same kernel as one chunk."""
    import otspec.verifiers.step.wor_iid as mod

    p, q = np.array([0.35, 0.05, 0.3, 0.1, 0.2]), np.array([0.1, 0.3, 0.2, 0.25, 0.15])
    law = otspec.without_replacement(q, 3)
    whole = wor_iid.kernel(p, law).pi
    monkeypatch.setattr(mod, "SAMPLE_CHUNK_ENTRIES", 1)
    np.testing.assert_array_equal(mod.WorIIDVerifier().kernel(p, otspec.without_replacement(q, 3)).pi, whole)
