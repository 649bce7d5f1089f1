"""otspec.theory: the exact per-round expectations the decoder records, checked against independent
closed forms (numpy only, no torch): one draft is token verification (1 - TV at the first
position), a one-sequence tree is a chain, and a verifier's expectation averaged over its draft
law is its acceptance."""

import numpy as np
import pytest

import otspec
from otspec.theory import chain_theory, single_theory, tree_expected, tree_theory
from otspec.verifiers import token_chain


def _rows(rng, n, V):
    return rng.dirichlet(np.full(V, 0.7), size=n)


def test_chain_first_position_optimum_is_one_minus_tv():
    rng = np.random.default_rng(0)
    P, Q = _rows(rng, 3, 5), _rows(rng, 2, 5)
    out = chain_theory(P, Q, np.array([1, 3]), "token")
    assert out["opt_first"] == pytest.approx(1.0 - 0.5 * np.abs(P[0] - Q[0]).sum(), abs=1e-15)
    assert out["expected"] == out["exp_token"]
    assert out["exp_block"] >= out["exp_token"] - 1e-12  # block verification is optimal given the path


def test_one_sequence_tree_is_a_chain():
    rng = np.random.default_rng(1)
    V, g = 4, 3
    P, Q = _rows(rng, g + 1, V)[None], _rows(rng, g, V)[None]
    X = rng.integers(0, V, size=(1, g))
    chain = token_chain.expected_accepted_given_path(P[0], Q[0], X[0], validate=False)
    for rule in ("kseq", "rrs"):
        assert tree_expected(P, Q, X, rule) == pytest.approx(chain, abs=1e-12)
    assert tree_theory(P, Q, X, "kseq")["expected"] == pytest.approx(chain, abs=1e-12)


def test_single_round_averages_to_the_acceptance():
    """sum over draft tuples of Q(x) * expected_cond(x) = the verifier's exact acceptance."""
    rng = np.random.default_rng(2)
    V, k = 4, 2
    p, q = _rows(rng, 1, V)[0], _rows(rng, 1, V)[0]
    law = otspec.iid(q, k)
    tuples, weights = law.enumerate()
    for name in ("rrs", "kseq"):
        avg = sum(w * single_theory(p, q, np.asarray(t), name, "iid")["expected_cond"] for t, w in zip(tuples, weights, strict=True))
        assert avg == pytest.approx(otspec.verifiers.by_name(name).acceptance(p, law).value, abs=1e-12)
    one = single_theory(p, q, np.asarray(tuples[0]), "rrs", "iid")
    assert one["optimum"] == pytest.approx(otspec.optimal_acceptance(p, law).value, abs=0)
    assert one["expected"] == one["exp_rrs"]
