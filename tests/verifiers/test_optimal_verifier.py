"""The optimal verifier for i.i.d. drafts (``otspec.verifiers.step.optimal_iid``, registered as ``optimal_iid``).

What is checked here (each check is an assertion that can fail):

* exact kernel: ``sum_x Q(x) pi(.|x) == p`` to 1e-12 and acceptance == alpha* to 1e-12 against
  the brute-force subsets oracle, on random small laws with zeros, ties in p/q, p == q, k = 1 and
  a one-token q (and on product laws with identical drafters);
* r* lies in the base polytope {r : r(S) <= 1 - (1 - q(S))^k for all S} (every subset, V <= 10)
  and its Lorenz curve lies below Phi (also at V = 5000);
* the threshold tree's selection law, integrated over the level s from the tree alone, equals r*
  to 1e-12 at V in the thousands; the heap builder gives the argmax recursion's tree;
* the sampler matches the kernel per fixed draft tuple (chi-square, N = 20 000 per tuple,
  false-alarm 1e-6 overall) and the same test catches a sampler that reuses the accept uniform for
  the residual draw; at V = 49 152 the empirical acceptance over 1e5 draws lies within its
  confidence interval (false-alarm 1e-6) of alpha*;
* refusals name the verifier and the reason.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import stats

import otspec
from otspec.errors import UnsupportedMethodError
from otspec.synthetic import synthetic_pair
from otspec.verifiers.step.optimal_iid import optimal_iid, prepare, selection_law, threshold_tree

ATOL = 1e-12
FALSE_ALARM = 1e-6


def _phi(t, k):
    return 1.0 - (1.0 - np.minimum(t, 1.0)) ** k


def _random_pair(rng, V):
    p = rng.dirichlet(np.full(V, 0.7))
    q = rng.dirichlet(np.full(V, 0.7))
    u = rng.random()
    if u < 0.25 and V > 1:  # zeros in p and in q
        p[rng.integers(V)] = 0.0
        q[rng.integers(V)] = 0.0
    elif u < 0.45 and V > 2:  # ties in p/q: two tokens with the same ratio, and a tie in p
        i, j = rng.choice(V, 2, replace=False)
        p[j] = p[i] * q[j] / q[i]
        p[(j + 1) % V] = p[i]
    elif u < 0.55:
        q = p.copy()  # p == q
    elif u < 0.62:
        q = np.zeros(V)
        q[rng.integers(V)] = 1.0  # q with one token
    p, q = p / p.sum(), q / q.sum()
    return p, q


def _cases(rng, n):
    for _ in range(n):
        V = int(rng.integers(1, 7))
        k = int(rng.integers(1, 5)) if V <= 5 else int(rng.integers(1, 4))
        yield (*_random_pair(rng, V), k)


# ------------------------------------------------------------------------------------------------
def test_exact_kernel_is_lossless_and_attains_the_subsets_optimum():
    rng = np.random.default_rng(2026)
    seen = set()
    for p, q, k in _cases(rng, 250):
        law = otspec.iid(q, k)
        oracle = otspec.optimal_acceptance(p, law, method="subsets").value
        K = optimal_iid.kernel(p, law)
        np.testing.assert_allclose(K.pi.sum(axis=1), 1.0, rtol=0, atol=ATOL)
        assert K.pi.min() >= -1e-15
        np.testing.assert_allclose(K.output_law(), p, rtol=0, atol=ATOL)
        assert abs(K.acceptance() - oracle) <= ATOL, (p, q, k)
        est = optimal_iid.acceptance(p, law)
        assert est.how == "closed_form" and abs(est.value - oracle) <= ATOL
        seen.add((k == 1, bool(np.any(p == 0)), np.count_nonzero(q) == 1, bool(np.array_equal(p, q))))
    assert {s[0] for s in seen} == {True, False} and any(s[2] for s in seen) and any(s[3] for s in seen)


def test_product_of_identical_drafters_is_covered_and_others_are_refused():
    rng = np.random.default_rng(7)
    p, q = rng.dirichlet(np.ones(4)), rng.dirichlet(np.ones(4))
    same = otspec.product([q, q, q])
    K = optimal_iid.kernel(p, same)
    np.testing.assert_allclose(K.output_law(), p, atol=ATOL)
    assert abs(K.acceptance() - otspec.optimal_acceptance(p, otspec.iid(q, 3), method="subsets").value) <= ATOL
    for law, needle in [
        (otspec.product([q, rng.dirichlet(np.ones(4))]), "drafters of this product law differ"),
        (otspec.without_replacement(q, 2), "without replacement"),
        (otspec.greedy(q, 2), "greedy"),
    ]:
        assert not optimal_iid.applies_to(law)
        for call, args in ((optimal_iid.kernel, (p, law)), (optimal_iid.acceptance, (p, law)), (optimal_iid.sample, (p, law, [0, 1]))):
            kw = {"rng": np.random.default_rng(0)} if call == optimal_iid.sample else {}
            with pytest.raises(UnsupportedMethodError, match="optimal_iid") as info:
                call(*args, **kw)
            assert needle in str(info.value)


def test_k1_is_single_draft_speculative_sampling():
    rng = np.random.default_rng(3)
    p, q = rng.dirichlet(np.ones(6)), rng.dirichlet(np.ones(6))
    np.testing.assert_allclose(selection_law(p, q, 1), q, atol=0)
    assert abs(optimal_iid.acceptance(p, otspec.iid(q, 1)).value - np.minimum(p, q).sum()) <= ATOL


# ------------------------------------------------------------------------------------------------
def test_selection_law_lies_in_the_base_polytope_and_attains_alpha():
    rng = np.random.default_rng(11)
    for _ in range(120):
        V = int(rng.integers(2, 11))
        k = int(rng.integers(1, 6))
        p, q = _random_pair(rng, V)
        r = selection_law(p, q, k)
        assert r.min() >= 0 and abs(r.sum() - 1.0) <= ATOL and np.all(r[q == 0] == 0)
        masks = np.array(list(itertools.product([0, 1], repeat=V)), dtype=bool)
        rS, qS = masks @ r, masks @ q
        assert np.all(rS <= _phi(qS, k) + ATOL), (p, q, k)  # every subset S
        alpha = otspec.optimal_acceptance(p, otspec.iid(q, k), method="subsets").value
        assert abs(np.minimum(p, r).sum() - alpha) <= ATOL


@pytest.mark.parametrize("V,k,family", [(10, 3, "dirichlet"), (5000, 4, "zipf"), (5000, 8, "dirichlet")])
def test_lorenz_curve_of_r_star_lies_below_phi(V, k, family):
    p, q = synthetic_pair(V, family=family, seed=5)
    r = selection_law(p, q, k)
    pos = q > 0
    dens = r[pos] / q[pos]
    o = np.argsort(-dens, kind="stable")
    T = np.concatenate([[0.0], np.cumsum(q[pos][o])])
    L = np.concatenate([[0.0], np.cumsum(r[pos][o])])
    assert np.all(_phi(T, k) + ATOL >= L)
    assert abs(L[-1] - 1.0) <= ATOL


# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "V,k,family,seed",
    [(3000, 2, "zipf", 0), (3000, 4, "zipf", 1), (4000, 8, "zipf", 2), (2000, 8, "dirichlet", 3), (3000, 3, "dirichlet", 4)],
)
def test_integrated_selection_law_equals_r_star(V, k, family, seed):
    p, q = synthetic_pair(V, family=family, seed=seed)
    st = prepare(p, q, k)
    assert st.geometry.m > 100  # a real tree, not a handful of super-tokens
    G = st.tree.G
    inner = st.tree.order
    assert np.all(G[inner] <= np.minimum(G[st.tree.left[inner]], G[st.tree.right[inner]]))  # nested thresholds
    np.testing.assert_allclose(st.integrated_selection_law(), st.r, rtol=0, atol=ATOL)


def test_integrated_law_on_peaked_pairs():
    """Temperature 0.2: q spans 1e-30..1, so super-tokens near t = 1 have q-mass below float64
    resolution of the cumulative sums (regression: 0/0 in the integrated law)."""
    for k in (2, 8):
        p, q = synthetic_pair(2000, seed=2, temperature=0.2)
        st = prepare(p, q, k)
        assert np.all(np.isfinite(st.integrated_selection_law()))
        np.testing.assert_allclose(st.integrated_selection_law(), st.r, rtol=0, atol=ATOL)


def test_integrated_law_with_ties_and_zeros():
    rng = np.random.default_rng(8)
    V = 2000
    q = rng.dirichlet(np.full(V, 0.3))
    p = q * rng.choice([0.5, 1.0, 2.0], size=V)  # only three distinct ratios: big tied blocks
    p[:50] = 0.0
    q[50:80] = 0.0
    p, q = p / p.sum(), q / q.sum()
    for k in (2, 5):
        st = prepare(p, q, k)
        np.testing.assert_allclose(st.integrated_selection_law(), st.r, rtol=0, atol=ATOL)


def test_heap_builder_gives_the_argmax_tree():
    for seed in range(6):
        p, q = synthetic_pair(300, family=("zipf", "dirichlet")[seed % 2], seed=seed)
        k = 2 + seed
        a, b = threshold_tree(p, q, k, method="heap"), threshold_tree(p, q, k, method="argmax")
        np.testing.assert_allclose(a.G, b.G, rtol=0, atol=1e-10)
    with pytest.raises(UnsupportedMethodError, match="bogus"):
        threshold_tree(p, q, 2, method="bogus")


# ------------------------------------------------------------------------------------------------
# p has a zero (token 5, drafted: always rejected); q has a zero (token 3: only by residual); the
# residual (p - r*)_+ has two tokens (3 and 4) and the threshold tree has an interior cut.
P6 = np.array([0.1, 0.1, 0.2, 0.25, 0.35, 0.0])
Q6 = np.array([0.35, 0.25, 0.2, 0.0, 0.1, 0.1])
N_PER_TUPLE = 20_000


def _per_tuple_chi_square(sample_rows, p, law, seed):
    """Chi-square of the sampler's output law given each fixed draft tuple against the kernel row.

    ``N_PER_TUPLE`` draws per tuple, one test per tuple, Bonferroni: the overall false-alarm rate is
    <= ``FALSE_ALARM``. Returns the smallest p-value (times the number of tuples)."""
    K = optimal_iid.kernel(p, law)
    M, V = K.pi.shape
    worst = 1.0
    rng = np.random.default_rng(seed)
    for m in range(M):
        ys = sample_rows(np.repeat(K.tuples[m][None, :], N_PER_TUPLE, axis=0), rng)
        obs = np.bincount(ys, minlength=V).astype(float)
        exp = N_PER_TUPLE * K.pi[m]
        zero = exp <= 1e-9 * N_PER_TUPLE
        assert obs[zero].sum() == 0, f"tuple {K.tuples[m]} produced an output of probability 0"
        if (~zero).sum() < 2:
            continue
        assert exp[~zero].min() >= 5.0
        stat = float(((obs[~zero] - exp[~zero]) ** 2 / exp[~zero]).sum())
        worst = min(worst, M * float(stats.chi2.sf(stat, (~zero).sum() - 1)))
    return worst


def test_sampler_matches_kernel_per_draft_tuple():
    law = otspec.iid(Q6, 3)
    st = optimal_iid.state(P6, law)
    assert np.count_nonzero(np.maximum(P6 - st.r, 0)) == 2 and np.any((st.tree.G > 0) & (st.tree.G < 1))

    def rows(d, rng):
        return optimal_iid.sample_batch(P6, law, d, rng=rng)

    assert _per_tuple_chi_square(rows, P6, law, seed=99) > FALSE_ALARM


def test_negative_control_coin_reuse_is_caught():
    """A sampler that draws the residual token by inverse CDF at the accept uniform itself has the
    right acceptance rate but the wrong output law given the drafts: the same test rejects it."""
    law = otspec.iid(Q6, 3)
    st = optimal_iid.state(P6, law)

    def broken(d, rng):
        s, u, c = rng.random(d.shape[0]), rng.random(d.shape[0]), rng.random(d.shape[0])
        y = st.select(d, s, u)
        rej = c >= st.accept[y]
        cdf = st.residual_cdf
        y = y.copy()
        y[rej] = np.minimum(np.searchsorted(cdf, c[rej] * cdf[-1], side="right"), P6.size - 1)  # the coin, reused
        return y

    assert _per_tuple_chi_square(broken, P6, law, seed=99) < FALSE_ALARM


def test_sample_is_sample_batch_of_one_and_streams_are_spawned():
    law = otspec.iid(Q6, 2)
    for seed in range(10):
        d = law.sample(np.random.default_rng(seed), 1)[0]
        y = optimal_iid.sample(P6, law, d, rng=np.random.default_rng(seed))
        assert isinstance(y, int) and y == optimal_iid.sample_batch(P6, law, d[None, :], rng=np.random.default_rng(seed))[0]
    g = np.random.default_rng(0)
    before = g.bit_generator.state
    optimal_iid.sample(P6, law, [0, 1], rng=g)
    assert g.bit_generator.state["state"] == before["state"]  # only children were drawn from


def test_acceptance_at_V_49152_matches_alpha_star():
    """N = 1e5 draft tuples at V = 49 152, k = 4: the fraction of outputs that are one of the
    drafts is Binomial(N, alpha*)/N; the interval alpha* +- 4.89 sd has false-alarm 1e-6."""
    V, k, n = 49_152, 4, 100_000
    p, q = synthetic_pair(V, seed=3)
    law = otspec.iid(q, k)
    alpha = optimal_iid.acceptance(p, law).value
    assert abs(alpha - otspec.optimal_acceptance(p, law).value) <= ATOL
    drafts = law.sample(np.random.default_rng(1), n)
    ys = optimal_iid.sample_batch(p, law, drafts, rng=np.random.default_rng(2))
    acc = float(np.mean(np.any(drafts == ys[:, None], axis=1)))
    z = stats.norm.isf(FALSE_ALARM / 2)
    assert abs(acc - alpha) <= z * np.sqrt(alpha * (1 - alpha) / n), (acc, alpha)
    # and the optimum is strictly better than what K-SEQ / RRS give on this pair
    assert alpha > otspec.verifiers.kseq.acceptance(p, law).value
    assert alpha > otspec.verifiers.rrs.acceptance(p, law).value
