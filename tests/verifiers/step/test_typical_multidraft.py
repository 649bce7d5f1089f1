"""Typical acceptance with several drafts: the closed-form membership acceptance (independent and
greedy drafts), the O(k^2) per-tuple value and the importance-sampled estimate for drafts without
replacement, each checked exactly against the enumerated kernel."""

import numpy as np
import pytest

import otspec
from otspec._tolerances import FLOAT64_ATOL
from otspec.verifiers.step.typical import TypicalVerifier, rejection_weights

RULES = [TypicalVerifier(0.3, 0.9), TypicalVerifier(0.3, 0.9, on_reject="argmax"), TypicalVerifier(0.2, 0.6)]


def _laws(rng, n):
    """Small random laws of every family with a product form, some q with a zero."""
    for i in range(n):
        V, k = int(rng.integers(2, 6)), int(rng.integers(2, 4))
        p, q = rng.dirichlet(np.full(V, 0.5)), rng.dirichlet(np.full(V, 0.5))
        if i % 4 == 0:
            q[rng.integers(V)] = 0.0
            q /= q.sum()
        family = i % 3
        if family == 2:
            yield p, otspec.product([rng.dirichlet(np.ones(V)) for _ in range(k)])
        elif family == 1 and np.count_nonzero(q) >= k:
            yield p, otspec.greedy(q, k)
        else:
            yield p, otspec.iid(q, k)


def test_closed_form_equals_the_kernel_for_independent_and_greedy_drafts():
    rng = np.random.default_rng(11)
    kinds, rejecting = set(), 0
    for p, law in _laws(rng, 90):
        for v in RULES:
            est = v.acceptance(p, law)
            assert est.how == "closed_form"
            exact = v.kernel(p, law).acceptance()
            assert est.value == pytest.approx(exact, abs=FLOAT64_ATOL)
            rejecting += int(exact < 1.0 - 1e-6)
        kinds.add(law.kind)
    assert kinds == {"iid", "greedy", "product"}
    assert rejecting > 50  # the rejection branch (the r(S) term) is exercised


def test_per_tuple_acceptance_counts_each_distinct_draft_once():
    rng = np.random.default_rng(12)
    for p, law in _laws(rng, 30):
        for v in RULES:
            K = v.kernel(p, law)
            member = np.zeros_like(K.pi, dtype=bool)
            member[np.repeat(np.arange(K.tuples.shape[0]), law.k), K.tuples.ravel()] = True  # repeats allowed
            expected = np.where(member, K.pi, 0.0).sum(axis=1)
            assert np.abs(v.tuple_acceptance(p, law, K.tuples) - expected).max() <= FLOAT64_ATOL


def test_importance_weights_give_the_rejected_share_of_drafts_without_replacement_exactly():
    rng = np.random.default_rng(13)
    checked = 0
    for _ in range(40):
        V, k = int(rng.integers(3, 7)), int(rng.integers(1, 4))
        p, q = rng.dirichlet(np.full(V, 0.5)), rng.dirichlet(np.full(V, 0.5))
        law = otspec.without_replacement(q, k)
        v = RULES[checked % 2]
        B = p <= v._threshold(p, law)
        qB = np.where(B, q, 0.0)
        if np.count_nonzero(qB) < k:
            continue
        r = np.where(B, v._reject_law(p), 0.0)
        tuples, w = law.enumerate()
        inside = B[tuples].all(axis=1)
        direct = float(w[inside] @ r[tuples[inside]].sum(axis=1))  # E[r(S) 1{S in B}] by enumeration
        t2, w2 = otspec.without_replacement(qB / qB.sum(), k).enumerate()
        weighted = float(w2 @ (r[t2].sum(axis=1) * rejection_weights(q, t2, float(qB.sum()))))
        assert weighted == pytest.approx(direct, abs=FLOAT64_ATOL)
        kernel = v.kernel(p, law).acceptance()
        assert 1.0 - law.prob_all_in(B) + direct == pytest.approx(kernel, abs=1e-12)
        checked += 1
    assert checked > 15


def test_without_replacement_estimate_lies_in_its_certified_interval():
    # 2000 tuples (seeded): the interval is intersected with [1 - Q(B^k), 1 - Q(B^k) + Q(B^k) max r(S)]
    rng = np.random.default_rng(14)
    V = 400
    p, q = rng.dirichlet(np.full(V, 0.3)), rng.dirichlet(np.full(V, 0.3))
    law = otspec.without_replacement(q, 4)
    v = TypicalVerifier()
    est = v.acceptance(p, law, method="monte_carlo")
    all_in = law.prob_all_in(p <= v._threshold(p, law))
    assert est.how == "monte_carlo" and est.extras["prob_all_rejected"] == all_in
    assert 1.0 - all_in <= est.ci_low <= est.value <= est.ci_high <= 1.0
    assert 0.0 < all_in < 1.0
