"""Deployable select-then-BV tree verifiers (K-SEQ's BV boost, nested optimal selection) and the
selJ+BV rule, checked exactly on enumerable models.

The closed-form selection law (count recursion along a path) must equal the law obtained by
enumerating every drafted tree; the per-tree laws the real-vocabulary sampler draws from must make
the emitted block exactly target-distributed; the selJ law must lie in B_k and reach the largest
joint acceptance (an LP over all sets on tiny cases)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import optimize, stats

import otspec
from otspec import models, prefixes
from otspec.bounds.tree_node import coverage, membership_violation, selection_value
from otspec.errors import InvalidDraftsError, ProblemTooLargeError, ShapeMismatchError, UnsupportedMethodError
from otspec.trees import draft_trees
from otspec.verifiers import chain, tree
from otspec.verifiers import tree_deployable as td
from otspec.verifiers.step.optimal_iid import prepare
from otspec.verifiers.tree_select import joint_selection_law, mu_conditional
from tests._oracles import make_pair
from tests._tolerances import LP_ATOL

#: Exact kernels: float64 sums over at most a few hundred drafted trees.
EXACT = 1e-12


def _cases(n, seed, sizes):
    rng = np.random.default_rng(seed)
    return [
        (int(rng.integers(0, 10_000)), *sizes[i % len(sizes)], float(rng.choice([0.3, 1.0, 3.0])), bool(rng.integers(2))) for i in range(n)
    ]


#: (seed, V, gamma, k, concentration, sparse): at most 81 drafted trees each.
SMALL = _cases(100, 33, [(2, 2, 2), (3, 2, 2), (2, 3, 2), (3, 1, 2), (2, 1, 3)])


def _conds(p, q, tr):
    P = np.stack([models.conditionals_along(p, row.tolist()) for row in tr])
    Q = np.stack([models.conditionals_along(q, row.tolist(), include_last=False) for row in tr])
    return P, Q


def _deployed_block_law(p, q, k, gamma, rule):
    """The emitted block's law over every drafted tree, from the per-tree laws the sampler draws from."""
    trees, weights = draft_trees(q, k, gamma)
    law: dict = {}
    for tr, w in zip(trees, weights, strict=True):
        P, Q = _conds(p, q, tr)
        for o, pr in td.block_law_given_tree(tr, P, Q, rule=rule).items():
            law[o] = law.get(o, 0.0) + w * pr
    return law


@pytest.mark.parametrize("seed,V,gamma,k,a,sparse", SMALL)
def test_deployable_rules_are_lossless_and_their_closed_form_law_is_the_enumerated_one(seed, V, gamma, k, a, sparse):
    p, q = make_pair(seed, V, a, sparse)
    table = prefixes.enumerate_prefixes(p, q, gamma)
    for rule in td.RULES:
        law = _deployed_block_law(p, q, k, gamma, rule)
        assert chain.lossless_violation(law, p) <= EXACT
        # the closed-form law on sequences (count recursion) is the law of the selections of every tree
        closed = td.sequence_law(p, q, k, gamma, rule=rule)
        assert np.abs(closed - td.selection_plan(p, q, k, gamma, rule=rule).mu).max() <= EXACT
        # and the deployed rule's E[tau] is Phi(mu), block verification's value of that law
        e_tau = sum(pr * (len(o) - 1) for o, pr in law.items())
        assert abs(e_tau - selection_value(table, closed)[0]) <= EXACT


@pytest.mark.parametrize("seed,V,gamma,k,a,sparse", SMALL[:4])
def test_expected_accepted_given_tree_is_the_mean_of_the_tree_law(seed, V, gamma, k, a, sparse):
    p, q = make_pair(seed, V, a, sparse)
    trees, _ = draft_trees(q, k, gamma)
    for tr in trees[:: max(1, len(trees) // 8)]:
        P, Q = _conds(p, q, tr)
        for rule in td.RULES:
            law = td.block_law_given_tree(tr, P, Q, rule=rule)
            assert abs(td.expected_accepted_given_tree(tr, P, Q, rule=rule) - sum(pr * (len(o) - 1) for o, pr in law.items())) <= EXACT


@pytest.mark.parametrize("seed,V,gamma,k,a,sparse", SMALL[:12] + [(71, 2, 2, 3, 1.0, False)])
def test_kseq_boost_closed_form_equals_the_enumerated_boost_and_beats_kseq(seed, V, gamma, k, a, sparse):
    """The boost's law from the K-SEQ count recursion equals the one read off K-SEQ's enumerated kernel;
    its conditionals along a path are the enumerated law's; E[tau] never drops below K-SEQ's."""
    p, q = make_pair(seed, V, a, sparse)
    plan = tree.selection_plan(p, q, k, gamma, verifier="kseq_bv")
    assert np.abs(td.sequence_law(p, q, k, gamma, rule="kseq_bv") - plan.mu).max() <= EXACT
    leaf = int(np.argmax(plan.mu))
    path = np.unravel_index(leaf, (V,) * gamma)
    path = [int(v) for v in path]
    P = models.conditionals_along(p, path)
    Q = models.conditionals_along(q, path, include_last=False)
    mu = td.mu_conditionals(path, P, Q, k, rule="kseq_bv")
    for i in range(gamma):
        assert np.abs(mu[i] - mu_conditional(plan, tuple(path[:i]))).max() <= EXACT
    assert tree.expected_accepted(p, q, k, gamma, verifier="kseq_bv") >= tree.expected_accepted(p, q, k, gamma, verifier="kseq") - EXACT


@pytest.mark.parametrize("seed", range(6))
def test_nested_pair_choice_is_the_realisation_of_the_optimal_iid_selection(seed):
    """Two distinct drafts at a node: the closed-form choice probability equals the realisation's
    exact selection law (integrated over its level), and the per-node law is r*_2."""
    rng = np.random.default_rng(seed)
    V = 5
    p, q = rng.dirichlet(np.ones(V)), rng.dirichlet(np.ones(V))
    state = prepare(p, q, 2)
    P, Q = np.tile(p, (2, 2, 1)), np.tile(q, (2, 1, 1))
    r = np.zeros(V)
    for a, b in itertools.product(range(V), repeat=2):
        sel = td.selection_given_tree([[a], [b]], P, Q, rule="nested")
        row = state.selection_rows(np.array([[a, b]]))[0]
        if a != b:
            assert abs(sel[0] - row[a]) <= EXACT
        r[a] += q[a] * q[b] * sel[0]
        r[b] += q[a] * q[b] * sel[1]
    assert np.abs(r - state.r).max() <= EXACT


def test_nested_count_law_three_drafts_by_enumeration():
    """n = 3 drafts at a node: the enumerated count law sums over m to r*_3, and sums over y to 1."""
    rng = np.random.default_rng(3)
    p, q = rng.dirichlet(np.ones(4)), rng.dirichlet(np.ones(4))
    K = np.stack([td.nested_counts(p, q, 3, y) for y in range(4)])
    assert np.abs(K.sum(axis=1) - prepare(p, q, 3).r).max() <= EXACT
    assert K[:, 0].max() == 0.0  # the chosen token is a draft
    assert abs(K.sum() - 1.0) <= EXACT


def test_kseq_count_laws_sum_to_the_target():
    """K-SEQ's counts: sum over m of L_n(y, m) is p(y) (losslessness of the node), and A + J is a law."""
    rng = np.random.default_rng(4)
    p, q = rng.dirichlet(np.ones(6)), rng.dirichlet(np.ones(6))
    for n in (1, 2, 3):
        L = np.stack([td.kseq_counts(p, q, n, y) for y in range(6)])
        assert np.abs(L.sum(axis=1) - p).max() <= EXACT
        A, J = td.kseq_next(p, q, n)
        assert np.abs(A - (p - L[:, 0])).max() <= EXACT
        assert abs(A.sum() + J.sum() - 1.0) <= EXACT


@pytest.mark.parametrize("rule", td.RULES)
def test_sampler_draws_follow_the_exact_law_of_the_tree(rule):
    """Monte Carlo: N = 2000 draws of the sampler on one drafted tree (V = 3, k = 2, gamma = 2, seed 5)
    against its exact per-tree law, Pearson chi-square (bins of expected count < 5 merged), false
    alarm 1e-4. ``sample`` itself is checked to emit a block of that law's support."""
    p, q = make_pair(5, 3, 1.0, False)
    tr = np.array([[0, 1], [2, 1]])
    P, Q = _conds(p, q, tr)
    law = td.block_law_given_tree(tr, P, Q, rule=rule)
    keys = sorted(law)
    index = {o: i for i, o in enumerate(keys)}
    N = 2000
    counts = np.zeros(len(keys))
    for tau, block in td.sample_many(tr, P, Q, N, rule=rule, rng=np.random.default_rng(11)):
        assert len(block) == tau + 1
        counts[index[block]] += 1  # a KeyError would be a block of probability 0
    assert td.sample(tr, P, Q, rule=rule, rng=np.random.default_rng(12))[1] in law
    expected = N * np.array([law[o] for o in keys])
    big = expected >= 5
    obs = np.append(counts[big], counts[~big].sum())
    exp = np.append(expected[big], expected[~big].sum())
    if exp[-1] == 0:
        obs, exp = obs[:-1], exp[:-1]
    assert stats.chisquare(obs, exp).pvalue >= 1e-4


def test_real_vocabulary_tree_runs_without_enumeration():
    """V = 4096, k = 2, gamma = 2: the selection probabilities sum to 1, the conditionals are laws, and
    the exact E[tau | tree] lies in [0, gamma] for both rules."""
    rng = np.random.default_rng(0)
    V, k, g = 4096, 2, 2
    P = rng.dirichlet(np.full(V, 0.1), size=(k, g + 1))
    Q = rng.dirichlet(np.full(V, 0.1), size=(k, g))
    Q = 0.5 * Q + 0.5 * P[:, :g]  # a draft close to the target
    tr = np.array([[int(np.argmax(Q[0, 0])), int(np.argmax(Q[0, 1]))], [int(np.argsort(Q[1, 0])[-2]), int(np.argmax(Q[1, 1]))]])
    Q[1, 0] = Q[0, 0]  # one root, shared by both sequences
    P[1, 0] = P[0, 0]
    for rule in td.RULES:
        sel = td.selection_given_tree(tr, P, Q, rule=rule)
        assert abs(sel.sum() - 1.0) <= EXACT
        mu = td.mu_conditionals(tr[0], P[0], Q[0], k, rule=rule)
        assert np.abs(mu.sum(axis=1) - 1.0).max() <= EXACT
        e = td.expected_accepted_given_tree(tr, P, Q, rule=rule)
        assert 0.0 <= e <= g
        tau, block = td.sample(tr, P, Q, rule=rule, rng=np.random.default_rng(1))
        assert 0 <= tau <= g and len(block) == tau + 1


def test_bad_inputs():
    P, Q = np.full((2, 3, 2), 0.5), np.full((2, 2, 2), 0.5)
    with pytest.raises(UnsupportedMethodError):
        td.sample([[0, 1], [1, 1]], P, Q, rule="kseq", rng=np.random.default_rng(0))
    with pytest.raises(ShapeMismatchError):
        td.expected_accepted_given_tree([[0, 1], [1, 1]], P[:, :2], Q, rule="nested")
    with pytest.raises(InvalidDraftsError):
        td.selection_given_tree([[0, 1], [1, 2]], P, Q, rule="kseq_bv")
    Qz = Q.copy()
    Qz[:, 0] = [1.0, 0.0]
    with pytest.raises(InvalidDraftsError):
        td.selection_given_tree([[0, 1], [1, 1]], P, Qz, rule="kseq_bv")
    rng = np.random.default_rng(0)
    p, q = rng.dirichlet(np.ones(100)), rng.dirichlet(np.ones(100))
    with pytest.raises(ProblemTooLargeError):
        td.nested_counts(p, q, 3, 0)


# ------------------------------------------------------------------------------------------------
# selJ + BV

SELJ = _cases(24, 7, [(2, 2, 2), (3, 2, 2), (2, 3, 2), (2, 2, 3)])


def _joint_lp(mb, ms, k):
    """max sum_l a_l s.t. a <= mu, a <= Mb, mu(S) <= h(Ms(S)) for every set S, sum mu = 1 (all sets)."""
    n = mb.size
    # variables [mu (n), a (n)]; minimise -sum a
    c = np.concatenate([np.zeros(n), -np.ones(n)])
    rows, rhs = [], []
    for r in range(1, n + 1):
        for S in itertools.combinations(range(n), r):
            row = np.zeros(2 * n)
            row[list(S)] = 1.0
            rows.append(row)
            rhs.append(float(coverage(ms[list(S)].sum(), k)))
    a_le_mu = np.hstack([-np.eye(n), np.eye(n)])
    res = optimize.linprog(
        c,
        A_ub=np.vstack([np.array(rows), a_le_mu]),
        b_ub=np.concatenate([rhs, np.zeros(n)]),
        A_eq=np.concatenate([np.ones(n), np.zeros(n)])[None],
        b_eq=[1.0],
        bounds=[(0, None)] * n + [(0, float(m)) for m in mb],
        method="highs",
    )
    assert res.status == 0
    return -res.fun


@pytest.mark.parametrize("seed,V,gamma,k,a,sparse", SELJ)
def test_selj_bv_is_lossless_below_the_optimum_and_its_law_maximises_the_joint_acceptance(seed, V, gamma, k, a, sparse):
    p, q = make_pair(seed, V, a, sparse)
    K = tree.kernel(p, q, k, gamma, verifier="selj_bv")
    assert chain.lossless_violation(K.output_law(), p) <= EXACT
    t_star = otspec.tree_optimum(p, q, k, gamma, method="node")
    assert K.expected_accepted() <= t_star.value + EXACT
    table = prefixes.enumerate_prefixes(p, q, gamma)
    mb, ms = table.p_joint[gamma], table.q_joint[gamma]
    mu = joint_selection_law(mb, ms, k)
    assert abs(mu.sum() - 1.0) <= EXACT and membership_violation(mu, ms, k)[0] <= EXACT
    assert np.abs(tree.selection_plan(p, q, k, gamma, verifier="selj_bv").mu - mu).max() <= LP_ATOL  # the transport realises it
    if mb.size <= 9:  # the LP over every set: 2^9 rows at most
        assert abs(np.minimum(mu, mb).sum() - _joint_lp(mb, ms, k)) <= LP_ATOL
