"""Deterministic draft sets and trees (top_k, top_k_tree, dynamic_tree) and their sample-and-match walk.

Exact checks on enumerable cases (V <= 4, gamma <= 3): the walk's block law meets the losslessness
criterion to 1e-12; its E[tau] equals sum_u M_b(u) and an independent enumeration of every target
path; the optimum of a deterministic set is p(S) by every method (prefix, subsets, LP, flow) and
every lossless verifier that applies stays at or below it (exact_match attains it); on a tree the
walk's value equals a node LP (maximise sum_u A(u) with A(u) <= M_b(u_last | parent) A(parent), A = 0
off the tree) solved by HiGHS. The dynamic tree equals a brute-force top-budget selection. One
sampler check: chi-square of 8 000 walks against the exact block law (false alarm 1e-6).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import optimize, stats

import otspec
from otspec import models, verifiers
from otspec.laws import dynamic_tree, top_k, top_k_tree
from otspec.testing import assert_lossless
from otspec.testing.forms import ConditionalVerifier
from otspec.theory import tree_theory
from otspec.verifiers import sample_match
from otspec.verifiers.chain import lossless_violation
from tests.conftest import random_simplex


def _cases():
    """(p_model, law) pairs: sets, static and dynamic trees over context-dependent models."""
    out = []
    for seed in range(4):
        V = 3 + seed % 2
        p_model, q_model = models.dirichlet(V, seed=seed), models.dirichlet(V, seed=seed + 100)
        out.append((p_model, top_k(q_model(()), 2)))
        out.append((p_model, top_k_tree(q_model, (2, 1, 2))))
        out.append((p_model, top_k_tree(q_model, 1, gamma=3)))
        out.append((p_model, dynamic_tree(q_model, 2, gamma=3, budget=5)))
    return out


def _walk_tau(law, path):
    """Accepted tokens of the walk on one target path (enough tokens to stop)."""
    children = sample_match.tree_children(law)
    u = ()
    for y in path:
        if y not in children.get(u, ()):
            return len(u)
        u = u + (y,)
    return len(u)


def _depth(law):
    return getattr(law, "gamma", 1)


@pytest.mark.parametrize("case", range(16))
def test_walk_is_lossless_and_its_value_matches_enumeration(case):
    p_model, law = _cases()[case]
    blocks = sample_match.block_law(p_model, law)
    assert lossless_violation(blocks, p_model) <= 1e-12
    closed = sample_match.expected_accepted(p_model, law)
    from_blocks = sum(w * (len(o) - 1) for o, w in blocks.items())
    # independent: every target path of length gamma + 1, its probability, the walk's tau on it
    g, V = _depth(law), law.V
    brute = 0.0
    for path in itertools.product(range(V), repeat=g + 1):
        w = float(np.prod([p_model(path[:i])[path[i]] for i in range(g + 1)]))
        brute += w * _walk_tau(law, path)
    assert abs(closed - from_blocks) <= 1e-12 and abs(closed - brute) <= 1e-12
    nodes = getattr(law, "nodes", tuple((int(s),) for s in law.drafted))
    assert abs(closed - sum(float(np.prod([p_model(u[:i])[u[i]] for i in range(len(u))])) for u in nodes)) <= 1e-12


@pytest.mark.parametrize("seed", range(6))
def test_set_optimum_is_p_of_s_and_exact_match_attains_it(seed):
    rng = np.random.default_rng(seed)
    V, k = 5, 1 + seed % 3
    p, q = random_simplex(rng, V, zeros=1), random_simplex(rng, V)
    law = top_k(q, k)
    pS = float(p[np.argsort(-q, kind="stable")[:k]].sum())  # top-k by sorting, not by the law's own code
    for method in ("prefix", "subsets", "lp", "flow"):
        assert abs(otspec.optimal_acceptance(p, law, method=method).value - pS) <= 1e-9, method
    assert abs(verifiers.exact_match.acceptance(p, law).value - pS) <= 1e-12
    assert abs(sample_match.expected_accepted(p, law) - pS) <= 1e-12
    for v in verifiers.ALL:
        if v.applies_to(law) and v.lossless:
            assert_lossless(v, p, law)
            assert v.acceptance(p, law).value <= pS + 1e-9, v.name


def _node_lp(p_model, law):
    """max sum_u A(u) over every prefix of depth 1..gamma: A(u) <= M_b(u_last | parent) A(parent), A = 0 off the tree."""
    g, V = _depth(law), law.V
    prefixes = [u for d in range(1, g + 1) for u in itertools.product(range(V), repeat=d)]
    index = {u: i for i, u in enumerate(prefixes)}
    on_tree = set(getattr(law, "nodes", ()) or ((int(s),) for s in law.drafted))
    rows, rhs = [], []
    for u, i in index.items():
        row = np.zeros(len(prefixes))
        row[i] = 1.0
        cond = p_model(u[:-1])[u[-1]]
        if len(u) == 1:
            rhs.append(cond)
        else:
            row[index[u[:-1]]] = -cond
            rhs.append(0.0)
        rows.append(row)
    bounds = [(0.0, None if u in on_tree else 0.0) for u in prefixes]
    res = optimize.linprog(-np.ones(len(prefixes)), A_ub=np.array(rows), b_ub=np.array(rhs), bounds=bounds, method="highs")
    assert res.status == 0
    return -res.fun


@pytest.mark.parametrize("case", [1, 3, 5, 7, 11])
def test_tree_walk_attains_the_node_lp(case):
    p_model, law = _cases()[case]
    assert abs(_node_lp(p_model, law) - sample_match.expected_accepted(p_model, law)) <= 1e-9


def test_static_tree_holds_the_top_children():
    q_model = models.dirichlet(5, seed=3)
    law = top_k_tree(q_model, (3, 2))
    assert law.k == 3 and len(law.nodes) == 3 + 3 * 2 and law.gamma == 2
    for u in ((),) + tuple(x for x in law.nodes if len(x) == 1):
        want = 3 if u == () else 2
        assert law.children_of(u) == tuple(int(y) for y in np.argsort(-q_model(u), kind="stable")[:want])
    assert top_k_tree(q_model(()), 3).drafted.tolist() == top_k(q_model(()), 3).drafted.tolist()


@pytest.mark.parametrize("seed", range(3))
def test_dynamic_tree_is_the_top_budget_by_draft_mass(seed):
    q_model = models.dirichlet(4, seed=seed)
    k, g, budget = 2, 3, 6
    law = dynamic_tree(q_model, k, gamma=g, budget=budget)
    cands, level = {}, [((), 1.0)]
    for _ in range(g):  # every candidate: top-k children of every candidate, by brute force
        nxt = []
        for u, m in level:
            for y in np.argsort(-q_model(u), kind="stable")[:k]:
                nxt.append((u + (int(y),), m * float(q_model(u)[y])))
        cands.update(nxt)
        level = nxt
    best = sorted(cands, key=lambda u: -cands[u])[:budget]
    assert set(law.nodes) == set(best)
    assert all(u[:-1] == () or u[:-1] in law.nodes for u in law.nodes)  # a tree
    assert [law.draft_mass(u) for u in law.nodes] == sorted((law.draft_mass(u) for u in law.nodes), reverse=True)


def test_walk_sampler_matches_its_block_law():
    # N = 8 000 walks, chi-square over the blocks of positive probability, false alarm 1e-6
    p_model, law = models.dirichlet(3, seed=7), top_k_tree(models.dirichlet(3, seed=8), (2, 1))
    blocks = sample_match.block_law(p_model, law)
    keys = list(blocks)
    rng = np.random.default_rng(0)
    n = 8_000
    counts = dict.fromkeys(keys, 0)
    for _ in range(n):
        counts[sample_match.sample(p_model, law, rng=rng)] += 1
    observed = np.array([counts[o] for o in keys], dtype=float)
    expected = n * np.array([blocks[o] for o in keys])
    assert stats.chisquare(observed, expected).pvalue > 1e-6


def _keep_or_resample(p, q, drafts):
    """Single-draft speculative sampling, written against the proposal q it is handed."""
    x = drafts[0]
    a = min(1.0, p[x] / q[x])
    r = np.maximum(p - q, 0.0)
    out = (1.0 - a) * (r / r.sum() if r.sum() > 0 else p)
    out[x] += a
    return out


def test_a_rule_given_q_receives_the_law_the_drafts_follow():
    rng = np.random.default_rng(5)
    p, q = random_simplex(rng, 4), random_simplex(rng, 4)
    law = top_k(q, 1)
    assert np.array_equal(law.source_q, q) and law.q[int(law.drafted[0])] == 1.0
    v = ConditionalVerifier(_keep_or_resample, k=1)
    assert_lossless(v, p, law)  # against the point mass: the one-hot rule, lossless
    # the pitfall: the same rule against the q the drafts were chosen from is not lossless
    x = int(law.drafted[0])
    assert np.abs(_keep_or_resample(p, q, np.array([x])) - p).max() > 1e-3
    assert top_k(q, 2).q is None and not ConditionalVerifier(_keep_or_resample).applies_to(top_k(q, 2))


def test_walk_refuses_sampled_drafts():
    with pytest.raises(otspec.errors.UnsupportedMethodError, match="deterministic"):
        sample_match.block_law([0.5, 0.5], otspec.iid([0.5, 0.5], 1))
    with pytest.raises(otspec.errors.ShapeMismatchError, match="V = 3"):
        sample_match.expected_accepted([0.5, 0.5], top_k([0.2, 0.5, 0.3], 1))


@pytest.mark.parametrize("branching", [(2, 2), (3, 1, 1), (1, 2, 2)])
def test_value_from_drafted_sequences_equals_the_tree_value(branching):
    """What decoding records per round: E[tau] from the k leaf sequences and their target rows."""
    p_model, q_model = models.dirichlet(4, seed=11), models.dirichlet(4, seed=12)
    law = top_k_tree(q_model, branching)
    leaves = [u for u in law.nodes if len(u) == len(branching)]
    P = np.array([[p_model(u[:i]) for i in range(len(u) + 1)] for u in leaves])
    got = sample_match.expected_accepted_given_paths(P, leaves)
    assert abs(got - sample_match.expected_accepted(p_model, law)) <= 1e-12
    assert tree_theory(P, P[:, :-1], np.array(leaves), "sample_match")["expected"] == got
