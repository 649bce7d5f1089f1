"""Khisti's canonical scheme, Hu et al.'s greedy-optimal verifier and SpecHub."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import otspec
from otspec._tolerances import FLOAT64_ATOL
from otspec.errors import ProblemTooLargeError
from otspec.verifiers import greedy_optimal, khisti, spechub
from otspec.verifiers.step.khisti import khisti_k2_closed_form


def test_khisti_k2_closed_form_equals_iid_optimum(rng):
    """Independent oracles: brute force over every subset (min-cut dual) and the HiGHS LP."""
    for _ in range(80):
        V = int(rng.integers(2, 8))
        p, q = rng.dirichlet(np.full(V, 0.6)), rng.dirichlet(np.full(V, 0.6))
        if rng.random() < 0.3:
            q[rng.integers(V)] = 0.0
            q /= q.sum()
        cf = khisti_k2_closed_form(p, q)
        law = otspec.iid(q, 2)
        assert abs(cf - otspec.optimal_acceptance(p, law, method="subsets").value) < 1e-12
        assert abs(cf - otspec.optimal_acceptance(p, law, method="lp").value) < 1e-9
        # the formula min_S {P(S) + q(S^c)^2 + 2 q(S) q(S^c)} checked literally over all subsets
        if V <= 5:
            brute = min(
                p[list(S)].sum() + (1 - q[list(S)].sum()) ** 2 + 2 * q[list(S)].sum() * (1 - q[list(S)].sum())
                for r in range(V + 1)
                for S in itertools.combinations(range(V), r)
            )
            assert abs(cf - brute) < 1e-12


def test_khisti_lp_weights_attain_optimum_for_every_law_kind(rng):
    for _ in range(15):
        V, k = int(rng.integers(2, 6)), int(rng.integers(2, 4))
        q, p = rng.dirichlet(np.ones(V)), rng.dirichlet(np.ones(V))
        laws = [
            otspec.iid(q, k),
            otspec.product([rng.dirichlet(np.ones(V)) for _ in range(k)]),
            otspec.explicit(rng.integers(0, V, size=(5, k)), rng.dirichlet(np.ones(5)), vocab_size=V),
        ]
        if k <= V:
            laws.append(otspec.without_replacement(q, k))
        for law in laws:
            sw = khisti.weights(p, law)
            valid = sw.sets >= 0
            assert np.all(sw.beta >= 0) and np.all(sw.beta[~valid] == 0)
            np.testing.assert_allclose(sw.beta.sum(axis=1), 1.0, atol=1e-14)
            assert abs(sw.r.sum() - 1.0) < 1e-12
            opt = otspec.optimal_acceptance(p, law, method="lp").value
            assert abs(sw.value - opt) < 1e-9
            assert abs(khisti.acceptance(p, law, method="kernel").value - opt) < 1e-9


def test_khisti_closed_form_at_scale_and_refusal_without_it():
    rng = np.random.default_rng(3)
    V = 262_144
    p, q = rng.dirichlet(np.full(V, 0.1)), rng.dirichlet(np.full(V, 0.1))
    est = khisti.acceptance(p, otspec.iid(q, 2))
    assert est.how == "closed_form"
    assert abs(est.value - otspec.optimal_acceptance(p, otspec.iid(q, 2)).value) < 1e-9
    assert abs(est.value - khisti_k2_closed_form(p, q)) < 1e-9
    # i.i.d. drafts: the canonical selection attains alpha* in closed form at any k
    p5, q5 = p[:5000] / p[:5000].sum(), q[:5000] / q[:5000].sum()
    est = khisti.acceptance(p5, otspec.iid(q5, 3))
    assert est.how == "closed_form"
    assert abs(est.value - otspec.optimal_acceptance(p5, otspec.iid(q5, 3)).value) < 1e-12
    # a law with no closed form and too many tuples to enumerate (the LP path) is refused
    qs = [rng.dirichlet(np.full(5000, 0.1)) for _ in range(3)]
    with pytest.raises(ProblemTooLargeError, match="khisti"):
        khisti.acceptance(p5, otspec.product(qs))


def _laws_iid(rng, V, k):
    q = rng.dirichlet(np.full(V, 0.6))
    if rng.random() < 0.4:
        q[rng.integers(V)] = 0.0
        q /= q.sum()
    return q, [otspec.iid(q, k), otspec.product([q] * k)]


def test_khisti_iid_kernel_is_the_canonical_optimal_iid_kernel(rng):
    """For i.i.d. laws (and products of identical drafters) khisti's kernel is optimal_iid's,
    lossless and at alpha* (against the brute-force subsets optimum)."""
    for _ in range(40):
        V, k = int(rng.integers(2, 7)), int(rng.integers(1, 4))
        p = rng.dirichlet(np.full(V, 0.6))
        if rng.random() < 0.3:
            p[rng.integers(V)] = 0.0
            p /= p.sum()
        q, laws = _laws_iid(rng, V, k)
        if rng.random() < 0.15:
            p = q.copy()
        for law in laws:
            K = khisti.kernel(p, law)
            np.testing.assert_array_equal(K.pi, otspec.verifiers.optimal_iid.kernel(p, law).pi)
            np.testing.assert_allclose(K.output_law(), p, rtol=0, atol=1e-12)
            opt = otspec.optimal_acceptance(p, otspec.iid(q, k), method="subsets").value
            assert abs(K.acceptance() - opt) < 1e-12
            assert abs(khisti.acceptance(p, law).value - opt) < 1e-12
            sw = khisti.weights(p, law)
            np.testing.assert_allclose(sw.r, otspec.verifiers.step.optimal_iid.selection_law(p, q, k), rtol=0, atol=1e-12)
            assert abs(sw.value - opt) < 1e-12


def test_khisti_k2_selection_is_one_range_minimum(rng):
    """K = 2, drafts y, y' in super-tokens a < b: y' is selected with probability
    (1/2) min_{a <= i < b} kappa_i (docs: verifiers, khisti), 1/2 each in the same super-token."""
    from otspec.verifiers.step.optimal_iid import prepare

    for _ in range(40):
        V = int(rng.integers(2, 9))
        p, q = rng.dirichlet(np.full(V, 0.6)), rng.dirichlet(np.full(V, 0.6))
        st = prepare(p, q, 2)
        kap = st.tree.kappa
        tuples = np.array([(x, y) for x in range(V) for y in range(V)])
        beta = st.selection_rows(tuples)
        for (x, y), row in zip(tuples, beta, strict=False):
            if x == y:
                assert abs(row[x] - 1.0) < 1e-15
                continue
            a, b = sorted((st.super_token[x], st.super_token[y]))
            low = y if st.super_token[y] == b else x  # the draft of lower density (later super-token)
            want = 0.5 if a == b else 0.5 * float(np.min(kap[a:b]))
            assert abs(row[low] - want) < 1e-15 and abs(row[x] + row[y] - 1.0) < 1e-15


def test_greedy_hand_example():
    """p = (0.2, 0.5, 0.3), q = (0.5, 0.3, 0.2), k = 2: G = {0}, q~ = (0, 0.6, 0.4);
    alpha = 0.2 + min(0.5, 0.6) + min(0.3, 0.4) = 1."""
    law = otspec.greedy([0.5, 0.3, 0.2], 2)
    for v in (greedy_optimal, spechub):
        assert abs(v.acceptance([0.2, 0.5, 0.3], law).value - 1.0) < 1e-15
        assert abs(v.kernel([0.2, 0.5, 0.3], law).acceptance() - 1.0) < 1e-15


def test_spechub_drafting_law_is_greedy_k2(rng):
    """SpecHub's ordered drafting law Q(i, a) = q(i), Q(a, i) = q(a) q(i) / (1 - q(a)) has the same
    draft *sets* as otspec.greedy(q, 2), and given the set the order is (i, a) w.p. 1 - q(a)."""
    for _ in range(20):
        V = int(rng.integers(2, 7))
        q = rng.dirichlet(np.ones(V))
        a = int(np.argmax(q))
        pairs, w = [], []
        for i in range(V):
            if i == a:
                continue
            pairs += [(i, a), (a, i)]
            w += [q[i], q[a] * q[i] / (1 - q[a])]
        hub = otspec.explicit(pairs, np.array(w) / np.sum(w), vocab_size=V)
        assert abs(np.sum(w) - 1.0) < 1e-12
        s1, w1 = hub.enumerate_sets()
        s2, w2 = otspec.greedy(q, 2).enumerate_sets()
        np.testing.assert_array_equal(s1, s2)
        np.testing.assert_allclose(w1, w2, atol=1e-15)
        for i in range(V):
            if i != a:
                assert abs(q[i] / (q[i] + q[a] * q[i] / (1 - q[a])) - (1 - q[a])) < 1e-12
        # and the hub rule, run on the explicit ordered law, has the same output law per set
        p = rng.dirichlet(np.ones(V))
        K = spechub.kernel(p, otspec.greedy(q, 2))
        np.testing.assert_allclose(K.output_law(), p, atol=FLOAT64_ATOL)


def test_spechub_kernel_marginalised_over_order_equals_greedy_optimal(rng):
    """Derived by hand: averaging the hub rule over the latent order ((i, a) w.p. 1 - q(a)) keeps i
    w.p. (1 - q(a)) min(1, p_i/q_i) + q(a) min(1, (p_i - q_i)_+ / (q(a) q~_i)) = min(1, p_i / q~_i)
    in all three cases (p_i >= q~_i, q_i <= p_i < q~_i, p_i < q_i), and splits the rest like
    p_rem. So the two verifiers have the same kernel (their samplers differ). This is otspec's
    placement of the leftover draft mass; the SpecHub paper's released code places it differently
    and has another per-set kernel (same acceptance and output law), which this test does not cover."""
    for _ in range(30):
        V = int(rng.integers(2, 8))
        q, p = rng.dirichlet(np.ones(V)), rng.dirichlet(np.ones(V))
        law = otspec.greedy(q, 2)
        K1, K2 = greedy_optimal.kernel(p, law), spechub.kernel(p, law)
        np.testing.assert_allclose(K1.pi, K2.pi, atol=FLOAT64_ATOL)


def test_greedy_top_is_the_stable_full_sort_including_ties(rng):
    """The law's partial-sort top set equals a full stable sort (larger q first, then lower id)."""

    def reference(law):
        q = np.asarray(law.q)
        top = np.argsort(-q, kind="stable")[: law.k - 1]
        rest = q.copy()
        rest[top] = 0.0
        return top, rest / rest.sum()

    for q in ([0.2, 0.2, 0.2, 0.2, 0.2], [0.1, 0.3, 0.3, 0.1, 0.2], [0.0, 0.5, 0.0, 0.25, 0.25]):
        for k in (1, 2, 3):
            law = otspec.greedy(q, k)
            top, rest = reference(law)
            np.testing.assert_array_equal(top, law.top)
            np.testing.assert_array_equal(rest, law.q_rest)
    for _ in range(50):
        V = int(rng.integers(2, 40))
        q = rng.integers(1, 4, size=V).astype(float)  # many ties
        q /= q.sum()
        k = int(rng.integers(1, min(V, 6) + 1))
        law = otspec.greedy(q, k)
        np.testing.assert_array_equal(reference(law)[0], law.top)
